"""Output files that never destroy what their path points at, written atomically with the permissions the user's
umask asks for.

Standard output (`-`), a device, a FIFO or a socket is written to directly; a symbolic link's target is replaced,
the link kept. A regular file is written to a temporary file in the target's folder and renamed over the target,
so that a failed or interrupted write leaves neither a partial target nor the temporary file. `tempfile.mkstemp`
creates the temporary file 0600 whatever the umask; the mode is set from the umask before the rename (0666 & ~umask,
like `open()`; 0777 & ~umask for an executable script, like a compiler's output), so the file reads as any other file
the user creates.
"""

from __future__ import annotations

import os
import re
import socket
import stat
import sys
import tempfile
from pathlib import Path

from meshcore.errors import InputError


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
    """Write `data` to `target` without destroying what the path points at:
    - `-`, /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N: written to that open file descriptor;
    - a device, FIFO or socket (after following symbolic links): written to directly, never renamed over;
    - a symbolic link: its target is replaced atomically in the target's folder (the link stays a link);
    - a regular file or a new name: a temporary file in the same folder, its mode set from the umask, renamed over
      the target, so that a failed or interrupted write leaves neither a partial file nor the temporary one.
    An empty path or a folder is a one-line InputError, as is any OSError."""
    text = os.fspath(target)
    if not text:
        raise InputError("cannot write to an empty path: name a file, or - for standard output")
    descriptor = _descriptor(text)
    try:
        if descriptor is not None:
            _write_descriptor(descriptor, data)
            return
        mode = _existing_mode(text)
        if mode is not None and stat.S_ISDIR(mode):
            raise InputError(f"cannot write {text}: it is a folder; name a file in it")
        if mode is not None and not stat.S_ISREG(mode):
            _write_special(text, mode, data)
            return
    except OSError as exc:
        raise InputError(f"cannot write {text}: {exc.strerror or exc}") from None
    _replace_atomically(Path(os.path.realpath(text)) if os.path.islink(text) else Path(text), data, executable)


_DESCRIPTOR = re.compile(r"(?:/dev/fd/|/proc/self/fd/)(\d+)")
_STANDARD = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor(path: str) -> int | None:
    """The open file descriptor a path names (`-` is standard output), or None for any other path."""
    if path in _STANDARD:
        return _STANDARD[path]
    match = _DESCRIPTOR.fullmatch(path)
    return int(match.group(1)) if match else None


def writes_stdout(target: str | Path) -> bool:
    """Whether writing `target` writes standard output (`-`, /dev/stdout, /dev/fd/1): the report printed beside
    such an output goes to standard error, so that the output stays clean."""
    return _descriptor(os.fspath(target)) == 1


def _write_descriptor(fd: int, data: bytes) -> None:
    """Write to an open descriptor as a shell redirection would (`> /dev/stdout` duplicates it, never reopens it);
    standard output and error through sys's streams, so that a caller capturing them sees the bytes."""
    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        stream.flush()
        buffer = getattr(stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:  # a text stream without a buffer (a test harness's)
            stream.write(data.decode())
            stream.flush()
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _existing_mode(path: str) -> int | None:
    """st_mode of what `path` leads to (symbolic links followed), None where nothing is there yet."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None


def _write_special(path: str, mode: int, data: bytes) -> None:
    """A device or FIFO is opened and written; a Unix socket is connected to and sent the bytes."""
    if stat.S_ISSOCK(mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            sock.sendall(data)
        return
    with open(path, "wb") as handle:
        handle.write(data)


def _replace_atomically(target: Path, data: bytes, executable: bool) -> None:
    """Write `data` to a temporary file in `target`'s folder, set its mode from the umask, rename it over `target`."""
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
