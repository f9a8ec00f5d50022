"""meshplan's solver API: `import planner`.

planner.plan(...) searches for the fastest layout that fits and returns a Plan (planner.save_plan /
planner.load_plan write and read plan files); planner.evaluate(...) predicts one given layout.
Names are imported on first use, so that `cost_models` (which reads `meshcore`) can be
imported on its own without a circular import, and a command imports only what it uses; type checkers see the
real names through the TYPE_CHECKING imports below (tests/test_public_api.py holds the two lists equal).
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

_EXPORTS = MappingProxyType({
    "cost_models.prediction": ("Breakdown", "Prediction", "StageCost"),
    "hardware_profiles": ("HardwareOverrides", "load_hardware"),
    "planner.api": ("Problem", "evaluate", "make_layout", "plan", "resolve"),
    "planner.search.ilp": ("Solver",),
    "planner.outputs.plan": ("Plan",),
    "planner.outputs.planfile": ("save_plan",),
    "planner.outputs.planread": ("load_plan",),
    "planner.search.space": ("SearchSpec",),
    "meshcore.errors": ("InfeasibleError", "InputError", "LayoutError", "MeshplanError", "SpecError"),
    "planner.inputs.loaders": ("load_model", "model_preset_names"),
    "meshcore": ("AttentionKernel", "ClusterSpec", "Dtype", "JobSpec", "Layout", "ModelSpec",
                      "Recompute", "Runtime", "Schedule", "ZeroStage"),
    "meshcore.framework": ("Framework",),
})
_WHERE = MappingProxyType({name: module for module, names in _EXPORTS.items() for name in names})
__all__ = [  # the lazy exports above, in one list (tests/test_public_api.py)
    "AttentionKernel", "Breakdown", "ClusterSpec", "Dtype", "Framework", "HardwareOverrides", "InfeasibleError",
    "InputError", "JobSpec", "Layout", "LayoutError", "MeshplanError", "ModelSpec", "Plan", "Prediction", "Problem",
    "Recompute", "Runtime", "Schedule", "SearchSpec", "Solver", "SpecError", "StageCost", "ZeroStage", "evaluate",
    "load_hardware", "load_model", "load_plan", "make_layout", "model_preset_names", "plan", "resolve", "save_plan",
]

if TYPE_CHECKING:  # what `planner.X` is, for mypy and editors; at run time __getattr__ imports it on first use
    from cost_models.prediction import Breakdown, Prediction, StageCost
    from hardware_profiles import HardwareOverrides, load_hardware
    from meshcore import (
        AttentionKernel,
        ClusterSpec,
        Dtype,
        JobSpec,
        Layout,
        ModelSpec,
        Recompute,
        Runtime,
        Schedule,
        ZeroStage,
    )
    from meshcore.errors import InfeasibleError, InputError, LayoutError, MeshplanError, SpecError
    from meshcore.framework import Framework
    from planner.api import Problem, evaluate, make_layout, plan, resolve
    from planner.inputs.loaders import load_model, model_preset_names
    from planner.outputs.plan import Plan
    from planner.outputs.planfile import save_plan
    from planner.outputs.planread import load_plan
    from planner.search.ilp import Solver
    from planner.search.space import SearchSpec


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return __all__
