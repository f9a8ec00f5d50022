"""meshplan's solver API: `import planner`.

planner.plan(...) searches for the fastest layout that fits and returns a Plan (planner.save_plan /
planner.load_plan write and read plan files); planner.evaluate(...) predicts one given layout.
Names are imported on first use, so that `cost_models` (which reads `planner.core`) can be
imported on its own without a circular import.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import Any

_EXPORTS = MappingProxyType({
    "cost_models.prediction": ("Breakdown", "Prediction", "StageCost"),
    "hardware_profiles": ("HardwareOverrides", "load_hardware"),
    "planner.api": ("Problem", "evaluate", "make_layout", "plan", "resolve"),
    "planner.search.ilp": ("Solver",),
    "planner.outputs.plan": ("Plan",),
    "planner.outputs.planfile": ("save_plan",),
    "planner.outputs.planread": ("load_plan",),
    "planner.search.space": ("SearchSpec",),
    "planner.core.errors": ("InfeasibleError", "InputError", "LayoutError", "MeshplanError", "SpecError"),
    "planner.inputs.loaders": ("load_model", "model_preset_names"),
    "planner.core": ("AttentionKernel", "ClusterSpec", "Dtype", "JobSpec", "Layout", "ModelSpec",
                      "Recompute", "Runtime", "Schedule", "ZeroStage"),
})
_WHERE = MappingProxyType({name: module for module, names in _EXPORTS.items() for name in names})
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return __all__
