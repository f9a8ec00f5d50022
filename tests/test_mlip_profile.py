"""`meshplan profile mlip`: a real MACE model (mace-torch) timed on periodic bulk boxes writes a cost table that
`meshplan mlip plan` reads; the cost-table writer reads back equal. The profiling tests skip where mace-torch is not
installed (the [mlip] extra); the tiny model and boxes keep them to seconds."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from planner.workloads.mlip.inputs import cost_table_text, load_cost_table, parse_cost_table
from planner.workloads.mlip.spec import MdScheme, MlipMode

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "mlip"
runner = CliRunner()
needs_mace = pytest.mark.skipif(importlib.util.find_spec("mace") is None,
                                reason="mace-torch is not installed (pip install -e '.[mlip]')")
TINY = ["--channels", "4", "--hidden-l", "0", "--layers", "1", "--max-ell", "1", "--correlation", "1",
        "--cells", "1,3", "--repeats", "1", "--threads", "1"]


def test_written_table_reads_back_equal() -> None:
    train = load_cost_table(str(DATA / "example-mace-formula.csv"))
    md = replace(train, name="md", mode=MlipMode.MD, md_scheme=MdScheme.MESSAGE_PASSING, ghost_depth_a=12.0,
                 swap_s=3.4e-5)
    for table in (train, md):
        assert parse_cost_table(cost_table_text(table, ("a plain comment",)), "t.csv") == table
    with pytest.raises(ValueError, match="colon"):
        cost_table_text(train, ("command: x",))


@needs_mace
@pytest.mark.parametrize("mode", ["train", "md"])
def test_profile_writes_a_table_the_planner_reads(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "mace.csv"
    before = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    res = runner.invoke(app, ["profile", "mlip", "--out", str(out), "--mode", mode, *TINY])
    assert res.exit_code == 0, res.output
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") == before  # mace's import side effect undone
    table = load_cost_table(str(out))
    # fcc Cu: 4 atoms per cubic cell of ASE's reference lattice, 3.61 Å
    assert [r.atoms for r in table.rows] == [4, 108]
    assert table.density == pytest.approx(4 / 3.61**3, rel=1e-3)
    assert table.mode is MlipMode(mode) and table.layers == 1 and table.cutoff_a == 5.0
    assert table.halo_bytes == 4 * 4  # 4 scalar channels of float32 per ghost
    assert table.params > 0 and "measured by meshplan profile mlip" in table.source and "mace-torch" in table.source
    assert table.device.startswith("CPU") and "1 threads" in table.device
    assert all(r.step_s > 0 for r in table.rows)
    assert table.rows[1].memory_bytes > table.rows[0].memory_bytes > 0  # 27 times the atoms and edges
    args = ["mlip", "plan", "--costs", str(out), "--hardware", "h100-sxm", "--gpus", "2", "--atoms", "1000",
            "--mode", mode] + (["--structures", "4"] if mode == "train" else [])
    res = runner.invoke(app, args)
    assert res.exit_code == 0 and "best:" in res.output, res.output


@needs_mace
def test_bad_profile_flags_are_one_line_errors(tmp_path: Path) -> None:
    for flags, says in ((["--mode", "fit"], "--mode must be train or md"), (["--element", "Xx"], "--element"),
                        (["--dtype", "half"], "--dtype"), (["--cells", "0"], "--cells")):
        res = runner.invoke(app, ["profile", "mlip", "--out", str(tmp_path / "t.csv"), *TINY, *flags])
        assert res.exit_code == 2 and says in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed: the profile extra's "
                                                                      "message comes first")
def test_without_mace_the_profiler_says_which_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mace" else real(name, *a))
    res = runner.invoke(app, ["profile", "mlip", "--out", str(tmp_path / "t.csv"), *TINY])
    assert res.exit_code == 2 and "pip install -e '.[mlip]'" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "t.csv").exists()
