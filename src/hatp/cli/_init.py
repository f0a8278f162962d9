"""``hatp init``: a folder that ``hatp serve --config DIR/hatp.toml`` runs as it is.

It writes the directory's, the gateway's and the coordinator's keys, the keyring
that vouches for them, an example ``people.toml``, the directory of Human Cards
signed from it and a commented ``hatp.toml``: every file is written into a
folder of its own inside DIR first and renamed into place once all are written,
so a refusal or a failure leaves DIR as it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from hatp.cli._app import HatpCommand, app, err, escape, reports_errors
from hatp.errors import AddressInvalid, ConfigInvalid

log = logging.getLogger(__name__)

#: What ``hatp init`` writes, relative to DIR (keys in ``keys/``, mode 0600).
WRITES = (
    "keys/directory.jwk",
    "keys/gateway.jwk",
    "keys/coordinator.jwk",
    "keyring.json",
    "people.toml",
    "directory.json",
    "hatp.toml",
)

PEOPLE_TOML = """\
# Who may approve what at {org}. Edit it, then sign the cards again:
#   hatp cards build --config hatp.toml
# Every member is described in docs/spec.md §17, "people.toml".

org = "{org}"                 # people's addresses are human://{org}/<name>
timezone = "Europe/London"    # everyone's time zone unless they name their own

[roles]                       # every role a person holds is declared here
finance-approver = "approves spending"
security-lead = "approves access and deployments"

[people.alice]
name = "Alice Martin"
roles = ["finance-approver"]
# action -> currency (ISO 4217) -> the most they may approve, a decimal string
limits = {{ "approve.spend" = {{ USD = "10000", EUR = "9000" }} }}
delegates = ["bob"]           # who takes over when alice does not answer
channels = ["web", "email"]   # slack, sms, voice, email, webhook, terminal, web
passkey = true                # approves on the approver page with a passkey

[people.bob]
name = "Bob Chen"
roles = ["finance-approver"]
limits = {{ "approve.spend" = {{ USD = "2000" }} }}
delegates = ["alice"]
channels = ["web"]
status = "busy"               # available, busy, away, offline
decide_seconds = 1800         # how long bob usually takes to decide

[people.carol]
name = "Carol Diaz"
roles = ["security-lead"]
limits = {{ "approve.access" = {{ USD = "0" }} }}
channels = ["web", "slack"]
timezone = "America/New_York"
max_open = 5                  # asks carol takes at once
"""

HATP_TOML = """\
# Settings of `hatp serve --config hatp.toml` (docs/spec.md §25). Paths are
# relative to this file. Run it as it is; then invite people to register a
# passkey: hatp invite human://{org}/alice --config hatp.toml

[server]
host = "127.0.0.1"
port = 8000
db = "hatp.db"                      # SQLite here; or postgresql+psycopg://user@host/db
keyring = "keyring.json"            # the public keys of the directory, gateway, coordinator

[gateway]
id = "{gateway}"
key = "keys/gateway.jwk"
# Whom each agent works for: that person never approves the agent's asks.
# initiator_principals = {{ "agent://{org}/travel-bot" = "human://{org}/alice" }}

[directory]
issuer = "{directory}"
cards = "directory.json"            # from people.toml: hatp cards build --config hatp.toml

[coordinator]
id = "{coordinator}"
key = "keys/coordinator.jwk"
# No participants yet: transactions can begin once their tool servers are named,
# each by its streamable-HTTP MCP endpoint.
# [coordinator.participants]
# "mcp://airline.example" = "http://127.0.0.1:9001/mcp"

[web]                               # the approver page, http://localhost:8000/approve
rp_id = "localhost"                 # behind https: your domain, with origins = ["https://…"]
directory_key = "keys/directory.jwk"   # registers passkeys from `hatp invite`
"""


@app.command("init", cls=HatpCommand)
@reports_errors
def init(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to write (made if new).")],
    org: Annotated[
        str, typer.Option("--org", help="The organisation's DNS name, e.g. acme.example.")
    ] = "acme.example",
    force: Annotated[
        bool, typer.Option("--force", help="Replace the files a previous init wrote.")
    ] = False,
) -> None:
    """Write keys, a keyring, an example people.toml, its signed cards and a hatp.toml.

    `hatp serve --config DIR/hatp.toml` serves them as they are. Exit 2 when DIR
    already holds any of these files (without --force) or cannot be written;
    nothing is written then.
    """
    from hatp.cli._paths import folder_to_use
    from hatp.directory import build_directory, parse_people
    from hatp.evidence import Keyring, SigningKey
    from hatp.model import parse_address

    try:
        parse_address(f"human://{org}/x")
    except AddressInvalid as exc:
        log.info("hatp init refused org %r: %s", org, exc.message)
        raise ConfigInvalid(
            f"--org: {org!r} is not a lower-case DNS name like acme.example: {exc.message}",
            key="org",
        ) from None
    folder_to_use(folder, "DIR")
    taken = [name for name in WRITES if (folder / name).exists()]
    if taken and not force:
        log.info("hatp init refused %s: it holds %s", folder, ", ".join(taken))
        raise ConfigInvalid(
            f"DIR: {folder} already holds {', '.join(taken)}: pick a new folder, or pass "
            "--force to replace them (their keys are lost)",
            key="DIR",
        )
    ids = {
        "directory": f"https://directory.{org}",
        "gateway": f"https://gateway.{org}",
        "coordinator": f"hatp://{org}/coordinator",
    }
    keys = {role: SigningKey.generate(f"{who}#key-1") for role, who in ids.items()}
    keyring = Keyring(
        [(keys[role].public, ids[role]) for role in ids], trusted_issuers=list(ids.values())
    )
    people_text = PEOPLE_TOML.format(org=org)
    people = parse_people(people_text, source="people.toml")
    directory = build_directory(people, ids["directory"], keys["directory"])
    staging = Path(tempfile.mkdtemp(prefix=".hatp-init-", dir=folder))
    try:
        (staging / "keys").mkdir(mode=0o700)
        for role, key in keys.items():
            key.save(staging / "keys" / f"{role}.jwk")
        keyring.save(staging / "keyring.json")
        (staging / "people.toml").write_text(people_text, encoding="utf-8")
        directory.save(staging / "directory.json")
        (staging / "hatp.toml").write_text(HATP_TOML.format(org=org, **ids), encoding="utf-8")
        (folder / "keys").mkdir(mode=0o700, exist_ok=True)
        for name in WRITES:
            os.replace(staging / name, folder / name)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
    err.print(f"wrote {escape(org)}'s organisation in {escape(folder)}:")
    for name in WRITES:
        err.print(f"  {escape(name)}")
    err.print(
        "edit people.toml, then: hatp cards build --config hatp.toml; "
        f"serve: hatp serve --config {escape(folder / 'hatp.toml')}"
    )
    typer.echo(str(folder / "hatp.toml"))
