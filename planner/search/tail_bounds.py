"""A lower bound on the step's tail of one pipeline shape, before the split is known.

The tail a plan reports is the most exposed stage's gradient reduction, weight gather and optimizer step
(`cost_models.step`: the stage with the largest dp_exposed_s + optimizer_s). `SearchBounds._family` bounds it for every
schedule at once, with the widest windows any vpp gives (the interleaved schedule's, in the limit of ever finer
chunks), where the reduction mostly hides. Every other schedule (1F1B, GPipe, ZB-H1/H2, the V schedules, the wave)
reduces each stage's gradients beside its last backward alone (`sync.dp_reduce_exposed` with v = 1) and exposes far
more: Qwen3-235B on 1,024 H100 at pp 16, the priced ZB-V and DualPipeV layouts show 0.18 s of tail where that bound
gives 0.08. Interleaved layouts expose more, the fewer their chunks. `staggered_tail` prices each shape's own
windows.
"""

from __future__ import annotations

from cost_models.compute.knobs import LayerTimes
from cost_models.memory.params import StageParams
from cost_models.sync import grad_traffic, staggered_exposed
from meshcore import ClusterSpec, JobSpec, Layout

# parameters at which a collective's time per byte is its least (its latency spread over them is below 1e-9 s)
_HUGE = 1e18


def pass_ceilings(times: LayerTimes, counts: tuple[int, int], pp: int) -> tuple[float, float]:
    """(backward, forward) of the average stage's layers and ends per micro-batch at the most: the windows the tail's
    bounds hide the gradient reduction and weight gather behind (longer passes only hide more). Each of the (dense,
    MoE) `counts` decoder layers at the longer of its own and its fully recomputed pass, the embedding and the head,
    over `pp` ranks. A stage's backward also holds its gradient accumulation where the runtime adds it in autograd
    (`grad_accumulation_time`, linear in the stage's parameters: the caller adds the average stage's)."""
    ends = times.embedding + times.head
    backward, forward = ends.backward, ends.forward
    for own, full, n in zip((times.decoder, times.moe), (times.decoder_full, times.moe_full), counts, strict=True):
        if n and own is not None and full is not None:
            backward += n * max(own.backward, full.backward)
            forward += n * max(own.forward, full.forward)
    return backward / pp, forward / pp


def linear_traffic(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds per step of a stage holding `params`, at the least: `grad_traffic`
    of the same stage scaled up to 1e18 parameters, scaled back. Every NCCL choice takes latency + bytes / algbw with
    algbw at most its large-message value (cost_models/comm/nccl.py), so each collective's time per byte is least
    for the largest message, and the latency left over, scaled back, is below 1e-9 s. Linear in the parameters, so
    the average stage's is the mean of the stages'."""
    if params.total <= 0:
        return 0.0, 0.0
    scale = _HUGE / params.total
    reduce, gather = grad_traffic(params.scaled(scale), layout, job, cluster)
    return reduce / scale, gather / scale


def staggered_tail(reduce: float, gather: float, v: int, n: int, backward: float, forward: float, job: JobSpec,
                   cluster: ClusterSpec) -> float:
    """A lower bound on the most exposed stage's gradient reduction and weight gather per step
    (`sync.dp_reduce_exposed`, where the runtime does not keep weights gathered under the pipeline: `kept_gathered`,
    another formula), from the average stage's `linear_traffic` and upper bounds on its backward and forward per
    micro-batch; `v` chunks (1 without interleaving), n = min(pp, m) micro-batches per group.

    Stage s reduces for at least R_s = r·P_s (`linear_traffic`) and exposes `staggered_exposed` of it: (1 − κ)·late
    + κ·R_s, late = max(0, R_s/v − own, R_s − (v − 1)·gap − own), with v = vpp under Megatron-LM's interleaved
    schedule (own 0, gap n·b_s/v for the reduction; own f_s/v, gap n·f_s/v for the gather) and v = 1 under every
    other (own the stage's whole pass): a maximum of affine functions of (R_s, b_s, f_s), convex, nondecreasing in R_s
    and nonincreasing in the passes. So the most exposed stage, at least the mean of them, exposes at least (Jensen)
    what the mean stage would, and at least that with R̄ = r·P̄ and the passes at their upper bounds. Without overlap
    (`Runtime.overlap_grad_reduce` off) all of it."""
    if not job.runtime.overlap_grad_reduce:
        return reduce + gather
    gpu = cluster.gpu
    exposed = staggered_exposed(reduce, v, backward if v == 1 else 0.0, n * backward / v, gpu)
    if job.runtime.overlap_param_gather:
        return exposed + staggered_exposed(gather, v, forward / v, n * forward / v, gpu)
    return exposed + gather
