"""Reading a user's input file, bounded: every model, hardware, cluster, plan, cost-table, run-log and calibration
file meshplan reads goes through `read_bytes` / `read_text`, which read at most the limit of that kind of file plus
one byte, whatever the path is (a regular file, a device such as /dev/zero, a FIFO), and refuse it past the limit;
and YAML or JSON text goes through `parse_yaml` / `parse_json`, which refuse nesting deeper than MAX_NESTING and
aliases that expand past the text's size, so that what reaches the loaders is small and shallow.

The limits (README, "Inputs") are far above any real input: a model YAML, a config.json or a hardware profile is a
few KB, a plan file with 100 alternatives about 75 KB, a profiled cost table some 100s of rows, a training log of a
long run 100s of MB. They exist so that a wrong path (/dev/zero, a dataset shard) is refused at once instead of
filling memory, and a file that takes more than seconds to parse is refused before parsing. Only the packaged
presets are read without them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

import yaml

from meshcore.errors import InputError

KIB = 1024
MIB = 1024 * KIB
MAX_SPEC_BYTES = 1 * MIB  # a model YAML, HF config.json, hardware profile or fragment, cluster, error-band file
MAX_PLAN_BYTES = 8 * MIB  # a plan file (YAML or JSON), a calibration runs file, a trial manifest
MAX_TABLE_BYTES = 64 * MIB  # a cost table: a transformer's or a chain's (CSV or parquet), an MLIP cost table
MAX_LOG_BYTES = 256 * MIB  # a training log (Megatron-LM, torchtitan, DeepSpeed) that calibrate reads
MAX_NESTING = 64  # mappings and lists inside one another in a YAML or JSON file (plan files nest 6 deep)
_CHUNK = 1 * MIB
# libyaml's parser where PyYAML was built with it (twice as fast here), else the pure-Python one; both are safe
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """yaml.safe_load with `SAFE_LOADER` (the packaged presets and profiles: a third of a small plan's start-up was
    the pure-Python parser)."""
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)

_LAST_PIPE: dict[tuple[int, int, int], bytes] = {}  # the last pipe read: (device, inode, change time) -> its bytes


def shown(path: str | os.PathLike[str]) -> str:
    """A path as a message shows it: as written, or quoted with escapes when it holds a line break or another
    character that is not printable (the message stays one line)."""
    text = os.fspath(path)
    return text if text.isprintable() else repr(text)


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit // KIB} KiB" if limit % KIB == 0 else f"{limit} B"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def not_a_file(path: str | os.PathLike[str], what: str = "file") -> str | None:
    """Why `path` cannot be read as a file ("is a directory", "is not a regular file (...)"), or None when it is a
    regular file or does not exist; a path the system refuses to look up (a name too long, no permission) is an
    InputError naming it (`what` it is meant to be: "model")."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise InputError(f"cannot read {what} {shown(path)}: {_reason(exc)}") from None
    except ValueError:  # a NUL character in the path
        raise InputError(f"cannot read {what} {shown(path)}: a path cannot hold a NUL character") from None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, FIFO or socket)"
    return None


def _pipe(info: os.stat_result) -> tuple[int, int, int] | None:
    """(device, inode, change time) of a FIFO or pipe (a named FIFO, /dev/stdin from a pipe, bash's <(...)), else
    None. Writes change the time, and a FIFO made anew at a path (its inode number reused) has another."""
    return (info.st_dev, info.st_ino, info.st_ctime_ns) if stat.S_ISFIFO(info.st_mode) else None


def _last_pipe(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes of `path` when it is the pipe read last and nothing has been written to it since."""
    try:
        return _LAST_PIPE.get(_pipe(os.stat(path)) or (0, 0, 0)) if _LAST_PIPE else None
    except (OSError, ValueError):
        return None


def read_bytes(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The contents of the file at `path` (`what` names it in messages: "plan file"), read in chunks up to `limit`
    bytes plus one; a directory, a file over `limit` bytes (a device such as /dev/zero included) or one the system
    cannot open is an InputError naming the path and the limit. A pipe is read once: reading the last pipe read
    again (explain and plan --costs look at their input twice) gives the same bytes instead of waiting for a writer
    that has gone."""
    where = f"cannot read {what} {shown(path)}"
    again = _last_pipe(path)
    if again is not None:
        return again
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise InputError(f"{where}: it is a directory; give the {what} itself")
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise InputError(f"{where}: {info.st_size} bytes; a {what} may be at most {_size(limit)}")
            chunks: list[bytes] = []
            total = 0
            while total <= limit:
                chunk = handle.read(min(_CHUNK, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            pipe = _pipe(os.fstat(handle.fileno()))
    except IsADirectoryError:
        raise InputError(f"{where}: it is a directory; give the {what} itself") from None
    except OSError as exc:
        raise InputError(f"{where}: {_reason(exc)}") from None
    except ValueError:  # a NUL character in the path
        raise InputError(f"{where}: a path cannot hold a NUL character") from None
    if total > limit:
        raise InputError(f"{where}: larger than {_size(limit)}; a {what} may be at most {_size(limit)}")
    data = b"".join(chunks)
    if pipe is not None:
        _LAST_PIPE.clear()
        _LAST_PIPE[pipe] = data
    return data


def read_text(path: str | os.PathLike[str], what: str, limit: int) -> str:
    """`read_bytes` decoded as UTF-8 (a byte-order mark dropped); text that is not UTF-8 is an InputError."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"cannot read {what} {shown(path)}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None


def _children(value: Any) -> list[Any] | tuple[Any, ...] | set[Any]:
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, list | tuple | set):
        return value
    return ()


def check_shape(data: Any, origin: str, size: int) -> Any:
    """`data` (parsed from `size` characters of text) unless it nests deeper than MAX_NESTING or holds more values
    than the text has characters (YAML aliases, `*name`, can make a document of a few lines expand to 10^9 values:
    the "billion laughs")."""
    budget = size + 1000
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise InputError(f"{origin}: values nested more than {MAX_NESTING} deep (mappings and lists inside one "
                             "another); meshplan's inputs nest a few levels")
        children = _children(value)
        budget -= len(children)
        if budget < 0:
            raise InputError(f"{origin}: its aliases (*name) expand to more values than the file has characters; "
                             "write the values out")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple | set))
    return data




def parse_yaml(text: str, origin: str, problem: str = "not valid YAML") -> Any:
    """`text` parsed as YAML with the safe loader (no tag constructs an object); a syntax error, nesting past what
    the parser allows, a number too long to convert, or a shape `check_shape` refuses is an InputError starting
    with `origin` and `problem`."""
    with _parse_errors(origin, problem):
        try:
            data = yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
        except yaml.YAMLError as exc:  # a marked error's `problem` says what (its first line may be the context)
            reason = getattr(exc, "problem", None) or _first_line(exc)
            raise InputError(f"{origin}: {problem} ({_first_line(reason)})") from None
    return check_shape(data, origin, len(text))


def parse_json(text: str, origin: str, problem: str = "not valid JSON") -> Any:
    """`text` parsed as JSON; the errors of `parse_yaml`, for JSON."""
    with _parse_errors(origin, problem):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{origin}: {problem} ({exc.msg} at line {exc.lineno})") from None
    return check_shape(data, origin, len(text))


@contextlib.contextmanager
def _parse_errors(origin: str, problem: str) -> Iterator[None]:
    """What both parsers raise beyond their own errors, as one-line InputErrors: nesting past the interpreter's
    recursion limit, and a ValueError (a date such as 2001-13-01, an integer of more than 4300 digits)."""
    try:
        yield
    except RecursionError:
        raise InputError(f"{origin}: {problem} (values nested too deep; meshplan's inputs nest a few levels)") \
            from None
    except ValueError as exc:
        raise InputError(f"{origin}: {problem} ({_value_error(exc)})") from None


def _value_error(exc: ValueError) -> str:
    """What a ValueError of a parser says, without its advice to change Python's limit on integer digits."""
    text = _first_line(exc)
    return "an integer of more than 4300 digits" if "integer string conversion" in text else text


def _first_line(exc: BaseException | str) -> str:
    lines = str(exc).splitlines()
    return lines[0] if lines else type(exc).__name__
