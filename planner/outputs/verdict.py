"""Why a plan beats its runner-up, in one sentence: the ranked gap, the one or two step-time terms that differ
most between the two layouts' breakdowns, and whether the two are within model error.

`why_best` works on plain numbers (`Contender`: a name, a step time, seconds per cause, a band), so it is
tested on hand-made breakdowns; `plan_verdict` feeds it a plan's best layout and first alternative.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.outputs.report import layout_line

if TYPE_CHECKING:
    from planner.outputs.plan import Plan
    from planner.search.ranked import Ranked

TERM_NAMES = {"compute": "compute", "recompute": "recomputation", "tp_comm": "TP communication",
              "cp_comm": "CP communication", "ep_comm": "expert all-to-all", "pp_p2p": "pipeline send/receive",
              "sharded_dp_comm": "ZeRO parameter gathers", "bubble": "pipeline bubble",
              "dp_comm": "DP gradient reduction", "optimizer": "optimizer step",
              "embedding_sync": "embedding sync", "host": "waiting for kernel launches",
              "offload": "host copies of offloaded state"}
SECOND_TERM_SHARE = 0.2  # a second term is named when it is at least this share of the first


@dataclass(frozen=True)
class Contender:
    """What `why_best` compares: a layout's name, its ranked step time, its breakdown (seconds per cause) and its
    model error band (low, high) in seconds when there is one."""

    name: str
    step_s: float
    terms: Mapping[str, float]
    band: tuple[float, float] | None = None


def seconds(x: float) -> str:
    """A duration (its size) in s, or in ms below 10 ms."""
    x = float(f"{abs(x):.3g}")  # 0.09999... is 0.10 s, not 0.100 s
    return f"{x:.2f} s" if x >= 0.1 else f"{x:.3f} s" if x >= 0.01 else f"{x * 1e3:.2g} ms"


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %" if share >= 0.1 else f"{100 * share:.2g} %"


def _term(diff: float, key: str) -> str:
    """One difference, from the plan's side: the runner-up spends `diff` seconds more (positive) on `key`."""
    return f"{seconds(diff)} {'less' if diff > 0 else 'more'} {TERM_NAMES.get(key, key.replace('_', ' '))}"


def why_best(best: Contender, runner_up: Contender, within_error: bool) -> str:
    """One sentence: by how much the plan beats the runner-up, the one or two breakdown terms that differ most,
    and whether the two are within model error (`within_error`: `Plan.indistinguishable`).

    Named: the largest saving; then the larger of the next saving and the largest extra cost, when it is at
    least SECOND_TERM_SHARE of the first. The largest difference either way is therefore always named."""
    keys = list(dict.fromkeys([*best.terms, *runner_up.terms]))
    diffs = {k: runner_up.terms.get(k, 0.0) - best.terms.get(k, 0.0) for k in keys}
    gains = sorted((k for k in keys if diffs[k] > 0), key=lambda k: -diffs[k])
    costs = sorted((k for k in keys if diffs[k] < 0), key=lambda k: diffs[k])
    head = f"The plan beats the runner-up ({runner_up.name}) by {_percent(runner_up.step_s / best.step_s - 1)}"
    if not gains:
        why = "; no term of its breakdown is smaller" + (f" ({_term(diffs[costs[0]], costs[0])})" if costs else "")
    else:
        why = f": {_term(diffs[gains[0]], gains[0])}"
        second = max(gains[1:2] + costs[:1], key=lambda k: abs(diffs[k]), default=None)
        if second is not None and abs(diffs[second]) >= SECOND_TERM_SHARE * diffs[gains[0]]:
            offset = "partly offset by" if sum(diffs.values()) > 0 else "offset by"
            why += (f" and {_term(diffs[second], second)}" if diffs[second] > 0
                    else f", {offset} {_term(diffs[second], second)}")
    bands = ""
    if best.band is not None and runner_up.band is not None:
        bands = (f" (bands {best.band[0]:.3g}-{best.band[1]:.3g} s and {runner_up.band[0]:.3g}-"
                 f"{runner_up.band[1]:.3g} s {'overlap' if within_error else 'do not overlap'})")
    verdict = (f"; the two are within model error{bands}, so the model cannot say which is faster" if within_error
               else f"; the gap is beyond model error{bands}")
    return f"{head}{why}{verdict}."


def plan_verdict(plan: Plan) -> str:
    """`why_best` for a plan and its first alternative (an explicit note when it kept none)."""
    if not plan.alternatives:
        return "The plan kept no alternative to compare with (plan with --top-k 2 or more)."
    bands = plan.bands

    def contender(r: Ranked, i: int) -> Contender:
        # the ranking uses the simulated step where there is one: the simulator re-prices the pipeline, so
        # its difference from the closed form goes to the bubble and the terms add up to the ranked step
        terms = r.prediction.breakdown.as_dict()
        terms["bubble"] += r.step_time_s - r.prediction.step_time_s
        return Contender(layout_line(r.layout), r.step_time_s, terms, (bands[i].low_s, bands[i].high_s))

    return why_best(contender(plan.best, 0), contender(plan.alternatives[0], 1), plan.indistinguishable[0])


__all__ = ["Contender", "TERM_NAMES", "plan_verdict", "seconds", "why_best"]
