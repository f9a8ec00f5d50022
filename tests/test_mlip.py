"""Graph interatomic potentials: the branch-and-bound split search equals brute force on seeded cases, the ghost
shell formula, the cost-table format and `meshplan mlip plan`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore.errors import InfeasibleError, InputError
from planner.workloads.mlip.cost import ghost_atoms, interpolate
from planner.workloads.mlip.inputs import load_cost_table, parse_cost_table
from planner.workloads.mlip.search import brute_force, search_mlip
from planner.workloads.mlip.spec import CostRow, MlipCostTable, MlipJob

EXAMPLE = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "mlip" / "example-mace-formula.csv"
runner = CliRunner()


def _table(rng: random.Random) -> MlipCostTable:
    per_atom_s, per_atom_b = rng.uniform(1e-7, 1e-5), rng.uniform(1e5, 3e6)
    rows = tuple(CostRow(n, rng.uniform(1e-3, 1e-2) + n * per_atom_s, 5e8 + n * per_atom_b)
                 for n in (100, 10_000, 1_000_000))
    return MlipCostTable("rand", rows, rng.choice([1, 2, 3]), rng.choice([4.0, 5.0, 6.0]),
                         rng.choice([512.0, 2048.0, 8192.0]), rng.choice([10**5, 5 * 10**6]),
                         rng.choice([0.05, 0.1]))


@pytest.mark.parametrize("seed", range(40))
def test_search_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    table = _table(rng)
    gpus = rng.choice([1, 2, 3, 4, 6, 8, 16, 24])
    job = MlipJob(rng.choice([500, 20_000, 200_000, 2_000_000]), rng.choice([1, 3, 16, 64]), gpus)
    cluster = load_hardware("h100-sxm", gpus, HardwareOverrides())
    expected = brute_force(table, job, cluster)
    if expected is None:
        with pytest.raises(InfeasibleError, match="do not fit"):
            search_mlip(table, job, cluster)
        return
    found = search_mlip(table, job, cluster).best
    assert found.step_s == pytest.approx(expected.step_s, rel=1e-12)
    assert found.fits and found.replicas * found.domains == gpus


def test_ghost_shell() -> None:
    table = load_cost_table(str(EXAMPLE))
    assert ghost_atoms(table, 100_000, (1, 1, 1)) == 0
    side = (100_000 / 0.1) ** (1 / 3)  # 100 Å
    a = side / 2
    expected = 0.1 * ((a + 12) ** 3 - a**3)
    assert ghost_atoms(table, 100_000, (2, 2, 2)) == pytest.approx(expected)
    assert ghost_atoms(table, 1000, (4, 4, 4)) <= 1000  # capped at the other bricks' atoms


def test_interpolation_is_linear_between_rows() -> None:
    table = load_cost_table(str(EXAMPLE))
    lo, hi = table.rows[1], table.rows[2]
    mid = (lo.atoms + hi.atoms) / 2
    assert interpolate(table, mid)[0] == pytest.approx((lo.step_s + hi.step_s) / 2)


def test_large_system_splits_into_domains_small_ones_replicate() -> None:
    table = load_cost_table(str(EXAMPLE))
    h100 = load_hardware("h100-sxm", 16)
    assert search_mlip(table, MlipJob(1000, 16, 16), h100).best.domains == 1
    assert search_mlip(table, MlipJob(100_000, 16, 16), h100).best.domains > 1


def test_bad_tables() -> None:
    good = "# layers: 2\n# cutoff_a: 5\n# halo_bytes: 1024\n# params: 1000\n# density: 0.1\n" \
           "atoms,step_s,memory_bytes\n10,0.001,1e6\n100,0.002,1e7\n"
    parse_cost_table(good, "ok.csv")
    with pytest.raises(InputError, match="unknown key 'colour'"):
        parse_cost_table("# colour: red\n" + good, "x.csv")
    with pytest.raises(InputError, match="missing keys"):
        parse_cost_table(good.replace("# density: 0.1\n", ""), "x.csv")
    with pytest.raises(InputError, match="header must be"):
        parse_cost_table(good.replace("atoms,step_s", "n,step_s"), "x.csv")
    with pytest.raises(InputError, match="must not decrease"):
        parse_cost_table(good.replace("100,0.002", "100,0.0001"), "x.csv")
    with pytest.raises(InputError, match="row 3 step_s must be a number"):
        parse_cost_table(good.replace("0.002", "fast"), "x.csv")


def test_cli(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["mlip", "plan", "--costs", str(EXAMPLE), "--hardware", "h100-sxm", "--gpus", "16",
                              "--atoms", "100000", "--structures", "16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "domain(s)" in res.output and out.exists()
    res = runner.invoke(app, ["mlip", "plan", "--costs", str(EXAMPLE), "--hardware", "h100-sxm", "--gpus", "2",
                              "--atoms", "10000000"])
    assert res.exit_code == 3 and "do not fit" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["mlip", "plan", "--costs", str(tmp_path / "none.csv"), "--hardware", "h100-sxm",
                              "--gpus", "2", "--atoms", "10"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
