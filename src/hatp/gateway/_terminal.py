"""The terminal channel: a person at a console reads the view and types a response.

One conversation at a time holds the console: the view is printed (a plan's
approval group, one tool call, or a question), a line is read (in a thread,
so the event loop keeps running), and the person's response goes back to
the gateway through the :class:`Responder`. A vote is signed here with the
person's own key, as their device would. Unreadable input is asked for
again; end of input declines, so the gateway asks someone else.

A line is applied only to the prompt that was on screen when its read began
([GW-TERMINAL-FRESH]): if an ask is withdrawn while its read is waiting, the
line that read returns is thrown away, never taken as the response to the
next ask (an "approve" typed for one plan must not approve another).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TextIO

from hatp.clock import Clock, format_time
from hatp.errors import AnswerInvalid, HatpError, InvalidJson
from hatp.evidence import SigningKey, parse_json
from hatp.gateway._channels import Notice, Responder
from hatp.gateway._people import sign_vote
from hatp.gateway._view import (
    ApproverView,
    CallView,
    QuestionView,
    render_call_text,
    render_question_text,
    render_text,
)
from hatp.model import QuestionType

__all__ = ["DECLINE_COMMAND", "TerminalChannel"]

#: What a person types to pass a question on (a bare word could be a text answer).
DECLINE_COMMAND = "/decline"

_Key = tuple[str, str]


class _Declined(Exception):
    """The person declined, or the input ended."""


class TerminalChannel:
    """A :class:`~hatp.gateway._channels.Channel` of type ``terminal`` on one console.

    ``keys`` maps each person this console serves to the Ed25519 key on their
    card that signs their votes; a person without one here can only decline.
    """

    def __init__(
        self,
        console_in: TextIO,
        console_out: TextIO,
        keys: Mapping[str, SigningKey],
        clock: Clock,
    ) -> None:
        self._in = console_in
        self._out = console_out
        self._keys = dict(keys)
        self._clock = clock
        self._console = asyncio.Lock()
        self._tasks: dict[_Key, asyncio.Task[None]] = {}
        self._shown: set[_Key] = set()
        self._responding: set[_Key] = set()
        # The read in flight, and the conversation (task) it was begun for.
        self._reading: tuple[asyncio.Task[Any] | None, asyncio.Future[str]] | None = None

    @property
    def channel_type(self) -> str:
        return "terminal"

    async def deliver(self, notice: Notice, responder: Responder) -> None:
        """Queue a conversation about ``notice``; return at once.

        A notice already being handled (delivered again after a gateway
        restart) is not asked twice.
        """
        key = (notice.ask_id, notice.human)
        if key in self._tasks:
            return
        task = asyncio.create_task(self._converse(notice, responder))
        self._tasks[key] = task
        task.add_done_callback(lambda done: self._forget(key, done))

    async def withdraw(self, ask_id: str, human: str) -> None:
        """Stop asking ``human`` about ``ask_id``, and tell them if they saw it.

        A response already on its way to the gateway is left to finish.
        """
        key = (ask_id, human)
        task = self._tasks.get(key)
        if task is None or key in self._responding or task is asyncio.current_task():
            return
        self._tasks.pop(key, None)
        shown = key in self._shown
        waiting = self._reading is not None and self._reading[0] is task
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if shown:
            self._say(
                f"Ask {ask_id} for {human} was withdrawn; nothing more is needed."
                + (" (The next line you type is ignored.)" if waiting else "")
            )

    async def idle(self) -> None:
        """Return once every conversation has ended; re-raise what one of them raised."""
        while self._tasks:
            ended = await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            # A withdrawn conversation ends cancelled: that is not a failure.
            failed = [e for e in ended if isinstance(e, Exception)]
            if failed:
                raise failed[0]

    def _forget(self, key: _Key, task: asyncio.Task[None]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        self._shown.discard(key)

    async def _converse(self, notice: Notice, responder: Responder) -> None:
        key = (notice.ask_id, notice.human)
        async with self._console:
            self._shown.add(key)
            self._say(f"=== For {notice.human} (ask {notice.ask_id}) ===")
            try:
                if isinstance(notice.view, ApproverView | CallView):
                    shown = (
                        render_text(notice.view)
                        if isinstance(notice.view, ApproverView)
                        else render_call_text(notice.view)
                    )
                    self._say(shown.rstrip("\n"))
                    self._say(f"Please respond by {format_time(notice.respond_by)} (UTC).")
                    await self._vote(notice, responder)
                else:
                    self._say(render_question_text(notice.view).rstrip("\n"))
                    self._say(f"Please respond by {format_time(notice.respond_by)} (UTC).")
                    await self._answer(notice, notice.view, responder)
            except _Declined:
                if await self._respond(key, responder.decline(notice.ask_id, notice.human)):
                    self._say("Declined: the gateway will ask someone else.")

    async def _vote(self, notice: Notice, responder: Responder) -> None:
        key = self._keys.get(notice.human)
        if key is None:
            self._say(f"No signing key for {notice.human} is set up on this terminal.")
            raise _Declined
        while True:
            line = await self._prompt(notice, "approve / reject / decline? ")
            word = line.strip().lower()
            if word in ("decline", DECLINE_COMMAND):
                raise _Declined
            if word in ("approve", "reject"):
                decision: Literal["approve", "reject"] = (
                    "approve" if word == "approve" else "reject"
                )
                vote = sign_vote(key, notice.payload, decision, self._clock.now())
                if await self._respond(
                    (notice.ask_id, notice.human), responder.submit_vote(notice.ask_id, vote)
                ):
                    self._say(f"Recorded: {decision}.")
                return
            self._say("Type approve, reject or decline.")

    async def _answer(self, notice: Notice, view: QuestionView, responder: Responder) -> None:
        prompts = {
            QuestionType.CHOOSE: f"option number (1-{len(view.options)}) or {DECLINE_COMMAND}? ",
            QuestionType.FORM: f"answer as JSON on one line, or {DECLINE_COMMAND}? ",
            QuestionType.TEXT: f"your answer on one line, or {DECLINE_COMMAND}? ",
        }
        while True:
            line = await self._prompt(notice, prompts[view.type])
            if line.strip() == DECLINE_COMMAND:
                raise _Declined
            value = self._read_value(view, line)
            if value is _UNREADABLE:
                continue
            try:
                sent = await self._respond(
                    (notice.ask_id, notice.human),
                    responder.submit_answer(notice.ask_id, notice.human, value),
                )
            except AnswerInvalid as exc:
                self._say(f"Not accepted: {exc.message}")
                continue
            if sent:
                self._say("Recorded your answer.")
            return

    def _read_value(self, view: QuestionView, line: str) -> Any:
        """The answer a line stands for, or :data:`_UNREADABLE` (and say why)."""
        text = line.removesuffix("\n").removesuffix("\r")
        if view.type is QuestionType.TEXT:
            return text
        if view.type is QuestionType.FORM:
            try:
                return parse_json(text)
            except InvalidJson as exc:
                self._say(f"That is not JSON: {exc.message}")
                return _UNREADABLE
        number = text.strip()
        if number.isascii() and number.isdigit() and 1 <= int(number) <= len(view.options):
            return view.options[int(number) - 1]
        self._say(f"Type a number from 1 to {len(view.options)}, or {DECLINE_COMMAND}.")
        return _UNREADABLE

    async def _respond(self, key: _Key, call: Awaitable[None]) -> bool:
        """Await a call to the gateway, which a withdrawal must not cut in half.

        Returns whether the gateway took it; a refusal other than
        ``ANSWER_INVALID`` (the ask closed meanwhile, …) is shown and ends
        the conversation.

        Raises:
            AnswerInvalid: the answer does not fit; the person may try again.
        """
        self._responding.add(key)
        try:
            await call
        except AnswerInvalid:
            raise
        except HatpError as exc:
            self._say(f"The gateway refused it: {exc}")
            return False
        finally:
            self._responding.discard(key)
        return True

    async def _prompt(self, notice: Notice, prompt: str) -> str:
        self._out.write(prompt)
        self._out.flush()
        line = await self._read_line()
        if line == "":
            self._say("(end of input)")
            raise _Declined
        return line

    async def _read_line(self) -> str:
        """Read one line for this conversation; ``""`` at end of input. [GW-TERMINAL-FRESH]"""
        owner = asyncio.current_task()
        if self._reading is not None and self._reading[0] is not owner:
            # Begun for a prompt since withdrawn: that line was not typed for this one.
            stale = await asyncio.shield(self._reading[1])
            self._reading = None
            if stale == "":
                return ""
            self._say("(A line typed for a withdrawn ask was ignored; please answer again.)")
        if self._reading is None:
            self._reading = (owner, _read_in_background(self._in.readline))
        # Shielded: if this conversation is withdrawn, the read stays in flight
        # (its thread cannot be stopped) and the next reader discards its line.
        line = await asyncio.shield(self._reading[1])
        self._reading = None
        return line

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()


_UNREADABLE: Any = object()


def _read_in_background(readline: Callable[[], str]) -> asyncio.Future[str]:
    """Read one line on a daemon thread and resolve the returned future with it.

    Not :func:`asyncio.to_thread`: a read still waiting when the program ends
    (its ask was withdrawn, nobody types) would keep ``asyncio.run`` waiting
    for the default executor until someone pressed Enter.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(line or "")

    def work() -> None:
        try:
            line, error = readline(), None
        except BaseException as exc:  # handed to the reader, whatever it is
            line, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            loop.call_soon_threadsafe(settle, line, error)

    threading.Thread(target=work, name="hatp-terminal-read", daemon=True).start()
    return future
