"""`import meshplan`: the planner's API under the project's name, the very objects `import planner` gives
(`meshplan.plan is planner.plan`), imported on first use as planner imports them."""

from __future__ import annotations

from typing import Any

import planner as _planner

__all__ = list(_planner.__all__)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(_planner, name)
    raise AttributeError(f"module 'meshplan' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
