"""Per-layer strategies on a chain (planner.search.layerwise, layerwise_dp): the exact search against brute force,
per-layer plans against every uniform plan, the uniform special case, the CLI and plan file."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore import GIB
from planner.search.chain import LayerChoice, plan_chain, read_chain
from planner.search.layerwise import price, setting
from planner.search.layerwise_bounds import step_floor
from planner.search.layerwise_dp import best_plan, plan_layerwise

runner = CliRunner()
HEADER = "kind,count,tp,mbs,seq_len,forward_ms,backward_ms,activation_bytes,params,output_bytes"


def mixed_table(path: Path, early: int = 3, late: int = 3) -> Path:
    """A CNN-like mixed stack: early `conv` layers with huge activations and few parameters (TP halves little of
    their time), late `fc` layers with huge parameters and small activations (TP halves their time)."""
    rows = [HEADER]
    for tp in (1, 2):
        for mbs in (2, 4, 8):
            k, slow = mbs / 4, (1.0 if tp == 1 else 0.65)
            rows += [f"conv,{early},{tp},{mbs},1,{4 * k * slow},{8 * k * slow},{3e9 * k / tp},{2e5 / tp},{4e8 * k}",
                     f"fc,{late},{tp},{mbs},1,{k / tp},{2 * k / tp},{2e7 * k / tp},{4e8 / tp},{1e6 * k}"]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_per_layer_beats_every_uniform_plan(tmp_path: Path) -> None:
    table = read_chain(str(mixed_table(tmp_path / "mixed.csv")))
    hw = load_hardware("a100-40gb", 8)
    uniform = plan_chain(table, hw, 64, top_k=1000)
    best = plan_layerwise(table, hw, 64)[0]
    assert best.step_time_s < min(p.step_time_s for p in uniform) * 0.95
    # early layers data-parallel (tp 1 in a group of 2), the last fc layers tensor-parallel
    assert best.tp == 2 and best.layers[0].tp == 1 and best.layers[-1].tp == 2
    assert {c.tp * c.dp for c in best.layers} == {best.tp * best.dp}
    assert all(m <= 40 for m in best.stage_memory_gib)


def test_uniform_choices_price_as_the_uniform_planner(tmp_path: Path) -> None:
    table = read_chain(str(mixed_table(tmp_path / "mixed.csv", 4, 4)))
    hw = load_hardware("a100-40gb", 8)
    for p in plan_chain(table, hw, 64, top_k=1000):
        st = setting(table, hw, p.tp, p.pp, p.dp, p.mbs, 64)
        assert st is not None
        bounds = list(itertools.accumulate(p.stage_layers, initial=0))
        priced = price(st, hw, bounds, [LayerChoice(p.tp, p.dp, False)] * table.num_layers)
        assert priced.step_time_s == pytest.approx(p.step_time_s, rel=1e-9)
        assert [x / GIB for x in priced.stage_memory_bytes] == pytest.approx(list(p.stage_memory_gib), rel=1e-9)


def _random_table(path: Path, rng: random.Random, n: int) -> Path:
    rows = [HEADER]
    for layer in range(n):
        act, par, out = rng.uniform(0.5, 6) * 1e8, rng.choice([0, rng.uniform(0.1, 3) * 1e7]), rng.uniform(1, 5) * 1e7
        speed = rng.uniform(0.4, 1.0)  # how much of the work TP 2 halves
        for tp, mbs in ((1, 1), (1, 2), (2, 2), (2, 4)):
            k, f = mbs / 2, (1.0 if tp == 1 else speed)
            rows.append(f"l{layer},1,{tp},{mbs},1,{rng.uniform(0.5, 2) * k * f},{2 * k * f},{act * k / tp},"
                        f"{par / tp},{out * k}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _brute_force(st: object, hw: object, n: int, cap: float) -> float | None:
    best = None
    for cuts in itertools.combinations(range(1, n), st.pp - 1):  # type: ignore[attr-defined]
        bounds = [0, *cuts, n]
        for combo in itertools.product(*[[(o.tp, r) for o in opts for r in (False, True)]
                                         for opts in st.options]):  # type: ignore[attr-defined]
            choices = [LayerChoice(t, st.dp * st.group // t, r) for t, r in combo]  # type: ignore[attr-defined]
            priced = price(st, hw, bounds, choices)  # type: ignore[arg-type]
            if max(priced.stage_memory_bytes) <= cap and (best is None or priced.step_time_s < best):
                best = priced.step_time_s
    return best


@pytest.mark.parametrize("seed", range(20))
def test_exact_search_equals_brute_force(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(4, 6)
    table = read_chain(str(_random_table(tmp_path / "t.csv", rng, n)))
    memory = rng.uniform(2.3, 4.0)  # GiB: 2 are the buffer allowance, the rest makes recomputation bind
    hw = load_hardware("a100-40gb", 4, HardwareOverrides(memory_gib=memory))
    cap = memory * GIB
    pp = rng.choice([1, 2])
    st = setting(table, hw, 2, pp, 4 // (2 * pp), 2, 16)
    assert st is not None
    got = best_plan(st, hw, cap)
    want = _brute_force(st, hw, n, cap)
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert got[2].step_time_s == pytest.approx(want, rel=1e-9)
        assert max(got[2].stage_memory_bytes) <= cap


def test_recomputation_is_chosen_when_memory_binds(tmp_path: Path) -> None:
    table = read_chain(str(mixed_table(tmp_path / "mixed.csv")))
    hw = load_hardware("a100-40gb", 8, HardwareOverrides(memory_gib=8))
    best = plan_layerwise(table, hw, 64)[0]
    assert any(c.recompute for c in best.layers) and max(best.stage_memory_gib) <= 8


def test_cli_per_layer_plan_file(tmp_path: Path) -> None:
    path, out = mixed_table(tmp_path / "mixed.csv"), tmp_path / "plan.yaml"
    args = ["plan", "--costs", str(path), "--hardware", "a100-40gb", "--gpus", "8", "--seq-len", "1",
            "--global-batch", "64", "--per-layer"]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "per layer" in res.output and "no launcher runs per-layer strategies" in res.output
    doc = yaml.safe_load(out.read_text())
    first = doc["plans"][0]
    assert len(first["per_layer"]) == 6 and first["per_layer"][0] == {"layer": 0, "kind": "conv", "tp": 1, "dp": 8,
                                                                      "recompute": False}
    assert "no launcher" in doc["launchers"]
    res = runner.invoke(app, [*args, "--emit", "megatron"])
    assert res.exit_code == 2 and "no launcher runs per-layer strategies" in res.output
    plain = runner.invoke(app, args[:-1] + ["--json"])
    assert plain.exit_code == 0 and "\"per_layer\"" not in plain.output and "\"launchers\"" not in plain.output


def test_vgg16_formula_chain_plans_layer_wise() -> None:
    """VGG-16 from a formula (benchmarks/vgg_chain_table.py, not a measurement): convolutions data-parallel, the
    fully connected layers tensor-parallel (Krizhevsky 2014's "one weird trick"), faster than any uniform plan."""
    table = read_chain(str(Path(__file__).parent.parent / "benchmarks/data/chains/vgg16-a100-formula.csv"))
    hw = load_hardware("a100-40gb", 8)
    st = setting(table, hw, 4, 1, 2, 64, 256)
    assert st is not None
    found = best_plan(st, hw, 40 * GIB)
    assert found is not None
    choices = found[1]
    assert all(c.tp == 1 for c in choices[:13]) and all(c.tp > 1 for c in choices[13:])
    assert found[2].step_time_s < min(p.step_time_s for p in plan_chain(table, hw, 256, top_k=1000))


@pytest.mark.parametrize("seed", range(6))
def test_pruned_search_keeps_the_top_k(tmp_path: Path, seed: int) -> None:
    """Candidates skipped or cut against the k-th best step (planner.search.layerwise_bounds) leave the top k as
    the search without a limit finds them (top_k 1000 never has a k-th best to prune against here)."""
    rng = random.Random(seed)
    table = read_chain(str(_random_table(tmp_path / "t.csv", rng, rng.randint(6, 9))))
    hw = load_hardware("a100-40gb", 8, HardwareOverrides(memory_gib=rng.uniform(2.6, 4.0)))
    everything = plan_layerwise(table, hw, 64, top_k=1000)
    for k in (1, 3):
        assert plan_layerwise(table, hw, 64, top_k=k) == everything[:k]


@pytest.mark.parametrize("seed", range(6))
def test_step_floor_bounds_every_candidate(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    table = read_chain(str(_random_table(tmp_path / "t.csv", rng, rng.randint(4, 8))))
    memory = rng.uniform(2.6, 4.0)
    hw = load_hardware("a100-40gb", 8, HardwareOverrides(memory_gib=memory))
    bounded = 0
    for group, pp in ((1, 1), (2, 1), (2, 2), (2, 4), (1, 8)):
        st = setting(table, hw, group, pp, 8 // (group * pp), 2, 64)
        found = best_plan(st, hw, memory * GIB) if st is not None else None
        if st is not None and found is not None:
            assert step_floor(st).candidate <= found[2].step_time_s
            bounded += 1
    assert bounded
