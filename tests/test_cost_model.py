"""Cost-model behaviour: closed forms, tiers, orderings the calibration data shows, and accuracy."""

from __future__ import annotations

from pathlib import Path

import calibration  # benchmarks/calibration.py: conftest.py puts benchmarks/ on sys.path
import pytest

from cost_models.comm.collectives import Collective, collective_time, group_link, nccl_choice, p2p_time
from cost_models.pipeline.schedules import in_flight
from cost_models.pipeline.stages import bubble_fraction, pipeline_time
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore import AttentionKernel, Group, Runtime, Schedule
from planner import evaluate

MEGATRON_2022 = Runtime(attention=AttentionKernel.UNFUSED, overlap_grad_reduce=False, overlap_param_gather=False,
                        multi_rail=False)


def test_pipeline_closed_forms() -> None:
    t, p, m = 0.5, 8, 32
    assert pipeline_time([t] * p, m, 1, Schedule.ONE_F_ONE_B) == pytest.approx((m + p - 1) * t)
    assert pipeline_time([t] * p, m, 4, Schedule.INTERLEAVED_1F1B) == pytest.approx((m + (p - 1) / 4) * t)
    assert bubble_fraction(Schedule.ONE_F_ONE_B, p, m, 1) == pytest.approx((p - 1) / m)
    # Korthikanti et al. 2022: the first stage holds p·(1 + (p−1)/(p·v)) micro-batches of the stage
    v = 3
    assert in_flight(Schedule.INTERLEAVED_1F1B, 0, p, m, v) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert [in_flight(Schedule.ONE_F_ONE_B, r, p, m, 1) for r in (0, p - 1)] == [p, 1]


def test_tiers_follow_placement() -> None:
    c = load_hardware("h100-sxm", 64)
    assert group_link(c, 8, 1) == (c.scale_up, False)  # TP inside a node: NVLink
    assert group_link(c, 8, 8)[1] is True  # DP across nodes: NICs
    assert group_link(c, 4, 2) == (c.scale_up, False)  # TP 2 x CP 4 still fits in one node
    nv = collective_time(Collective.ALL_REDUCE, 1e9, 8, 1, c)
    ib = collective_time(Collective.ALL_REDUCE, 1e9, 8, 8, c)
    assert ib > 5 * nv
    # nccl-tests factors on a ring: all-reduce moves 2(n−1)/n, all-gather (n−1)/n of the buffer, beside NCCL's
    # latencies (cost_models/comm/nccl.py)
    ar, ag = (nccl_choice(kind, 1e9, Group.line(8, 1), c) for kind in (Collective.ALL_REDUCE, Collective.ALL_GATHER))
    assert ar.seconds == pytest.approx(nv) and ag.seconds == pytest.approx(collective_time(Collective.ALL_GATHER,
                                                                                           1e9, 8, 1, c))
    assert nv - ar.latency_s == pytest.approx(2 * (ag.seconds - ag.latency_s))


def test_breakdown_adds_up() -> None:
    p = evaluate("llama3-70b", "h100-sxm", gpus=64, seq_len=8192, global_batch=64, tp=8, pp=4, cp=2, vpp=5,
                 mbs=1, zero=1, recompute="selective")
    assert sum(p.breakdown.as_dict().values()) == pytest.approx(p.step_time_s, rel=1e-12)
    assert p.breakdown.bubble_s > 0
    # CP 2 ring attention: each of the 20 decoder layers of a stage sends one K,V block of 4096 tokens x 1 KV head
    # per TP rank x 128 x 2 (K and V) x 2 bytes to the CP peer (8 GPUs away: TP fills the node) once forward
    # and twice backward (K, V and their gradients), m = 64 micro-batches. At 8192 tokens that transfer is
    # shorter than the attention kernel beside it, so exactly kappa = 1 - overlap_efficiency of it is exposed
    # (GpuSpec.exposed); without CP there is no ring at all.
    cluster = load_hardware("h100-sxm", 64)
    ring = p2p_time(4096 * 1 * 128 * 2 * 2, 8, cluster)
    kappa = 1 - cluster.gpu.overlap_efficiency
    assert p.num_microbatches == 64 and [s.num_layers for s in p.stages] == [20] * 4
    assert p.breakdown.cp_comm_s == pytest.approx(64 * 20 * 3 * kappa * ring, rel=1e-9)
    no_cp = evaluate("llama3-70b", "h100-sxm", gpus=64, seq_len=8192, global_batch=64, tp=8, pp=4, cp=1, vpp=5,
                     mbs=1, zero=1, recompute="selective")
    assert no_cp.breakdown.cp_comm_s == 0.0


def test_selective_plus_sp_beats_full_recompute() -> None:
    """Korthikanti et al. 2022 Table 5: 175B, TP 8 PP 8: 13.75 s with SP + selective vs 18.13 s with full
    recomputation (ratio 0.758); the model keeps the order and the size of the gain within 10 %."""
    kw = dict(gpus=64, seq_len=2048, global_batch=64, tp=8, pp=8, vpp=3, mbs=1, runtime=MEGATRON_2022)
    fast = evaluate("gpt3-175b", "a100-80gb", sp=True, recompute="selective", **kw)
    slow = evaluate("gpt3-175b", "a100-80gb", sp=False, recompute="full", **kw)
    assert fast.step_time_s / slow.step_time_s == pytest.approx(13.75 / 18.13, rel=0.10)


def test_zero3_loses_to_ptdp_at_scale() -> None:
    """Narayanan et al. 2021 Table 2: on 1536 GPUs ZeRO-3 reaches 44 TFLOP/s, PTD-P 141."""
    rt = Runtime(attention=AttentionKernel.UNFUSED, grad_reduce_bytes=2, multi_rail=False)
    z3 = evaluate("gpt3-175b", "a100-80gb", gpus=1536, seq_len=2048, global_batch=1536, zero=3, mbs=1,
                  recompute="full", runtime=rt)
    ptd = evaluate("gpt3-175b", "a100-80gb", gpus=1536, seq_len=2048, global_batch=1536, tp=8, pp=12, mbs=1,
                   sp=False, recompute="full", runtime=MEGATRON_2022)
    assert ptd.step_time_s * 2.5 < z3.step_time_s


def test_faster_network_never_slower() -> None:
    kw = dict(gpus=256, seq_len=4096, global_batch=512, tp=8, pp=4, mbs=1, zero=1)
    base = evaluate("llama3-70b", "h100-sxm", **kw)
    fast = evaluate("llama3-70b", "h100-sxm", overrides=HardwareOverrides(inter_node_gbps=3200), **kw)
    assert fast.step_time_s <= base.step_time_s


def test_fp8_is_faster_than_bf16_on_h100() -> None:
    """Where the GPU bounds the step (TP 1, 2) fp8 GEMMs make it faster; Llama-3-8B at TP 8 and one sequence per
    micro-batch is host-bound (each layer pass issues the same operators, and TP 8's collective calls, whatever the
    GEMMs' dtype: cost_models/compute/host.py), so fp8 gains nothing there and is never slower."""
    for tp in (1, 2):
        kw = dict(gpus=8, seq_len=4096, global_batch=32, tp=tp, mbs=1)
        assert evaluate("llama3-8b", "h100-sxm", dtype="fp8", **kw).step_time_s < \
            evaluate("llama3-8b", "h100-sxm", dtype="bf16", **kw).step_time_s
    kw = dict(gpus=8, seq_len=4096, global_batch=32, tp=8, mbs=1)
    fp8, bf16 = (evaluate("llama3-8b", "h100-sxm", dtype=d, **kw) for d in ("fp8", "bf16"))
    assert fp8.breakdown.host_s > 0 and fp8.step_time_s <= bf16.step_time_s * (1 + 1e-12)


def test_calibration_has_not_regressed(calibration_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/calibration.py --check: no in-sample or leave-one-source-out mean error, nor pair ranking,
    worse than the figures of record, and every published run predicted to fit."""
    assert (calibration_dir / "accuracy_of_record.yaml").is_file()
    assert calibration.main(["--check"]) == 0, capsys.readouterr().out


def test_a100_calibration_meets_its_targets(calibration_dir: Path) -> None:
    """The A100 runs (bf16, dense): in-sample mean |error| <= 5 % and leave-one-source-out <= 10 %."""
    import yaml
    record = yaml.safe_load((calibration_dir / "accuracy_of_record.yaml").read_text())
    assert record["ampere/dense"]["in_sample_pct"] <= 5.0
    assert record["ampere/dense"]["held_out_pct"] <= 10.0


def test_multi_rail_speeds_up_fsdp_across_nodes() -> None:
    """A data-parallel group with 8 ranks per node spreads its rings over the node's 8 NICs (current NCCL);
    a group with one rank per node (TP 8 inside) cannot."""
    kw = dict(gpus=64, seq_len=8192, global_batch=64, mbs=1, zero=3)
    one = evaluate("llama3-8b", "a100-80gb", runtime=Runtime(multi_rail=False), **kw)
    all_rails = evaluate("llama3-8b", "a100-80gb", **kw)
    assert all_rails.breakdown.sharded_dp_comm_s < one.breakdown.sharded_dp_comm_s / 2
    tp8 = dict(kw, tp=8, zero=1)
    assert evaluate("llama3-8b", "a100-80gb", runtime=Runtime(multi_rail=False), **tp8).step_time_s == \
        pytest.approx(evaluate("llama3-8b", "a100-80gb", **tp8).step_time_s)


def test_fp8_param_gather_halves_the_weight_gathers_of_fp8_training() -> None:
    """Megatron --fp8-param-gather: FSDP gathers fp8 weights, 1 byte per parameter instead of bf16's 2, so the
    gathers take about half as long (the gradient reduce-scatters do not change); bf16 training is unaffected."""
    from cost_models.sync import gather_bytes
    from meshcore import Dtype, JobSpec
    h100 = load_hardware("h100-sxm", 16)
    on = Runtime(fp8_param_gather=True)
    assert gather_bytes(JobSpec(seq_len=4096, global_batch=16, dtype=Dtype.FP8, runtime=on), h100) == 1.0
    assert gather_bytes(JobSpec(seq_len=4096, global_batch=16, dtype=Dtype.BF16, runtime=on), h100) == 2.0
    kw = dict(gpus=16, seq_len=4096, global_batch=16, mbs=1, zero=3)
    plain = evaluate("llama3-8b", "h100-sxm", dtype="fp8", **kw)
    fp8_gather = evaluate("llama3-8b", "h100-sxm", dtype="fp8", runtime=on, **kw)
    assert fp8_gather.breakdown.sharded_dp_comm_s < plain.breakdown.sharded_dp_comm_s
    bf16 = dict(kw, dtype="bf16")
    assert evaluate("llama3-8b", "h100-sxm", runtime=on, **bf16).step_time_s == \
        pytest.approx(evaluate("llama3-8b", "h100-sxm", **bf16).step_time_s)


def test_sequence_parallel_collectives_as_transformer_engine_runs_them() -> None:
    """Under sequence parallelism the forward's all-gathers and reduce-scatters are exposed; in the backward only the
    row layers' gradient all-gathers are: the column layers' input re-gather and dgrad reduce-scatter run beside their
    dgrad and wgrad GEMMs (TE linear.py / layernorm_linear.py), costing kappa of their time. fp8 gathers 1-byte
    casts: an all-gather is a quarter of a bf16 all-reduce-equivalent instead of a half."""
    from cost_models.compute.knobs import LayerKnobs
    from cost_models.compute.layer import _tp_comm, decoder_layer_time
    from meshcore import Dtype, JobSpec, Recompute
    from planner.inputs.loaders import load_model

    model, cluster = load_model("llama3-70b"), load_hardware("h100-sxm", 8)
    knobs = LayerKnobs(tp=8, cp=1, sp=True, mbs=1, recompute=Recompute.NONE)
    unit = _tp_comm(cluster, knobs, 8192 * model.hidden_size * 2, 1, True)
    kappa = 1 - cluster.gpu.overlap_efficiency
    for dtype, gather in ((Dtype.BF16, 0.5), (Dtype.FP8, 0.25)):
        t = decoder_layer_time(model, JobSpec(seq_len=8192, global_batch=8, dtype=dtype), cluster, knobs)
        forward = 2 * (gather + 0.5) * unit
        backward = 2 * gather * unit + kappa * 2 * (gather + 0.5) * unit
        assert t.tp_comm == pytest.approx(forward + backward, rel=1e-9)
    # without sequence parallelism the two all-reduces of each pass stay on the critical path
    plain = LayerKnobs(tp=8, cp=1, sp=False, mbs=1, recompute=Recompute.NONE)
    t = decoder_layer_time(model, JobSpec(seq_len=8192, global_batch=8), cluster, plain)
    assert t.tp_comm == pytest.approx(4 * unit, rel=1e-9)


def test_fp8_gemm_takes_the_curve_point_of_an_equally_long_bf16_gemm() -> None:
    """The efficiency curve is one of bf16 FLOPs; an fp8 GEMM of F FLOPs lasts as long as a bf16 one of F/2 and sits
    at that point of the curve (times fp8_matmul_ratio): fixed per-kernel costs weigh on it as on the shorter bf16
    GEMM, so fp8 saturates at twice the size."""
    from cost_models.compute.kernels import Gemm, gemm_time
    from meshcore import Dtype

    gpu = load_hardware("h100-sxm", 8).gpu
    ratio = gpu.peak_fp8_tflops / gpu.peak_bf16_tflops  # type: ignore[operator]
    for m, n, k in ((2048, 2048, 2048), (8192, 8192, 8192)):
        g = Gemm(m, n, k)
        fp8, bf16_half = gemm_time(g, gpu, Dtype.FP8), gemm_time(Gemm(m, n, k / ratio), gpu, Dtype.BF16)
        assert fp8 == pytest.approx(bf16_half / gpu.fp8_matmul_ratio, rel=1e-9)


def test_ring_attention_pays_its_merges_and_half_blocks() -> None:
    """Causal ring attention (cp 2) costs more than the same attention FLOPs at s/cp keys: the steps after the
    diagonal run on half blocks, and every step merges its output (forward) and its dQ, dK, dV (backward) at HBM
    speed."""
    from cost_models.compute.kernels import flash_attention_time, memory_time
    from cost_models.compute.knobs import LayerKnobs
    from cost_models.compute.layer import _attention_core, ring_attention_merge_time
    from meshcore import JobSpec, Recompute
    from planner.inputs.loaders import load_model

    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 8)
    job = JobSpec(seq_len=8192, global_batch=8)
    knobs = LayerKnobs(tp=1, cp=2, sp=False, mbs=1, recompute=Recompute.NONE)
    flops = 2.0 * 32 * 4096 * 8192 * 256 * 0.5
    whole_f, _ = flash_attention_time(flops, 4096, 128, cluster.gpu)
    ring_f, _ = _attention_core(model, job, cluster, knobs)
    assert ring_f > whole_f
    merge_f, merge_b = ring_attention_merge_time(model, knobs, 4096, cluster.gpu)
    kv = 2 * 8 * 128
    assert merge_f == pytest.approx(2 * memory_time(4096 * (6 * 4096 + 2 * kv), cluster.gpu), rel=1e-9)
    assert merge_b == pytest.approx(2 * memory_time(4096 * (6 * 4096 + 8 * kv), cluster.gpu), rel=1e-9)
    assert ring_attention_merge_time(model, LayerKnobs(1, 1, False, 1, Recompute.NONE), 8192, cluster.gpu) == (0, 0)


def test_cross_entropy_reads_and_writes_fp32_logits() -> None:
    """Megatron-core's vocabulary-parallel cross-entropy works on an fp32 copy of the logits: 22 bytes per logit
    forward (copy and max, shift-exp-sum, normalise) and 14 backward (scale the saved softmax, cast to bf16)."""
    from cost_models.compute.kernels import Gemm, gemm_fwd_bwd_time, memory_time
    from cost_models.compute.knobs import LayerKnobs
    from cost_models.compute.layer import head_time
    from meshcore import Dtype, JobSpec, Recompute
    from planner.inputs.loaders import load_model

    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 8)
    gpu, tokens, h, v = cluster.gpu, 4096, model.hidden_size, model.vocab_size
    t = head_time(model, JobSpec(seq_len=tokens, global_batch=8), cluster, LayerKnobs(1, 1, False, 1, Recompute.NONE))
    gf, gb = gemm_fwd_bwd_time(Gemm(tokens, v, h), gpu, Dtype.BF16)
    norm = memory_time(tokens * 4 * h, gpu)
    assert t.forward == pytest.approx(gf + norm + memory_time(tokens * 22 * v, gpu), rel=1e-12)
    assert t.backward == pytest.approx(gb + 2 * norm + memory_time(tokens * 14 * v, gpu), rel=1e-12)


def test_unfused_squared_relu_costs_its_extra_passes() -> None:
    """Nemotron's squared ReLU as NeMo runs it (relu, then pow; autograd's pow and relu backward) reads and writes
    8 bytes per FC1 output element forward and 20 backward, against a fused GELU's 4 and 6; the GEMMs and the
    stored activations are the same."""
    from dataclasses import replace

    from cost_models.compute.kernels import memory_time
    from cost_models.compute.knobs import LayerKnobs
    from cost_models.compute.layer import decoder_layer_time
    from cost_models.step import decoder_activation
    from meshcore import JobSpec, Recompute
    from meshcore.enums import Activation
    from planner.inputs.loaders import model_from_mapping

    gelu = model_from_mapping({"name": "n", "num_layers": 4, "hidden_size": 4096, "ffn_hidden_size": 16384,
                               "num_attention_heads": 32, "vocab_size": 256000, "gated_mlp": False,
                               "tied_embeddings": False, "norm": "layernorm"}, "m.yaml")
    relu2 = replace(gelu, activation=Activation.SQUARED_RELU)
    cluster, job = load_hardware("h100-sxm", 8), JobSpec(seq_len=4096, global_batch=8)
    knobs = LayerKnobs(tp=2, cp=1, sp=True, mbs=1, recompute=Recompute.NONE)
    a, b = decoder_layer_time(gelu, job, cluster, knobs), decoder_layer_time(relu2, job, cluster, knobs)
    elements = 4096 * 16384 / 2
    assert b.forward - a.forward == pytest.approx(memory_time(elements * 4, cluster.gpu), rel=1e-9)
    assert b.backward - a.backward == pytest.approx(memory_time(elements * 14, cluster.gpu), rel=1e-9)
    args = (job, 2, 1, True, 1, Recompute.NONE)
    assert decoder_activation(gelu, *args) == decoder_activation(relu2, *args)
