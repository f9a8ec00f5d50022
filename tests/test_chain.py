"""Planning an arbitrary chain of profiled layers: the split DP against brute force, and a CNN-like table."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from hardware_profiles import load_hardware
from planner.search.chain import best_split, plan_chain, read_chain

runner = CliRunner()


@pytest.mark.parametrize("seed", range(40))
def test_split_dp_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n, stages, m = rng.randint(1, 8), rng.randint(1, 4), rng.randint(1, 10)
    if stages > n:
        stages = n
    t = [rng.uniform(0.1, 2.0) for _ in range(n)]
    pre = np.concatenate([[0.0], np.cumsum(t)])
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    extra = [rng.uniform(0, 0.5) for _ in range(stages)]
    cost = np.stack([np.where(j > i, pre[j] - pre[i] + extra[s], np.inf) for s in range(stages)])
    fits = np.stack([(j - i) <= rng.randint(1, n) for _ in range(stages)])
    got = best_split(cost, fits, m)
    best = None
    for cuts in itertools.combinations(range(1, n), stages - 1):
        b = (0, *cuts, n)
        if not all(fits[s, b[s], b[s + 1]] for s in range(stages)):
            continue
        times = [cost[s, b[s], b[s + 1]] for s in range(stages)]
        value = (m - 1) * max(times) + sum(times)
        best = value if best is None else min(best, value)
    assert (got is None) == (best is None)
    if got is not None:
        assert got[1] == pytest.approx(best, rel=1e-9)


def _cnn_table(path: Path) -> Path:
    """A ResNet-like chain: a stem, heavy early blocks with big activations, light late blocks, a head."""
    rows = ["kind,count,tp,mbs,seq_len,forward_ms,backward_ms,activation_bytes,params,output_bytes"]
    for mbs in (8, 16):
        k = mbs / 8
        rows += [f"stem,1,1,{mbs},1,{2 * k},{4 * k},{4e8 * k},9408,{2e8 * k}",
                 f"early,6,1,{mbs},1,{6 * k},{12 * k},{6e8 * k},2.2e5,{2e8 * k}",
                 f"late,10,1,{mbs},1,{3 * k},{6 * k},{1e8 * k},4.7e6,{5e7 * k}",
                 f"head,1,1,{mbs},1,{0.5 * k},{1 * k},{1e6 * k},2e6,{4e4 * k}"]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_cnn_chain_is_split_by_time(tmp_path: Path) -> None:
    table = read_chain(str(_cnn_table(tmp_path / "cnn.csv")))
    assert table.num_layers == 18 and table.kinds[0] == "stem" and table.kinds[-1] == "head"
    plans = plan_chain(table, load_hardware("a100-40gb", 8), global_batch=256)
    best = plans[0]
    assert best.tp * best.pp * best.dp == 8 and sum(best.stage_layers) == 18
    assert all(mem <= 40 for mem in best.stage_memory_gib)
    assert [p.step_time_s for p in plans] == sorted(p.step_time_s for p in plans)
    piped = plan_chain(table, load_hardware("a100-40gb", 8), global_batch=256, top_k=50)
    two = next(p for p in piped if p.pp == 2)
    # the early blocks cost twice the late ones: the first stage takes fewer layers
    assert two.stage_layers[0] < two.stage_layers[1]


def test_cli_plans_a_chain_table(tmp_path: Path) -> None:
    path = _cnn_table(tmp_path / "cnn.csv")
    res = runner.invoke(app, ["plan", "--costs", str(path), "--hardware", "a100-40gb", "--gpus", "8", "--seq-len", "1",
                              "--global-batch", "256"])
    assert res.exit_code == 0, res.output
    assert "18-layer chain" in res.output and "samples/s" in res.output


@pytest.mark.parametrize("text", ["kind,count\nconv,3\n",
                                  "kind,count,tp,mbs,seq_len,forward_ms,backward_ms,activation_bytes,params,output_bytes\n"
                                  "conv,x,1,1,1,1,1,1,1,1\n",
                                  "kind,count,tp,mbs,seq_len,forward_ms,backward_ms,activation_bytes,params,output_bytes\n"
                                  "conv,1,0,1,1,1,1,1,1,1\n", "", "not a table"])
def test_broken_chain_tables_fail_cleanly(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    res = runner.invoke(app, ["plan", "--costs", str(path), "--hardware", "a100-40gb", "--gpus", "8", "--seq-len", "1",
                              "--global-batch", "64"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "error:" in res.output
