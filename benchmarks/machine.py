"""What a benchmark prints beside its figures: the machine and how busy it was, so that a missed target on a
loaded machine reads as such (a time measured while other processes share the cores is not the code's alone)."""

from __future__ import annotations

import os
import platform
import time


def machine_line() -> str:
    """'<date> on <host>: N cores, load 1.02 0.87 0.55 (busy: ...)' with a warning when the 1-minute load exceeds
    half the cores."""
    cores = os.cpu_count() or 1
    one, five, fifteen = os.getloadavg()
    busy = " (BUSY: other work shares the cores, times are inflated)" if one > cores / 2 else ""
    return (f"{time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}: {cores} cores, load {one:.2f} {five:.2f} "
            f"{fifteen:.2f}{busy}")
