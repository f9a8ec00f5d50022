"""A family entry settled before its family floor (planner/search/state_fit.py): exactly where `expand` would queue
none of its groups, with the same answer and the same priced candidates."""

from __future__ import annotations

import pytest

import planner.search.state_fit as state_fit
from meshcore import Runtime
from meshcore.framework import Framework
from planner import resolve
from planner.inputs.runtimes import load_runtime
from planner.search.exact import _Search, search
from planner.search.ilp import SolveOptions, Solver
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds
from planner.search.space import Candidate, SearchSpec

Job = tuple[str, str, int, int, int, str]
JOBS: list[Job] = [("llama3-70b", "h100-sxm", 32, 8192, 64, "torchtitan"),
                   ("qwen3-30b-a3b", "h100-sxm", 16, 4096, 32, "torchtitan"),
                   ("mixtral-8x7b", "a100-40gb", 32, 4096, 64, "any")]


def _state(job: Job) -> _Search:
    model, hw, gpus, seq, batch, framework = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=Framework(framework)))
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    return _Search(pr.model, pr.cluster, pr.job, spec, Solver.DP, SolveOptions(), None, None)


@pytest.mark.parametrize("job", JOBS)
def test_fits_none_is_expand_skipping_every_member(job: Job) -> None:
    """For every family entry of jobs where some entries fit and some do not: `fits_none` is True exactly where no
    member, at the entry's (ep, etp), has an offload choice within the state bound for the head placement of any of
    its own shapes (`expand`'s test, each shape placed by itself here), and then expanding the entry queues nothing."""
    state = _state(job)
    outcomes = set()
    for entry in list(state.heap):
        members = entry[4]
        assert isinstance(members, list)
        first, _, experts, _ = state.built[members[0][0]]
        ep, etp = experts[members[0][1]]
        fits = any(state.fit.within(c if (ep, etp) == (c.ep, c.etp) else c.but(ep=ep, etp=etp),
                                    state.bounds.shape_beside(c, vpp, schedule))
                   for c, shapes, _, _ in (state.built[f] for f, _ in members) for vpp, schedule in shapes)
        assert state.fit.fits_none(state.built, members) is not fits
        outcomes.add(fits)
        if not fits:
            before = (len(state.heap), state.tally["fitting"])
            state.expand(members)
            assert (len(state.heap), state.tally["fitting"]) == before
    assert outcomes == {True, False}


@pytest.mark.parametrize("job", JOBS[:2])
def test_settling_entries_changes_no_answer(job: Job,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The same top 5, priced and infeasible counts with entries settled before their family floor as without, and
    fewer family floors computed."""
    model, hw, gpus, seq, batch, framework = job
    pr = resolve(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=Framework(framework)))
    floors: list[int] = []
    real = ReportedBounds.family_floor

    def counted(self, *args):  # type: ignore[no-untyped-def]
        floors[-1] += 1
        return real(self, *args)

    monkeypatch.setattr(ReportedBounds, "family_floor", counted)
    results = []
    for settle in (True, False):
        if not settle:
            monkeypatch.setattr(state_fit.StateFit, "none_fit", lambda self, built, members: False)
        floors.append(0)
        results.append(search(pr.model, pr.cluster, pr.job))
    settled, plain = results
    assert [(r.layout, r.step_time_s) for r in (settled.best, *settled.alternatives)] == \
        [(r.layout, r.step_time_s) for r in (plain.best, *plain.alternatives)]
    assert (settled.certificate.evaluated, settled.certificate.infeasible) == \
        (plain.certificate.evaluated, plain.certificate.infeasible)
    assert settled.certificate.candidates == plain.certificate.candidates
    assert floors[0] < floors[1]


def test_fits_none_reads_each_shape_s_head_placement() -> None:
    """On a tied-embedding model a head beside the embedding shares its weights, so a V shape's states are less than
    its 1F1B shape's. With the GPU between the two for the leanest member of an entry whose shapes place the head both
    ways, that entry fits by its V shapes alone: `fits_none` says so, and agrees with placing each shape by itself on
    every entry."""
    state = _state(("megatron-1.7b", "rtx4090", 8, 2048, 32, "any"))
    bounds = state.bounds

    def placed(members: list[tuple[int, int]]) -> list[tuple[Candidate, list[bool]]]:
        return [(c, [bounds.shape_beside(c, vpp, schedule) for vpp, schedule in shapes])
                for c, shapes, _, _ in (state.built[f] for f, _ in members)]

    entries = [e[4] for e in state.heap if isinstance(e[4], list)]
    both = next(m for m in entries if any(False in sides and True in sides for _, sides in placed(m)))
    least = {side: min(bounds.state_bound(c, side) for c, _ in placed(both)) for side in (False, True)}
    assert least[True] < least[False]
    state.fit.capacity = (least[True] + least[False]) / 2
    for members in entries:
        fits = {side: any(state.fit.within(c, side) for c, sides in placed(members) if side in sides)
                for side in (False, True)}
        assert state.fit.fits_none(state.built, members) is not (fits[False] or fits[True])
        if members is both:
            assert fits == {False: False, True: True}
