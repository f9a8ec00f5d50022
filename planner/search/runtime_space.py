"""The search space of one runtime: a SearchSpec narrowed to what the runtime's profile says it runs
(meshcore.framework.Capabilities), keeping every pin and limit the user gave. A pin the runtime cannot run is
an InputError naming the runtime, the pin and what it runs instead, never silently dropped."""

from __future__ import annotations

from dataclasses import replace

from meshcore import DEFAULT_SCHEDULE, Layout, ModelSpec, Offload, Recompute, non_default_modules
from meshcore.errors import InputError, LayoutError
from meshcore.framework import Framework, RuntimeProfile
from planner.search.searchspec import SearchSpec


def _refuse(profile: RuntimeProfile, what: str, runs: str) -> InputError:
    return InputError(f"{profile.label} {profile.version} cannot run {what} (it runs {runs}); pin something it runs, "
                      "or plan for another --runtime (any: every layout meshplan prices)")


def _names(values: tuple[object, ...]) -> str:
    return ", ".join(str(getattr(v, "value", v)) for v in values)


def _check_pins(spec: SearchSpec, profile: RuntimeProfile) -> None:
    """Refuse the pins `profile`'s runtime cannot run, naming it and what it runs."""
    caps = profile.capabilities
    if spec.zero is not None and spec.zero not in caps.zero_stages:
        raise _refuse(profile, f"ZeRO-{spec.zero}", f"ZeRO {_names(caps.zero_stages)}")
    if spec.zero is not None and spec.pp not in (None, 1) and spec.zero not in caps.pipeline_zero_stages:
        raise _refuse(profile, f"ZeRO-{spec.zero} beside a pipeline", f"ZeRO {_names(caps.pipeline_zero_stages)} "
                      "with pp > 1")
    if spec.schedule not in (None, DEFAULT_SCHEDULE) and spec.schedule not in caps.schedules:
        raise _refuse(profile, f"the {spec.schedule.value} schedule", _names(caps.schedules))
    for pinned, allowed, name in ((spec.cp, caps.context_parallel, "context parallelism (cp > 1)"),
                                  (spec.ep, caps.expert_parallel, "expert parallelism (ep > 1)"),
                                  (spec.etp, caps.expert_tensor_parallel, "expert tensor parallelism (etp > 1)"),
                                  (spec.vpp, caps.virtual_stages, "virtual pipeline stages (vpp > 1)")):
        if pinned not in (None, 1) and not allowed:
            raise _refuse(profile, name, "1")
    if spec.dp_replicate not in (None, 1) and not caps.hsdp_zero_stages:
        raise _refuse(profile, f"HSDP (dp_replicate {spec.dp_replicate})", "ZeRO/FSDP sharded over every "
                      "data-parallel rank (dp_replicate 1)")
    if spec.dp_replicate not in (None, 1) and spec.zero is not None and spec.zero not in caps.hsdp_zero_stages:
        raise _refuse(profile, f"ZeRO-{spec.zero} with HSDP (dp_replicate {spec.dp_replicate})",
                      f"HSDP with ZeRO {_names(caps.hsdp_zero_stages)}")
    if spec.recompute_modules and not caps.recompute_modules:
        raise _refuse(profile, "a set of recomputed modules", "recompute none, selective or full")
    if spec.sp is False and spec.tp not in (None, 1) and caps.sp_with_tp:
        raise _refuse(profile, "TP without sequence parallelism", "SP whenever tp > 1")
    for what in (o for o in Offload if o in (spec.offload or ())):  # in the enum's order: the first it cannot run
        if not caps.offload_stages(what):
            raise _refuse(profile, f"{what.value} offloading", _names(tuple(k for k, _ in caps.offload)) or "none")
    if (caps.offload_checkpoints_only and Offload.ACTIVATIONS in (spec.offload or ())
            and spec.recompute not in (None, Recompute.FULL)):
        raise _refuse(profile, f"activation offloading with recompute {spec.recompute.value}", "it for the "
                      "checkpoints of fully recomputed layers only: --recompute full")


def for_runtime(spec: SearchSpec, profile: RuntimeProfile) -> SearchSpec:
    """`spec` narrowed to what `profile`'s runtime runs (the user's pins and limits kept; InputError for a pin it
    cannot run)."""
    _check_pins(spec, profile)
    caps = profile.capabilities
    zeros = tuple(z for z in (spec.zero_choices or caps.zero_stages) if z in caps.zero_stages)
    schedules = tuple(s for s in (spec.schedule_choices or caps.schedules) if s in caps.schedules)
    if not zeros or not schedules:
        raise _refuse(profile, f"ZeRO {_names(spec.zero_choices or ())} / schedules "
                      f"{_names(spec.schedule_choices or ())}", f"ZeRO {_names(caps.zero_stages)} and "
                      f"{_names(caps.schedules)}")
    research = profile.framework is Framework.ANY  # meshplan's own offload rules (space.offload_options)
    return replace(
        spec, zero_choices=zeros, schedule_choices=schedules, pipeline_zero_choices=caps.pipeline_zero_stages,
        no_cp=spec.no_cp or not caps.context_parallel,
        max_ep=spec.max_ep if caps.expert_parallel else 1,
        etp=spec.etp if caps.expert_tensor_parallel else 1,
        vpp=spec.vpp if caps.virtual_stages else 1,
        max_waves=min(spec.max_waves, caps.max_waves),
        uneven_split=spec.uneven_split and caps.uneven_split,
        partial_recompute=spec.partial_recompute and caps.per_stage_recompute,
        module_recompute=spec.module_recompute and caps.recompute_modules,
        replicate_alone=spec.replicate_alone or not caps.ddp_beside_others,
        kv_replication=spec.kv_replication and caps.kv_heads_replicated,
        sp=True if caps.sp_with_tp and spec.tp not in (None, 1) and spec.sp is None else spec.sp,
        max_tp=1 if caps.sp_with_tp and spec.sp is False else spec.max_tp,
        offload_zero=None if research else caps.offload, checkpoints_only=caps.offload_checkpoints_only,
        hsdp_zero_choices=tuple(z for z in caps.hsdp_zero_stages if z in zeros))




def check_layout(layout: Layout, model: ModelSpec, profile: RuntimeProfile) -> None:
    """Raise LayoutError when `profile`'s runtime cannot run `layout` (what `meshplan evaluate --runtime` checks):
    the pins of the layout as for_runtime checks them, and the rules a search applies while enumerating."""
    caps = profile.capabilities
    pins = SearchSpec(tp=layout.tp, pp=layout.pp, cp=layout.cp, vpp=layout.vpp, ep=layout.ep, etp=layout.etp,
                      zero=int(layout.zero), schedule=layout.schedule, sp=layout.sp, recompute=layout.recompute,
                      recompute_modules=layout.recompute_modules if non_default_modules(layout) else None,
                      offload=layout.offload or None)
    try:
        _check_pins(pins, profile)
    except InputError as exc:
        raise LayoutError(str(exc)) from None
    problem = None
    if model.num_kv_heads % layout.tp and not caps.kv_heads_replicated:
        problem = f"tp {layout.tp} with {model.num_kv_heads} KV heads (TP must divide them)"
    elif layout.recompute_layers is not None and not caps.per_stage_recompute:
        problem = f"a count of fully recomputed layers per stage ({list(layout.recompute_layers)})"
    elif layout.stage_layers is not None and len(set(layout.stage_layers)) > 1 and not caps.uneven_split:
        problem = f"an uneven layer split ({list(layout.stage_layers)})"
    elif (not caps.ddp_beside_others and int(layout.zero) == 0 and layout.dp > 1
          and layout.tp * layout.pp * layout.cp > 1):
        problem = "plain data parallelism (ZeRO-0) beside tp, pp or cp"
    elif layout.dp_replicate > 1 and int(layout.zero) and int(layout.zero) not in caps.hsdp_zero_stages:
        problem = (f"ZeRO-{int(layout.zero)} sharded over part of the data-parallel ranks (dp_replicate "
                   f"{layout.dp_replicate}; it does with ZeRO {_names(caps.hsdp_zero_stages) or 'none'})")
    if problem is not None:
        raise LayoutError(f"{profile.label} {profile.version} cannot run {problem}; plan for another --runtime "
                          "(any: every layout meshplan prices)")


__all__ = ["check_layout", "for_runtime"]
