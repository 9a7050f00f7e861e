"""What is at a path a user typed, without raising for names no file can have.

`Path.is_file()` and `is_dir()` return False for a missing path but raise for others: a part of
the name longer than the file system allows (255 bytes on Linux and macOS: ENAMETOOLONG), a NUL
byte, a folder this process may not enter. A path from a request or a form is checked here, so
such a name is "nothing there" (a 400 saying so), never a 500.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal


def file_or_directory(path: Path) -> Literal["file", "directory"] | None:
    """A regular file, a directory (symlinks followed), or None: nothing there, or nothing that
    can be looked at."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    if stat.S_ISREG(mode):
        return "file"
    return "directory" if stat.S_ISDIR(mode) else None
