"""The ``hatp`` command line: ``demo``, ``verify``, ``serve``, ``recover`` and ``keys``."""

from hatp.cli import _demo, _keys, _recover, _serve, _verify
from hatp.cli._app import app, main

__all__ = ["app", "main"]

del _demo, _keys, _recover, _serve, _verify  # imported so that their commands register
