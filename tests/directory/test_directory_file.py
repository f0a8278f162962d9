"""A directory loaded from its file follows the file, and edits it one at a time.

Several processes hold one directory each (the workers of one ``hatp serve``,
a second machine's gateway on the same file system): a card one of them
changes is read by the others at their next look, and edits made at the same
moment, in threads or in separate OS processes, are all kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from directory.people import DIRECTORY_KEY, ISSUER, keyring, signed
from hatp.directory import Directory, add_passkey, sign_card
from hatp.errors import CardInvalid
from hatp.gateway import SoftwareAuthenticator
from hatp.model import WebAuthnKey

BOB = "human://acme.com/bob"
ALICE = "human://acme.com/alice"
TESTS = Path(__file__).parents[1]


def _file(tmp_path: Path) -> Path:
    """bob and alice without passkeys, in a directory file."""
    path = tmp_path / "directory.json"
    Directory(ISSUER, [signed("bob", keys=[]), signed("alice", keys=[])], keyring()).save(path)
    return path


def _entry(n: int, human: str = BOB) -> dict[str, str]:
    """A passkey entry of ``human``'s, the ``n``-th (its own key, kid and credential)."""
    device = SoftwareAuthenticator.from_seed(
        f"device-{n}".encode(), "acme.com", f"{human}#passkey-{n}"
    )
    return device.key_entry()


def _add(directory: Directory, n: int, human: str = BOB) -> None:
    with directory.editing():
        directory.replace_card(
            add_passkey(directory.signed(human), _entry(n, human), DIRECTORY_KEY), keyring()
        )


def _passkeys(directory: Directory, human: str = BOB) -> list[str]:
    return sorted(k.kid for k in directory.card(human).keys if isinstance(k, WebAuthnKey))


def _on_disk(path: Path, human: str = BOB) -> list[str]:
    return _passkeys(Directory.load(path, keyring()), human)


def test_a_card_edited_by_one_holder_is_read_by_another_at_its_next_look(
    tmp_path: Path,
) -> None:
    path = _file(tmp_path)
    first, second = Directory.load(path, keyring()), Directory.load(path, keyring())
    assert _passkeys(second) == []

    _add(first, 1)

    assert _passkeys(second) == [f"{BOB}#passkey-1"]
    assert [c.id for c in second.cards()] == [ALICE, BOB]
    assert _on_disk(path) == [f"{BOB}#passkey-1"]


def test_an_edit_starts_from_the_file_so_edits_by_two_holders_are_both_kept(
    tmp_path: Path,
) -> None:
    """The second holder's copy is stale when its edit starts; the edit reads the file
    first, so it adds to the first holder's change instead of writing over it."""
    path = _file(tmp_path)
    first, second = Directory.load(path, keyring()), Directory.load(path, keyring())
    assert len(second) == 2  # second has read the file before first changes it

    _add(first, 1)
    _add(second, 2)
    _add(first, 3, ALICE)

    expected = [f"{BOB}#passkey-1", f"{BOB}#passkey-2"]
    assert _on_disk(path) == expected
    assert _passkeys(first) == _passkeys(second) == expected
    assert _on_disk(path, ALICE) == [f"{ALICE}#passkey-3"]


def test_edits_in_many_threads_at_once_are_all_kept(tmp_path: Path) -> None:
    path = _file(tmp_path)
    holders = [Directory.load(path, keyring()) for _ in range(4)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: _add(holders[n % 4], n), range(1, 17)))

    assert _on_disk(path) == sorted(f"{BOB}#passkey-{n}" for n in range(1, 17))


def _rename(directory: Directory, human: str, name: str) -> None:
    """Give ``human``'s card a new display name, signed again by the directory."""
    with directory.editing():
        body = {k: v for k, v in directory.signed(human).items() if k != "signature"}
        directory.replace_card(sign_card({**body, "displayName": name}, DIRECTORY_KEY), keyring())


_EDITOR = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from directory.test_directory_file import EDITS, _rename
    from directory.people import keyring
    from hatp.directory import Directory

    path, go, me = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    directory = Directory.load(path, keyring())
    while not go.exists():
        time.sleep(0.001)
    for n in range(1, EDITS + 1):
        _rename(directory, f"human://acme.com/{me}", f"{me} v{n}")
    """
)
EDITS = 30


def test_edits_from_several_os_processes_at_once_are_all_kept(tmp_path: Path) -> None:
    """Four processes, each with its own card, rename it 30 times as fast as they can,
    all starting together: every card ends at its 30th name, so no process wrote the
    file over another's edit."""
    people = [f"p{i}" for i in range(4)]
    path = tmp_path / "directory.json"
    Directory(ISSUER, [signed(name) for name in people], keyring()).save(path)
    go = tmp_path / "go"
    editors = [
        subprocess.Popen(
            [sys.executable, "-c", _EDITOR, str(TESTS), str(path), str(go), name],
            stderr=subprocess.PIPE,
        )
        for name in people
    ]
    time.sleep(1.0)  # every editor has loaded the file and waits
    go.touch()
    for editor in editors:
        _, errors = editor.communicate(timeout=120)
        assert editor.returncode == 0, errors.decode()

    found = Directory.load(path, keyring())
    assert {name: found.card(f"human://acme.com/{name}").display_name for name in people} == {
        name: f"{name} v{EDITS}" for name in people
    }


def test_an_edit_that_raises_writes_nothing_and_keeps_the_file_s_cards(tmp_path: Path) -> None:
    path = _file(tmp_path)
    holder = Directory.load(path, keyring())
    before = path.read_bytes()

    with pytest.raises(RuntimeError, match="changed my mind"), holder.editing():
        holder.replace_card(add_passkey(holder.signed(BOB), _entry(1), DIRECTORY_KEY), keyring())
        assert _passkeys(holder) == [f"{BOB}#passkey-1"]
        raise RuntimeError("changed my mind")

    assert path.read_bytes() == before
    assert _passkeys(holder) == []


def test_a_file_that_no_longer_verifies_is_refused_until_it_is_mended(tmp_path: Path) -> None:
    """Fail closed, as at start-up: a card that does not verify refuses the whole file;
    the holder reads it again once it verifies."""
    path = _file(tmp_path)
    holder = Directory.load(path, keyring())
    good = path.read_text()
    doc = json.loads(good)
    doc["cards"][0]["displayName"] = "Mallory"  # changed after the directory signed it
    path.write_text(json.dumps(doc))

    with pytest.raises(CardInvalid) as caught:
        holder.cards()
    assert caught.value.data["index"] == 0
    with pytest.raises(CardInvalid), holder.editing():
        pytest.fail("an edit must not start on a file that does not verify")

    path.write_text(good)
    assert [c.id for c in holder.cards()] == [ALICE, BOB]


def test_a_file_now_issued_by_another_directory_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path)
    holder = Directory.load(path, keyring())
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "issuer": "https://other.example"}))

    with pytest.raises(CardInvalid) as caught:
        holder.cards()
    assert caught.value.data["reason"] in {"ISSUER", "SHAPE"}


def test_a_directory_built_in_memory_follows_no_file(tmp_path: Path) -> None:
    """Nothing to follow or lock: an edit changes the directory and writes nothing."""
    held = Directory(ISSUER, [signed("bob", keys=[])], keyring())
    _add(held, 1)
    assert _passkeys(held) == [f"{BOB}#passkey-1"]
    assert list(tmp_path.iterdir()) == []
