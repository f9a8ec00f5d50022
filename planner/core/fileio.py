"""Atomic output files with the permissions the user's umask asks for.

A file is written to a temporary file in the target's folder and renamed over the target, so that a failed or
interrupted write leaves neither a partial target nor the temporary file. `tempfile.mkstemp` creates the
temporary file 0600 whatever the umask; the mode is set from the umask before the rename (0666 & ~umask, like
`open()`; 0777 & ~umask for an executable script, like a compiler's output), so the file reads as any other
file the user creates.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.core.errors import InputError


def current_umask() -> int:
    """The process's umask, read without changing it where /proc says it (Linux), else set and restored."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode(executable: bool = False) -> int:
    """The mode a new file gets under the current umask (readable and writable; executable when asked)."""
    return (0o777 if executable else 0o666) & ~current_umask()


def write_bytes_atomic(target: str | Path, data: bytes, executable: bool = False) -> None:
    """Write `data` to `target` through a temporary file in the same folder, set its mode from the umask, rename."""
    target = Path(target)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), file_mode(executable))
        os.replace(tmp, target)
    except BaseException as exc:  # an interrupt too: no temporary file is left behind
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None
        raise


def write_text_atomic(target: str | Path, text: str, executable: bool = False) -> None:
    """`write_bytes_atomic` of `text` (UTF-8); `executable` for scripts (a `#!` first line)."""
    write_bytes_atomic(target, text.encode(), executable)


def is_script(text: str) -> bool:
    """Text that runs as a program: it starts with a `#!` line."""
    return text.startswith("#!")
