"""Recommendation models: the sharding ILP equals brute force on small seeded cases, the plan fits memory, the
loaders refuse bad tables, and the TorchRec plan has TorchRec's field names."""

from __future__ import annotations

import random

import pytest

from hardware_profiles import HardwareOverrides, load_hardware
from meshcore.errors import InfeasibleError, InputError, SpecError
from planner.workloads.recsys.cost import evaluate_sharding, zipf_share
from planner.workloads.recsys.inputs import load_recsys_model, recsys_from_mapping, recsys_preset_names
from planner.workloads.recsys.search import brute_force, plan_sharding
from planner.workloads.recsys.spec import EmbeddingTable, RecJob, RecModel, RecRuntime, ShardingKind, Storage


def _model(rng: random.Random, tables: int) -> RecModel:
    dim = 64
    return RecModel(
        name="rand", dense_features=13, bottom_mlp=(128, dim), top_mlp=(128, 1),
        tables=tuple(EmbeddingTable(f"t{i}", rng.choice([10, 10**4, 10**6, 4 * 10**6, 2 * 10**7]), dim,
                                    pooling=rng.choice([1.0, 4.0, 20.0]), skew=rng.choice([0.0, 1.1]))
                     for i in range(tables)))


@pytest.mark.parametrize("seed,runtime", [(s, RecRuntime.TORCHREC) for s in range(6)]
                         + [(s, RecRuntime.DLE) for s in range(6, 9)])
def test_ilp_equals_brute_force(seed: int, runtime: RecRuntime) -> None:
    rng = random.Random(seed)
    gpus = rng.choice([2, 3])
    model = _model(rng, rng.choice([2, 3]))
    memory = rng.choice([2.4, 3.0, 80.0])  # GiB: tight enough that placement matters
    host = rng.choice([0.0, 4.0]) if runtime is RecRuntime.TORCHREC else 0.0  # DLE keeps tables in HBM
    job = RecJob(batch=gpus * rng.choice([1024, 8192]), gpus=gpus, host_gib=host, runtime=runtime)
    cluster = load_hardware("h100-sxm", gpus, HardwareOverrides(memory_gib=memory))
    best = brute_force(model, job, cluster, min_column_dim=32)
    if best is None:
        with pytest.raises(InfeasibleError):
            plan_sharding(model, job, cluster, min_column_dim=32)
        return
    plan = plan_sharding(model, job, cluster, min_column_dim=32)
    expected = evaluate_sharding(model, job, cluster, best).step_s
    assert plan.optimal
    assert plan.evaluation.step_s == pytest.approx(expected, rel=1e-6)
    assert plan.evaluation.fits


def test_preset_plan_fits_and_uses_every_gpu() -> None:
    model = load_recsys_model("dlrm-criteo-1tb")
    job = RecJob(batch=65536, gpus=8)
    plan = plan_sharding(model, job, load_hardware("a100-80gb", 8))
    ev = plan.evaluation
    assert ev.fits and max(ev.hbm_bytes) <= ev.hbm_capacity
    assert {t.name for t in model.tables} == {s.table for s in plan.shardings}
    placed = {r for s in plan.shardings if s.kind is ShardingKind.TABLE_WISE for r in s.ranks}
    assert placed == set(range(8))


def test_does_not_fit_names_memory() -> None:
    model = load_recsys_model("dlrm-criteo-1tb")
    with pytest.raises(InfeasibleError, match="do not fit.*GiB"):
        plan_sharding(model, RecJob(batch=8192, gpus=1), load_hardware("a100-80gb", 1))


def test_host_memory_lets_it_fit_and_skew_helps() -> None:
    model = load_recsys_model("dlrm-criteo-1tb")
    job = RecJob(batch=8192, gpus=1, host_gib=512.0)
    plan = plan_sharding(model, job, load_hardware("a100-80gb", 1))
    assert plan.evaluation.fits
    assert any(s.storage is Storage.HOST for s in plan.shardings)
    assert zipf_share(0.2, 10**6, 0.0) == pytest.approx(0.2, rel=1e-3)
    assert zipf_share(0.2, 10**6, 1.1) > 0.8


def test_column_wise_shards_cover_the_table() -> None:
    table = EmbeddingTable("t", 1000, 256)
    from planner.workloads.recsys.spec import TableSharding

    s = TableSharding("t", ShardingKind.COLUMN_WISE, Storage.HBM, (3, 1), 2)
    assert [(x.rank, x.col_offset, x.cols) for x in s.shards(table)] == [(3, 0, 128), (1, 128, 128)]
    rw = TableSharding("t", ShardingKind.ROW_WISE, Storage.HBM, (0, 1, 2), 1)
    assert sum(x.rows for x in rw.shards(table)) == 1000


def test_presets_load() -> None:
    for name in recsys_preset_names():
        assert load_recsys_model(name).tables


def test_bad_tables_are_refused() -> None:
    base = {"dense_features": 13, "bottom_mlp": [64], "top_mlp": [1],
            "tables": [{"name": "a", "rows": 10, "dim": 64}]}
    recsys_from_mapping(base, "ok.yaml")
    with pytest.raises(InputError, match="unknown keys.*allowed"):
        recsys_from_mapping({**base, "layers": 3}, "x.yaml")
    with pytest.raises(InputError, match="rows"):
        recsys_from_mapping({**base, "tables": [{"name": "a", "rows": -1, "dim": 64}]}, "x.yaml")
    with pytest.raises(InputError, match="dim"):
        recsys_from_mapping({**base, "tables": [{"name": "a", "rows": 10, "dim": 32}]}, "x.yaml")
    with pytest.raises(InputError, match="optimizer must be one of"):
        recsys_from_mapping({**base, "optimizer": "lamb"}, "x.yaml")
    with pytest.raises(SpecError, match="divide evenly"):
        RecJob(batch=10, gpus=3)
