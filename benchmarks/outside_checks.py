"""Outside checks the README quotes: published runs no fit has seen, predicted with the committed profiles.

    python benchmarks/outside_checks.py

DeepSeek-V3 (arXiv 2412.19437): 2.664M H800 GPU-hours of pre-training for 14.8T tokens on 2048 GPUs, i.e.
14.8e12 / (2.664e6 / 2048 · 3600) ≈ 3.16M tokens/s. Layout and mechanisms from the report: PP16, EP64, no TP,
ZeRO-1, sequence 4096, global batch 15360, micro-batch 1, FP8 GEMMs, expert all-to-all overlapped with compute
(DualPipe; modelled as Megatron's EP overlap on 1F1B), node-limited deduplicated dispatch, RMSNorm and MLA
up-projections recomputed, SwiGLU recomputed (moe_act).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import planner  # noqa: E402
from meshcore import Runtime  # noqa: E402

DEEPSEEK_V3_TOKENS_PER_S = 14.8e12 / (2.664e6 / 2048 * 3600)


def deepseek_v3() -> planner.Prediction:
    return planner.evaluate(
        "deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360, pp=16, ep=64, mbs=1, zero=1,
        dtype="fp8", recompute_modules="layernorm,mla_up_proj,moe_act",
        runtime=Runtime(moe_comm_overlap=True, moe_dedup_dispatch=True))


def main() -> int:
    pred = deepseek_v3()
    err = 100 * (pred.tokens_per_s / DEEPSEEK_V3_TOKENS_PER_S - 1)
    print(f"DeepSeek-V3 on 2048 x H800: reported {DEEPSEEK_V3_TOKENS_PER_S / 1e6:.2f}M tokens/s, predicted "
          f"{pred.tokens_per_s / 1e6:.2f}M ({err:+.0f} %), {pred.peak_memory_gib:.1f} GiB per GPU, "
          f"{'fits' if pred.fits else 'does NOT fit'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
