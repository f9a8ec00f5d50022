"""The search over several processes (planner/search/parallel.py) gives the single search's answer."""

from __future__ import annotations

import pytest

import planner.search.parallel as parallel
from planner import InfeasibleError, resolve
from planner.inputs.runtimes import load_runtime
from planner.search.exact import search
from planner.search.runtime_space import for_runtime
from planner.search.space import SearchSpec, tp_options


def test_degrees_are_dealt_round_robin() -> None:
    assert parallel.tp_groups([1, 2, 4, 8], 2) == [(1, 4), (2, 8)]
    assert parallel.tp_groups([1, 2], 8) == [(1,), (2,)]


@pytest.mark.parametrize("case", [("llama3-8b", "h100-sxm", 16, 4096, 64), ("qwen3-30b-a3b", "h100-sxm", 16, 4096, 32)])
def test_parallel_search_equals_the_single_search(case: tuple) -> None:  # type: ignore[type-arg]
    """Same best, same alternatives in the same order with the same times, whatever the number of processes."""
    model, hw, gpus, seq, batch = case
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch)
    spec = SearchSpec(top_k=6)
    one = search(pr.model, pr.cluster, pr.job, spec)
    for workers in (2, 3):
        many = parallel.search_parallel(pr.model, pr.cluster, pr.job, spec, workers=workers)
        assert [r.layout for r in (many.best, *many.alternatives)] == [r.layout for r in (one.best, *one.alternatives)]
        assert [r.step_time_s for r in (many.best, *many.alternatives)] == \
            [r.step_time_s for r in (one.best, *one.alternatives)]
        assert many.certificate.optimal and "processes" in many.certificate.method


def test_nothing_fits_says_why_as_the_single_search_does() -> None:
    pr = resolve("llama3-405b", "rtx4090", gpus=8, seq_len=8192, global_batch=64)
    with pytest.raises(InfeasibleError, match="no layout fits"):
        parallel.search_parallel(pr.model, pr.cluster, pr.job, SearchSpec(), workers=2)


def test_a_slow_single_process_search_notes_workers() -> None:
    """`meshplan plan` notes --workers where one process searched past SLOW_SEARCH_S on a machine with more cores;
    where several processes (or the one core) still took that long it names the pins that narrow the space instead,
    and research mode's size where the plan is one; nothing where the search was quick."""
    from dataclasses import replace

    import planner
    from meshcore import Runtime
    from meshcore.framework import Framework
    from planner.commands.planout import PINS, SLOW_SEARCH_S, workers_note

    plan = planner.plan("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=32)
    assert plan.certificate is not None
    slow = replace(plan, certificate=replace(plan.certificate, solve_time_s=SLOW_SEARCH_S + 0.5))
    note = workers_note(slow, 1, cores=2)
    assert note is not None and "--workers N" in note and "1.5 s in one process" in note and "2 here" in note
    for workers, cores, took in ((2, 2, "1.5 s over 2 processes"), (1, 1, "1.5 s in one process")):
        note = workers_note(slow, workers, cores=cores)
        assert note is not None and took in note and PINS in note and "--workers" not in note
        assert "research mode" not in note
    research = replace(slow, job=replace(slow.job, runtime=Runtime(framework=Framework.ANY)))
    note = workers_note(research, 2, cores=2)
    assert note is not None and PINS in note and "research mode" in note
    quick = replace(plan, certificate=replace(plan.certificate, solve_time_s=SLOW_SEARCH_S / 2))
    assert workers_note(quick, 1, cores=2) is None
    assert workers_note(quick, 2, cores=2) is None


def test_a_part_the_others_beat_everywhere_builds_no_message() -> None:
    """A part whose every layout is slower than the k-th best the other parts found returns at once: its no-fit
    message (the layouts that did not fit, each offload choice searched) would be thrown away by the merge."""

    class Beaten:
        def kth(self) -> float:
            return 1e-9

        def offer(self, step: float) -> None:
            raise AssertionError("nothing can be kept below the k-th best")

    pr = resolve("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    with pytest.raises(InfeasibleError, match="slower than the k-th best the other parts found"):
        search(pr.model, pr.cluster, pr.job, SearchSpec(), incumbent=Beaten())


def test_the_calling_process_searches_the_first_part_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two workers the calling process searches the first part of the TP degrees itself, and that part alone
    (a forked worker searches the other, recording its call in its own memory)."""
    import os

    calls: list[tuple[int, tuple[int, ...] | None]] = []

    def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((os.getpid(), args[3].tp_choices))
        return search(*args, **kwargs)

    monkeypatch.setattr(parallel, "search", recorded)
    pr = resolve("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    parallel.search_parallel(pr.model, pr.cluster, pr.job, spec, workers=2)
    first, _ = parallel.tp_groups(tp_options(pr.model, pr.cluster, spec), 2)
    assert [tps for pid, tps in calls if pid == os.getpid()] == [first]  # (the worker's calls stay in the worker)
