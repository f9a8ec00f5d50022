"""The tail bound of each pipeline shape (planner/search/tail_bounds.py, `ReportedBounds.shape_tail`) is below the tail
every priced layout reports, and the piece it rests on holds: a collective's time per byte is least for the largest
messages."""

from __future__ import annotations

import random

import pytest

from cost_models.comm.collectives import Collective, collective
from meshcore import Runtime, Schedule
from meshcore.framework import Framework
from meshcore.mesh import Group
from planner.api import resolve
from planner.inputs.runtimes import load_runtime
from planner.search.ilp import SolveOptions, Solver
from planner.search.pricing import price
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds
from planner.search.simulate import step_tail
from planner.search.space import Candidate, SearchSpec, candidates

# (model, hardware, GPUs, sequence, global batch, runtime): dense and MoE, NVLink and PCIe clusters, Megatron-LM's
# overlapped reductions, DeepSpeed's autograd gradient accumulation and the research space's schedules
JOBS = [
    ("llama3-8b", "h100-sxm", 32, 4096, 64, Framework.ANY),
    ("qwen3-30b-a3b", "h100-sxm", 64, 4096, 128, Framework.ANY),
    ("mixtral-8x7b", "a100-80gb", 64, 4096, 128, Framework.MEGATRON),
    ("llama2-7b", "a100-80gb", 16, 2048, 64, Framework.DEEPSPEED),
    ("llama3-8b", "rtx4090", 16, 2048, 32, Framework.ANY),
]


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j[0]}-{j[2]}-{j[5].value}")
def test_shape_tail_is_below_every_priced_tail(job: tuple) -> None:  # type: ignore[type-arg]
    """On 60 random candidates per job (every schedule; interleaved layouts price balanced chunks), each priced
    layout (solved and balanced split) reports a tail (gradient reduction, gather, optimizer step) at least the
    bound's."""
    model, hw, gpus, seq, batch, framework = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=framework))
    spec = for_runtime(SearchSpec(), load_runtime(framework))
    pool = [c for c in candidates(pr.model, pr.cluster, pr.job, spec) if c.dp * c.cp > 1]
    bounds = ReportedBounds(pr.model, pr.cluster, pr.job, spec.partial_recompute)
    checked = 0
    for c in random.Random(7).sample(pool, min(60, len(pool))):
        priced = price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP, SolveOptions(), bounds.get(c),
                       bounds.activations(c))
        for r in priced.layouts:
            assert bounds.shape_tail(c) <= step_tail(r.prediction) * (1 + 1e-9), (c, r.layout.stage_layers)
            checked += 1
    assert checked >= 10  # enough candidates fit to mean something


def test_each_shape_gets_its_own_windows() -> None:
    """Qwen3-235B on 1,024 H100 at pp 16: under ZB-V (one chunk's windows) the bound is more than twice the
    every-shape one (0.18 s priced against 0.08); interleaved, it lies between the two and below what is priced."""
    pr = resolve("qwen3-235b-a22b", "h100-sxm", gpus=1024, seq_len=4096, global_batch=2048,
                 runtime=Runtime(framework=Framework.ANY))
    spec = for_runtime(SearchSpec(), load_runtime(Framework.ANY))
    pool = [c for c in candidates(pr.model, pr.cluster, pr.job, SearchSpec(pp=16, tp=1, ep=8, mbs=1, zero=1))
            if c.schedule in (Schedule.ZB_V, Schedule.INTERLEAVED_1F1B) and c.modules == frozenset()]
    bounds = ReportedBounds(pr.model, pr.cluster, pr.job, spec.partial_recompute)
    def priced_tails(c: Candidate) -> list[float]:
        priced = price(pr.model, pr.cluster, pr.job, c, spec, Solver.DP, SolveOptions(), bounds.get(c),
                       bounds.activations(c))
        return [step_tail(r.prediction) for r in priced.layouts]

    fitting = [(c, tails) for c in pool for tails in (priced_tails(c),) if tails]
    v, v_tails = next((c, t) for c, t in fitting if c.schedule is Schedule.ZB_V)
    interleaved, i_tails = next((c, t) for c, t in fitting if c.schedule is Schedule.INTERLEAVED_1F1B)
    every = bounds._family(v, bounds.beside(v))[4]
    assert bounds.shape_tail(v) > 2 * every
    assert every <= bounds.shape_tail(interleaved) < bounds.shape_tail(v)
    assert bounds.shape_tail(v) <= min(v_tails) and bounds.shape_tail(interleaved) <= min(i_tails)


@pytest.mark.parametrize("hardware", ["h100-sxm", "a100-80gb", "rtx4090"])
@pytest.mark.parametrize("kind", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER])
def test_a_collective_costs_least_per_byte_at_the_largest_size(hardware: str, kind: Collective) -> None:
    """`one_chunk_exposed` prices every stage's collectives at their time per byte at 1e18 parameters: no smaller
    message moves a byte faster (latency >= 0, and NCCL's algorithm bandwidths only grow with the size)."""
    cluster = resolve("llama3-8b", hardware, gpus=64, seq_len=4096, global_batch=64).cluster
    for group in (Group.line(8, 1), Group.line(8, 8), Group.line(64, 1)):
        rate = collective(kind, 1e18, group, cluster) / 1e18
        for nbytes in (1e3, 1e5, 1e6, 3e7, 1e9, 4e10):
            assert collective(kind, nbytes, group, cluster) >= nbytes * rate * (1 - 1e-12)
