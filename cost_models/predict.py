"""A layout's step from its pipeline ranks' stages (cost_models.step.stage_cost): the pipeline over their times per
micro-batch (cost_models.pipeline.stages), the tail of the stage with the longest gradient reduction and optimizer
step, the tied embedding's gradient all-reduce, and the headline figures (tokens/s, model and hardware TFLOP/s, MFU,
HFU), peak memory and host memory against their capacities.

Step time = pipeline + max over stages of (exposed gradient reduction + optimizer step) + embedding all-reduce.
"""

from __future__ import annotations

from cost_models.comm.collectives import Collective, collective
from cost_models.compute import flops as F
from cost_models.compute.sac import per_op_sac, recomputed_flops_per_token
from cost_models.memory.offload import host_capacity_bytes, node_host_bytes, nvme_fits
from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.stages import bubble_fraction, pipeline_time
from cost_models.prediction import Prediction, StageCost, step_breakdown
from meshcore import GIB, AttentionKernel, ClusterSpec, JobSpec, Layout, ModelSpec, RecomputeModule


def predict(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout, stages: list[StageCost],
            m: int) -> Prediction:
    """The step of `layout` from its ranks' stages over `m` micro-batches (the module docstring's sum)."""
    per_mb = [s.compute_s for s in stages]
    hidden = [W_SHARE * s.time.backward for s in stages]  # weight gradients zero-bubble schedules move around
    pipe = pipeline_time(per_mb, m, layout.vpp, layout.schedule, hidden, [s.time.forward for s in stages])
    tail = max(stages, key=lambda s: s.dp_exposed_s + s.optimizer_s)
    emb_sync = 0.0
    if model.tied_embeddings and not layout.head_beside_embedding:
        nbytes = model.vocab_size * model.hidden_size / layout.tp * job.runtime.grad_reduce_bytes
        emb_sync = collective(Collective.ALL_REDUCE, nbytes, layout.mesh.pipeline_ends, cluster)
    step = pipe + tail.dp_exposed_s + tail.optimizer_s + emb_sync
    breakdown = step_breakdown(stages, m, pipe, emb_sync)
    world = layout.world
    model_flops = F.model_flops_per_sequence(model, job.seq_len) * job.global_batch
    if job.trainable_fraction < 1:  # LoRA: no weight gradients of the frozen weights, the adapters' own work
        model_flops *= (2 + 3 * job.trainable_fraction) / 3
    n_full = sum(s.layers.full for s in stages)
    recompute_per_seq = sum(s.layers.dense_full for s in stages) * F.decoder_matmul_flops(model, job.seq_len)
    if model.moe is not None:
        recompute_per_seq += sum(s.layers.moe_full for s in stages) * F.moe_decoder_matmul_flops(model, job.seq_len)
    if RecomputeModule.CORE_ATTN in layout.recompute_modules and job.runtime.attention is AttentionKernel.UNFUSED:
        recompute_per_seq += (model.num_layers - n_full) * F.attention_core_flops(model, job.seq_len)
    if per_op_sac(layout.recompute, job):
        dense = sum(s.layers.dense - s.layers.dense_full for s in stages)  # per-op SAC prices dense layers only
        recompute_per_seq += dense * job.seq_len * recomputed_flops_per_token(model)
    hw_flops = model_flops + recompute_per_seq * job.global_batch
    peak = cluster.gpu.peak(job.dtype)
    peak_mem = max(s.peak_memory_gib for s in stages)
    host_need = node_host_bytes([s.host_gib * GIB for s in stages], layout.mesh.stage_group.size,
                                min(cluster.gpus_per_node, layout.world)) / GIB
    host_cap = host_capacity_bytes(cluster) / GIB
    return Prediction(
        step_time_s=step,
        tokens_per_s=job.tokens_per_step / step,
        model_tflops_per_gpu=model_flops / step / world / 1e12,
        hardware_tflops_per_gpu=hw_flops / step / world / 1e12,
        mfu=model_flops / step / world / peak,
        hfu=hw_flops / step / world / peak,
        peak_memory_gib=peak_mem,
        memory_capacity_gib=cluster.gpu.memory_gib,
        fits=(peak_mem <= cluster.gpu.memory_gib and host_need <= host_cap
              and nvme_fits(F.total_params(model), layout, job, cluster)),
        bubble_fraction=bubble_fraction(layout.schedule, layout.pp, m, layout.vpp),
        num_microbatches=m,
        breakdown=breakdown,
        stages=tuple(stages),
        host_memory_gib=host_need,
        host_capacity_gib=host_cap,
    )
