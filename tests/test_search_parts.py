"""benchmarks/search_parts.py's seed (issue 36): a part of a split search given the whole search's k-th best from its
start. The seed is the reported step the search ranks by; the plain cost model's step of a simulated layout is
higher and would prune less, which once made a measurement of the seeded parts wrong."""

from __future__ import annotations

from search_parts import SeedIncumbent, seed_of

from meshcore import Runtime
from meshcore.framework import Framework
from planner import resolve
from planner.search.exact import search
from planner.search.space import SearchSpec


def test_a_search_seeded_with_its_own_kth_best_finds_the_same_top_k() -> None:
    pr = resolve("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                 runtime=Runtime(framework=Framework.ANY))
    spec = SearchSpec(top_k=4)
    plain = search(pr.model, pr.cluster, pr.job, spec)
    ranked = (plain.best, *plain.alternatives)
    seed = seed_of(plain)
    assert seed.step == ranked[-1].step_time_s  # the k-th best, as ranked
    simulated = [r for r in ranked if r.simulated_step_time_s is not None]
    # the trap: a simulated layout's plain step is above the step it is ranked by
    assert simulated and any(r.prediction.step_time_s > r.step_time_s for r in simulated)
    seeded = search(pr.model, pr.cluster, pr.job, spec, incumbent=seed)
    assert [(r.layout, r.step_time_s) for r in (seeded.best, *seeded.alternatives)] == \
        [(r.layout, r.step_time_s) for r in ranked]
    assert seeded.certificate.evaluated <= plain.certificate.evaluated
    loose = search(pr.model, pr.cluster, pr.job, spec,
                   incumbent=SeedIncumbent(max(r.prediction.step_time_s for r in ranked)))
    assert loose.certificate.evaluated >= seeded.certificate.evaluated
    seed.offer(0.0)  # it learns nothing: the seed is already the whole space's k-th best
    assert seed.kth() == ranked[-1].step_time_s
