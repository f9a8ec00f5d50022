"""The pipeline fills a candidate's key takes before its split is known (planner.search.pipeline_fills: `path_fill`,
`ordered_fills`, `ReportedBounds.sim_fill`): below every split of random stage times, below the simulator on random
ZB-H1 and ZB-H2 pipelines, and, on random small jobs, every candidate's family floor below its group's floor, that
below its key, and the key below the step a plan reports for it wherever it fits (exhaustive pricing the oracle)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from test_sim_bounds import small_jobs

from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Durations, makespan
from meshcore import Runtime, Schedule
from planner.api import resolve
from planner.inputs.runtimes import load_runtime
from planner.search.ilp import SolveOptions, Solver
from planner.search.pipeline_fills import minimax_fill, ordered_fills, path_fill
from planner.search.pricing import price, reported
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds
from planner.search.space import SearchSpec, families


@pytest.mark.parametrize("seed", range(200))
def test_path_fill_is_below_every_split(seed: int) -> None:
    """max_d (a·S_d + mu_d·T_d + k·d·hop) >= (Σ T + β·hop)/α for random stage times, a <= mu_d; with a = 1, mu = m,
    k = 2 it is `minimax_fill`, and the equal-path split (T_d grown stage by stage to X) reaches it."""
    rng = random.Random(seed)
    pp, k, hop = rng.randint(1, 12), rng.choice([1, 2]), rng.choice([0.0, 0.01, 0.3])
    a = rng.uniform(0.0, 1.0)
    mu = [rng.uniform(max(a, 1.0), 20.0) for _ in range(pp)]
    alpha, beta = path_fill(a, mu, k)
    for _ in range(20):
        times = [rng.expovariate(1.0) * rng.choice([0.0, 1.0, 1.0]) for _ in range(pp)]
        before, worst = 0.0, 0.0
        for d, t in enumerate(times):
            worst = max(worst, a * before + mu[d] * t + k * d * hop)
            before += t
        assert (sum(times) + beta * hop) / alpha <= worst * (1 + 1e-12)
    m = rng.randint(1, 30)
    total = rng.uniform(0.1, 10.0)
    one, sends = path_fill(1.0, [float(m)] * pp, 2)
    assert (total + sends * hop) / one == pytest.approx(minimax_fill(total, pp, m, hop), rel=1e-12)
    x, before, times = (total + sends * hop) / one, 0.0, []
    for d in range(pp):  # every path equal to X: the bound is tight
        times.append((x - before - 2 * d * hop) / m)
        before += times[-1]
    assert before == pytest.approx(total, rel=1e-9)


@pytest.mark.parametrize("seed", range(80))
def test_ordered_fills_are_below_the_simulator(seed: int) -> None:
    """ZB-H1 and ZB-H2 on random per-rank forward, backward, recomputation and communication times, shared as
    planner.search.simulate.durations shares them: the simulated pipeline is at least every (Σ T + β·hop)/α of
    `ordered_fills`, with φ the least forward share and ω W_SHARE times the largest backward share of the ranks."""
    rng = random.Random(seed)
    schedule = rng.choice([Schedule.ZB_H1, Schedule.ZB_H2])
    pp, m, hop = rng.randint(2, 8), rng.randint(1, 16), rng.choice([0.0, 0.05, 0.3])
    m = max(m, 2 * pp - 1) if schedule is Schedule.ZB_H2 and rng.random() < 0.5 else m
    try:
        prog = program(schedule, pp, m, 1)
    except ValueError:
        return
    f_c, b_c, w_c, shares = [], [], [], []
    for _ in range(pp):
        fwd, bwd, rec = rng.uniform(0.2, 1.0), rng.uniform(0.4, 2.0), rng.choice([0.0, rng.uniform(0.0, 1.0)])
        comm, compute = rng.uniform(0.0, 0.3), fwd + bwd + rec
        f_c.append(fwd + comm * fwd / compute)
        w = W_SHARE * bwd
        b_c.append(bwd + rec + comm * (1 - fwd / compute) - w)
        w_c.append(w)
        shares.append((fwd / compute, bwd / compute))
    phi, omega = min(f for f, _ in shares), W_SHARE * max(b for _, b in shares)
    d = Durations(tuple(f_c), tuple(b_c), tuple(w_c), (1.0,) * pp, p2p_s=hop)
    total = sum(f_c) + sum(b_c) + sum(w_c)
    simulated = makespan(prog, d)
    for alpha, beta in ordered_fills(schedule, pp, m, phi, omega):
        assert (total + beta * hop) / alpha <= simulated * (1 + 1e-9), (schedule, pp, m)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=small_jobs())
def test_floors_and_keys_below_every_priced_candidate(job: tuple) -> None:  # type: ignore[type-arg]
    """On random small jobs, every candidate of the space (pp > 1): its family's floor (`family_floor`) is below its
    group's (`shape_floor`), that below its key, and the key below the step a plan reports for it (simulated where the
    pipeline is simulated) wherever it fits."""
    model, hw, gpus, seq, batch, runtime = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=runtime))
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    bounds = ReportedBounds(pr.model, pr.cluster, pr.job, spec.partial_recompute)
    for first, shapes, experts, offloads in families(pr.model, pr.cluster, pr.job, spec):
        if first.pp == 1:
            continue
        ep, etp = experts[0]
        base = first.but(ep=ep, etp=etp)
        held = [(s, v) for v, s in shapes]
        floor = bounds.family_floor(base, held)
        group = bounds.shape_floor(base, held, offloads)
        assert floor <= group * (1 + 1e-12)
        for schedule, vpp in held:
            c = base.but(schedule=schedule, vpp=vpp, offload=offloads[0])
            key = bounds.key(c)
            assert group <= key * (1 + 1e-12)
            found = reported(pr.model, pr.cluster, pr.job, price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP,
                                                                  SolveOptions(), bounds.get(c)))
            if found is not None:
                assert key <= found.step_time_s * (1 + 1e-9), c


def _settled(job: tuple, eager: bool) -> tuple[list[str], list[object], int]:  # type: ignore[type-arg]
    """(the top-k's reprs or the error, the candidates settled in order, candidates whose tight key was computed) of a
    search; with `eager` every candidate's early key is its tight key (as the search queued them before early keys)."""
    from meshcore.errors import InfeasibleError, LayoutError
    from planner.search import exact
    from planner.search.exact import search

    model, hw, gpus, seq, batch, runtime = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=runtime))
    spec = for_runtime(SearchSpec(top_k=5), load_runtime(pr.job.runtime.framework))
    order: list[object] = []
    tights: set[object] = set()
    settle, tight_key = exact._Search.settle, ReportedBounds.tight_key

    def traced(self: exact._Search, c: object) -> None:
        order.append(c)
        settle(self, c)  # type: ignore[arg-type]

    def counted(self: ReportedBounds, c: object, balanced: bool) -> float:
        tights.add(c)
        return tight_key(self, c, balanced)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exact._Search, "settle", traced)
        patch.setattr(ReportedBounds, "tight_key", counted)
        if eager:
            patch.setattr(ReportedBounds, "early_key", lambda self, c: counted(self, c, False))
        try:
            result = search(pr.model, pr.cluster, pr.job, spec)
        except (InfeasibleError, LayoutError) as exc:
            return [str(exc)], order, len(tights)
    return [repr(r) for r in (result.best, *result.alternatives)], order, len(tights)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=small_jobs())
def test_early_keys_settle_in_the_same_order(job: tuple) -> None:  # type: ignore[type-arg]
    """A candidate queued at its early key (`ReportedBounds.early_key`) and refined to its tight key only when it comes
    up: on random small jobs the same candidates settle in the same order, to the same top-k, as with every tight key
    computed at once, and no more tight keys are computed."""
    lazy, lazy_order, lazy_tights = _settled(job, False)
    eager, eager_order, eager_tights = _settled(job, True)
    assert lazy == eager and lazy_order == eager_order
    assert lazy_tights <= eager_tights


def test_early_keys_on_mixtral() -> None:
    """Mixtral 8x7B on 16 A100 (80 GB) in the research space: the same order and top-5, fewer tight keys (166 candidates
    against 521 when measured)."""
    job = ("mixtral-8x7b", "a100-80gb", 16, 4096, 64, "any")
    lazy, lazy_order, lazy_tights = _settled(job, False)
    eager, eager_order, eager_tights = _settled(job, True)
    assert lazy == eager and lazy_order == eager_order and "Ranked" in lazy[0]
    assert lazy_tights < eager_tights


@pytest.mark.parametrize("job", [("deepseek-v3", "h800", 2048, 4096, 15360),
                                 ("llama3-70b", "h100-sxm", 1024, 8192, 1024),
                                 ("llama4-maverick", "h100-sxm", 256, 8192, 512)], ids=lambda j: j[0])
def test_floors_reading_the_slowest_rank_stay_below_every_member(job: tuple) -> None:  # type: ignore[type-arg]
    """The family and group floors read the slowest rank (`SearchBounds.slowest`: whole layers and the heavy ends,
    most of DeepSeek-V3's key on 16 stages of 61 layers with the multi-token-prediction head): on 150 families of each
    benchmark space, drawn at random, the family floor is below each group's floor and that below the key of every
    member (each shape, expert choice and offload choice)."""
    model, hw, gpus, seq, batch = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework="any"))
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    bounds = ReportedBounds(pr.model, pr.cluster, pr.job, spec.partial_recompute)
    built = [f for f in families(pr.model, pr.cluster, pr.job, spec) if f[0].pp > 1]
    raised = 0
    for first, shapes, experts, offloads in random.Random(model).sample(built, min(150, len(built))):
        for ep, etp in experts:
            base = first.but(ep=ep, etp=etp)
            held = [(s, v) for v, s in shapes]
            floor, group = bounds.family_floor(base, held), bounds.shape_floor(base, held, offloads)
            assert floor <= group * (1 + 1e-12)
            m = pr.job.global_batch // (base.dp * base.mbs)
            a, f, b = bounds._average_parts(base)
            raised += bounds.least_pipe(base, held, m, (a, f, b), 0.0, 0.0) < floor / (1 - 1e-9) ** 2 * (1 - 1e-12)
            for schedule, vpp in held:
                for o in offloads:
                    c = base.but(schedule=schedule, vpp=vpp, offload=o)
                    assert group <= bounds.key(c) * (1 + 1e-12), c
    assert raised  # the slowest rank raised some family floor above the average stage's
