"""The search: exact against exhaustive pricing, solvers agree, published layouts are matched or beaten,
plan invariants hold, and a job that fits nowhere says why."""

from __future__ import annotations

import pytest
from tiny_models import TINY_DEEPSEEK

from cost_models.prediction import StageLayers
from cost_models.step import layout_costs, stage_body, stage_weights
from hardware_profiles import load_hardware
from meshcore import JobSpec, Runtime
from meshcore.framework import Framework
from planner import InfeasibleError, plan, resolve
from planner.api import Problem
from planner.inputs.runtimes import load_runtime
from planner.search.bounds import SearchBounds
from planner.search.exact import search
from planner.search.ilp import SolveOptions, Solver
from planner.search.pricing import Shared, body_key, price, reported, weights_key
from planner.search.runtime_space import for_runtime
from planner.search.space import Candidate, SearchSpec, candidates, module_family, next_module_set

SMALL = [("llama3-8b", "h100-sxm", 8, 4096, 32), ("llama2-13b", "a100-40gb", 16, 4096, 64),
         ("mistral-7b", "l40s", 8, 4096, 16)]


@pytest.mark.parametrize("case", SMALL)
def test_search_equals_exhaustive_pricing(case: tuple) -> None:
    """Best-first pruning loses nothing: the same best as pricing every candidate."""
    model, hw, gpus, seq, batch = case
    _check_against_exhaustive(resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch), SearchSpec(top_k=1))


def _every_candidate(pr: Problem, spec: SearchSpec) -> list:
    """The generated candidates and every recompute-module variant the search may add to them."""
    family, out = module_family(pr.model, pr.job, spec), []
    for c in candidates(pr.model, pr.cluster, pr.job, spec):
        while c is not None:
            out.append(c)
            c = next_module_set(c, family, pr.job)
    return out


def _check_against_exhaustive(pr: Problem, spec: SearchSpec) -> list:
    """Price every candidate of the job's runtime as a plan reports it (the simulated step where the pipeline is
    simulated, else the closed form); the pruned search must find the same best. Returns the priced candidates."""
    spec = for_runtime(spec, load_runtime(pr.job.runtime.framework))  # what search() narrows to, too
    times = SearchBounds(pr.model, pr.cluster, pr.job)
    priced = [price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP, SolveOptions(), times.get(c))
              for c in _every_candidate(pr, spec)]
    reports = [reported(pr.model, pr.cluster, pr.job, p) for p in priced]
    best = min(r.step_time_s for r in reports if r is not None)
    result = search(pr.model, pr.cluster, pr.job, spec)
    assert result.best.step_time_s == pytest.approx(best, rel=1e-12)
    assert result.certificate.optimal and result.certificate.pruned_time > 0
    return priced


@pytest.mark.parametrize("solver", [Solver.CPSAT, Solver.HIGHS])
def test_ilp_solvers_find_the_dp_plan(solver: Solver) -> None:
    kw = dict(gpus=16, seq_len=4096, global_batch=64)
    dp = plan("llama2-13b", "a100-40gb", **kw)
    ilp = plan("llama2-13b", "a100-40gb", solver=solver, **kw)
    assert ilp.best.prediction.step_time_s == pytest.approx(dp.best.prediction.step_time_s, rel=1e-6)
    assert ilp.certificate is not None and ilp.certificate.solver is solver and ilp.certificate.optimal


def test_plan_invariants() -> None:
    p = plan("llama3-70b", "h100-sxm", gpus=128, seq_len=8192, global_batch=256, spec=SearchSpec(top_k=8))
    for ranked in (p.best, *p.alternatives):
        lay, pred = ranked.layout, ranked.prediction
        assert lay.tp * lay.pp * lay.dp * lay.cp == 128
        chunks = lay.chunk_layers(80)
        assert sum(chunks) == 80 and len(chunks) == lay.pp * lay.vpp
        assert all(s.peak_memory_gib <= 80 for s in pred.stages)
    times = [r.step_time_s for r in (p.best, *p.alternatives)]
    assert times == sorted(times)


def test_finalists_are_priced_by_the_simulator() -> None:
    """The top-k come back with a simulated step time; the closed form matches it within the pipeline send
    latency it charges and the stage imbalance it approximates."""
    p = plan("llama3-70b", "h100-sxm", gpus=64, seq_len=4096, global_batch=64,
             spec=SearchSpec(pp=4, vpp=1, top_k=3))
    for ranked in (p.best, *p.alternatives):
        assert ranked.simulated_step_time_s is not None
        assert ranked.simulated_step_time_s == pytest.approx(ranked.prediction.step_time_s, rel=0.05)


def test_uneven_split_relieves_the_ends() -> None:
    """Llama-3-405B: 126 layers, a 128K-vocabulary head. With pp pinned to 16 the chosen split gives the
    first and last stages (embedding, LM head and loss) fewer layers than the busiest ones."""
    p = plan("llama3-405b", "h100-sxm", gpus=1024, seq_len=8192, global_batch=512,
             spec=SearchSpec(pp=16, vpp=1, top_k=1))
    layers = p.best.layout.chunk_layers(126)
    assert sum(layers) == 126 and len(layers) == 16
    assert layers[0] < max(layers) and layers[-1] < max(layers)


def test_fits_nowhere_names_the_resource() -> None:
    with pytest.raises(InfeasibleError, match=r"no layout fits in 23.6 GiB per GPU.*weights, gradients and "
                                              r"optimizer state.*use about \d+ GPUs"):
        plan("llama3-405b", "rtx4090", gpus=8, seq_len=8192, global_batch=64)


def test_gathered_states_message() -> None:
    """DeepSpeed's ZeRO-3 gathers Maverick's 128 experts as one module (no expert parallelism): 80 GiB held whole
    beside the states, which more GPUs do not shrink, so the message says so instead of asking for more GPUs."""
    with pytest.raises(InfeasibleError, match=r"needs 108.2 GiB .* 80.0 GiB of it the weights and gradients its "
                                              r"sharding gathers whole, which more GPUs do not shrink"):
        plan("llama4-maverick", "h100-sxm", gpus=256, seq_len=8192, global_batch=512,
             runtime=Runtime(framework=Framework.DEEPSPEED))


def test_activation_bound_message() -> None:
    """States fit with TP 8 (16.8 GiB of 23.6) but 256K-token activations and logits do not."""
    with pytest.raises(InfeasibleError, match="activations do not; use a shorter sequence than 262144"):
        plan("llama3-8b", "rtx4090", gpus=8, seq_len=262144, global_batch=8, spec=SearchSpec(no_cp=True))


def test_search_is_never_worse_than_a_published_layout_in_the_model() -> None:
    """For each distinct published A100 layout: the planner's best is predicted at least as fast as that
    layout (same model, cluster, batch and framework), and pinned to it the search returns it. Both sides are
    priced by the same model, so this shows the search is complete, not that its plans are good: the held-out
    accuracy of benchmarks/calibration.py and tests/test_ordering.py measure that."""
    from published import a100_observations

    seen = set()
    for obs in a100_observations():
        lay = obs.layout
        key = (obs.model.name, obs.cluster.num_gpus, obs.job.global_batch, lay.tp, lay.pp, lay.recompute, lay.sp)
        if key in seen:
            continue
        seen.add(key)
        published = obs.predict()
        best = search(obs.model, obs.cluster, obs.job, SearchSpec(top_k=1)).best
        assert best.prediction.step_time_s <= published.step_time_s * (1 + 1e-9), obs.run_id
        pinned = SearchSpec(tp=lay.tp, pp=lay.pp, cp=1, vpp=lay.vpp, mbs=lay.mbs, zero=int(lay.zero),
                            recompute=lay.recompute, sp=lay.sp, partial_recompute=False, top_k=1)
        got = search(obs.model, obs.cluster, obs.job, pinned).best
        g = got.layout
        assert (g.tp, g.pp, g.vpp, g.mbs, g.zero, g.recompute, g.sp) == (
            lay.tp, lay.pp, lay.vpp, lay.mbs, lay.zero, lay.recompute, lay.sp)
        assert got.prediction.step_time_s <= published.step_time_s * (1 + 1e-9), obs.run_id


def test_job_spec_runtime_changes_the_answer() -> None:
    """Unfused attention makes selective recomputation a real choice (it is pruned with fused attention)."""
    from meshcore import AttentionKernel, Runtime

    cluster = load_hardware("a100-80gb", 64)
    pr = resolve("gpt3-175b", cluster, gpus=64, seq_len=2048, global_batch=64,
                 runtime=Runtime(attention=AttentionKernel.UNFUSED))
    kinds = {c.recompute.value for c in candidates(pr.model, pr.cluster, pr.job, SearchSpec())}
    assert kinds == {"none", "selective", "full"}
    pr_flash = resolve("gpt3-175b", cluster, gpus=64, seq_len=2048, global_batch=64)
    assert {c.recompute.value for c in candidates(pr_flash.model, pr_flash.cluster, pr_flash.job,
                                                  SearchSpec())} == {"none", "full"}
    assert isinstance(pr.job, JobSpec)




# Mixtral on 40 GB A100s: a module-set variant's tight bound is below its cheaper sibling's, which the search must
# still price first (it once dropped the variant with the sibling)
@pytest.mark.parametrize("case", [(TINY_DEEPSEEK, "a100-40gb", 16, 4096, 64, 4), ("qwen3-30b-a3b", "h100-sxm", 16,
                                                                                    4096, 32, 2),
                                  ("mixtral-8x7b", "a100-40gb", 32, 4096, 64, 4)])
def test_moe_search_equals_exhaustive_pricing(case: tuple) -> None:
    """With expert degrees in the space and dense/MoE stacks split by the segment DP, best-first pruning still
    loses nothing."""
    from planner.inputs.loaders import model_from_mapping

    model, hw, gpus, seq, batch, pp = case
    spec_model = model_from_mapping(model, "test") if isinstance(model, dict) else model
    priced = _check_against_exhaustive(resolve(spec_model, hw, gpus=gpus, seq_len=seq, global_batch=batch),
                                       SearchSpec(pp=pp, top_k=1))
    assert any(p.ranked is not None and p.ranked.layout.ep > 1 for p in priced)


def test_layouts_with_the_same_durations_share_one_simulation() -> None:
    """The search's makespans by what the simulator reads (`simulated_step_time`'s memo): Llama-3 8B's best research
    layout on 8 H100 (pipelined, simulated, ZeRO 1) sharded over all four data-parallel ranks and over two of them
    (HSDP: the same stage times, another tail) runs the simulator once, and each step equals the one simulated on its
    own."""
    from dataclasses import replace

    from cost_models.step import evaluate_layout
    from meshcore import Runtime
    from planner.search.simulate import simulated_step_time

    found = plan("llama3-8b", "h100-sxm", gpus=8, seq_len=8192, global_batch=128, runtime=Runtime(framework="any"))
    pr = resolve("llama3-8b", "h100-sxm", gpus=8, seq_len=8192, global_batch=128, runtime=Runtime(framework="any"))
    assert found.best.layout.pp > 1
    memo: dict[tuple[object, ...], float] = {}
    steps = []
    assert found.best.layout.dp == 4 and found.best.layout.dp_replicate == 1
    for replicas in (1, 2):
        layout = replace(found.best.layout, dp_replicate=replicas)
        prediction = evaluate_layout(pr.model, pr.cluster, pr.job, layout)
        alone = simulated_step_time(pr.model, pr.cluster, pr.job, layout, prediction)
        shared = simulated_step_time(pr.model, pr.cluster, pr.job, layout, prediction, memo=memo)
        assert alone is not None and shared == alone
        steps.append(shared)
    assert len(memo) == 1 and steps[0] != steps[1]


@pytest.mark.parametrize("model", ["llama4-maverick", "mixtral-8x7b", "llama3-8b"])
@pytest.mark.parametrize("weights", [False, True])
def test_candidates_of_one_key_have_the_same_stage_bodies(model: str, weights: bool) -> None:
    """`pricing.body_key` is all that stage bodies read of a candidate, `weights_key` all that stage weights read:
    candidates of one key price every stage body (weights), at every rank place and for stacks of each kind,
    recomputed or not, exactly as their own layout does (the research space of a small job, six or so candidates
    spread over each of 80 keys spread over it)."""
    pr = resolve(model, "h100-sxm", gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework=Framework.ANY))
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    bounds = SearchBounds(pr.model, pr.cluster, pr.job)
    kinds = set(pr.model.moe_layers())
    stacks = [StageLayers(dense=3 * (not moe), dense_full=not moe, moe=2 * moe, moe_full=moe) for moe in kinds]
    stacks += [StageLayers(dense=1 * (not moe), moe=1 * moe) for moe in kinds] + [StageLayers()]
    key, stage = (weights_key, stage_weights) if weights else (body_key, stage_body)
    groups: dict[object, list[Candidate]] = {}
    for c in _every_candidate(pr, spec):
        groups.setdefault(key(c), []).append(c)
    alike = [members for members in groups.values() if len(members) > 1]
    assert len(alike) > 80
    for members in alike[::len(alike) // 80]:
        seen = []
        for c in members[::max(1, len(members) // 6)]:
            costs = layout_costs(pr.model, pr.cluster, pr.job, c.layout(), bounds.get(c), bounds.activations(c))
            seen.append([stage(costs, first, last, layers)
                         for first in (False, True) for last in (False, True) for layers in stacks])
        assert all(other == seen[0] for other in seen[1:])


@pytest.mark.parametrize("model", ["llama4-maverick", "mixtral-8x7b"])
def test_pricing_with_what_candidates_share_prices_alike(model: str) -> None:
    """Pricing candidates one after the other with one `Shared` (stage bodies by key, the DP's splits by problem)
    gives each the `Priced` it gets alone: every schedule of 40 keys spread over a small job's research space."""
    pr = resolve(model, "h100-sxm", gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework=Framework.ANY))
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    bounds = SearchBounds(pr.model, pr.cluster, pr.job)
    groups: dict[object, dict[object, Candidate]] = {}
    for c in _every_candidate(pr, spec):
        groups.setdefault(body_key(c), {}).setdefault((c.schedule, c.vpp), c)
    alike = [members for members in groups.values() if len(members) > 2]
    shared = Shared()
    for members in alike[::len(alike) // 40]:
        for c in members.values():
            alone = price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP, SolveOptions(), bounds.get(c),
                          bounds.activations(c))
            assert price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP, SolveOptions(), bounds.get(c),
                         bounds.activations(c), shared) == alone
    assert len(shared.bodies) >= 40 and shared.weights and shared.splits
