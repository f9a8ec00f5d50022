"""A measured MLIP profile (cost_models/profile/mlipprofile.py) as a cost table `meshplan mlip plan` reads: the
model's facts become the table's keys, each box a row; a profile whose time or memory fell as the boxes grew (noise
on a busy machine, or boxes too close in size) is refused with what to change, not smoothed."""

from __future__ import annotations

from cost_models.profile.mlipprofile import MaceSize, MlipProfile
from meshcore.errors import InputError, SpecError
from planner.workloads.mlip.spec import CostRow, MlipCostTable, MlipMode


def profiled_table(profile: MlipProfile, size: MaceSize, element: str, mode: MlipMode, device: str,
                   repeats: int) -> MlipCostTable:
    step = ("training step (forward, forces with create_graph, backward)" if mode is MlipMode.TRAIN else
            "forces-only call (forward and forces)")
    source = (f"measured by meshplan profile mlip ({profile.built_with}), MACE {size.hidden_irreps}, "
              f"{size.layers} layers, {size.cutoff_a:g} A, max_ell {size.max_ell}, correlation {size.correlation}, "
              f"{size.dtype.value}, random weights, on bulk {element} boxes; {step}; least of {repeats}")
    name = f"mace-{size.channels}x{size.hidden_l}-{size.layers}l-{element}-{mode.value}"
    try:
        return MlipCostTable(name, tuple(CostRow(r.atoms, r.step_s, r.memory_bytes) for r in profile.rows),
                             size.layers, size.cutoff_a, float(profile.halo_bytes), profile.params, profile.density,
                             device=device, source=source, mode=mode)
    except SpecError as exc:
        raise InputError(f"the measured profile is not a cost table ({exc}): time or memory fell as the boxes "
                         "grew; rerun with more --repeats, on a quieter machine, or with boxes further apart in "
                         "--cells") from None
