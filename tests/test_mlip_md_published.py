"""`mlip plan --mode md` against published LAMMPS runs of MACE on GH200 (github.com/ACEsuit/mace issue #1708:
pair_style symmetrix/mace and ML-IAP, BCC high-entropy alloys of 54-13,718 atoms on 1, 2, 4 and 8 GPUs;
benchmarks/data/mlip/mace-hea-gh200-lammps.csv). The one-GPU runs are the cost table; the multi-GPU runs are
predicted (benchmarks/mlip_md_accuracy.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import mlip_md_accuracy as bench  # noqa: E402


def test_published_runs_are_the_issue_table() -> None:
    """The data file holds the issue's 40 figures: 5 sizes x 4 GPU counts x 2 backends; e.g. symmetrix, 13,718
    atoms: 1.28 ns/day on 1 GPU, 6.40 on 8."""
    runs = bench.load_runs()
    assert len(runs) == 40
    assert {(r.atoms, r.gpus, r.ns_per_day) for r in runs if r.backend == "symmetrix"} >= {(13718, 1, 1.28),
                                                                                            (13718, 8, 6.40)}


@pytest.mark.parametrize(("backend", "low", "high"), [("symmetrix", -5.0, 20.0), ("mliap", -12.0, 20.0)])
def test_multi_gpu_runs_from_the_one_gpu_table(backend: str, low: float, high: float) -> None:
    """On LAMMPS's default grids, with swap_s measured on the 54-atom 2-GPU run alone, the other 14 multi-GPU runs
    of each backend are predicted within `low` .. `high` % of their published ns/day and within 8 % on average
    (benchmark: symmetrix 7.2 %, ML-IAP 7.4 %; symmetrix, 13,718 atoms on 8 GPUs: 6.40 published, 7.35 predicted).
    The issue publishes no memory, so whether these runs fit is not checked here."""
    rows = bench.compare(backend)
    held_out = [r for r in rows if not r.calibration]
    assert len(held_out) == 14
    for row in held_out:
        assert low < row.diff_pct < high, (row.run, row.diff_pct)
    assert sum(abs(r.diff_pct) for r in held_out) / len(held_out) < 8.0
    big = next(r for r in rows if r.run.atoms == 13718 and r.run.gpus == 8)
    assert big.lammps.grid == (2, 2, 2)
    assert bench.ns_per_day(big.lammps.step_s) == pytest.approx(big.run.ns_per_day, rel=0.20)


def test_swap_cost_is_measured_not_fitted_per_run() -> None:
    """One swap_s per pair style, from one run: the 54-atom 2-GPU step less the one-GPU table and the modelled
    transfer, over the 28 swaps its feature exchanges add (a 9.6 Å box under a 14 Å shell: 2, 2 and 3 swaps a
    direction). Symmetrix's Kokkos kernels cost tens of microseconds a swap; ML-IAP's Python exchange ten times more."""
    symmetrix = bench.compare("symmetrix")[0]
    mliap = bench.compare("mliap")[0]
    assert symmetrix.calibration and abs(symmetrix.diff_pct) < 1e-6
    assert 1e-5 < symmetrix.table.swap_s < 1e-4 < mliap.table.swap_s < 1e-3


def test_running_the_model_on_every_ghost_would_miss_the_published_speed_up() -> None:
    """Priced as pair_style mace runs a model (every ghost 2 x 6 Å + skin deep a node), the same table predicts
    8 GPUs slower than the published 6.40 ns/day by over half: symmetrix computes on owned atoms only."""
    big = next(r for r in bench.compare("symmetrix") if r.run.atoms == 13718 and r.run.gpus == 8)
    assert bench.ns_per_day(big.ghosts.step_s) < 0.5 * 6.40
    assert big.lammps.compute_s < 0.25 * big.ghosts.compute_s
