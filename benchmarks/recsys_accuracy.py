"""meshplan recsys against published DLRM training throughputs (benchmarks/data/recsys/published.yaml: NVIDIA
DeepLearningExamples' DLRM on DGX A100 and DGX-1). Nothing is fitted: the hardware presets as they are.

The published figures are of NVIDIA's own code (runtime `dle`: sparse embedding gradients applied by
torch.optim.SGD, the bottom MLP on GPU 0, its own table placement; planner/workloads/recsys/runtime.py), so the
comparison prices that placement under that runtime (`dle placement`). Beside it: the placement meshplan's ILP picks
for the same runtime, and meshplan's plan for TorchRec (FBGEMM's fused kernels), which no published run measures.

    python benchmarks/recsys_accuracy.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_profiles import load_hardware  # noqa: E402
from planner.workloads.recsys.cost import RecEvaluation, evaluate_sharding  # noqa: E402
from planner.workloads.recsys.inputs import load_recsys_model  # noqa: E402
from planner.workloads.recsys.runtime import dle_placement  # noqa: E402
from planner.workloads.recsys.search import plan_sharding  # noqa: E402
from planner.workloads.recsys.spec import RecJob, RecRuntime  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "recsys" / "published.yaml"
BOUND = 0.25  # issue 34's bound for DLRM


def _mps(ev: RecEvaluation | None) -> str:
    return "-" if ev is None else f"{ev.samples_per_s / 1e6:.2f}"


def main() -> None:
    data = yaml.safe_load(DATA.read_text())
    print(f"source: {data['source']}")
    print(f"{'run':<20} {'published M/s':>13} {'dle placement':>13} {'error':>8}  {'step ms':>7} {'dense':>6} "
          f"{'emb':>6} {'host':>5}  {'ILP (dle) M/s':>13} {'torchrec M/s':>12}")
    errors = []
    unexplained = []
    for run in data["runs"]:
        model = load_recsys_model(run["model"])
        cluster = load_hardware(run["hardware"], run["gpus"])
        job = RecJob(run["batch"], run["gpus"], runtime=RecRuntime.DLE)
        ev = evaluate_sharding(model, job, cluster, dle_placement(model, job))
        if run.get("memory_unchecked"):  # one GPU, published for a smaller model: time only, no plan to search
            ilp = torchrec = None
        else:
            ilp = plan_sharding(model, job, cluster).evaluation
            torchrec = plan_sharding(model, dataclasses.replace(job, runtime=RecRuntime.TORCHREC), cluster).evaluation
        error = ev.samples_per_s / run["records_per_s"] - 1
        errors.append(abs(error))
        if abs(error) > BOUND:
            unexplained.append(f"{run['name']}: {error:+.1%}, {ev.step_s * 1e3:.2f} ms predicted against "
                               f"{run['batch'] / run['records_per_s'] * 1e3:.2f} ms published per step")
        host = ev.step_s - ev.dense.compute_s - ev.dense.allreduce_s - max(ev.rank_s)
        print(f"{run['name']:<20} {run['records_per_s'] / 1e6:>13.2f} {ev.samples_per_s / 1e6:>13.2f} "
              f"{error:>+8.1%}  {ev.step_s * 1e3:>7.3f} {(ev.dense.compute_s + ev.dense.allreduce_s) * 1e3:>6.3f} "
              f"{max(ev.rank_s) * 1e3:>6.3f} {host * 1e3:>5.3f}  {_mps(ilp):>13} {_mps(torchrec):>12}")
    print(f"mean |error| {sum(errors) / len(errors):.1%} over {len(errors)} runs (positive: meshplan faster); "
          "one-GPU rows: the small model's time, no all-to-all")
    for line in unexplained:
        print(f"outside ±{BOUND:.0%} (issue 34): {line}; the rest of the gap is not explained by the published figures "
              "meshplan prices (NVSwitch all-to-all and all-reduce, PCIe, the code's host syncs and data path): "
              "not fitted")


if __name__ == "__main__":
    main()
