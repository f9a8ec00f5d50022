"""The families' first floor (planner.search.early_floor) and the per-layer floors it reads
(cost_models.compute.layer.decoder_layer_floor): on random small jobs (and DeepSeek-V3's tiny stack, with its
multi-token prediction), with and without the expert all-to-alls overlapped and a fixed host cost per pass, every layer
floor is field by field at most the layer times of every recomputation the search prices, the early floor at most the
family's own floor (`family_floor`, no tolerance: the search relies on it as it is), and at most the step a plan
reports for every candidate of the family that fits."""

from __future__ import annotations

import random
from dataclasses import fields, replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_sim_bounds import small_jobs
from tiny_models import TINY_DEEPSEEK

from cost_models.compute.knobs import LayerTime
from meshcore import Runtime
from planner.api import resolve
from planner.inputs.loaders import model_from_mapping
from planner.inputs.runtimes import load_runtime
from planner.search.early_floor import EarlyFloors
from planner.search.ilp import SolveOptions, Solver
from planner.search.pricing import price, reported
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds
from planner.search.space import SearchSpec, candidates, families


def _below(low: LayerTime | None, high: LayerTime | None) -> None:
    assert (low is None) == (high is None)
    if low is not None and high is not None:
        for f in fields(LayerTime):
            assert 0.0 <= getattr(low, f.name) <= getattr(high, f.name), (f.name, low, high)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=small_jobs(), overlap=st.booleans(), host=st.sampled_from([0.0, 2e-5]), seed=st.integers(0, 10**6))
@example(job=(model_from_mapping(TINY_DEEPSEEK, "test"), "rtx4090", 8, 8192, 32, "any"), overlap=False, host=0.0,
         seed=0)
@example(job=(model_from_mapping(TINY_DEEPSEEK, "test"), "h100-sxm", 16, 4096, 64, "megatron"), overlap=True,
         host=2e-5, seed=1)
def test_early_floor_is_below_family_floor_and_priced_steps(job: tuple, overlap: bool, host: float,  # type: ignore[type-arg]
                                                            seed: int) -> None:
    model, hw, gpus, seq, batch, runtime = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=runtime))
    execution = replace(pr.job.runtime.priced_execution, host_layer_s=host)
    rt = replace(pr.job.runtime, moe_comm_overlap=overlap, execution=execution)
    job_ = replace(pr.job, runtime=rt)
    assert job_.runtime.priced_execution.host_layer_s == host
    spec = for_runtime(SearchSpec(), load_runtime(job_.runtime.framework))
    bounds = ReportedBounds(pr.model, pr.cluster, job_, spec.partial_recompute)
    early = EarlyFloors(bounds)
    for c in candidates(pr.model, pr.cluster, job_, spec):  # every recomputation and module set the search prices
        times, layers = bounds.get(c), early.layers(c)
        assert layers is not None
        decoder, embedding, head, moe = layers
        _below(decoder, times.decoder)
        _below(embedding, times.embedding)
        _below(head, times.head)
        _below(moe, times.moe)
    rng = random.Random(seed)
    for first, shapes, experts, offloads in families(pr.model, pr.cluster, job_, spec):
        for ep, etp in experts:
            base = first.but(ep=ep, etp=etp)
            held = [(s, v) for v, s in shapes]
            floor = early.floor(base, held)
            assert floor <= bounds.family_floor(base, held), base
            if first.pp == 1 or rng.random() > 0.2:  # price a sample of the families' candidates
                continue
            schedule, vpp = rng.choice(held)
            c = base.but(schedule=schedule, vpp=vpp, offload=rng.choice(offloads))
            found = reported(pr.model, pr.cluster, job_, price(pr.model, pr.cluster, job_, c, spec, Solver.DP,
                                                               SolveOptions(), bounds.get(c)))
            if found is not None:
                assert floor <= found.step_time_s, c
