"""Data-parallel MLIP training over structures of different sizes: the atom balance (planner/workloads/mlip/
balance.py) equals brute force on small instances, LPT keeps Graham's bound, and `meshplan mlip plan --sizes`
prices the balanced step beside MACE's deal by count."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore.errors import InfeasibleError, InputError
from planner.workloads.mlip.balance import balance, brute_force, by_count, lower_bound, lpt, lpt_bound
from planner.workloads.mlip.cost import interpolate
from planner.workloads.mlip.inputs import load_cost_table, parse_sizes
from planner.workloads.mlip.mixed import evaluate_mixed

EXAMPLE = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "mlip" / "example-mace-formula.csv"
runner = CliRunner()


def _sizes(rng: random.Random, n: int) -> list[int]:
    return [rng.choice([rng.randint(1, 30), rng.randint(20, 400)]) for _ in range(n)]


@pytest.mark.parametrize("seed", range(60))
def test_balance_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    replicas = rng.choice([2, 3, 4])
    sizes = _sizes(rng, rng.randint(1, 9 if replicas < 4 else 7))
    part = balance(sizes, replicas)
    assert part.exact and part.makespan == brute_force(sizes, replicas)
    assert sorted(a for g in part.groups for a in g) == sorted(sizes) and len(part.groups) == replicas


@pytest.mark.parametrize("seed", range(20))
def test_lpt_within_graham_bound_and_cut_off_search_never_worse(seed: int) -> None:
    rng = random.Random(100 + seed)
    replicas = rng.choice([2, 3])
    sizes = _sizes(rng, 9)
    best = brute_force(sizes, replicas)
    assert lpt(sizes, replicas).makespan <= lpt_bound(replicas) * best
    cut = balance(sizes, replicas, node_limit=3)  # the search stopped early: LPT's answer or better
    assert best <= cut.makespan <= lpt(sizes, replicas).makespan
    assert cut.lower_bound == lower_bound(sizes, replicas) <= best


def test_graham_worst_case_is_not_exact_and_search_finds_the_optimum() -> None:
    # Graham's tight instance for 2 machines: 3, 3, 2, 2, 2; LPT gives 7, the optimum 6 (3+3 | 2+2+2)
    assert lpt([3, 3, 2, 2, 2], 2).makespan == 7
    part = balance([3, 3, 2, 2, 2], 2)
    assert part.makespan == 6 and part.exact


def test_by_count_is_distributed_samplers_strided_deal() -> None:
    assert by_count([5, 1, 4, 2, 3], 2) == ((5, 4, 3), (1, 2))


def test_mixed_step_is_the_table_at_the_largest_share() -> None:
    table = load_cost_table(str(EXAMPLE))
    cluster = load_hardware("h100-sxm", 4, HardwareOverrides())
    sizes = (2000,) + (100,) * 12  # one large structure and twelve small: by count, one GPU gets 2,300 atoms
    p = evaluate_mixed(table, sizes, 4, cluster)
    assert p.partition.makespan == 2000 and p.partition.exact  # the large one alone; 12 x 100 over the other 3
    assert p.compute_s == pytest.approx(interpolate(table, 2000)[0])
    assert p.step_s == pytest.approx(p.compute_s + p.allreduce_s)
    assert p.by_count_max_atoms >= 2200 and p.by_count_step_s > p.step_s
    assert p.by_count_too_big == 0
    with pytest.raises(InfeasibleError, match="do not fit"):
        evaluate_mixed(table, (5_000_000,), 4, cluster)
    # the example table needs ~72 GiB at 50,000 atoms (of the H100's 80) and ~105 GiB at 75,000: balanced, each GPU
    # takes two of the eight 25,000-atom structures; dealt by count (8 structures each), a GPU that draws three of
    # them runs out of memory
    crowded = (25_000,) * 8 + (10,) * 24
    q = evaluate_mixed(table, crowded, 4, cluster)
    assert q.partition.makespan == 50_060 and q.memory_bytes <= q.memory_capacity
    assert 0 < q.by_count_too_big < 1


def test_sizes_file_format() -> None:
    assert parse_sizes("# a step\natoms,count\n64,2\n8,1\n", "s.csv") == (64, 64, 8)
    for text, says in (("n,count\n1,1\n", "header"), ("atoms,count\n", "no rows"), ("atoms,count\n0,1\n", "1 <="),
                       ("atoms,count\n5\n", "cells"), ("atoms,count\n5,x\n", "integer")):
        with pytest.raises(InputError, match=says):
            parse_sizes(text, "s.csv")


def test_cli_sizes(tmp_path: Path) -> None:
    sizes = tmp_path / "sizes.csv"
    sizes.write_text("atoms,count\n2000,1\n100,12\n")
    out = tmp_path / "plan.json"
    res = runner.invoke(app, ["mlip", "plan", "--costs", str(EXAMPLE), "--hardware", "h100-sxm", "--gpus", "4",
                              "--sizes", str(sizes), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "balanced by atoms: largest share 2000 atoms (exact)" in res.output and "by count" in res.output
    assert '"replica_atoms"' in out.read_text()
    for extra in (["--atoms", "10"], ["--mode", "md"], ["--structures", "3"]):
        res = runner.invoke(app, ["mlip", "plan", "--costs", str(EXAMPLE), "--hardware", "h100-sxm", "--gpus", "4",
                                  "--sizes", str(sizes), *extra])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
