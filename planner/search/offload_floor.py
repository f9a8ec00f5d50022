"""The least exposed host copies of a candidate's average stage (`offload_floor`), a term of the search's time bounds
(planner.search.bounds.SearchBounds._family)."""

from __future__ import annotations

from cost_models.compute.knobs import LayerActivations, LayerTimes
from cost_models.memory.offload import layer_offload_exposed
from cost_models.memory.params import StageParams
from cost_models.sync import layer_copy_bytes
from meshcore import ClusterSpec, JobSpec, Offload, ZeroStage
from planner.search.space import Candidate


def offload_floor(c: Candidate, times: LayerTimes, acts: LayerActivations, layers: tuple[StageParams, StageParams],
                  counts: tuple[int, int], job: JobSpec, cluster: ClusterSpec) -> float:
    """Exposed host copies of the average stage per micro-batch, at the least: each layer's copies as
    cost_models.sync.stage_offload_exposed prices them (`layer_offload_exposed`: its weight shard with parameter
    offload, its stored activations with activation offload), every decoder layer over pp ranks, each at the
    cheaper of its own recomputation and full recomputation (whose smaller copy may hide behind a longer
    backward) net of the time full recomputation adds, which the bound's other terms do not count. That time
    also lengthens the windows the ZeRO and gradient-reduction traffic hides behind, and a window longer by Δ
    hides at most (1 − κ)·Δ more (`GpuSpec.exposed`): it is not counted, for each window the layer's passes
    belong to (forward and backward, with ZeRO-2/3 also the backward with its recomputation, each twice).
    0 without weights or activations on the host.

    `layers`: one dense and one MoE layer's parameters on a rank; `counts`: the (dense, MoE) decoder layers."""
    stored, nvme = Offload.ACTIVATIONS in c.offload, Offload.NVME in c.offload
    if not (stored or Offload.PARAMS in c.offload or Offload.GRADIENTS in c.offload):
        return 0.0
    layout = c.layout()
    (dense, moe), (n_dense, n_moe) = layers, counts
    hiding = 1.0 - cluster.gpu.overlap_efficiency  # 1 − κ
    total = 0.0
    for n, base, full, act, params in ((n_dense, times.decoder, times.decoder_full, acts.dense, dense),
                                       (n_moe, times.moe, times.moe_full, acts.moe, moe)):
        if not n or base is None or full is None:
            continue
        w, g = layer_copy_bytes(params, layout, job)
        own = layer_offload_exposed(base, w, act if stored else 0.0, cluster, g, nvme)
        longer = max(full.forward - base.forward, 0.0) + max(full.backward - base.backward, 0.0)
        if c.zero >= ZeroStage.GRADIENTS:
            longer = 2 * longer + max(full.recompute - base.recompute, 0.0)
        fully = (layer_offload_exposed(full, w, acts.full if stored else 0.0, cluster, g, nvme)
                 + full.total - base.total - hiding * longer)
        total += n * max(0.0, min(own, fully))
    return total / c.pp
