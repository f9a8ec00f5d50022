"""ZeRO-2 and ZeRO-3 twins under torchtitan's pipeline (cost_models.sync.gathered_alike): FSDP2 keeps every weight
gathered across the micro-batches at either stage, so the cost model prices the two alike, and the search prices one
of them (planner.search.pricing.price) and tries one's group floor (planner.search.group_floor)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

import planner.search.pricing as pricing
from cost_models.step import evaluate_layout
from cost_models.sync import gathered_alike
from meshcore import Runtime, ZeroStage
from meshcore.framework import Framework
from planner.api import resolve
from planner.inputs.runtimes import load_runtime
from planner.search.exact import search
from planner.search.group_floor import GroupFloors
from planner.search.runtime_space import for_runtime
from planner.search.space import SearchSpec, candidates

JOBS = [("llama3-8b", "h100-sxm", 16, 8192, 64), ("qwen3-30b-a3b", "h100-sxm", 16, 8192, 64)]


def _problem(job: tuple[str, str, int, int, int], framework: str):  # type: ignore[no-untyped-def]
    name, hw, gpus, seq, batch = job
    runtime = Runtime(framework=Framework(framework))
    return resolve(name, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=runtime)


@pytest.mark.parametrize("job", JOBS)
def test_gathered_alike_twins_have_the_same_prediction(job: tuple[str, str, int, int, int]) -> None:
    """Every torchtitan candidate with a pipeline at ZeRO-2 or -3 is `gathered_alike`, and its layout at the other
    stage, balanced and with random splits, has the same prediction to the bit: its step, its stages' times and bytes.
    A rule that called them alike where one term reads the stage (ZeRO-2's weight gather, its unsharded weights at
    rest) fails it."""
    pr = _problem(job, "torchtitan")
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    pool = [c for c in candidates(pr.model, pr.cluster, pr.job, spec) if c.pp > 1 and c.zero >= ZeroStage.GRADIENTS]
    rng = random.Random(7)
    checked = 0
    for c in rng.sample(pool, min(40, len(pool))):
        layout = c.layout()
        assert gathered_alike(layout, pr.job)
        cuts = sorted(rng.sample(range(1, pr.model.num_layers), c.pp - 1))
        split = tuple(b - a for a, b in zip([0, *cuts], [*cuts, pr.model.num_layers], strict=True))
        shapes = [layout] + ([replace(layout, stage_layers=split)] if c.vpp == 1 else [])
        for shape in shapes:
            two, three = (evaluate_layout(pr.model, pr.cluster, pr.job, replace(shape, zero=z))
                          for z in (ZeroStage.GRADIENTS, ZeroStage.WEIGHTS))
            assert two == three, shape
            checked += 1
    assert checked >= 20


def test_megatron_zero_stages_are_not_alike() -> None:
    """Megatron-LM reshards under its pipeline (and shards per module): its ZeRO-2 and -3 are priced apart."""
    pr = _problem(JOBS[0], "megatron")
    spec = for_runtime(SearchSpec(), load_runtime(pr.job.runtime.framework))
    pool = [c for c in candidates(pr.model, pr.cluster, pr.job, spec) if c.pp > 1 and c.zero >= ZeroStage.GRADIENTS]
    assert pool and not any(gathered_alike(c.layout(), pr.job) for c in pool[::11])


@pytest.mark.parametrize("job", [("llama3-70b", "h100-sxm", 1024, 8192, 1024)])
def test_twins_priced_and_floored_once_change_no_answer(job: tuple[str, str, int, int, int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pricing one of each pair of twins, and trying one's group floor, finds the same top 5 and certificate as
    doing both for each, with fewer splits solved and group floors computed (torchtitan's Llama-3-70B on 1,024 GPUs:
    half of the 38 candidates it prices are twins)."""
    pr = _problem(job, "torchtitan")
    calls: list[str] = []
    price_split, exceeds = pricing.price_split, GroupFloors.exceeds

    def counted_price(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("price")
        return price_split(*args, **kwargs)

    def counted_floor(self: GroupFloors, *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
        calls.append("floor")
        return exceeds(self, *args, **kwargs)

    monkeypatch.setattr(pricing, "price_split", counted_price)
    monkeypatch.setattr(GroupFloors, "exceeds", counted_floor)
    answers, certificates, counts = [], [], []
    for alike in (True, False):
        if not alike:
            monkeypatch.setattr(pricing, "zero_alike", lambda job: False)  # (pricing.zero_twin: both read it)
        calls.clear()
        found = search(pr.model, pr.cluster, pr.job, SearchSpec())
        answers.append([(r.layout, r.step_time_s) for r in (found.best, *found.alternatives)])
        certificates.append(replace(found.certificate, solve_time_s=0.0))
        counts.append((calls.count("price"), calls.count("floor")))
    assert answers[0] == answers[1] and certificates[0] == certificates[1]
    assert counts[0][0] < counts[1][0] and counts[0][1] < counts[1][1], counts
