"""benchmarks/pick_best.py: its arithmetic on a hand-made example, its data files, and its core on one small job.
No accuracy target is asserted here (the README reports them); only that the figures are computed as defined."""

from __future__ import annotations

import math

import pytest
from pick_best import (
    DATA,
    Job,
    JobResult,
    Measured,
    evaluate_job,
    job_line,
    load_jobs,
    main,
    make_runtime,
    score,
    totals,
)

from meshcore import AttentionKernel
from meshcore.framework import Framework


def test_score_hand_made_example() -> None:
    """Four layouts measured at 10, 12, 11 and 20 s, predicted at 9, 8, 10 and 30 s."""
    s = score([10.0, 12.0, 11.0, 20.0], [9.0, 8.0, 10.0, 30.0])
    assert s.n == 4
    assert s.pick == 1  # predicted fastest (8 s) ...
    assert s.pick_ratio == pytest.approx(12.0 / 10.0)  # ... measured 12 s against the fastest measured 10 s
    # predicted top three: 8 s (measured 12), 9 s (10), 10 s (11): 12 > 1.10 x 10
    assert s.top3_ok is False
    # six pairs differ by >= 5 %; (10, 12) and (12, 11) are predicted the other way round
    assert (s.pairs_ordered, s.pairs) == (4, 6)
    assert s.mae == pytest.approx((1 / 10 + 4 / 12 + 1 / 11 + 10 / 20) / 4)


def test_score_gap_ties_and_small_jobs() -> None:
    near = score([10.0, 10.4], [1.0, 2.0])  # 4 % apart: below the 5 % gap, no pair to order
    assert (near.pairs_ordered, near.pairs) == (0, 0)
    assert near.top3_ok is None  # two layouts: the top three is every layout, not scored
    tie = score([10.0, 20.0], [5.0, 5.0])  # a predicted tie orders nothing; the first is the pick
    assert (tie.pairs_ordered, tie.pairs, tie.pick, tie.pick_ratio) == (0, 1, 0, 1.0)
    assert score([10.0, 20.0], [5.0, 5.0], min_gap=1.5).pairs == 0  # 2x apart is under a 150 % gap
    top = score([10.0, 10.5, 10.9, 30.0], [1.0, 2.0, 3.0, 4.0])
    assert top.top3_ok is True and top.pick_ratio == 1.0
    with pytest.raises(ValueError, match="as many predictions"):
        score([1.0, 2.0], [1.0])


def test_top_k_when_fewer_than_three_layouts_are_close() -> None:
    """DLPerf's 8-GPU job measured 0.480, 0.665, 0.576 and 0.594 s: only the fastest is within 1.10 of it, so no
    order puts three layouts within 1.10 (top3 fails whatever is predicted); top-k with k = 1 asks that the pick is
    that layout."""
    measured = [0.480, 0.665, 0.576, 0.594]
    right = score(measured, [1.0, 4.0, 2.0, 3.0])
    assert (right.top3_ok, right.within, right.topk_ok) == (False, 1, True)
    wrong = score(measured, [2.0, 4.0, 1.0, 3.0])
    assert (wrong.top3_ok, wrong.topk_ok) == (False, False)
    three = score([10.0, 10.5, 10.9, 30.0], [1.0, 4.0, 3.0, 2.0])  # three close: top-k is top3
    assert three.within == 3 and three.top3_ok is three.topk_ok is False


def test_data_files_are_sourced_jobs_of_several_layouts() -> None:
    jobs = load_jobs(DATA)
    assert {j.source.split(",")[0] for j in jobs} == {p.name for p in DATA.glob("*.yaml")}
    for job in jobs:
        timed = [m for m in job.layouts if m.step_s is not None]
        assert len(timed) >= 2, job.id  # a pick needs at least two measured layouts of the job
        assert all(m.step_s is not None and m.step_s > 0 and m.row for m in timed), job.id
        keys = [tuple(sorted(m.knobs.items())) for m in job.layouts]
        assert len(keys) == len(set(keys)), f"{job.id}: a layout listed twice"
    assert len({j.id for j in jobs}) == len(jobs)


def test_runtime_switches_this_checkout_lacks_are_named() -> None:
    runtime, dropped = make_runtime({"framework": "deepspeed", "attention": "unfused", "no_such_switch": True})
    assert runtime.framework is Framework.DEEPSPEED and runtime.attention is AttentionKernel.UNFUSED
    assert dropped == ["no_such_switch"]


def test_core_on_one_small_job() -> None:
    """Korthikanti's 22B on 8 A100s: both layouts priced, the score computed from the predictions printed."""
    job = next(j for j in load_jobs(DATA) if j.id == "korthikanti-22b-8gpu")
    result = evaluate_job(job)
    assert not result.skipped and len(result.priced) == 2 and result.score is not None
    measured = [m.step_s for m, _, _ in result.priced]
    predicted = [p for _, p, _ in result.priced]
    assert all(math.isfinite(p) and p > 0 for p in predicted)
    assert result.score == score([m for m in measured if m is not None], predicted)
    assert result.score.pick == predicted.index(min(predicted))


def test_a_job_meshplan_cannot_express_is_skipped_with_the_reason() -> None:
    job = Job("no-gpu", "test", "llama3-8b", "no-such-gpu", {}, 8, 2048, 16, "bf16", {"framework": "megatron"},
              (Measured({"tp": 1}, 1.0, "row"), Measured({"tp": 2}, 2.0, "row")))
    result = evaluate_job(job)
    assert result.score is None and not result.priced
    assert len(result.skipped) == 1 and "no-such-gpu" in result.skipped[0][1]


def test_top_three_rule_is_printed_beside_the_raw_figure() -> None:
    """DLPerf's 8-GPU job (0.480 s fastest, the others 0.576-0.665 s): the job line keeps the raw "no" and says the
    top three is n/a with only one layout within 1.10, then whether meshplan's first is that one; the totals print the
    raw count, the rule and the count under it."""
    measured = [0.480, 0.665, 0.576, 0.594]
    job = Job("dlperf-like", "test", "llama3-8b", "v100-32gb", {}, 8, 2048, 16, "bf16", {"framework": "megatron"},
              tuple(Measured({"tp": 2**i}, m, "row") for i, m in enumerate(measured)))
    right = JobResult(job, [(m, p, True) for m, p in zip(job.layouts, [1.0, 4.0, 2.0, 3.0], strict=True)],
                      score=score(measured, [1.0, 4.0, 2.0, 3.0]))
    wrong = JobResult(job, right.priced, score=score(measured, [2.0, 4.0, 1.0, 3.0]))
    assert "no; n/a, only 1 within 1.10: top-1 yes" in job_line(right)
    assert "no; n/a, only 1 within 1.10: top-1 no" in job_line(wrong)
    lines = totals([right, wrong])
    assert "top three within 1.10 (jobs with more than three layouts): 0 of 2 (raw figure)" in lines
    assert any(line.strip().startswith("rule: where only k < 3 measured layouts") for line in lines)
    assert "  top three, or top-k where n/a: 1 of 2 (target: all)" in lines


def test_host_what_if_refuses_a_negative_time(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--host-op-us", "-3", "--job", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--host-op-us must be between 0 and 10000" in err


def test_host_what_if_slows_short_passes_only() -> None:
    """The --host-op-us what-if behind the README's reading of BigScience's TP 2 (benchmarks/data/pick_best/
    bigscience_tr3m_1b3.yaml): at 100 us per operator the TP-2 layout's half-width passes wait for the host and
    slow by over a third, while TP 1 at micro-batch 8 (eight times the GPU work per pass) does not move."""
    job = next(j for j in load_jobs(DATA) if j.id == "bigscience-1b3-v100-32gb")
    picked = tuple(m for m in job.layouts if m.knobs in ({"tp": 2, "pp": 1, "mbs": 1, "zero": 1, "recompute": "none",
                                                          "sp": False},
                                                         {"tp": 1, "pp": 1, "mbs": 8, "zero": 1, "recompute": "full",
                                                          "sp": False}))
    assert len(picked) == 2
    small = Job(job.id, job.source, job.model, job.hardware, job.overrides, job.gpus, job.seq_len, job.global_batch,
                job.dtype, job.runtime, picked)
    base = {m.knobs["tp"]: p for m, p, _ in evaluate_job(small).priced}
    slow = {m.knobs["tp"]: p for m, p, _ in evaluate_job(small, host_op_us=100.0).priced}
    assert slow[2] > 1.35 * base[2]
    assert slow[1] == pytest.approx(base[1], rel=0.01)
