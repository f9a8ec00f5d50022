"""meshplan recsys against published DLRM training throughputs (benchmarks/data/recsys/published.yaml: NVIDIA
DeepLearningExamples' DLRM on DGX A100 and DGX-1). Nothing is fitted: the planner picks the sharding with the
hardware presets as they are and its predicted samples/s is compared with the published records/s.

    python benchmarks/recsys_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_profiles import load_hardware  # noqa: E402
from planner.workloads.recsys.inputs import load_recsys_model  # noqa: E402
from planner.workloads.recsys.search import plan_sharding  # noqa: E402
from planner.workloads.recsys.spec import RecJob  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "recsys" / "published.yaml"


def main() -> None:
    data = yaml.safe_load(DATA.read_text())
    print(f"source: {data['source']}")
    print(f"{'run':<22} {'published M/s':>13} {'predicted M/s':>13} {'error':>8}  {'step ms':>8} {'dense':>6} "
          f"{'emb':>6}  shardings")
    errors = []
    for run in data["runs"]:
        model = load_recsys_model(run["model"])
        job = RecJob(run["batch"], run["gpus"])
        plan = plan_sharding(model, job, load_hardware(run["hardware"], run["gpus"]))
        ev = plan.evaluation
        error = ev.samples_per_s / run["records_per_s"] - 1
        errors.append(abs(error))
        kinds = sorted({s.kind.value for s in plan.shardings})
        print(f"{run['name']:<22} {run['records_per_s'] / 1e6:>13.2f} {ev.samples_per_s / 1e6:>13.2f} "
              f"{error:>+8.1%}  {ev.step_s * 1e3:>8.3f} {(ev.dense.compute_s + ev.dense.allreduce_s) * 1e3:>6.3f} "
              f"{max(ev.rank_s) * 1e3:>6.3f}  {','.join(kinds)}")
    print(f"mean |error| {sum(errors) / len(errors):.1%} over {len(errors)} runs (positive: meshplan faster)")


if __name__ == "__main__":
    main()
