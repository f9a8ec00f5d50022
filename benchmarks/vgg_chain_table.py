"""Write a VGG-16 chain table from a formula, not a measurement (benchmarks/data/chains/vgg16-a100-formula.csv).

VGG-16 (Simonyan and Zisserman 2015, configuration D) on 224 x 224 images, bf16, one row per (layer, tp, mbs). A
conv layer at TP t splits its output channels t ways (Megatron-style column parallelism of the 3 x 3 filters):
    forward FLOPs  2 · H² · C_in · C_out · 9 · mbs / t   (fully connected: 2 · in · out · mbs / t)
    backward       twice the forward
    time           FLOPs / (312 TFLOP/s A100 bf16 dense peak x 0.45 achieved)
    TP traffic     forward all-gather of the output, backward reduce-scatter of its gradient:
                   each (t − 1)/t · output / 240 GB/s (NVLink bus bandwidth) + (t − 1) x 5 µs
    activations    the layer's 16-bit input (whole) + its output shard before ReLU: 2 · H² · (C_in + C_out / t) · mbs
    params         (9 · C_in · C_out + C_out) / t   (fully connected: (in · out + out) / t)
    output_bytes   2 · H'² · C_out · mbs, H' = H / 2 after the block's max-pool (the gathered output)
Usage: python benchmarks/vgg_chain_table.py [OUT.csv]
"""

from __future__ import annotations

import sys
from pathlib import Path

PEAK, EFFICIENCY, BUS, ALPHA = 312e12, 0.45, 240e9, 5e-6
CONVS = [(224, 3, 64, False), (224, 64, 64, True), (112, 64, 128, False), (112, 128, 128, True),
         (56, 128, 256, False), (56, 256, 256, False), (56, 256, 256, True), (28, 256, 512, False),
         (28, 512, 512, False), (28, 512, 512, True), (14, 512, 512, False), (14, 512, 512, False),
         (14, 512, 512, True)]
FCS = [(25088, 4096), (4096, 4096), (4096, 1000)]
TPS, SIZES = (1, 2, 4, 8), (1, 2, 4, 8, 16, 32, 64)
HEADER = "kind,count,tp,mbs,seq_len,forward_ms,backward_ms,activation_bytes,params,output_bytes"


def _row(kind: str, tp: int, mbs: int, flops: float, inp: float, out_shard: float, out: float, params: float) -> str:
    compute = flops * mbs / tp / (PEAK * EFFICIENCY)
    comm = ((tp - 1) / tp * out * mbs / BUS + (tp - 1) * ALPHA) if tp > 1 else 0.0
    act = (inp + out_shard / tp) * mbs
    return (f"{kind},1,{tp},{mbs},1,{(compute + comm) * 1e3:.6g},{(2 * compute + comm) * 1e3:.6g},{act:.6g},"
            f"{params / tp:.6g},{out * mbs:.6g}")


def rows() -> list[str]:
    lines = [HEADER]
    for tp in TPS:
        for mbs in SIZES:
            for n, (h, cin, cout, pool) in enumerate(CONVS):
                side = h // 2 if pool else h
                lines.append(_row(f"conv{n + 1}", tp, mbs, 2 * h * h * cin * cout * 9, 2 * h * h * cin,
                                  2 * h * h * cout, 2 * side * side * cout, 9 * cin * cout + cout))
            for n, (a, b) in enumerate(FCS):
                lines.append(_row(f"fc{n + 1}", tp, mbs, 2 * a * b, 2 * a, 2 * b, 2 * b, a * b + b))
    return lines


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data/chains/vgg16-a100-formula.csv")
    target.write_text("\n".join(rows()) + "\n")
    print(f"wrote {target}")
