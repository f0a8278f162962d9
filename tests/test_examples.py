"""Every program in examples/ runs as a user would run it (the venv's python, in a folder
of its own) and says it worked; each says what it shows and uses hatp's public API only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: How long one example may run, at most.
BOUND = 120
PROGRAMS = sorted(EXAMPLES.glob("*.py"))


def test_the_examples_the_readme_names_are_there() -> None:
    assert {p.name for p in PROGRAMS} >= {
        "gated_function.py",
        "mcp_participant.py",
        "write_plan.py",
        "lease_guarded_route.py",
    }
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    for program in PROGRAMS:
        assert f"examples/{program.name}" in readme, program.name


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_each_example_runs_and_says_it_worked(program: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=BOUND,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("OK: "), done.stdout
    assert list(tmp_path.iterdir()) == []  # it wrote nothing where it was run


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_each_example_says_what_it_shows_and_imports_no_private_module(program: Path) -> None:
    tree = ast.parse(program.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    assert docstring and "Shows:" in docstring and "Run it:" in docstring
    imported = [
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom)
            else []
        )
    ]  # fmt: skip
    private = [n for n in imported if n.startswith("hatp") and "._" in n]
    assert private == []
