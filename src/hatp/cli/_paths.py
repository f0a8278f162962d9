"""The paths a command is given, checked before any work starts: each problem a
``CONFIG_INVALID`` naming the option and what to do, never a traceback."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hatp.errors import ConfigInvalid

log = logging.getLogger(__name__)


def new_folder(path: Path, option: str) -> Path:
    """Make ``path`` a new or empty folder the command writes into; return it.

    Raises:
        ConfigInvalid: ``path`` is a file, a folder with files in it (a previous
            run's, whose state would change this run), or cannot be made or written.
    """
    if path.exists() and not path.is_dir():
        raise _refused(option, f"{path} is a file, not a folder: give a new or empty folder")
    if path.is_dir():
        try:
            taken = any(path.iterdir())
        except OSError as exc:
            raise _refused(option, f"cannot read folder {path}: {exc.strerror}") from None
        if taken:
            raise _refused(
                option,
                f"{path} already holds files (a previous run's world, whose bookings would "
                "change this run): give a new or empty folder",
            )
    else:
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise _refused(option, f"cannot make folder {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise _refused(option, f"cannot write in folder {path}: permission denied")
    return path


def folder_to_use(path: Path, option: str) -> Path:
    """Make ``path`` a folder (kept as it is if it exists) the command may write in.

    Raises:
        ConfigInvalid: ``path`` is a file, or the folder cannot be made or written.
    """
    if path.exists() and not path.is_dir():
        raise _refused(option, f"{path} is a file, not a folder: give a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refused(option, f"cannot make folder {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise _refused(option, f"cannot write in folder {path}: permission denied")
    return path


def file_to_write(path: Path, option: str) -> Path:
    """Check that a file can be written at ``path`` (whether one may be replaced there is
    the writer's to say, atomically).

    Raises:
        ConfigInvalid: ``path`` is a folder, or its folder is missing or not writable.
    """
    if path.is_dir():
        raise _refused(option, f"{path} is a folder: name the file to write")
    folder = path.parent
    if not folder.is_dir():
        raise _refused(option, f"folder {folder} does not exist: make it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refused(option, f"cannot write in folder {folder}: permission denied")
    return path


def _refused(option: str, message: str) -> ConfigInvalid:
    log.info("refused %s: %s", option, message)
    return ConfigInvalid(f"{option}: {message}", key=option.lstrip("-"))
