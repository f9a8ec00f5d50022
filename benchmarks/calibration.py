"""Accuracy of the cost model against published measured runs (shared/calibration/published_runs.yaml).

    python benchmarks/calibration.py [--runs PATH] [--check]

For each run: the published layout is evaluated on the `a100-80gb` profile and compared in the
run's own convention: Narayanan et al. 2021 print TFLOP/s per GPU counting recomputation
(F = 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration), Korthikanti et al. 2022 print iteration time
(and MFU where no time is given). Knobs the paper did not print (micro-batch size in Table 1, the
TP/PP split of Table 2's PTD-P rows, the interleaving depth) are chosen as a planner would: the
fastest setting that fits, with TP = 8 (one DGX node) for PTD-P. The framework of each source is
described by physical switches only (runtime): Megatron-LM 2021-22 ran unfused attention and did
not overlap the gradient all-reduce; DeepSpeed ZeRO-3 (Table 2) reduced fp16 gradients; the
collectives of that era used one NIC per rank (no multi-rail rings).

--check exits 1 when the mean absolute error exceeds 5 %, any run exceeds 10 %, or a published run
is predicted not to fit in memory.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cost_models.flops import narayanan_iteration_flops  # noqa: E402
from cost_models.step import Prediction, evaluate_layout  # noqa: E402
from hardware_profiles import load_hardware  # noqa: E402
from planner.api import Problem, make_layout  # noqa: E402
from planner.errors import LayoutError  # noqa: E402
from planner.loaders import model_from_mapping  # noqa: E402
from planner.specs import AttentionKernel, JobSpec, Runtime  # noqa: E402

DEFAULT_RUNS = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"
MEGATRON_2021 = Runtime(attention=AttentionKernel.UNFUSED, overlap_grad_reduce=False,
                        overlap_param_gather=False, grad_reduce_bytes=4, multi_rail=False)
DEEPSPEED_ZERO3_2021 = Runtime(attention=AttentionKernel.UNFUSED, overlap_grad_reduce=True,
                               overlap_param_gather=True, grad_reduce_bytes=2, multi_rail=False)


@dataclass(frozen=True)
class Result:
    run_id: str
    layout: str
    metric: str
    measured: float
    predicted: float
    fits: bool
    peak_gib: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.measured) / self.measured


def _model(rec: dict[str, Any]) -> Any:
    m = rec["model"]
    h = m["hidden_size"]
    return model_from_mapping({
        "name": m["name"], "num_layers": m["num_layers"], "hidden_size": h,
        "ffn_hidden_size": m["ffn_hidden_size"] or 4 * h, "num_attention_heads": m["num_attention_heads"],
        "vocab_size": m["vocab_size"], "gated_mlp": False, "tied_embeddings": True, "norm": "layernorm",
        "linear_bias": True, "learned_positions": m["seq_length"], "dropout": True,
    }, rec["id"])


def _candidates(rec: dict[str, Any], gpus: int) -> list[dict[str, Any]]:
    """Layouts consistent with what the source printed; unprinted knobs are enumerated."""
    par, batch = rec["parallel"], rec["batch"]
    zero = par.get("zero_stage") or 0
    tp = par["tp"] or (1 if zero == 3 else 8)
    pp = par["pp"] or gpus // (par["dp"] * tp)
    recompute = par["recompute"] if par["recompute"] in ("full", "selective", "none") else "full"
    mbs_options = [batch["micro_batch_size"]] if batch["micro_batch_size"] else [1, 2, 4, 8]
    if par.get("vpp"):
        vpp_options = [par["vpp"]]
    else:  # interleaving is opt-in in Megatron-LM: a run that does not say so ran plain 1F1B
        vpp_options = [1]
    sp = bool(par.get("sp"))
    return [dict(tp=tp, pp=pp, cp=1, vpp=v, mbs=b, sp=sp, zero=zero, recompute=recompute)
            for b in mbs_options for v in vpp_options]


def published_layout(rec: dict[str, Any]) -> tuple[Problem, dict[str, Any], Prediction]:
    """The run's problem, its layout knobs (unprinted ones chosen as described above) and prediction."""
    gpus = rec["hardware"]["num_gpus"]
    model = _model(rec)
    runtime = DEEPSPEED_ZERO3_2021 if rec["parallel"].get("zero_stage") == 3 else MEGATRON_2021
    job = JobSpec(seq_len=rec["model"]["seq_length"], global_batch=rec["batch"]["global_batch_size_seqs"],
                  runtime=runtime)
    problem = Problem(model, load_hardware("a100-80gb", gpus), job)
    best: tuple[Prediction, dict[str, Any]] | None = None
    for knobs in _candidates(rec, gpus):
        try:
            layout = make_layout(problem, **knobs)
        except LayoutError:
            continue
        pred = evaluate_layout(model, problem.cluster, job, layout)
        key = (pred.fits, -pred.step_time_s)
        if best is None or key > (best[0].fits, -best[0].step_time_s):
            best = (pred, knobs)
    if best is None:
        raise SystemExit(f"{rec['id']}: no valid layout")
    return problem, best[1], best[0]


def evaluate_record(rec: dict[str, Any]) -> Result:
    gpus = rec["hardware"]["num_gpus"]
    problem, knobs, pred = published_layout(rec)
    job = problem.job
    res = rec["result"]
    m = rec["model"]
    if res.get("tflops_per_gpu"):
        flops = narayanan_iteration_flops(job.global_batch, job.seq_len, m["num_layers"], m["hidden_size"],
                                          m["vocab_size"])
        metric, measured, predicted = "TFLOP/s", float(res["tflops_per_gpu"]), flops / pred.step_time_s / gpus / 1e12
    elif res.get("seconds_per_iteration"):
        metric, measured, predicted = "s/iter", float(res["seconds_per_iteration"]), pred.step_time_s
    else:
        metric, measured, predicted = "MFU %", float(res["mfu_pct"]), 100 * pred.mfu
    desc = (f"tp{knobs['tp']} pp{knobs['pp']} dp{gpus // (knobs['tp'] * knobs['pp'])} v{knobs['vpp']} "
            f"mbs{knobs['mbs']} z{knobs['zero']} {knobs['recompute']}{' sp' if knobs['sp'] else ''}")
    return Result(rec["id"], desc, metric, measured, predicted, pred.fits, pred.peak_memory_gib)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--check", action="store_true", help="exit 1 when the accuracy targets are missed")
    args = parser.parse_args(argv)
    records = yaml.safe_load(args.runs.read_text())
    results = [evaluate_record(r) for r in records]
    print(f"{'run':48} {'layout':42} {'metric':8} {'measured':>9} {'predicted':>9} {'error':>7} {'GiB':>6} fits")
    for r in results:
        print(f"{r.run_id:48} {r.layout:42} {r.metric:8} {r.measured:9.2f} {r.predicted:9.2f} "
              f"{r.error_pct:+6.1f}% {r.peak_gib:6.1f} {'yes' if r.fits else 'NO'}")
    errors = [abs(r.error_pct) for r in results]
    worst = max(results, key=lambda r: abs(r.error_pct))
    mean = sum(errors) / len(errors)
    unfit = [r.run_id for r in results if not r.fits]
    print(f"\n{len(results)} runs: mean absolute error {mean:.2f} %, worst {abs(worst.error_pct):.2f} % "
          f"({worst.run_id}), predicted not to fit: {len(unfit)}")
    ok = mean <= 5.0 and abs(worst.error_pct) <= 10.0 and not unfit
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
