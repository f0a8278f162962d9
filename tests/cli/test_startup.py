"""The command line starts fast: each command imports what it runs, and ``hatp verify``
only the evidence layer's dependencies (a structural check; timings are in
benchmarks/cli.py)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hatp.http
from planted import FIXTURES, good_record

#: What the server, MCP and the store bring; verifying a record needs none of it.
HEAVY = ("mcp", "starlette", "uvicorn", "sqlalchemy", "psycopg", "webauthn", "jinja2")

RUN = """
import json, sys
from hatp.cli import main
sys.argv = ["hatp", *sys.argv[1:]]
try:
    main()
except SystemExit as done:
    code = done.code
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(HEAVY)))
print(json.dumps({"exit": code, "loaded": heavy}), file=sys.stderr)
"""


def _loaded(*argv: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", RUN.replace("HEAVY", repr(json.dumps(HEAVY))), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = done.stderr.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last)
    return result


def test_hatp_verify_loads_only_the_evidence_layer(tmp_path: Path) -> None:
    """[VFY-STANDALONE] verifying a record loads no server, MCP, store or py_webauthn."""
    record = tmp_path / "record.json"
    record.write_bytes(good_record())
    ran = _loaded("verify", str(record), "--keys", str(FIXTURES / "keyring.json"))
    assert ran == {"exit": 0, "loaded": []}


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["verify", "--help"],
        ["serve", "--help"],
        ["demo", "--help"],
        ["init", "--help"],
        ["cards", "build", "--help"],
        ["txn", "list", "--help"],
    ],
    ids=" ".join,
)
def test_version_and_help_load_no_role_and_no_server(argv: list[str]) -> None:
    assert _loaded(*argv) == {"exit": 0, "loaded": []}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_of_hatp_http_imports_the_demo() -> None:
    """The demo world is composed at the CLI edge (``hatp serve --demo``), from
    hatp.http's public API: the HTTP package never imports it, at any depth."""
    files = sorted(Path(hatp.http.__file__).parent.rglob("*.py"))
    assert files
    offending = {
        str(path.name): sorted(
            n for n in _imported(path) if n == "hatp.demo" or n.startswith("hatp.demo.")
        )
        for path in files
    }
    assert {name: found for name, found in offending.items() if found} == {}
