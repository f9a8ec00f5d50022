"""The zero-bubble group's op orders (Qi, Wan, Huang, Lin, "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024,
arXiv 2401.10241; and Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, arXiv 2405.15362).

The backward is split into the input gradient B (on the critical path: the stage before waits for it) and the weight
gradient W (needed only by the optimizer step), so W passes can be moved into what would be bubbles. Times per stage
and micro-batch T_F, T_B, T_W; p stages, m micro-batches; M_B the activations of one micro-batch on one stage.

- ZB-H1 (2401.10241 section 2.1, Figure 3 top): 1F1B's warm-up of p − 1 − i forwards on stage i, then F and B in
  turn; stage i starts its W passes late, keeping i of them pending (the last stage the most). Its bubble is
  (p − 1)(T_F + T_B − T_W), a third of 1F1B's (p − 1)(T_F + T_B + T_W) when T_F = T_B = T_W, at 1F1B's peak memory
  p·M_B (stage i: p − i micro-batches whole and the weight-gradient share of i more).
- ZB-H2 (section 2.1, Figure 3 bottom): 2(p − i) − 1 warm-up forwards on stage i fill the bubble before the first
  B, then B, W, F in turn, W passes kept pending (2i of them) so that the tail runs them: every stage is busy from
  its first op to its last (a parallelogram), bubble (p − 1)(T_F + T_B − 2T_W), zero when T_F = T_B = T_W, at
  (2p − 1)·M_B.
- ZB-V (section 6; torch's ScheduleZBVZeroBubble): two chunks per rank placed as a V.

Each order is a tuple of `Op` per stage; the simulator (cost_models.pipeline.simulator) runs it as written.
"""

from __future__ import annotations

from cost_models.pipeline.simulator import Op, OpKind


def split_1f1b(chunk: int, m: int, warmup: int, pending: int, w_before_f: bool) -> tuple[Op, ...]:
    """One stage's F, B and W over m micro-batches: `warmup` forwards, then B and F in turn (F before B in the
    steady phase unless `w_before_f`, which runs B, then W, then F as ZB-H2 does), a W whenever more than `pending`
    of them wait, and the W passes still pending at the end."""
    fwd = [Op(OpKind.F, i, chunk) for i in range(m)]
    ops: list[Op] = fwd[:warmup]
    f = min(warmup, m)
    w = 0
    for b in range(m):
        if not w_before_f and f < m:
            ops.append(fwd[f])
            f += 1
        ops.append(Op(OpKind.B, b, chunk))
        if b + 1 - w > pending:
            ops.append(Op(OpKind.W, w, chunk))
            w += 1
        if w_before_f and f < m:
            ops.append(fwd[f])
            f += 1
    return tuple(ops + [Op(OpKind.W, i, chunk) for i in range(w, m)])


def zb_h1_order(stage: int, pp: int, m: int) -> tuple[Op, ...]:
    """ZB-H1 on `stage` (2401.10241 Figure 3 top): 1F1B's p − 1 − i warm-up forwards, F then B in the steady phase,
    i weight gradients kept pending on stage i. Bubble (p − 1)·max(T_F, T_B, T_F + T_B − T_W) for m >= p: the
    paper's (p − 1)(T_F + T_B − T_W) whenever T_W <= T_F and T_W <= T_B."""
    return split_1f1b(stage, m, min(pp - 1 - stage, m), stage, w_before_f=False)


def zb_h2_order(stage: int, pp: int, m: int) -> tuple[Op, ...]:
    """ZB-H2 on `stage` (2401.10241 Figure 3 bottom): 2(p − i) − 1 warm-up forwards, then B, W, F in turn with 2i
    weight gradients kept pending for the tail. Each stage busy from its first op to its last when
    T_F + T_B >= 2T_W (bubble (p − 1)(T_F + T_B − 2T_W) per stage, the paper's measure); the whole step, which waits
    for the last stage's late start, is m(T_F + T_B + T_W) + (p − 1)·max(T_F, T_F + T_B − 2T_W) for m >= 2p − 1."""
    return split_1f1b(stage, m, min(2 * (pp - stage) - 1, m), 2 * stage, w_before_f=True)


def zbv_order(device: int, pp: int, m: int) -> tuple[Op, ...]:
    """ZB-V on `device` (2401.10241 section 6), in the order torch.distributed.pipelining's
    ScheduleZBVZeroBubble runs (torchtitan "ZBVZeroBubble"): 2(p − d) − 1 forwards of the down chunk, d pairs of
    up/down forwards, p − d up-chunk F/B/W triples, then F-B-W on either chunk in turn, and a cool-down that drains
    the input gradients before the weight gradients. Built for max(m, 2p − 1) micro-batches, as torch does, then
    restricted to the m that exist."""
    down, up = device, 2 * pp - 1 - device
    total = max(m, 2 * pp - 1)
    ops: list[Op] = []
    count = {(kind, chunk): 0 for kind in OpKind for chunk in (down, up)}

    def emit(kind: OpKind, chunk: int) -> None:
        ops.append(Op(kind, count[(kind, chunk)], chunk))
        count[(kind, chunk)] += 1

    def triple(chunk: int) -> None:  # input gradient, then weight gradient of the same micro-batch
        emit(OpKind.B, chunk)
        emit(OpKind.W, chunk)

    for _ in range(2 * (pp - device) - 1):
        emit(OpKind.F, down)
    for _ in range(device):
        emit(OpKind.F, up)
        emit(OpKind.F, down)
    for _ in range(pp - device):
        emit(OpKind.F, up)
        triple(up)
    while count[(OpKind.F, up)] < count[(OpKind.F, down)] or count[(OpKind.F, down)] < total:
        if count[(OpKind.F, down)] < total:
            emit(OpKind.F, down)
        triple(down)
        emit(OpKind.F, up)
        triple(up)
    for _ in range(device):
        emit(OpKind.B, down)
        emit(OpKind.B, up)
    for _ in range(pp - device):
        emit(OpKind.B, down)
        emit(OpKind.W, down)
    for chunk in (up, down):
        while count[(OpKind.W, chunk)] < count[(OpKind.B, chunk)]:
            emit(OpKind.W, chunk)
    return tuple(op for op in ops if op.microbatch < m)
