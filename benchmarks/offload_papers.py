"""meshplan against the published throughput of offloading systems (benchmarks/data/offload/published.yaml):
ZeRO-Offload, ZeRO-Infinity and Fuyou on one GPU, and RoundPipe's measured baselines on 8 x RTX 4090 (DeepSpeed
ZeRO-2 and ZeRO-Infinity, Megatron-LM's pipeline, Mobius). Each record is priced as its run was set up: the run's
own layout evaluated (`layout`), the best layout of a search on the runtime that runs it (`plan`), or stage
swapping (`stage_swap`, cost_models/memory/stage_swap.py: Mobius, which no runtime meshplan writes for runs). The
prediction
is printed beside the figure with the difference; nothing is fitted (the presets as they are, the fragments the data
names for a run's setting). What a record assumes is in its `verified` field. A TFLOP/s figure is read in the FLOP
count its source uses (`flop_convention`, FlopConvention): meshplan's model FLOPs by default, its hardware FLOPs
(recomputation counted) where the source counts the recomputed forward.

    python benchmarks/offload_papers.py [--json]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.compute.knobs import LayerKnobs  # noqa: E402
from cost_models.compute.layer import decoder_layer_time, head_time  # noqa: E402
from cost_models.memory.params import embedding_params, head_params, one_layer_params, rank_params  # noqa: E402
from cost_models.memory.stage_swap import SwapStage, stage_swap_step  # noqa: E402
from cost_models.prediction import Prediction  # noqa: E402
from cost_models.step import evaluate_layout as evaluate_problem_layout  # noqa: E402
from meshcore import Recompute, Runtime  # noqa: E402
from meshcore.execution import Execution  # noqa: E402
from meshcore.framework import Framework  # noqa: E402
from planner.api import make_layout, plan, resolve  # noqa: E402
from planner.inputs.execution import execution_from_mapping  # noqa: E402
from planner.search.space import SearchSpec  # noqa: E402

HERE = Path(__file__).resolve().parent / "data" / "offload"
DATA = HERE / "published.yaml"


class FlopConvention(str, Enum):
    """How a published TFLOP/s figure counts a step's work, so that the prediction is read the same way. MODEL: the
    forward and backward, three forward passes' FLOPs (meshplan's model_tflops_per_gpu, the MFU convention, about
    6·N·D); HARDWARE: the recomputed forward passes too (meshplan's hardware_tflops_per_gpu; with full
    recomputation Megatron-LM's 96·B·s·l·h²·(1 + s/6h + V/16lh), Narayanan et al. 2021 eq. 3, about 8·N·D)."""

    MODEL = "model"
    HARDWARE = "hardware"


class DataError(ValueError):
    """A record of the data file that the benchmark cannot price as written."""


def flop_convention(key: str, rec: dict[str, Any]) -> FlopConvention:
    """The record's `flop_convention` (MODEL where it names none); only TFLOP/s records may name one."""
    if "flop_convention" not in rec:
        return FlopConvention.MODEL
    text, unit = rec["flop_convention"], rec["published"]["unit"]
    if unit != "tflops_per_gpu":
        raise DataError(f"{key}: flop_convention applies to tflops_per_gpu records only, this one is in {unit}")
    try:
        return FlopConvention(text)
    except ValueError:
        allowed = ", ".join(c.value for c in FlopConvention)
        raise DataError(f"{key}: flop_convention {text!r} is not one of {allowed}") from None


@dataclass(frozen=True)
class Row:
    key: str
    system: str
    unit: str
    published: float
    predicted: float
    how: str

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def _model(name: str) -> str:
    return str(HERE / name) if name.endswith(".yaml") else name


def _hardware(name: str) -> str:
    base, *frags = name.split(",")
    return ",".join([base, *(str(HERE / f) for f in frags)])


def _figure(rec: dict[str, Any], pred: Prediction) -> float:
    """The prediction in the record's unit, TFLOP/s in the FLOP count of its source."""
    if rec["published"]["unit"] == "tokens_per_s":
        return pred.tokens_per_s
    if flop_convention(rec.get("system", "record"), rec) is FlopConvention.HARDWARE:
        return pred.hardware_tflops_per_gpu
    return pred.model_tflops_per_gpu


def _counted(rec: dict[str, Any], pred: Prediction) -> str:
    """What a TFLOP/s record's figure counts, with both of meshplan's counts beside it."""
    if rec["published"]["unit"] == "tokens_per_s":
        return ""
    conv = flop_convention(rec.get("system", "record"), rec)
    return (f"; read as {conv.value} FLOPs (model {pred.model_tflops_per_gpu:.1f}, hardware "
            f"{pred.hardware_tflops_per_gpu:.1f} TFLOP/s)")


def _execution(framework: Framework, name: str) -> Execution:
    """The runtime profile's execution section with the record's execution file (under execution/) laid over it:
    how the run's own model code executes a layer."""
    base = yaml.safe_load((Path(__file__).resolve().parents[1] / "hardware_profiles" / "runtimes"
                           / f"{framework.value}.yaml").read_text())["execution"]
    over = yaml.safe_load((HERE / "execution" / name).read_text())["execution"]
    return execution_from_mapping({**base, **over}, name)


def _runtime(rec: dict[str, Any]) -> Runtime:
    """The record's runtime with the switches its run set (`runtime_flags`, e.g. DeepSpeed's overlap_comm as
    overlap_grad_reduce) and the execution of its model code (`execution`)."""
    framework = Framework(rec.get("runtime", "deepspeed"))
    execution = _execution(framework, rec["execution"]) if "execution" in rec else None
    return Runtime(framework=framework, execution=execution, **rec.get("runtime_flags", {}))


def evaluate_layout(rec: dict[str, Any]) -> Prediction:
    """The record's own layout, evaluated on its hardware, model, job and runtime (`stage_layers`: the decoder layers
    of each pipeline stage where the run split them unevenly)."""
    lay = dict(rec["layout"])
    offload = ",".join(lay.pop("offload", [])) or None
    if "stage_layers" in lay:
        lay["stage_layers"] = tuple(lay["stage_layers"])
    problem = resolve(_model(rec["model"]), _hardware(rec["hardware"]), gpus=rec["gpus"], seq_len=rec["seq_len"],
                      global_batch=rec["global_batch"], runtime=_runtime(rec), dtype="bf16")
    layout = make_layout(problem, offload=offload, **lay)
    return evaluate_problem_layout(problem.model, problem.cluster, problem.job, layout)


def phases(pred: Prediction) -> dict[str, float]:
    """Seconds per step of the phases DeepSpeed's timers log: forward, backward (with the recomputation, which runs
    inside it, and the host copies the passes do not hide, each in the pass it belongs to) and the optimizer step (the
    slowest stage's passes over every micro-batch)."""
    m, stage = pred.num_microbatches, max(pred.stages, key=lambda s: s.compute_s)
    t = stage.time
    return {"forward": m * (t.forward + stage.offload_forward_s),
            "backward": m * (t.backward + t.recompute + stage.offload_s - stage.offload_forward_s),
            "optimizer": pred.breakdown.optimizer_s}


def price_layout(rec: dict[str, Any]) -> tuple[float, str]:
    pred = evaluate_layout(rec)
    how = f"evaluated: {rec['layout']}; {pred.step_time_s:.1f} s/step, peak {pred.peak_memory_gib:.1f} GiB"
    if not pred.fits:
        how += " (meshplan says it does not fit)"
    if "phases" in rec:  # what the run logged of each phase against the prediction
        how += "; " + ", ".join(f"{k} {v:.1f} s (logged {'-'.join(f'{x:.1f}' for x in rec['phases'][k])})"
                                for k, v in phases(pred).items())
    return _figure(rec, pred), how + _counted(rec, pred)


def price_plan(rec: dict[str, Any]) -> tuple[float, str]:
    off = rec.get("offload")
    spec = SearchSpec(top_k=1, offload_auto=off == "auto",
                      offload=frozenset(off) if isinstance(off, list) else None)
    p = plan(_model(rec["model"]), _hardware(rec["hardware"]), gpus=rec["gpus"], seq_len=rec["seq_len"],
             global_batch=rec["global_batch"], runtime=_runtime(rec), spec=spec)
    pred, lay = p.best.prediction, p.best.layout
    how = (f"planned on {rec.get('runtime', 'deepspeed')}: mbs {lay.mbs} ZeRO-{int(lay.zero)} {lay.recompute.value} "
           f"offload {'+'.join(sorted(o.value for o in lay.offload)) or 'none'}; hardware "
           f"{pred.hardware_tflops_per_gpu:.0f} TFLOP/s")
    return _figure(rec, pred), how + _counted(rec, pred)


def _with_params(stage: SwapStage, params: float) -> SwapStage:
    """`stage` with `params` more 16-bit weights to swap in and gradients to send out."""
    return replace(stage, weight_bytes=stage.weight_bytes + 2.0 * params, grad_bytes=stage.grad_bytes + 2.0 * params)


def price_stage_swap(rec: dict[str, Any]) -> tuple[float, str]:
    """Stage swapping with near-even stages of whole layers, the embedding's weights on the first and the LM head's
    time and weights on the last (a tied head's copy too), CPU Adam over every parameter once; the best stage count of
    the multiples of the GPU count."""
    gpus, mbs = rec["gpus"], rec["microbatch"]
    problem = resolve(_model(rec["model"]), _hardware(rec["hardware"]), gpus=gpus, seq_len=rec["seq_len"],
                      global_batch=rec["global_batch"], runtime=Runtime(framework=Framework.ANY))
    model, cluster, job = problem.model, problem.cluster, problem.job
    knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=mbs, recompute=Recompute.FULL)
    layer = decoder_layer_time(model, job, cluster, knobs)
    head = head_time(model, job, cluster, knobs)
    params = one_layer_params(model, job, 1, 1, 1, False).total
    total = rank_params(model, job, 1, head_beside_embedding=True).total
    m = rec["global_batch"] // mbs
    best: tuple[float, int] | None = None
    for stages in range(gpus, model.num_layers + 1, gpus):  # near-even stages of whole layers, the head on the last
        counts = [model.num_layers // stages + (s < model.num_layers % stages) for s in range(stages)]
        built = [SwapStage.of_layers([layer] * n, n * params) for n in counts]
        built[0] = _with_params(built[0], embedding_params(model, job, 1))
        built[-1] = replace(_with_params(built[-1], head_params(model, job, 1, beside_embedding=False).total),
                            forward_s=built[-1].forward_s + head.forward,
                            backward_s=built[-1].backward_s + head.backward + head.recompute)
        per_gpu = [built[g::gpus] for g in range(gpus)]
        step = stage_swap_step(per_gpu, m, total / gpus, cluster)
        if best is None or step < best[0]:
            best = (step, stages)
    assert best is not None
    step, stages = best
    tokens = rec["global_batch"] * rec["seq_len"] / step
    return tokens, f"stage swapping: {stages} stages, mbs {mbs}; {step:.1f} s/step"


PRICERS = {"layout": price_layout, "plan": price_plan, "stage_swap": price_stage_swap}


def load() -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """(records by key, pairs of record keys) of the data file."""
    data = yaml.safe_load(DATA.read_text())
    pairs = [(a, b) for a, b in data.pop("pairs", [])]
    for key, rec in data.items():
        flop_convention(key, rec)
    return data, pairs


def rows(records: dict[str, dict[str, Any]]) -> dict[str, Row]:
    out = {}
    for key, rec in records.items():
        predicted, how = PRICERS[rec["price"]](rec)
        if "assumed" in rec:  # what the source does not print and the record had to assume
            how += f"; ASSUMED, not published: {rec['assumed']}"
        out[key] = Row(key, rec["system"], rec["published"]["unit"], rec["published"]["value"], predicted, how)
    return out


def ratios(table: dict[str, Row], pairs: list[tuple[str, str]]) -> list[tuple[str, str, float, float]]:
    """(numerator, denominator, published ratio, predicted ratio) of each pair."""
    return [(a, b, table[a].published / table[b].published, table[a].predicted / table[b].predicted)
            for a, b in pairs]


def main() -> None:
    try:
        records, pairs = load()
    except DataError as e:
        sys.exit(f"error: {DATA.name}: {e}")
    table = rows(records)
    paired = ratios(table, pairs)
    if "--json" in sys.argv[1:]:
        print(json.dumps({"records": [{"key": r.key, "system": r.system, "unit": r.unit, "published": r.published,
                                       "predicted": r.predicted, "error": r.error, "how": r.how}
                                      for r in table.values()],
                          "pairs": [{"of": a, "over": b, "published": p, "predicted": q} for a, b, p, q in paired]},
                         indent=2))
        return
    print(f"{'record':42} {'unit':14} {'published':>10} {'meshplan':>10} {'diff':>7}  how meshplan priced it")
    for r in table.values():
        print(f"{r.key:42} {r.unit:14} {r.published:10.1f} {r.predicted:10.1f} {100 * r.error:+6.1f}%  {r.how}")
    errors = [abs(r.error) for r in table.values()]
    print(f"\n{len(errors)} records: mean |difference| {100 * sum(errors) / len(errors):.1f} %, "
          f"{sum(e <= 0.2 for e in errors)} within 20 %")
    print(f"\n{'ratio of two runs on one machine':80} {'published':>9} {'meshplan':>9} {'diff':>7}")
    for a, b, p, q in paired:
        print(f"{a + ' / ' + b:80} {p:9.3f} {q:9.3f} {100 * (q / p - 1):+6.1f}%")


if __name__ == "__main__":
    main()
