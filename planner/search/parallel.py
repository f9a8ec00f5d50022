"""The exact search over several processes: the layout space split by tensor-parallel degree, each part searched
exactly in its own process, the parts' answers merged into the answer of the whole.

Why the merge is exact: each part returns its own top-k by (reported step time, candidate sort key), the order
`exact.search` keeps. The whole space's top-k are among the parts' top-k, and two candidates of different parts differ
in TP, the first element of the sort key, so ordering the union by (step time, TP, rank within its part) is the single
search's order. Each part prunes with its own incumbent, so the
parts together price more candidates than one search would: measured on the 2-core machine (medians of 3), two
processes took 0.44 s against one's 0.29 s for Llama-3-70B on 1,024 H100, 0.86 against 0.46 s for Llama-3-405B on
16,384, 3.36 against 2.74 s for Llama 4 Maverick and 3.97 against 2.79 s for DeepSeek-V3. So `plan` runs one
process unless asked (`--workers`); the split pays where parts prune as well as the whole, on more cores.
"""

from __future__ import annotations

import time
from dataclasses import replace

from planner.core import ClusterSpec, JobSpec, ModelSpec
from planner.core.errors import InfeasibleError, LayoutError
from planner.inputs.runtimes import load_runtime
from planner.search.exact import search
from planner.search.ilp import SolveOptions, Solver
from planner.search.ranked import Certificate, SearchResult
from planner.search.runtime_space import for_runtime
from planner.search.space import SearchSpec, tp_options


def tp_groups(degrees: list[int], parts: int) -> list[tuple[int, ...]]:
    """`degrees` dealt round-robin into at most `parts` non-empty groups (the larger degrees, whose spaces are the
    smaller, spread over the groups)."""
    groups: list[list[int]] = [[] for _ in range(min(parts, len(degrees)))]
    for i, tp in enumerate(degrees):
        groups[i % len(groups)].append(tp)
    return [tuple(g) for g in groups]


def _part(args: tuple[ModelSpec, ClusterSpec, JobSpec, SearchSpec, Solver, SolveOptions]
          ) -> SearchResult | InfeasibleError | LayoutError:
    """One part's search; a part where nothing fits, or no layout passes the rules (its TP degrees may be ones the
    runtime does not run), returns its error for the merge to skip."""
    try:
        return search(*args)
    except (InfeasibleError, LayoutError) as exc:
        return exc


def merge(results: list[SearchResult], top_k: int, solve_time_s: float) -> SearchResult:
    """The whole space's answer from its parts' (module docstring)."""
    entries = [(r.step_time_s, r.layout.tp, i, r) for res in results
               for i, r in enumerate((res.best, *res.alternatives))]
    ranked = [e[3] for e in sorted(entries, key=lambda e: e[:3])[:top_k]]
    certs = [r.certificate for r in results]
    cert = Certificate(
        method=certs[0].method + f"; the space split by TP over {len(results)} processes", solver=certs[0].solver,
        candidates=sum(c.candidates for c in certs), evaluated=sum(c.evaluated for c in certs),
        pruned_memory=sum(c.pruned_memory for c in certs), pruned_time=sum(c.pruned_time for c in certs),
        infeasible=sum(c.infeasible for c in certs), solve_time_s=solve_time_s,
        optimal=all(c.optimal for c in certs), gap=max(c.gap for c in certs),
        simulated=sum(c.simulated for c in certs))
    return SearchResult(ranked[0], tuple(ranked[1:]), cert)


def search_parallel(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec | None = None,
                    solver: Solver = Solver.DP, options: SolveOptions | None = None,
                    workers: int = 1) -> SearchResult:
    """`exact.search` over up to `workers` processes, one part of the TP degrees each; one process (the plain
    search) when there is one worker or one TP degree."""
    spec, options = for_runtime(spec or SearchSpec(), load_runtime(job.runtime.framework)), options or SolveOptions()
    degrees = tp_options(model, cluster, spec)  # the runtime's TP degrees only: no part searches an empty space
    if workers <= 1 or len(degrees) < 2:
        return search(model, cluster, job, spec, solver, options)
    from concurrent.futures import ProcessPoolExecutor  # here: one process imports none of it

    start = time.perf_counter()
    parts = [replace(spec, tp_choices=group) for group in tp_groups(degrees, workers)]
    with ProcessPoolExecutor(max_workers=len(parts)) as pool:
        outcomes = list(pool.map(_part, [(model, cluster, job, p, solver, options) for p in parts]))
    found = [o for o in outcomes if isinstance(o, SearchResult)]
    if not found:
        return search(model, cluster, job, spec, solver, options)  # its own message says why nothing fits
    return merge(found, spec.top_k, time.perf_counter() - start)
