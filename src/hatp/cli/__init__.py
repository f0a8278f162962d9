"""The ``hatp`` command line: ``demo``, ``verify`` and ``keys``."""

from hatp.cli import _demo, _keys, _verify
from hatp.cli._app import app, main

__all__ = ["app", "main"]

del _demo, _keys, _verify  # imported so that their commands register
