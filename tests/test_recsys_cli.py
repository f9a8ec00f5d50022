"""`meshplan recsys plan` through typer's CliRunner, and the TorchRec plan it emits: field names and values as
TorchRec 1.9 defines them (torchrec/distributed/types.py, embedding_types.py, sharding_plan.py), and the emitted
module run against TorchRec where it imports (it does not on CPU with torch 2.13: see
planner/workloads/recsys/torchrec.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from planner.workloads.recsys.torchrec import PARAMETER_SHARDING_FIELDS, SHARD_METADATA_FIELDS

runner = CliRunner()
PLAN = ["recsys", "plan", "--model", "dlrm-small", "--hardware", "h100-sxm", "--gpus", "4", "--batch", "8192"]
SHARDING_TYPES = {"data_parallel", "table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise"}
KERNELS = {"dense", "fused", "fused_uvm", "fused_uvm_caching", "quant", "quant_uvm", "quant_uvm_caching"}


def _tables_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({
        "name": "mixed", "dense_features": 4, "bottom_mlp": [64, 256], "top_mlp": [64, 1],
        "tables": [{"name": "big", "rows": 30_000_000, "dim": 256, "pooling": 8},
                   {"name": "tiny", "rows": 50, "dim": 256},
                   {"name": "mid", "rows": 2_000_000, "dim": 256, "pooling": 2, "skew": 1.1}]}))
    return path


def test_plan_writes_file_and_torchrec_module(tmp_path: Path) -> None:
    out, emitted = tmp_path / "plan.yaml", tmp_path / "plan_torchrec.py"
    res = runner.invoke(app, [*PLAN, "--out", str(out), "--emit", "torchrec", "--emit-out", str(emitted)])
    assert res.exit_code == 0, res.output
    assert "M samples/s" in res.output and "table_wise" in res.output
    doc = yaml.safe_load(out.read_text())
    assert doc["workload"] == "recsys" and len(doc["tables"]) == 8
    tree = ast.parse(emitted.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    for call in calls:
        names = {k.arg for k in call.keywords}
        if call.func.id == "ParameterSharding":
            assert names == set(PARAMETER_SHARDING_FIELDS)
        if call.func.id == "ShardMetadata":
            assert names == set(SHARD_METADATA_FIELDS)
    assert sum(isinstance(c.func, ast.Name) and c.func.id == "ParameterSharding" for c in calls) == 8


def test_torchrec_structure_covers_every_table_and_rank(tmp_path: Path) -> None:
    res = runner.invoke(app, ["recsys", "plan", "--model", str(_tables_yaml(tmp_path)), "--hardware", "h100-sxm",
                              "--gpus", "4", "--batch", "4096", "--memory-gib", "12", "--host-gib", "40",
                              "--min-column-dim", "64",
                              "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (path, tables), = doc["torchrec"].items()
    assert set(tables) == {"big", "tiny", "mid"}
    for name, ps in tables.items():
        assert set(ps) == set(PARAMETER_SHARDING_FIELDS)
        assert ps["sharding_type"] in SHARDING_TYPES and ps["compute_kernel"] in KERNELS
        if ps["sharding_type"] == "data_parallel":
            assert ps["sharding_spec"] is None and ps["ranks"] == [0, 1, 2, 3]
            continue
        shards = ps["sharding_spec"]
        assert [int(m["placement"].split("/")[0].removeprefix("rank:")) for m in shards] == ps["ranks"]
        rows = {"big": 30_000_000, "tiny": 50, "mid": 2_000_000}[name]
        area = sum(m["shard_sizes"][0] * m["shard_sizes"][1] for m in shards)
        assert area == rows * 256  # the shards tile the table
    assert max(doc["prediction"]["hbm_gib_per_rank"]) <= doc["prediction"]["hbm_capacity_gib"]


def test_emitted_module_builds_with_torchrec(tmp_path: Path) -> None:
    """TorchRec's own ShardingPlan built from the emitted module (torchrec 1.8.0 with fbgemm-gpu-cpu 1.8.0: the
    [recsys] extra and .ci/run), field for field the plan file's."""
    try:
        from torchrec.distributed.types import ParameterSharding, ShardMetadata
    except Exception as exc:  # fbgemm_gpu raises OSError when its libraries do not match torch
        pytest.skip(f"torchrec does not import here: {type(exc).__name__}")
    import dataclasses
    out, emitted = tmp_path / "plan.yaml", tmp_path / "p.py"
    res = runner.invoke(app, [*PLAN, "--out", str(out), "--emit", "torchrec", "--emit-out", str(emitted)])
    assert res.exit_code == 0, res.output
    assert set(PARAMETER_SHARDING_FIELDS) <= {f.name for f in dataclasses.fields(ParameterSharding)}
    assert set(SHARD_METADATA_FIELDS) <= {f.name for f in dataclasses.fields(ShardMetadata)}
    scope: dict[str, object] = {}
    exec(compile(emitted.read_text(), str(emitted), "exec"), scope)
    (path, tables), = yaml.safe_load(out.read_text())["torchrec"].items()
    built = scope["plan"].plan[path]  # type: ignore[attr-defined]
    assert set(built) == set(tables) and len(built) == 8
    for name, ps in built.items():
        want = tables[name]
        assert (ps.sharding_type, ps.compute_kernel, ps.ranks) == (
            want["sharding_type"], want["compute_kernel"], want["ranks"])
        shards = [] if ps.sharding_spec is None else ps.sharding_spec.shards
        assert [{"shard_offsets": m.shard_offsets, "shard_sizes": m.shard_sizes, "placement": str(m.placement)}
                for m in shards] == (want["sharding_spec"] or [])


@pytest.mark.parametrize(("args", "message", "code"), [
    (["--model", "nope"], "unknown recommendation model", 2),
    (["--shardings", "diagonal"], "--shardings takes", 2),
    (["--batch", "8191"], "divide evenly", 2),
    (["--emit", "megatron"], "--emit must be torchrec", 2),
    (["--memory-gib", "3"], "do not fit", 3),
])
def test_errors_one_line(args: list[str], message: str, code: int) -> None:
    base = dict(zip(PLAN[2::2], PLAN[3::2], strict=True))
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    res = runner.invoke(app, ["recsys", "plan", *[x for kv in base.items() for x in kv]])
    assert res.exit_code == code, res.output
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
