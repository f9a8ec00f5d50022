"""The exact search over several processes: the layout space split by tensor-parallel degree, each part searched
exactly in its own process (the first in the calling process itself, the others in a pool of forked workers), the
parts' answers merged into the answer of the whole.

Why the merge is exact: each part returns its own top-k by (reported step time, candidate sort key), the order
`exact.search` keeps. The whole space's top-k are among the parts' top-k, and two candidates of different parts differ
in TP, the first element of the sort key, so ordering the union by (step time, TP, rank within its part) is the single
search's order. The parts share their incumbent (`SharedTop`: the k best reported steps any part has found, in shared
memory), so each prunes as the single search would with what all have found so far; nothing is lost: a candidate of
the whole's top-k is within its part's top-k, and its bound is below the whole's k-th best, which the shared k-th
best never undercuts. Without the sharing each part pruned with its own best alone and two processes were slower
than one on 2 cores for every benchmark case; with it they take 0.55-0.65 of one's time (README, Search speed).
The calling process searches the first part rather than wait on a pool of as many workers as parts: one process fewer
to fork, and the caller's part runs where its memory is already its own (a forked worker's first writes copy the pages
it shares with its parent: 4,000 of them searching Llama-3-70B's research space, 12,000 for Maverick's, about 2.6 µs
each on the benchmark machine).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from meshcore import ClusterSpec, JobSpec, ModelSpec
from meshcore.errors import InfeasibleError, LayoutError
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


class SharedTop:
    """The k least reported steps found by any part, sorted, in shared memory (a lock around each offer)."""

    def __init__(self, top_k: int) -> None:
        import multiprocessing

        self.steps = multiprocessing.Array("d", [math.inf] * top_k)

    def kth(self) -> float:
        return float(self.steps[len(self.steps) - 1])

    def offer(self, step: float) -> None:
        with self.steps.get_lock():
            values = [float(self.steps[i]) for i in range(len(self.steps))]
            if step < values[-1]:
                values = sorted([*values[:-1], step])
                self.steps[:] = values


_SHARED: SharedTop | None = None  # the incumbent of this worker process
Part = tuple[ModelSpec, ClusterSpec, JobSpec, SearchSpec, Solver, SolveOptions]


def _share(shared: SharedTop) -> None:
    global _SHARED
    _SHARED = shared


def _part(args: Part) -> SearchResult | InfeasibleError | LayoutError:
    """One part's search in a worker process, with the incumbent its pool shared (`_searched`)."""
    return _searched(args, _SHARED)


def _searched(args: Part, incumbent: SharedTop | None) -> SearchResult | InfeasibleError | LayoutError:
    """One part's search; a part where nothing fits, or no layout passes the rules (its TP degrees may be ones the
    runtime does not run), returns its error for the merge to skip, as does one whose every candidate the other parts'
    incumbent prunes."""
    try:
        return search(*args, incumbent=incumbent)
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
    parts: list[Part] = [(model, cluster, job, replace(spec, tp_choices=group), solver, options)
                         for group in tp_groups(degrees, workers)]
    shared = SharedTop(spec.top_k)
    with ProcessPoolExecutor(max_workers=len(parts) - 1, initializer=_share, initargs=(shared,)) as pool:
        others = [pool.submit(_part, part) for part in parts[1:]]
        outcomes = [_searched(parts[0], shared), *(other.result() for other in others)]
    found = [o for o in outcomes if isinstance(o, SearchResult)]
    if not found:
        return search(model, cluster, job, spec, solver, options)  # its own message says why nothing fits
    return merge(found, spec.top_k, time.perf_counter() - start)
