"""DualPipeV (DeepSeek-AI, DualPipe repository, dualpipe/dualpipev.py; the "cut-in-half" V of DualPipe, DeepSeek-V3
technical report, arXiv 2412.19437, section 3.2.1): two chunks per rank placed as a V (chunk 0 going down on rank r,
chunk 1 = 2P − 1 − r coming back up), the forward of one chunk and the full backward of the other run as a pair
(F&B, which DeepSeek overlaps with each other's communication), and zero-bubble split backwards (B then a later W)
only where they fill the warm-up and cool-down. The repository's table (README, "Pipeline Bubbles and Memory Usage"):
bubble (PP/2 − 1)(F&B + B − 3W) and PP + 1 chunk activations per device, PP = 2P stages, F, B (full backward) and W
per chunk.
"""

from __future__ import annotations

from collections import deque

from cost_models.pipeline.simulator import Op, OpKind


def dualpipev_order(rank: int, pp: int, m: int) -> tuple[Op, ...]:
    """Rank `rank`'s ops in the eight steps of dualpipev.py's `step` (P = pp ranks, m >= 2P micro-batches):
    1. 2(P − r − 1) forwards of chunk 0;  2. r + 1 pairs F0, F1;  3. P − r − 1 of B1 (split), W, F1;
    4. m − 2P + r + 1 of F0&B1, F1&B0 (full backwards);  5. P − r − 1 of B1, F1&B0;  6. r + 1 of B1, B0, split from
    the middle one on (before B1 on odd ranks, before B0 on even);  7. P − r − 1 of W, B0 (split);  8. r + 1 W.
    A full backward is `OpKind.BW`; the W passes pop the split backwards' in the order they ran."""
    down, up = rank, 2 * pp - 1 - rank
    count = {(kind, chunk): 0 for kind in (OpKind.F, OpKind.B) for chunk in (down, up)}
    waiting: deque[tuple[int, int]] = deque()
    ops: list[Op] = []

    def forward(chunk: int) -> None:
        ops.append(Op(OpKind.F, count[(OpKind.F, chunk)], chunk))
        count[(OpKind.F, chunk)] += 1

    def backward(chunk: int, split: bool) -> None:
        mb = count[(OpKind.B, chunk)]
        count[(OpKind.B, chunk)] += 1
        ops.append(Op(OpKind.B if split else OpKind.BW, mb, chunk))
        if split:
            waiting.append((mb, chunk))

    def weight() -> None:
        mb, chunk = waiting.popleft()
        ops.append(Op(OpKind.W, mb, chunk))

    for _ in range(2 * (pp - rank - 1)):
        forward(down)
    for _ in range(rank + 1):
        forward(down)
        forward(up)
    for _ in range(pp - rank - 1):
        backward(up, split=True)
        weight()
        forward(up)
    for _ in range(m - 2 * pp + rank + 1):
        forward(down)
        backward(up, split=False)
        forward(up)
        backward(down, split=False)
    for _ in range(pp - rank - 1):
        backward(up, split=False)
        forward(up)
        backward(down, split=False)
    split = False
    for i in range(rank + 1):
        split = split or (i == (rank + 1) // 2 and rank % 2 == 1)
        backward(up, split)
        split = split or (i == (rank + 1) // 2 and rank % 2 == 0)
        backward(down, split)
    for _ in range(pp - rank - 1):
        weight()
        backward(down, split=True)
    while waiting:
        weight()
    return tuple(ops)
