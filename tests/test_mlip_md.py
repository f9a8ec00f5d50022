"""`meshplan mlip plan --mode md`: one LAMMPS MD step over a grid of spatial domains (planner/workloads/mlip/md.py),
its ghost shell, its search against every ordered grid, the forces-only table it requires and the LAMMPS lines."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from hardware_profiles import load_hardware
from meshcore.errors import InputError, SpecError
from planner.workloads.mlip.inputs import parse_cost_table
from planner.workloads.mlip.md import evaluate_md, ghost_depth, ghost_slabs, md_ghosts, swaps
from planner.workloads.mlip.search import search_md
from planner.workloads.mlip.spec import CostRow, MdScheme, MlipCostTable, MlipJob, MlipMode

runner = CliRunner()
# A forces-only table of the shape a profile gives: a fixed cost plus a per-atom cost and memory (the numbers are
# the test's own, not a model's: what is checked is the decomposition, not the model's speed)
ROWS = tuple(CostRow(n, 2e-3 + n * 4e-7, 1e9 + n * 6e4) for n in (1000, 100_000, 1_000_000))


def _table(**kw: object) -> MlipCostTable:
    args: dict[str, object] = {"name": "md", "rows": ROWS, "layers": 2, "cutoff_a": 5.0, "halo_bytes": 1024.0,
                               "params": 4_000_000, "density": 0.1, "mode": MlipMode.MD}
    args.update(kw)
    return MlipCostTable(**args)  # type: ignore[arg-type]


def test_ghost_shell_is_layers_deep() -> None:
    """LAMMPS's ghost cutoff for a message-passing model run once per step: layers x cutoff, plus the 2 Å metal-units
    neighbour skin; the shell is the brick grown by it on every side, minus the brick (10^6 atoms at 0.1/Å^3: a
    215.4 Å box), and the x, y, z swaps' slabs add up to it."""
    table = _table()
    side = (1e6 / 0.1) ** (1 / 3)
    a = side / 2
    assert ghost_depth(table) == 10.0
    assert md_ghosts(table, 10**6, (2, 2, 2)) == pytest.approx(0.1 * ((a + 24) ** 3 - a ** 3))
    x, y, z = ghost_slabs(table, 10**6, (2, 2, 2))
    assert x == pytest.approx(0.1 * 24 * a * a) and x < y < z
    assert md_ghosts(_table(ghost_depth_a=5.0), 10**6, (2, 2, 2)) < md_ghosts(table, 10**6, (2, 2, 2))
    assert md_ghosts(table, 10**6, (1, 1, 1)) == 0.0


def test_md_step_is_table_time_at_owned_plus_ghosts_plus_exchange() -> None:
    table = _table()
    cluster = load_hardware("h100-sxm", 8)
    p = evaluate_md(table, MlipJob(10**6, 1, 8, MlipMode.MD), cluster, (2, 2, 2))
    atoms = 10**6 / 8 + md_ghosts(table, 10**6, (2, 2, 2))
    assert p.compute_s == pytest.approx(2e-3 + atoms * 4e-7)
    assert p.allreduce_s == 0.0 and 0.0 < p.halo_s < p.compute_s
    assert p.step_s == pytest.approx(p.compute_s + p.halo_s)
    assert p.memory_bytes == pytest.approx(1e9 + atoms * 6e4 + 4_000_000 * 4 + 2 * 2**30)


@pytest.mark.parametrize("gpus", [1, 2, 4, 6, 8, 16, 24, 32])
def test_search_is_the_best_ordered_grid(gpus: int) -> None:
    table = _table()
    cluster = load_hardware("h100-sxm", gpus)
    job = MlipJob(10**6, 1, gpus, MlipMode.MD)
    best = search_md(table, job, cluster).best
    every = [evaluate_md(table, job, cluster, g) for g in itertools.product(range(1, gpus + 1), repeat=3)
             if math.prod(g) == gpus]
    fastest = min(p.step_s for p in every if p.fits)
    assert best.step_s == pytest.approx(fastest)
    assert math.prod(best.grid) == gpus


def test_message_passing_computes_owned_atoms_and_exchanges_features() -> None:
    """pair_style symmetrix/mace's mpi_message_passing (and ML-IAP's MACE): the model runs on the owned atoms only
    and the ghosts' node features go forward between the layers and their gradients back: layers − 1 exchanges
    each way on top of positions and forces; a shell deeper than a brick takes more swaps (CommBrick's maxneed)."""
    cluster = load_hardware("h100-sxm", 8)
    job = MlipJob(10**6, 1, 8, MlipMode.MD)
    replicated = evaluate_md(_table(), job, cluster, (2, 2, 2))
    passing = evaluate_md(_table(md_scheme=MdScheme.MESSAGE_PASSING), job, cluster, (2, 2, 2))
    assert passing.compute_s == pytest.approx(2e-3 + 10**6 / 8 * 4e-7)
    assert passing.compute_s < replicated.compute_s
    assert passing.halo_s > replicated.halo_s  # two more exchanges of 1 KiB a ghost, against 24 B
    one_layer = evaluate_md(_table(md_scheme=MdScheme.MESSAGE_PASSING, layers=1), job, cluster, (2, 2, 2))
    assert one_layer.halo_s < replicated.halo_s  # a strictly local model: positions and forces only, shell of 7 Å
    assert swaps(_table(), 10**6, (2, 2, 2)) == (1, 1, 1)
    assert swaps(_table(), 1000, (2, 2, 2)) == (2, 2, 2)  # a 21.5 Å box: 10.8 Å bricks under a 12 Å shell


def test_md_needs_a_forces_only_table_and_one_box() -> None:
    cluster = load_hardware("h100-sxm", 8)
    with pytest.raises(InputError, match="forces-only"):
        search_md(_table(mode=MlipMode.TRAIN), MlipJob(10**6, 1, 8, MlipMode.MD), cluster)
    with pytest.raises(SpecError, match="one structure"):
        MlipJob(10**6, 4, 8, MlipMode.MD)


def test_cli_writes_lammps_lines(tmp_path: Path) -> None:
    costs = tmp_path / "md.csv"
    costs.write_text("# name: md\n# layers: 2\n# cutoff_a: 5.0\n# halo_bytes: 1024\n# params: 4000000\n"
                     "# density: 0.1\n# mode: md\natoms,step_s,memory_bytes\n"
                     + "".join(f"{r.atoms},{r.step_s},{r.memory_bytes}\n" for r in ROWS))
    out = tmp_path / "plan.yaml"
    base = ["mlip", "plan", "--costs", str(costs), "--hardware", "h100-sxm", "--gpus", "8", "--atoms", "1000000"]
    res = runner.invoke(app, [*base, "--mode", "md", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    assert doc["mode"] == "md" and doc["best"]["grid"] == [2, 2, 2]
    assert doc["lammps"]["input"] == ["processors 2 2 2", "newton on", "comm_modify cutoff 12"]
    assert doc["lammps"]["launch"].startswith("mpirun -np 8 lmp -k on g 8 -sf kk")
    assert "atom-steps/s" in res.output and "processors 2 2 2" in res.output
    for args, message in ((["--mode", "nve"], "--mode must be one of train, md"),
                          (["--mode", "md", "--structures", "3"], "one structure")):
        res = runner.invoke(app, [*base, *args])
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1
    train = tmp_path / "train.csv"
    train.write_text(costs.read_text().replace("# mode: md\n", ""))
    res = runner.invoke(app, [*base, "--costs", str(train), "--mode", "md"])
    assert res.exit_code == 2 and "forces-only" in res.output, res.output


def test_table_names_its_md_scheme_and_swap_cost() -> None:
    head = ("# layers: 2\n# cutoff_a: 6\n# halo_bytes: 4096\n# params: 1\n# density: 0.06\n# mode: md\n")
    body = "atoms,step_s,memory_bytes\n54,0.004,0\n13718,0.07,0\n"
    table = parse_cost_table(head + "# md_scheme: message_passing\n# swap_s: 3.4e-5\n" + body, "t.csv")
    assert table.md_scheme is MdScheme.MESSAGE_PASSING and table.swap_s == 3.4e-5
    assert parse_cost_table(head + body, "t.csv").md_scheme is MdScheme.GHOSTS
    with pytest.raises(InputError, match="md_scheme must be one of ghosts, message_passing, got 'owned'"):
        parse_cost_table(head + "# md_scheme: owned\n" + body, "t.csv")
    with pytest.raises(InputError, match="swap_s"):
        parse_cost_table(head + "# swap_s: 5\n" + body, "t.csv")
