"""Command-line options and Python API calls for benchmarks/fuzz.py: every numeric option of evaluate, plan, sweep
and trial (and the enums and switches beside them) set to bad or edge values, and the API's functions and
dataclasses called with arguments of the wrong type or range."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

from fuzz_inputs import HUGE, Case, _pick, _text

BAD_INT_TEXT = ["0", "-1", "1.5", "nan", "abc", "", str(HUGE), str(2**63), "1e3", "0x10", " "]
BAD_REAL_TEXT = ["nan", "inf", "-inf", "-1", "0", "1e400", "abc", "", "-0", "1e-400"]
# option -> (kind, edge values); kind: int (bad: BAD_INT_TEXT), int0 (0 allowed), real, or the allowed choices
OPTIONS: dict[str, tuple[str | tuple[str, ...], list[str]]] = {
    "--gpus": ("int", ["1", "2", "3", "4", "8", "16", "64"]),
    "--seq-len": ("int", ["1", "7", "128", "512", "4096", "65536"]),
    "--global-batch": ("int", ["1", "2", "3", "8", "64", "1000"]),
    "--global-batch-tokens": ("int", ["512", "1024", "4096", "1000"]),
    "--tp": ("int", ["1", "2", "3", "4", "8"]), "--pp": ("int", ["1", "2", "3", "4"]),
    "--cp": ("int", ["1", "2", "4"]), "--vpp": ("int", ["1", "2", "3", "4"]), "--ep": ("int", ["1", "2", "4", "8"]),
    "--etp": ("int", ["1", "2"]), "--mbs": ("int", ["1", "2", "3", "8", "64"]),
    "--zero": ("int0", ["0", "1", "2", "3"]), "--gpus-per-node": ("int", ["1", "2", "4", "8", "16"]),
    "--top-k": ("int", ["1", "2", "50"]), "--max-tp": ("int", ["1", "2", "8"]), "--max-mbs": ("int", ["1", "2", "64"]),
    "--max-gpus": ("int", ["1", "8", "64"]), "--workers": ("int", ["1"]), "--steps": ("int", ["1", "5", "1000"]),
    "--time-limit": ("real", ["0.001", "1", "60"]),
    "--moe-capacity-factor": ("real", ["1", "1.25", "2"]), "--moe-load-imbalance": ("real", ["1", "1.5", "3"]),
    "--inter-node-gbps": ("real", ["1e-3", "100", "400", "1e9"]), "--memory-gib": ("real", ["0.5", "24", "80", "1e6"]),
    "--tokens": ("real", ["1", "1e9", "1e12"]), "--days": ("real", ["0.001", "1", "30"]),
    "--recompute": (("none", "selective", "full"), []), "--schedule": (("gpipe", "1f1b", "interleaved-1f1b", "zb-h1",
                                                                         "zb-v", "wave"), []),
    "--dtype": (("bf16", "fp8"), []), "--attention": (("flash", "unfused"), []),
    "--solver": (("dp", "cpsat", "highs"), []), "--launcher": (("megatron", "torchtitan", "deepspeed", "nemo"), []),
    "--emit": (("megatron", "torchtitan", "deepspeed", "nemo"), []),
    "--recompute-modules": (("core_attn", "mlp", "layernorm", "moe", "core_attn,mlp"), []),
    "--to": (("megatron", "torchtitan", "deepspeed"), []),
}
SWITCHES = {"evaluate": ["--sp", "--no-sp", "--moe-comm-overlap", "--moe-dedup-dispatch", "--json"],
            "plan": ["--sp", "--no-sp", "--no-cp", "--no-partial-recompute", "--even-split", "--json",
                     "--record-timing", "--moe-comm-overlap"],
            "sweep": [], "trial": []}
COMMAND_OPTIONS = {
    "evaluate": ["--gpus", "--seq-len", "--global-batch", "--global-batch-tokens", "--tp", "--pp", "--cp", "--vpp",
                 "--ep", "--etp", "--mbs", "--zero", "--gpus-per-node", "--moe-capacity-factor",
                 "--moe-load-imbalance", "--inter-node-gbps", "--memory-gib", "--recompute", "--schedule", "--dtype",
                 "--attention", "--recompute-modules"],
    "plan": ["--gpus", "--seq-len", "--global-batch", "--global-batch-tokens", "--top-k", "--tp", "--pp", "--cp",
             "--vpp", "--ep", "--etp", "--mbs", "--zero", "--max-tp", "--max-mbs", "--gpus-per-node", "--time-limit",
             "--moe-capacity-factor", "--moe-load-imbalance", "--inter-node-gbps", "--memory-gib", "--solver",
             "--recompute", "--schedule", "--launcher", "--emit", "--dtype", "--attention", "--recompute-modules"],
    "sweep": ["--gpus", "--seq-len", "--global-batch", "--global-batch-tokens", "--max-gpus", "--workers", "--tokens",
              "--days", "--dtype", "--attention"],
    "trial": ["--top-k", "--steps", "--to"],
}
SWEEP_VALUES = {"gpus": (["0", "-4", "abc", "1.5", "nan", str(HUGE), "1e2"], ["1", "2", "8"]),
                "hardware": (["nope", "/no/such.yaml", "h100"], ["h100-sxm", "a100-80gb", "mi300x"]),
                "inter-node-gbps": (["nan", "-1", "0", "abc", "inf"], ["100", "400", "1e-3"]),
                "seq-len": (["0", "-1", "abc", "1.5", str(HUGE)], ["128", "512"]),
                "global-batch": (["0", "-1", "abc", "1.5", str(HUGE)], ["8", "16"])}


def _value(rng: random.Random, option: str) -> tuple[str, bool]:
    """A value for `option` and whether it is bad."""
    kind, edge = OPTIONS[option]
    if isinstance(kind, tuple):
        if rng.random() < 0.3:
            return _pick(rng, ["bogus", "", "1", "FULL"]), True
        return _pick(rng, list(kind)), False
    if rng.random() < 0.5 and edge:
        return _pick(rng, edge), False
    if kind == "real":
        return _pick(rng, BAD_REAL_TEXT), True
    bad = BAD_INT_TEXT if kind == "int" else [v for v in BAD_INT_TEXT if v != "0"] + ["4", "-0"]
    value = _pick(rng, bad)
    return value, value != "-0"


def option_case(rng: random.Random, tiny: str, tiny_moe: str, plan_path: str, out: str) -> Case:
    command = rng.choices(["evaluate", "plan", "sweep", "trial"], weights=[35, 40, 15, 10])[0]
    model = rng.choices([tiny, tiny_moe, "llama3-8b"], weights=[70, 20, 10])[0]
    settings: dict[str, str] = {}
    wrong: dict[str, bool] = {}
    for _ in range(_pick(rng, [1, 1, 2, 3])):
        option = _pick(rng, COMMAND_OPTIONS[command])
        settings[option], wrong[option] = _value(rng, option)
    bad = any(wrong.values())
    shown = [f"{option} {value!r}" for option, value in settings.items()]
    if command == "trial":
        args = ["trial", plan_path, "--out", out, "--to", settings.pop("--to", "megatron")]
    else:
        job = {"--model": model, "--hardware": "h100-sxm", "--seq-len": "512", "--global-batch": "8"}
        if command != "sweep":
            job["--gpus"] = "4"
        if "--global-batch-tokens" in settings:
            del job["--global-batch"]
        args = [command]
        for option, value in job.items():
            args += [option, settings.pop(option, value)]
        if command == "sweep":
            args += ["--workers", settings.pop("--workers", "1")]
            if rng.random() < 0.5 or "--tokens" in settings or "--days" in settings:
                for option, value in (("--tokens", "1e9"), ("--days", "1"), ("--max-gpus", "16")):
                    args += [option, settings.pop(option, value)]
                shown.append("capacity mode")
            else:
                vary = _pick(rng, sorted(SWEEP_VALUES))
                picks = [(_pick(rng, SWEEP_VALUES[vary][0]), True) if rng.random() < 0.4 else
                         (_pick(rng, SWEEP_VALUES[vary][1]), False) for _ in range(_pick(rng, [1, 2, 3]))]
                bad |= any(wrong for _, wrong in picks)
                values = ",".join(v for v, _ in picks)
                args += ["--gpus", settings.pop("--gpus", "4"), "--vary", vary, "--values", values]
                shown.append(f"--vary {vary} --values {values!r}")
        if command == "plan" and "--solver" not in settings:
            args += ["--solver", "dp"]
        for switch in SWITCHES[command]:
            if rng.random() < 0.1:
                args.append(switch)
                shown.append(switch)
    for option, value in settings.items():
        args += [option, value]
    base = "" if model == tiny or command == "trial" else f" ({Path(model).stem})"
    return Case("cli-options", f"{command}{base}: {', '.join(shown)}", bad, args=args)


# ---- the Python API --------------------------------------------------------------------------------------------

BAD_ARGS: list[Any] = ["8", None, [8], True, False, 1.5, math.nan, math.inf, 2.0, 0, -3, HUGE, {}, b"8"]
INT_ARGS = ("gpus", "seq_len", "global_batch", "tp", "pp", "cp", "vpp", "mbs", "ep", "etp", "zero")


def _bad_for(name: str, value: Any) -> bool:
    """Whether `value` is clearly wrong for the API argument `name`."""
    if name == "zero":
        return not (type(value) is int and 0 <= value <= 3)
    if name == "etp":
        return value is not None and not (type(value) is int and value >= 1)
    if name in INT_ARGS:
        return not (type(value) is int and 1 <= value <= 10**7)
    if name == "sp":
        return value is not None and not isinstance(value, bool)
    return True


def api_case(rng: random.Random, tiny: str, plan_path: str, folder: Path) -> Case:
    import planner
    from planner.search.space import SearchSpec
    from planner.studies.sweep import Job, Varied, capacity, sweep

    job = {"gpus": 4, "seq_len": 512, "global_batch": 8}
    roll = rng.random()
    if roll < 0.3:
        name = _pick(rng, [*INT_ARGS, "sp", "dtype", "recompute", "schedule", "recompute_modules"])
        value = _pick(rng, BAD_ARGS + ["bogus", 1, 2, 4])
        bad = _bad_for(name, value) if name in (*INT_ARGS, "sp") else value not in (None,) or name == "dtype"
        if name in ("dtype", "recompute", "schedule", "recompute_modules"):
            bad = value is not None or name in ("dtype", "recompute")
        kwargs = {**job, name: value}
        return Case("api", f"evaluate({name}={_text(value)})", bad,
                    call=lambda: planner.evaluate(tiny, "h100-sxm", **kwargs))
    if roll < 0.45:
        name = _pick(rng, ["tp", "pp", "cp", "vpp", "mbs", "zero", "max_tp", "max_mbs", "top_k", "max_waves", "ep",
                           "sp", "no_cp", "schedule", "recompute", "tp_choices", "mbs_choices", "zero_choices",
                           "recompute_modules", "max_ep", "partial_recompute"])
        value = _pick(rng, BAD_ARGS + ["bogus", (0,), (), (1, 2), 1, 2])
        ok_none = name not in ("max_mbs", "top_k", "max_waves", "no_cp", "partial_recompute")
        choices = name in ("tp_choices", "mbs_choices", "zero_choices")
        good = (choices and isinstance(value, tuple | list) and bool(value) and all(
            type(v) is int and (v >= 1 or name == "zero_choices" and v == 0) and not (name == "zero_choices" and v > 3)
            for v in value)) or (value is None and ok_none) or (type(value) is int and value >= 1 and name not in (
            "sp", "no_cp", "partial_recompute", "schedule", "recompute", "tp_choices", "mbs_choices", "zero_choices",
            "recompute_modules") and not (name == "zero" and value > 3)) or (
            type(value) is int and value == 0 and name == "zero") or (
            isinstance(value, bool) and name in ("sp", "no_cp", "partial_recompute")) or (
            value == (1, 2) and name in ("tp_choices", "mbs_choices", "zero_choices"))
        spec_call = (lambda: planner.plan(tiny, "h100-sxm", **job, spec=SearchSpec(**{name: value}))) \
            if rng.random() < 0.5 else (lambda: SearchSpec(**{name: value}))
        return Case("api", f"SearchSpec({name}={_text(value)})", not good, call=spec_call)
    if roll < 0.55:
        name = _pick(rng, ["moe_capacity_factor", "moe_load_imbalance", "grad_reduce_bytes", "attention",
                           "overlap_grad_reduce", "measured", "multi_rail"])
        value = _pick(rng, [*BAD_ARGS, "flash", 1.25, 4, 0.5])
        factor = type(value) in (int, float) and math.isfinite(value) and value >= 1
        good = (name == "moe_capacity_factor" and (value is None or factor)) or (
            name == "moe_load_imbalance" and factor) or (
            name == "grad_reduce_bytes" and value in (2, 4) and type(value) is int) or (
            name == "attention" and False) or (name in ("overlap_grad_reduce", "multi_rail")
                                                         and isinstance(value, bool)) or (
            name == "measured" and value is None)
        return Case("api", f"Runtime({name}={_text(value)})", not good,
                    call=lambda: planner.evaluate(tiny, "h100-sxm", **job, runtime=planner.Runtime(**{name: value})))
    if roll < 0.62:
        name = _pick(rng, ["gpus_per_node", "inter_node_gbps", "memory_gib"])
        value = _pick(rng, [*BAD_ARGS, 8, 400.0, 1e-3])
        good = value is None or (type(value) in (int, float) and value > 0 and math.isfinite(value)
                                 and not (name == "gpus_per_node" and type(value) is not int) and value < 1e6)
        return Case("api", f"HardwareOverrides({name}={_text(value)})", not good,
                    call=lambda: planner.evaluate(tiny, "h100-sxm", **job,
                                                  overrides=planner.HardwareOverrides(**{name: value})))
    if roll < 0.72:
        value = _pick(rng, [*BAD_ARGS, "", "no-such", str(folder), plan_path, "h100-sxm,", tiny])
        which = _pick(rng, ["load_model", "load_hardware", "load_plan", "resolve"])
        calls = {"load_model": lambda: planner.load_model(value),
                 "load_hardware": lambda: planner.load_hardware(value, 4),
                 "load_plan": lambda: planner.load_plan(value),
                 "resolve": lambda: planner.resolve(value, "h100-sxm", **job)}
        good = (which == "load_model" and value == tiny) or (which == "load_plan" and value == plan_path) or (
            which == "resolve" and value == tiny)
        return Case("api", f"{which}({_text(value)})", not good, call=calls[which])
    if roll < 0.8:
        name = _pick(rng, ["time_limit_s", "solver", "spec", "progress", "dtype"])
        value = _pick(rng, [*BAD_ARGS, "dp", "cpsat", 5.0, print])
        good = (name == "time_limit_s" and type(value) in (int, float) and 0 < value <= 86400) or (
            name == "solver" and value in ("dp", "cpsat")) or (name in ("spec", "progress") and value is None) or (
            name == "progress" and value is print)
        return Case("api", f"plan({name}={_text(value)})", not good,
                    call=lambda: planner.plan(tiny, "h100-sxm", **job, **{name: value}))
    if roll < 0.86:
        target = _pick(rng, [str(folder), str(folder / "missing" / "p.yaml"), "", 3, None, str(folder / "p.yaml"),
                             str(folder / "p.json")])
        good = isinstance(target, str) and target.endswith(("p.yaml", "p.json")) and "missing" not in target

        def save() -> None:
            planner.save_plan(planner.load_plan(plan_path), target)  # type: ignore[arg-type]
        return Case("api", f"save_plan(to {_text(target)})", not good, call=save)
    if roll < 0.94:
        varied = _pick(rng, list(Varied))
        values = [_pick(rng, ["1", "2", "0", "abc", "", "nan", "h100-sxm", "-1", "1.5"])
                  for _ in range(_pick(rng, [0, 1, 2]))]
        workers = _pick(rng, [1, 1, 1, 0, -1, 1.5, True, "2"])
        ok = {Varied.GPUS: ("1", "2"), Varied.HARDWARE: ("h100-sxm",), Varied.INTER_NODE_GBPS: ("1", "2", "1.5"),
              Varied.SEQ_LEN: ("1", "2"), Varied.GLOBAL_BATCH: ("1", "2")}[varied]
        good = bool(values) and all(v in ok for v in values) and workers == 1 and workers is not True
        return Case("api", f"sweep({varied.value}, {values}, workers={workers!r})", not good,
                    call=lambda: sweep(Job(tiny, "h100-sxm", 4, 512, 8), varied, values, workers=workers))
    tokens, days, max_gpus = (_pick(rng, [1e9, math.nan, -1.0, 0.0, math.inf, "1e9", 1e30]),
                              _pick(rng, [1.0, math.nan, 0.0, -2.0, 1e9]), _pick(rng, [8, 0, -1, 2.0, True, HUGE]))
    good = tokens == 1e9 and days == 1.0 and max_gpus == 8 and max_gpus is not True
    return Case("api", f"capacity(tokens={_text(tokens)}, days={_text(days)}, max_gpus={_text(max_gpus)})", not good,
                call=lambda: capacity(Job(tiny, "h100-sxm", 1, 512, 8), tokens, days, max_gpus))
