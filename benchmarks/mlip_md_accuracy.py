"""meshplan mlip --mode md against published LAMMPS throughput of a MACE model on 1-8 GH200 GPUs
(benchmarks/data/mlip/mace-hea-gh200-lammps.csv: github.com/ACEsuit/mace issue #1708, pair_style symmetrix/mace and
ML-IAP, BCC high-entropy-alloy crystals of 54-13,718 atoms).

Method: each backend's one-GPU runs are its forces-only cost table (what `meshplan mlip plan --mode md` takes); the
2-, 4- and 8-GPU runs are predicted from it by planner/workloads/mlip/md.py (domain grid searched, ghost shell,
LAMMPS's swaps) and compared. Nothing is fitted. Beside it: the same table priced with md_scheme `ghosts` (the model
run on every ghost, as pair_style mace does), to show what the message-passing scheme changes.

Stated assumptions (none published in the issue): the timestep is LAMMPS's metal-units default, 1 fs (ns/day ->
steps/s); the BCC lattice constant is 3.2 Å (refractory HEAs lie at 3.1-3.4 Å); the GPUs' links are the h100-sxm
preset's (NVLink within a node of 4, 400 Gb/s per GPU across), the compute comes from the one-GPU rows alone;
the features exchanged are 128 channels x 4 (L <= 1) doubles per ghost (pair_symmetrix: comm_forward =
num_LM x num_channels), ghost shell 2 x 6 Å + skin for symmetrix (its pair style enforces it), 6 Å + skin for ML-IAP.
A one-GPU time that falls as atoms grow (ML-IAP: 3.14 ns/day at 2,662 atoms against 3.12 at 686, noise on a flat,
host-bound step) enters the table as the running maximum, since a table never falls.
The issue publishes no memory, so the table's memory column is 0: `fits` then counts the weights and buffers only.

    python benchmarks/mlip_md_accuracy.py
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_profiles import HardwareOverrides, load_hardware  # noqa: E402
from planner.workloads.mlip.cost import MlipPrediction  # noqa: E402
from planner.workloads.mlip.md import added_swaps, evaluate_md, lammps_grid, md_ghosts  # noqa: E402
from planner.workloads.mlip.search import search_md  # noqa: E402
from planner.workloads.mlip.spec import CostRow, MdScheme, MlipCostTable, MlipJob, MlipMode  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "mlip" / "mace-hea-gh200-lammps.csv"
SOURCE = "https://github.com/ACEsuit/mace/issues/1708"
DT_FS = 1.0  # LAMMPS metal units' default timestep (0.001 ps)
LATTICE_A = 3.2  # BCC lattice constant, Å (assumed)
GPUS_PER_NODE = 4  # 8 GPUs ran on 2 nodes
GHOST_DEPTH_A = {"symmetrix": 12.0, "mliap": 6.0}
CALIBRATION = (54, 2)  # (atoms, GPUs) of the run swap_s is measured on: next to nothing to compute or send


@dataclass(frozen=True)
class Run:
    backend: str
    atoms: int
    gpus: int
    ns_per_day: float


def load_runs() -> list[Run]:
    lines = [line for line in DATA.read_text().splitlines() if line and not line.startswith("#")]
    return [Run(r["backend"], int(r["atoms"]), int(r["gpus"]), float(r["ns_per_day"]))
            for r in csv.DictReader(lines)]


def step_s(ns_per_day: float) -> float:
    """Seconds per MD step of a run printed as ns/day at DT_FS femtoseconds a step."""
    return 86400.0 / (ns_per_day * 1e6 / DT_FS)


def ns_per_day(seconds: float) -> float:
    return 86400.0 / seconds * DT_FS / 1e6


def cost_table(backend: str, runs: list[Run], scheme: MdScheme = MdScheme.MESSAGE_PASSING) -> MlipCostTable:
    """The backend's one-GPU runs as a forces-only cost table (running maximum: a table never falls), with the
    pair style's swap cost measured on its smallest box on 2 GPUs (`measured_swap_s`)."""
    table = _one_gpu_table(backend, runs, scheme)
    run = next(r for r in runs if r.backend == backend and (r.atoms, r.gpus) == CALIBRATION)
    return replace(table, swap_s=measured_swap_s(table, run))


def measured_swap_s(table: MlipCostTable, run: Run) -> float:
    """`swap_s` as md.py defines its measurement: the run's published step less the model's step without it (the
    one-rank table at its owned atoms and the modelled transfers), over the swaps the multi-rank step adds."""
    added = added_swaps(table, run.atoms, lammps_grid(run.gpus))
    if not added:
        return 0.0
    return max(0.0, (step_s(run.ns_per_day) - predict(replace(table, swap_s=0.0), run).step_s) / added)


def _one_gpu_table(backend: str, runs: list[Run], scheme: MdScheme) -> MlipCostTable:
    rows, worst = [], 0.0
    for run in sorted((r for r in runs if r.backend == backend and r.gpus == 1), key=lambda r: r.atoms):
        worst = max(worst, step_s(run.ns_per_day))
        rows.append(CostRow(run.atoms, worst, 0.0))
    return MlipCostTable(name=f"mace-omat-medium-{backend}", rows=tuple(rows), layers=2, cutoff_a=6.0,
                         halo_bytes=128 * 4 * 8.0, params=4_700_000, density=2 / LATTICE_A**3, device="GH200",
                         source=SOURCE, mode=MlipMode.MD, ghost_depth_a=GHOST_DEPTH_A[backend], md_scheme=scheme)


def predict(table: MlipCostTable, run: Run, searched: bool = False) -> MlipPrediction:
    """The run priced on the grid LAMMPS picks by default (the published runs name none), or on meshplan's pick."""
    cluster = load_hardware("h100-sxm", run.gpus, HardwareOverrides(gpus_per_node=GPUS_PER_NODE))
    job = MlipJob(run.atoms, 1, run.gpus, MlipMode.MD)
    if searched:
        return search_md(table, job, cluster, top_k=1).best
    return evaluate_md(table, job, cluster, lammps_grid(run.gpus))


@dataclass(frozen=True)
class Row:
    run: Run
    table: MlipCostTable  # the one-GPU table, swap_s measured
    lammps: MlipPrediction  # message passing on LAMMPS's default grid: the comparison
    searched: MlipPrediction  # meshplan's own pick of the grid
    ghosts: MlipPrediction  # the same table with md_scheme ghosts, LAMMPS's grid

    @property
    def calibration(self) -> bool:
        return (self.run.atoms, self.run.gpus) == CALIBRATION

    @property
    def diff_pct(self) -> float:
        return _pct(ns_per_day(self.lammps.step_s), self.run.ns_per_day)


def compare(backend: str) -> list[Row]:
    """Every multi-GPU run of `backend` with its predictions."""
    runs = load_runs()
    table = cost_table(backend, runs)
    ghosts = replace(table, md_scheme=MdScheme.GHOSTS)
    return [Row(r, table, predict(table, r), predict(table, r, True), predict(ghosts, r))
            for r in runs if r.backend == backend and r.gpus > 1]


def _pct(predicted: float, published: float) -> float:
    return (predicted / published - 1) * 100


def main() -> None:
    print(f"source: {SOURCE} (GH200, MACE-OMAT-0 medium fine-tuned, BCC HEA; one-GPU runs = the cost table)")
    print(f"{'backend':<10} {'atoms':>6} {'GPUs':>4} {'grid':>6} {'published':>9} {'meshplan':>8} {'diff':>7} "
          f"{'compute':>8} {'comm':>7} {'ghosts':>6}  {'ghosts-scheme':>13} {'diff':>7}  {'pick':>6} {'ns/day':>6}"
          "  fits")
    for backend in ("symmetrix", "mliap"):
        rows = compare(backend)
        for row in rows:
            run, p, g, s = row.run, row.lammps, row.ghosts, row.searched
            print(f"{backend:<10} {run.atoms:>6} {run.gpus:>4} {_grid(p):>6} {run.ns_per_day:>9.2f} "
                  f"{ns_per_day(p.step_s):>8.2f} {row.diff_pct:>+6.1f}% {p.compute_s * 1e3:>6.2f}ms "
                  f"{p.halo_s * 1e3:>5.2f}ms {md_ghosts(row.table, run.atoms, p.grid):>6.0f}  "
                  f"{ns_per_day(g.step_s):>13.2f} {_pct(ns_per_day(g.step_s), run.ns_per_day):>+6.1f}%  "
                  f"{_grid(s):>6} {ns_per_day(s.step_s):>6.2f}  {'yes' if p.fits else 'NO'}{_note(row)}")
        diffs = [abs(r.diff_pct) for r in rows if not r.calibration]
        print(f"{backend}: swap_s {rows[0].table.swap_s * 1e6:.0f} us measured on the {CALIBRATION[0]}-atom "
              f"{CALIBRATION[1]}-GPU run; mean |diff| {sum(diffs) / len(diffs):.1f} % over the other {len(diffs)} "
              f"multi-GPU runs, max {max(diffs):.1f} %")
    print("ns/day at 1 fs; grid: LAMMPS's default (least brick surface); compute/comm: ms per step of that "
          "prediction; ghosts per GPU; pick: meshplan's searched grid and its ns/day")


def _note(row: Row) -> str:
    return "  (swap_s measured here)" if row.calibration else ""


def _grid(p: MlipPrediction) -> str:
    return "x".join(map(str, p.grid))


if __name__ == "__main__":
    main()
