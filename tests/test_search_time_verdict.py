"""benchmarks/search_time.py's verdict on a job's target (issue 36: met on one core, only over the workers, or not)
and the line that counts them: what the README's table and its summary of the targets read."""

from __future__ import annotations

from search_time import Met, targets_line, verdict


def test_verdict_is_one_core_first_then_the_workers_median() -> None:
    assert verdict(0.9, [], 1.0) == "ok"
    assert verdict(0.9, [1.5, 1.6, 1.7], 1.0) == "ok"  # one core decides where it meets the target
    assert verdict(1.2, [0.8, 1.4, 0.9], 1.0) == "ok, workers"  # the median of the walls, 0.9
    assert verdict(1.2, [0.8, 1.4, 1.1], 1.0) == "over"  # median 1.1
    assert verdict(1.2, [], 1.0) == "over"  # no workers timed
    assert verdict(0.3, [], 0.3) == "ok"  # at the target is within it
    assert [m.label(2) for m in Met] == ["ok", "ok, 2 workers", "over"]  # the table's target column


def test_targets_line_counts_and_names_the_jobs_not_met() -> None:
    tally = {Met.ONE_CORE: ["a (megatron)", "b (nemo)"], Met.WORKERS: ["c (torchtitan)"],
             Met.OVER: ["d (any)", "e (any)"]}
    assert targets_line(tally, 2) == ("targets: 2 searches met on one core, 1 more over 2 workers, 2 not met: "
                                      "d (any), e (any)")
    assert targets_line({Met.ONE_CORE: ["a (any)"], Met.WORKERS: [], Met.OVER: []}, 1) == (
        "targets: 1 search met on one core, 0 not met")
