"""The `execution` section of a runtime profile (hardware_profiles/runtimes/NAME.yaml) ->
meshcore.execution.Execution. Every key is optional (a missing one keeps Megatron-core's value, `Execution()`);
an unknown key is an error naming the allowed ones. Schema: hardware_profiles/SCHEMA.md, "Runtime profiles"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from meshcore.checks import choice, flag, mapping_keys, real
from meshcore.errors import InputError
from meshcore.execution import (
    AttentionImpl,
    Elementwise,
    ElementwiseBytes,
    Execution,
    ExpertGemms,
    Fp8Casts,
    Fp8Recipe,
    FsdpForm,
    HeldMemory,
    SelectiveForm,
    WorkingBytes,
)

_BYTES = ("h", "q", "kv", "f")
_CASTS = ("recipe", "input_bytes", "grad_bytes", "wgrad_bytes", "weight_bytes")
_KEYS = ("fsdp", "reshard_under_pp", "sharded_weight_bytes", "optimizer_bytes", "attention", "attention_rate",
         "bucket_allreduce", "compile_default", "eager", "compiled", "fp8", "selective", "ring_merge", "logit_bytes",
         "expert_gemms", "host_layer_us", "host_microbatch_ms", "host_step_ms", "memory", "split_projections",
         "attention_backward", "grad_accumulation_bytes", "optimizer_group_mparams",
         "sync_checkpoint_copies", "head_fp16_accumulation", "param_reuse_mparams")
_WORKING = ("gathered", "h", "q", "kv", "f")
_MEMORY = ("parallel_logit_bytes", "kept_logit_bytes", "root_gathered", "loss_apart", "working_full",
           "working_selective", "reserve_share", "outside_allocator_gib")
MAX_BYTES = 1000.0  # bytes per element of one kernel family: far above any real count


def _bytes(data: Any, where: str) -> ElementwiseBytes:
    data = mapping_keys(data, _BYTES, ("norm",), where)
    return ElementwiseBytes(**{k: real(data[k], f"{where}: {k}", 0.0, MAX_BYTES, low_open=False)
                               for k in (*_BYTES, *(("norm",) if "norm" in data else ()))})


def _elementwise(data: Any, where: str) -> Elementwise | None:
    if data is None:
        return None
    data = mapping_keys(data, ("forward", "backward"), (), where)
    return Elementwise(_bytes(data["forward"], f"{where}: forward"), _bytes(data["backward"], f"{where}: backward"))


def _casts(data: Any, where: str) -> tuple[Fp8Casts, ...]:
    if not isinstance(data, list) or not data:
        raise InputError(f"{where}: a list of FP8 recipes with their casts (the first is the default)")
    out = []
    for i, item in enumerate(data):
        item = mapping_keys(item, ("recipe", "input_bytes", "grad_bytes"), _CASTS[3:], f"{where}[{i}]")
        numbers = {k: real(item.get(k, 0.0), f"{where}[{i}]: {k}", 0.0, MAX_BYTES, low_open=False) for k in _CASTS[1:]}
        out.append(Fp8Casts(choice(Fp8Recipe, item["recipe"], f"{where}[{i}]: recipe"), **numbers))
    return tuple(out)


def _rates(data: Any, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(data, dict):
        raise InputError(f"{where}: a mapping of GPU architecture -> rate over the profile's fused attention")
    return tuple((str(arch), real(rate, f"{where}: {arch}", 0.0, 2.0)) for arch, rate in data.items())


def _working(data: Any, where: str) -> WorkingBytes | None:
    if data is None:
        return None
    data = mapping_keys(data, _WORKING, (), where)
    return WorkingBytes(**{k: real(data[k], f"{where}: {k}", 0.0, MAX_BYTES, low_open=False) for k in _WORKING})


def _memory(data: Any, where: str) -> HeldMemory:
    """The `memory` mapping (every key optional; absent ones keep HeldMemory()'s Megatron-core values)."""
    data = mapping_keys(data, (), _MEMORY, where)
    fields: dict[str, Any] = {}
    for key in ("root_gathered", "loss_apart"):
        if key in data:
            fields[key] = flag(data[key], f"{where}: {key}")
    if data.get("parallel_logit_bytes") is not None:
        fields["parallel_logit_bytes"] = real(data["parallel_logit_bytes"], f"{where}: parallel_logit_bytes", 0.0,
                                              64.0, low_open=False)
    if "kept_logit_bytes" in data:
        fields["kept_logit_bytes"] = real(data["kept_logit_bytes"], f"{where}: kept_logit_bytes", 0.0, 64.0,
                                          low_open=False)
    for key in ("working_full", "working_selective"):
        if key in data:
            fields[key] = _working(data[key], f"{where}: {key}")
    if "reserve_share" in data:
        fields["reserve_share"] = real(data["reserve_share"], f"{where}: reserve_share", 0.0, 1.0, low_open=False)
    if "outside_allocator_gib" in data:
        fields["outside_allocator_gib"] = real(data["outside_allocator_gib"], f"{where}: outside_allocator_gib", 0.0,
                                               64.0, low_open=False)
    return replace(HeldMemory(), **fields)


def execution_from_mapping(data: Any, origin: str) -> Execution:
    """One `execution` section -> Execution (absent keys keep Megatron-core's values)."""
    if data is None:
        return Execution()
    where = f"{origin}: execution"
    data = mapping_keys(data, (), _KEYS, where)
    base = Execution()
    fields: dict[str, Any] = {}
    if "fsdp" in data:
        fields["fsdp"] = choice(FsdpForm, data["fsdp"], f"{where}: fsdp")
    if "attention" in data:
        fields["attention"] = choice(AttentionImpl, data["attention"], f"{where}: attention")
    if "expert_gemms" in data:
        fields["expert_gemms"] = choice(ExpertGemms, data["expert_gemms"], f"{where}: expert_gemms")
    if "selective" in data:
        fields["selective"] = choice(SelectiveForm, data["selective"], f"{where}: selective")
    for key in ("reshard_under_pp", "compile_default", "split_projections", "bucket_allreduce",
                "sync_checkpoint_copies", "head_fp16_accumulation"):
        if key in data:
            fields[key] = flag(data[key], f"{where}: {key}")
    for key in ("sharded_weight_bytes", "optimizer_bytes", "logit_bytes", "grad_accumulation_bytes"):
        if key in data:
            fields[key] = real(data[key], f"{where}: {key}", 0.0, 64.0, low_open=False)
    for key in ("attention_rate", "attention_backward"):
        if key in data:
            fields[key] = _rates(data[key], f"{where}: {key}")
    for key in ("eager", "compiled", "ring_merge"):
        if key in data:
            fields[key] = _elementwise(data[key], f"{where}: {key}")
    if "fp8" in data:
        fields["fp8"] = _casts(data["fp8"], f"{where}: fp8")
    for key, field, unit in (("host_layer_us", "host_layer_s", 1e-6), ("host_microbatch_ms", "host_microbatch_s", 1e-3),
                             ("host_step_ms", "host_step_s", 1e-3),
                             ("optimizer_group_mparams", "optimizer_group_params", 1e6),
                             ("param_reuse_mparams", "param_reuse_params", 1e6)):
        if key in data:
            fields[field] = real(data[key], f"{where}: {key}", 0.0, 1e6, low_open=False) * unit
    if "memory" in data:
        fields["memory"] = _memory(data["memory"], f"{where}: memory")
    return replace(base, **fields)


__all__ = ["execution_from_mapping"]
