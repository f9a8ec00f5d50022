"""Type and range checks of the numbers that cross meshplan's boundaries (the Python API, the command line,
input files): each one is an integer where an integer is meant (bool is not one), finite, and within a
documented range, else a one-line error naming the argument, what is allowed and what was given.

The upper bounds are far above any real training job; they exist so that an absurd number (10**20 GPUs) is
refused before any work instead of hanging the search or overflowing a float or a tuple size.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import re
from collections.abc import Sequence
from enum import Enum
from typing import Any, TypeVar

from meshcore.errors import InputError, MeshplanError

E = TypeVar("E", bound=Enum)

MAX_GPUS = 10**7  # about 100x the largest clusters built so far
MAX_SEQ_LEN = 2**24  # 16.8M tokens per sequence, above the longest context windows trained
MAX_GLOBAL_BATCH = 10**8  # sequences per optimizer step
MAX_LAYERS = 10**4  # decoder layers (the deepest published LLMs have ~130)
MAX_WIDTH = 2**24  # hidden, FFN, head, expert and vocabulary sizes, heads and experts
MAX_TIME_LIMIT_S = 86400.0  # one ILP solve: a day
MAX_PHYSICAL = 1e9  # bandwidths (GB/s), peaks (TFLOP/s), latencies (us), lengths in a hardware profile
MAX_MEMORY_GIB = 1e6  # one GPU's memory
MAX_WORKERS = 1024  # worker processes of one sweep
# Physical ranges of the real numbers that describe hardware and a run (issue 37): sign and finiteness are not enough,
# a denormal bandwidth (5e-324 GB/s) divides to infinity and a capacity factor of 1e308 to NaN. Each range holds every
# preset with two orders of magnitude to spare on either side (a Jetson Orin Nano on 1 GbE: 0.125 GB/s, 10 TFLOP/s,
# 7.5 GiB; a B200: 8,000 GB/s of HBM, 2,250 TFLOP/s).
BANDWIDTH_GBS = (1e-3, 1e6)  # a link, memory or bus, GB/s: 1 MB/s to 1 PB/s
NIC_GBPS = (1e-2, 1e6)  # a NIC's line rate per GPU, Gbit/s: 10 Mbit/s to 1 Pbit/s
PEAK_TFLOPS = (1e-3, 1e6)  # a peak, TFLOP/s: 1 GFLOP/s to 1 EFLOP/s
MEMORY_GIB = (1e-3, MAX_MEMORY_GIB)  # one device's memory, GiB: 1 MiB up
EFFICIENCY = (1e-3, 1.0)  # an achieved share of a peak (0.1 % to all of it)
MOE_LOAD_FACTOR = (1.0, 64.0)  # MoE capacity factor or load imbalance: the busiest expert (rank) over the mean
TIME_LIMIT_S = (1e-2, MAX_TIME_LIMIT_S)  # one solver run: 10 ms to a day
# Names that reach emitted files (model, hardware profile, GPU, node group, table, device names): ASCII letters and
# digits, space and . _ - + / ( ) : @ , only, at most MAX_NAME_LEN characters. No quote, `$`, backtick, backslash,
# `;`, `&`, `|`, `<`, `>`, `*`, `?`, `~`, `#`, newline or other control character can ever be in one, so a name can
# neither end a comment line nor a quoted word of an emitted shell script (the emitters quote and flatten them as
# well: meshcore/text.py).
NAME_CHARACTERS = "ASCII letters, digits, spaces and . _ - + / ( ) : @ ,"
MAX_NAME_LEN = 200
MAX_DESCRIPTION_LEN = 500  # free text kept in a record (a table's source, a profile's description)
_NAME = re.compile(r"[A-Za-z0-9._+/():@, -]+")


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _allowed(low: float, high: float | None, low_open: bool = False) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {_num(low)}"
    return f"in {'(' if low_open else '['}{_num(low)}, {_num(high)}]"


def is_integer(value: object) -> bool:
    """An int (numpy's included), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(value: object, name: str, low: int = 1, high: int | None = None,
            error: type[MeshplanError] = InputError) -> int:
    """`value` as an int in [low, high]; a bool, float or string is refused, as is anything out of range."""
    if not is_integer(value):
        raise error(f"{name} must be an integer {_allowed(low, high)}, got {value!r} ({type(value).__name__})")
    number: int = int(value)  # type: ignore[call-overload]
    if number < low or (high is not None and number > high):
        raise error(f"{name} must be an integer {_allowed(low, high)}, got {number}")
    return number


def optional_integer(value: object, name: str, low: int = 1, high: int | None = None,
                     error: type[MeshplanError] = InputError) -> int | None:
    return None if value is None else integer(value, name, low, high, error)


def finite(value: object) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite, nor an int too large for a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def real(value: object, name: str, low: float = 0.0, high: float | None = None, *, low_open: bool = True,
         error: type[MeshplanError] = InputError) -> float:
    """`value` as a finite float above `low` (or at it, unless `low_open`) and at most `high`."""
    if not finite(value):
        raise error(f"{name} must be a finite number {_allowed(low, high, low_open)}, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if number < low or (low_open and number == low) or (high is not None and number > high):
        raise error(f"{name} must be a finite number {_allowed(low, high, low_open)}, got {value!r}")
    return number


def physical(value: object, name: str, bounds: tuple[float, float], error: type[MeshplanError] = InputError) -> float:
    """`value` as a finite float within a physical range (BANDWIDTH_GBS, MEMORY_GIB, ...), both ends included; the
    error states the range."""
    return real(value, name, bounds[0], bounds[1], low_open=False, error=error)


def flag(value: object, name: str, error: type[MeshplanError] = InputError) -> bool:
    """A real bool (1 and "yes" are not)."""
    if not isinstance(value, bool):
        raise error(f"{name} must be True or False, got {value!r}")
    return value


def identifier(value: object, name: str, error: type[MeshplanError] = InputError) -> str:
    """`value` as a name: a str of 1 to MAX_NAME_LEN characters from NAME_CHARACTERS that is not only spaces;
    anything else (another type, a newline, a quote, `$`, a control character) is refused naming `name`."""
    if not isinstance(value, str):
        raise error(f"{name} must be a text name, got {value!r} ({type(value).__name__})")
    if not value.strip() or len(value) > MAX_NAME_LEN or not _NAME.fullmatch(value):
        bad = sorted({c for c in value if not _NAME.fullmatch(c)})
        why = (f"it holds {', '.join(repr(c) for c in bad[:5])}" if bad else
               f"it has {len(value)} characters" if len(value) > MAX_NAME_LEN else "it is empty")
        raise error(f"{name} must be 1 to {MAX_NAME_LEN} characters of {NAME_CHARACTERS} ({why}), got "
                    f"{value[:60]!r}{'...' if len(value) > 60 else ''}")
    return value


def description(value: object, name: str, error: type[MeshplanError] = InputError) -> str:
    """`value` as free text for a record (where numbers came from, what a profile describes): a str of one line of
    printable characters, at most MAX_DESCRIPTION_LEN; a newline or another control character is refused."""
    if not isinstance(value, str):
        raise error(f"{name} must be text, got {value!r} ({type(value).__name__})")
    if len(value) > MAX_DESCRIPTION_LEN or not value.isprintable():
        raise error(f"{name} must be one line of at most {MAX_DESCRIPTION_LEN} printable characters (no newline or "
                    f"control character), got {value[:60]!r}{'...' if len(value) > 60 else ''}")
    return value


def path_argument(value: object, name: str, what: str) -> None:
    """A file path argument of the Python API: a str or an os.PathLike (not a number, None or bytes)."""
    if not isinstance(value, str | os.PathLike):
        raise InputError(f"{name} must be the path of {what} (a str or a Path), got {value!r} ({type(value).__name__})")


def choice(kind: type[E], value: object, name: str, error: type[MeshplanError] = InputError) -> E:
    """`value` as a member of the enum `kind` (a member, or its value such as "selective")."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (ValueError, TypeError):
        allowed = ", ".join(str(v.value) for v in kind)
        raise error(f"{name} must be one of {allowed}, got {value!r}") from None


def _folded(name: str) -> str:
    """A name compared loosely: lower case, without separators (Llama3-70B, llama-3-70b and llama3_70b agree)."""
    return "".join(c for c in name.lower() if c.isalnum())


def not_found(what: str, given: str, names: Sequence[str], allowed: str, suffixes: tuple[str, ...]) -> str:
    """The message for a `what` ("model") that is neither one of `names` nor a readable file: a path that does not
    exist is named as missing; a near miss of a name gets "did you mean"; `allowed` says what may be given."""
    key = _folded(given)
    same = [n for n in names if _folded(n) == key]
    longer = [n for n in names if key and _folded(n).startswith(key)]
    folded = {_folded(n): n for n in names}
    close = same or longer[:3] or [folded[f] for f in difflib.get_close_matches(key, list(folded), n=3, cutoff=0.75)]
    hint = (f"; did you mean {close[0]!r}?" if len(close) == 1 else
            f"; did you mean one of {', '.join(close)}?" if close else "")
    if given.endswith(suffixes) or os.sep in given:
        where = "no such file" if not os.path.exists(given) else "not a file meshplan reads as one"
        return f"{what} {given!r}: {where}; give {allowed}{hint}"
    return f"unknown {what} {given!r}: give {allowed}{hint}"


def mapping_keys(data: object, required: tuple[str, ...], optional: tuple[str, ...], where: str) -> dict[str, Any]:
    """`data` as a mapping with every `required` key and no key outside `required` + `optional`; otherwise an
    InputError naming the unknown (or missing) keys and the allowed ones."""
    allowed = ", ".join(required + optional)
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping of {allowed}")
    unknown = sorted(str(k) for k in set(data) - set(required + optional))
    missing = [k for k in required if k not in data]
    if unknown or missing:
        problem = f"unknown keys {unknown}" if unknown else f"missing keys {missing}"
        raise InputError(f"{where}: {problem}; allowed: {allowed}")
    return data
