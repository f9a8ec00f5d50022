"""The model orders same-job pairs of published runs as they were measured.

A planner is used to choose between layouts, so the order of two layouts of one job matters more than either
absolute figure. The pairs are the ones the calibration data holds for the same model on the same GPUs:
- Narayanan et al. 2021 Table 2: ZeRO-3 against PTD-P for GPT-3 175B and the 530B model at equal GPU counts;
- Korthikanti et al. 2022: sequence parallelism with selective recomputation against full recomputation, same
  layout, for the 22B, 175B, 530B and 1T models;
- NVIDIA's Llama 3.1 405B on 1,024 H100: the 26.04 layout with three times the global batch (fewer bubbles and
  less per-step communication per token) against the same layout at 512 sequences in 25.09. The 25.11 run of the
  512-sequence layout is not paired: it ran 3.5 % slower than 25.09's identical layout, so its 12 % gap to 26.04
  is partly a change of software release, which no layout model should be asked to predict.
Each assertion compares model FLOP rates per GPU (step time scaled by the job's FLOPs), measured vs predicted
with the committed hardware profiles, and the predicted gap must be at least a third of the measured one; for the
405B pair, whose runs are seven months of releases apart, only the order: with the distributed optimizer's
reductions hidden chunk by chunk across the drain as Megatron-core's interleaved schedule runs them
(cost_models.sync.dp_reduce_exposed), what a 3x batch saves per token is the bubble and the DP remainder, about 2 %
of the 8.6 % measured; the rest is the releases (25.09 to 25.11 alone moved the same layout 3.5 %).
"""

from __future__ import annotations

import pytest
from published import Observation, a100_observations, h100_observations

PAIRS = [  # (faster as measured, slower as measured)
    ("narayanan2021_t2_ptd_174.6B_384gpus", "narayanan2021_t2_zero3_174.6B_384gpus"),
    ("narayanan2021_t2_ptd_174.6B_768gpus", "narayanan2021_t2_zero3_174.6B_768gpus"),
    ("narayanan2021_t2_ptd_174.6B_1536gpus", "narayanan2021_t2_zero3_174.6B_1536gpus"),
    ("narayanan2021_t2_ptd_529.6B_1120gpus", "narayanan2021_t2_zero3_529.6B_1120gpus"),
    ("narayanan2021_t2_ptd_529.6B_2240gpus", "narayanan2021_t2_zero3_529.6B_2240gpus"),
    ("korthikanti2022_22B_present_work", "korthikanti2022_22B_full_recompute"),
    ("korthikanti2022_175B_present_work", "korthikanti2022_175B_full_recompute"),
    ("korthikanti2022_530B_present_work", "korthikanti2022_530B_full_recompute"),
    ("korthikanti2022_1T_present_work", "korthikanti2022_1T_full_recompute"),
    ("mbridge_26.04.01_h100_LLAMA3p1_405B_1024gpus", "mbridge_25.09_h100_LLAMA3p1_405B_1024gpus"),
]
ACROSS_RELEASES = {("mbridge_26.04.01_h100_LLAMA3p1_405B_1024gpus", "mbridge_25.09_h100_LLAMA3p1_405B_1024gpus")}


@pytest.fixture(scope="module")
def runs() -> dict[str, Observation]:
    h100, _ = h100_observations()
    return {o.run_id: o for o in a100_observations() + h100}


def _predicted_rate(obs: Observation) -> float:
    return obs.measured_flops_per_gpu * obs.measured_step_s / obs.predict().step_time_s


@pytest.mark.parametrize(("fast", "slow"), PAIRS)
def test_same_job_pair_is_ordered_as_measured(runs: dict[str, Observation], fast: str, slow: str) -> None:
    a, b = runs[fast], runs[slow]
    measured_gap = a.measured_flops_per_gpu / b.measured_flops_per_gpu - 1
    predicted_gap = _predicted_rate(a) / _predicted_rate(b) - 1
    assert measured_gap > 0.05, "the data says these differ"
    share = 0.0 if (fast, slow) in ACROSS_RELEASES else 1 / 3
    assert predicted_gap > measured_gap * share, (
        f"{fast} should be {100 * measured_gap:.1f} % faster per GPU than {slow}; predicted "
        f"{100 * predicted_gap:+.1f} %")
