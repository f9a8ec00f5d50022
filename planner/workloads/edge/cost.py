"""A decoder-only transformer pipelined over a few edge devices (Jetson-class modules, one GPU each, linked by
Ethernet): per-layer times and memory on each device, and the hop between devices.

Each device runs whole layers at batch b with the single-GPU serving roofline (cost_models.inference, tp = 1):
decode is bound by the memory bandwidth (LPDDR5 shared with the CPU), prefill by the 16-bit tensor cores
(int8/int4 weights are weight-only quantised: dequantised in the GEMM, as in MLC's q4f16 and llama.cpp's CUDA
kernels). A hop sends the tokens' hidden states, 2·h bytes each, once per stage boundary (PipeEdge, Hu et al.
2022; EdgeShard, Zhang et al. 2024):  t_hop = α + tokens·h·2 / (link · η).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.inference import (
    decode_layer_time,
    kv_bytes_per_token_layer,
    layer_weight_bytes,
    prefill_layer_time,
)
from meshcore import GIB, ClusterSpec, ModelSpec
from meshcore.inference import ReplicaLayout, WeightFormat
from planner.workloads.edge.spec import EdgeJob

SINGLE = ReplicaLayout()


@dataclass(frozen=True)
class DeviceCosts:
    """One device's per-decoder-layer costs for a job, and its fixed ends: `decode[i]` seconds of one decode step
    of layer i for the micro-batch, `prefill[i]` of the prompt, `memory[i]` bytes (weights + KV of every sequence
    in flight); the embedding's and the LM head's bytes and the head's times; `capacity` bytes usable."""

    name: str
    decode: tuple[float, ...]
    prefill: tuple[float, ...]
    memory: tuple[float, ...]
    embedding_bytes: float
    head_bytes: float
    head_decode: float
    head_prefill: float
    capacity: float
    hop_decode: float
    hop_prefill: float


def hop_time(model: ModelSpec, device: ClusterSpec, tokens: float) -> float:
    """One stage-to-stage send of `tokens` hidden states over the receiving device's scale-out link."""
    link = device.scale_out
    return link.latency_us * 1e-6 + tokens * model.hidden_size * 2.0 / link.bus_bytes_per_s


def device_costs(model: ModelSpec, device: ClusterSpec, job: EdgeJob, micro: float) -> DeviceCosts:
    """Per-layer costs of `model` on `device` for `job`, decode steps of `micro` sequences at once. Memory
    holds the KV cache of all `job.batch` sequences at full context."""
    decode_t = {moe: decode_layer_time(model, device, SINGLE, micro, job.prompt_len + job.output_len / 2, moe,
                                       job.weights, job.kv) for moe in {False, model.moe is not None}}
    prefill_t = {moe: job.batch * prefill_layer_time(model, device, SINGLE, job.prompt_len, moe, job.weights)
                 for moe in decode_t}
    kv = job.batch * (job.prompt_len + job.output_len) * kv_bytes_per_token_layer(model, 1, job.kv)
    mem = {moe: layer_weight_bytes(model, SINGLE, moe, job.weights) + kv for moe in decode_t}
    kinds = model.moe_layers()
    head_params = model.vocab_size * model.hidden_size
    head_rate = device.gpu.peak_bf16_tflops * 1e12 * device.gpu.matmul_efficiency.at(2.0 * head_params)
    head_read = head_params * 2.0 / (device.gpu.hbm_gbs * 1e9 * device.gpu.memory_efficiency)
    return DeviceCosts(
        name=device.name,
        decode=tuple(decode_t[k] for k in kinds),
        prefill=tuple(prefill_t[k] for k in kinds),
        memory=tuple(mem[k] for k in kinds),
        embedding_bytes=model.vocab_size * model.hidden_size * 2.0,
        head_bytes=0.0 if model.tied_embeddings else head_params * 2.0,
        head_decode=max(head_read, 2.0 * micro * head_params / head_rate),
        head_prefill=max(head_read, 2.0 * job.batch * head_params / head_rate),
        capacity=(device.gpu.memory_gib - job.reserve_gib) * GIB,
        hop_decode=hop_time(model, device, micro),
        hop_prefill=hop_time(model, device, job.batch * job.prompt_len),
    )


def weights_gib(model: ModelSpec, weights: WeightFormat) -> float:
    """All decoder weights in `weights` plus the 16-bit embedding and head, GiB (for reports)."""
    layers = sum(layer_weight_bytes(model, SINGLE, moe, weights) for moe in model.moe_layers())
    ends = model.vocab_size * model.hidden_size * 2.0 * (1 if model.tied_embeddings else 2)
    return (layers + ends) / GIB
