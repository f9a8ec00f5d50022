"""Mixture-of-experts and MLA: parameter sharding, the FLOPs the time model prices, expert parallelism's
rules and traffic, the dense/MoE stage split, and DeepSeek-V3 on 2048 H800 GPUs with its published layout."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from cost_models.comm.collectives import all_to_all_time
from cost_models.compute import flops as F
from cost_models.compute.gemms import attention_gemms
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.layer import decoder_layer_time
from cost_models.compute.moe import moe_gemms
from cost_models.memory import footprint as M
from cost_models.memory.params import rank_params
from cost_models.prediction import StageLayers
from cost_models.step import evaluate_layout, layout_costs, stage_cost
from hardware_profiles import load_hardware
from meshcore import GIB, JobSpec, Layout, Recompute, Runtime, ZeroStage
from meshcore.errors import LayoutError, SpecError
from planner import plan as run_plan
from planner.api import make_layout, resolve
from planner.inputs.loaders import load_model
from planner.outputs.plan import Plan
from planner.outputs.planfile import plan_to_dict, save_plan
from planner.outputs.planread import load_plan
from planner.search.partition import KindSplitProblem, brute_force_kinds, solve_kinds
from planner.search.space import SearchSpec

MOE_PRESETS = ["mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "llama4-maverick"]
JOB = JobSpec(seq_len=4096, global_batch=64)
ANY = Runtime(framework="any")  # ZB-V layouts: the research space


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_rank_parameters_add_up_to_the_model(name: str) -> None:
    """One rank's parameters with no sharding are the whole model; sharded, the routed experts split
    exactly over ep x etp and the rest over tp (replicated norms, router and MLA down projections aside)."""
    model = load_model(name)
    whole = rank_params(model, JOB, 1, True)
    assert whole.total == pytest.approx(F.total_params(model), rel=1e-12)
    n_dense, n_moe = F.decoder_layer_counts(model)
    experts = n_moe + (model.mtp_layers if model.moe and model.moe.is_moe_layer(model.num_layers) else 0)
    assert whole.expert == experts * model.moe.num_experts * F.mlp_params_of_width(model, model.moe.ffn_hidden_size)
    for ep, etp in ((2, 1), (8, 2)):
        part = rank_params(model, JOB, 2, True, ep, etp)
        assert part.expert * ep * etp == pytest.approx(whole.expert)
        assert whole.dense / 2 < part.dense < whole.dense


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_priced_gemms_are_the_counted_flops(name: str) -> None:
    """The GEMMs the time model prices for one MoE layer on one unsharded rank carry exactly the forward
    FLOPs of `moe_decoder_matmul_flops` less the attention core (which FlopCounterMode checks against
    transformers' own models in test_torch_oracle.py)."""
    model = load_model(name)
    s = JOB.seq_len
    knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=1, recompute=Recompute.NONE)
    priced = sum(g.flops for g in attention_gemms(model, s, 1)) + sum(
        g.flops * n for g, n in moe_gemms(model, knobs, s))
    assert priced == pytest.approx(F.moe_decoder_matmul_flops(model, s) - F.attention_core_flops(model, s), rel=1e-12)


def test_routed_work_per_rank_does_not_depend_on_ep() -> None:
    """Balanced routing: each rank computes k·T·r copies whatever the expert-parallel degree; capacity
    padding scales them."""
    model = load_model("qwen3-30b-a3b")

    def routed(ep: int, load: float = 1.0) -> float:
        knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=1, recompute=Recompute.NONE, ep=ep)
        return sum(g.flops * n for g, n in moe_gemms(model, knobs, 4096, load)[1:])

    assert routed(1) == pytest.approx(routed(8)) == pytest.approx(routed(128))
    assert routed(8, 1.25) == pytest.approx(1.25 * routed(8))


def test_all_to_all_inside_and_across_nodes() -> None:
    """Inside a node the share to other ranks crosses NVLink; across nodes the share leaving the node goes
    through each rank's own NIC and sets the pace. NCCL's base latency (Simple, 8.4 µs) plus one latency of its
    tier per peer (cost_models/comm/nccl.py, p2p_seconds)."""
    cluster = load_hardware("h800", 512)
    nbytes = 256e6
    up, out = cluster.scale_up, cluster.scale_out
    inside = all_to_all_time(nbytes, 8, 1, cluster)
    assert inside == pytest.approx((8.4 + 7 * up.latency_us) * 1e-6 + nbytes * 7 / 8 / up.bus_bytes_per_s)
    across = all_to_all_time(nbytes, 64, 1, cluster)
    assert across == pytest.approx((8.4 + 7 * up.latency_us + 56 * out.latency_us) * 1e-6
                                   + nbytes * 56 / 64 / out.bus_bytes_per_s)
    assert all_to_all_time(nbytes, 1, 1, cluster) == 0.0
    assert inside < across < all_to_all_time(nbytes, 64, 8, cluster) * 1.01


def test_expert_parallel_rules_are_named() -> None:
    problem = resolve("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360)
    with pytest.raises(LayoutError, match="experts 256 not divisible by ep 48"):
        make_layout(problem, pp=16, ep=48)
    with pytest.raises(LayoutError, match=r"etp 2 \* ep 128 must divide tp \* cp \* dp = 128"):
        make_layout(problem, pp=16, ep=128, etp=2)
    with pytest.raises(LayoutError, match="needs sequence parallelism"):
        make_layout(problem, tp=2, pp=16, ep=8, sp=False)
    dense = resolve("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8)
    with pytest.raises(LayoutError, match="need a mixture-of-experts model"):
        make_layout(dense, ep=2)
    with pytest.raises(SpecError, match=r"moe_capacity_factor \(it pads buffers\) must be a finite number in \[1, 64"):
        Runtime(moe_capacity_factor=0.5)


def _deepseek(layout: Layout, runtime: Runtime = Runtime()) -> tuple:
    model = load_model("deepseek-v3")
    cluster = load_hardware("h800", 2048)
    job = JobSpec(seq_len=4096, global_batch=15360, runtime=runtime)
    layout.validate(model, job, 2048)
    return model, cluster, job, layout


PUBLISHED = Layout(tp=1, pp=16, dp=128, ep=64, mbs=1, zero=ZeroStage.OPTIMIZER, recompute=Recompute.FULL)


def test_expert_state_shards_over_expert_data_parallel_ranks() -> None:
    """ZeRO-1: Adam state of dense weights over dp·cp = 128 ranks, of routed experts over
    tp·cp·dp/(etp·ep) = 2 ranks."""
    model, cluster, job, layout = _deepseek(PUBLISHED)
    costs = layout_costs(model, cluster, job, layout)
    layers = StageLayers(moe=4, moe_full=4)
    st = stage_cost(costs, 5, layers)
    params = costs.stage_params(layers)
    assert layout.expert_dp == 2
    expected = M.ADAM_STATE_BYTES * (params.dense / 128 + params.expert / 2)
    assert st.optimizer_state_gib * GIB == pytest.approx(expected)


def test_routing_skew_costs_time_and_memory() -> None:
    base = evaluate_layout(*_deepseek(PUBLISHED))
    skewed = evaluate_layout(*_deepseek(PUBLISHED, Runtime(moe_load_imbalance=1.3)))
    padded = evaluate_layout(*_deepseek(PUBLISHED, Runtime(moe_capacity_factor=1.3)))
    assert skewed.step_time_s > base.step_time_s
    # the same load either way; padding to a capacity also spares the dispatcher's host sync (compute.host)
    assert padded.step_time_s <= skewed.step_time_s
    assert padded.step_time_s == pytest.approx(skewed.step_time_s, rel=5e-3)
    # the bytes grow with the load, the per-peer latency does not
    assert base.breakdown.ep_comm_s < skewed.breakdown.ep_comm_s <= 1.3 * base.breakdown.ep_comm_s
    assert skewed.breakdown.ep_comm_s > 1.25 * base.breakdown.ep_comm_s
    stored = [layout_costs(*_deepseek(replace(PUBLISHED, recompute=Recompute.NONE), Runtime(moe_load_imbalance=x)))
              .activations.moe for x in (1.0, 1.3)]
    assert stored[1] > stored[0]


def test_dense_layers_are_cheaper_than_moe_layers_in_a_stage() -> None:
    """DeepSeek-V3's first three layers are dense: a stage holding them is faster than one holding as many
    MoE layers (no all-to-all, 8 routed copies fewer), and every stage's layer kinds add up to the model's."""
    model, cluster, job, layout = _deepseek(PUBLISHED)
    pred = evaluate_layout(model, cluster, job, layout)
    assert sum(s.layers.moe for s in pred.stages) == 58 and sum(s.layers.dense for s in pred.stages) == 3
    costs = layout_costs(model, cluster, job, layout)
    dense = stage_cost(costs, 3, StageLayers(dense=3, dense_full=3))
    moe = stage_cost(costs, 3, StageLayers(moe=3, moe_full=3))
    assert dense.compute_s < moe.compute_s
    # with experts spread 64 ways an MoE layer holds fewer weights per rank than the 18432-wide dense MLP
    assert moe.weights_gib < dense.weights_gib
    knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=1, recompute=Recompute.NONE, ep=64)
    assert decoder_layer_time(model, job, cluster, knobs, moe=True).ep_comm > 0
    assert decoder_layer_time(model, job, cluster, knobs).ep_comm == 0


def _kind_instance(seed: int) -> KindSplitProblem:
    rng = random.Random(seed)
    layers = rng.randint(2, 11)
    stages = rng.randint(1, min(4, layers))
    kinds = tuple(rng.randint(0, 1) for _ in range(layers))
    m1 = [tuple(float(rng.randint(20, 60)) for _ in range(2)) for _ in range(stages)]
    zero_bubble = rng.random() < 0.4
    return KindSplitProblem(
        kinds=kinds, num_microbatches=rng.randint(1, 16),
        t0=tuple(rng.randint(50, 400) * 1e-6 for _ in range(stages)),
        t1=tuple(rng.randint(100, 300) * 1e-6 for _ in range(2)),
        tr=tuple(rng.randint(10, 120) * 1e-6 for _ in range(2)),
        m0=tuple(float(rng.randint(50, 200)) for _ in range(stages)), m1=tuple(m1),
        mr=tuple(tuple(float(rng.randint(0, int(x) - 1)) for x in row) for row in m1),
        transient=float(rng.randint(0, 30)), capacity=float(rng.randint(150, 600)),
        partial_recompute=rng.random() < 0.7,
        w0=tuple(rng.randint(0, 40) * 1e-6 for _ in range(stages)) if zero_bubble else (),
        w1=tuple(rng.randint(0, 50) * 1e-6 for _ in range(2)) if zero_bubble else ())


@pytest.mark.parametrize("seed", range(120))
def test_layer_kind_split_equals_brute_force(seed: int) -> None:
    p = _kind_instance(seed)
    ref, dp = brute_force_kinds(p), solve_kinds(p)
    assert (ref is None) == (dp is None)
    if ref is not None and dp is not None:
        assert dp.objective == pytest.approx(ref.objective, rel=1e-9)
        assert sum(dp.layers) == p.num_layers and min(dp.layers) >= 1


@cache
def _published_plan() -> Plan:
    return run_plan("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360,
                    spec=SearchSpec(tp=1, pp=16, cp=1, ep=64, zero=1, mbs=1, top_k=2))


def test_deepseek_v3_published_layout_fits_and_the_plan_is_at_least_as_fast() -> None:
    """Issue check: PP16, EP64, ZeRO-1, no TP on 2048 H800 fits (with the recomputation the split solver
    picks), and the unpinned search predicts a plan at least as fast."""
    pinned = _published_plan()
    lay = pinned.best.layout
    assert (lay.tp, lay.pp, lay.ep, int(lay.zero)) == (1, 16, 64, 1)
    assert pinned.best.prediction.fits
    free = run_plan("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360, spec=SearchSpec(top_k=1))
    assert free.best.prediction.fits
    assert free.best.step_time_s <= pinned.best.step_time_s * (1 + 1e-9)


def test_moe_plan_file_round_trip(tmp_path: Path) -> None:
    p = _published_plan()
    save_plan(p, tmp_path / "plan.yaml")
    back = load_plan(tmp_path / "plan.yaml")
    assert back.best.layout == p.best.layout and back.best.layout.ep == 64
    assert back.best.prediction.step_time_s == pytest.approx(p.best.prediction.step_time_s, rel=1e-12)
    assert plan_to_dict(back)["parallelism"]["ep"] == 64


def test_homogeneous_moe_stack_uses_the_uniform_split() -> None:
    """Mixtral's layers are all MoE: the layer-count split applies, and its stages price MoE layers."""
    p = run_plan("mixtral-8x7b", "h100-sxm", gpus=64, seq_len=4096, global_batch=256,
                 spec=SearchSpec(pp=4, vpp=1, ep=8, top_k=1))
    assert p.best.layout.ep == 8
    assert all(s.layers.dense == 0 and s.layers.moe == s.num_layers for s in p.best.prediction.stages)
    assert p.best.prediction.breakdown.ep_comm_s > 0


def test_ep_is_searched() -> None:
    p = run_plan("qwen3-30b-a3b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, spec=SearchSpec(top_k=3))
    assert p.certificate is not None and p.certificate.candidates > 0
    dense_only = replace(SearchSpec(top_k=1), max_ep=1)
    one = run_plan("qwen3-30b-a3b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, spec=dense_only)
    assert one.best.layout.ep == 1
    assert p.best.step_time_s <= one.best.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_model_keys_round_trip(name: str) -> None:
    """What a plan file stores of an MoE/MLA model reads back as the same model."""
    from planner.inputs.loaders import model_from_mapping, model_mapping

    model = load_model(name)
    assert model_from_mapping(model_mapping(model), "test") == model


def test_all_to_all_overlap_hides_part_of_the_traffic() -> None:
    """With the overlap on, the all-to-all is exposed only beyond the compute it runs beside, and never below
    (1 − overlap efficiency) of itself."""
    model, cluster, job, layout = _deepseek(PUBLISHED)
    knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=1, recompute=Recompute.FULL, ep=64)
    plain = decoder_layer_time(model, job, cluster, knobs, moe=True)
    hidden = decoder_layer_time(model, replace(job, runtime=Runtime(moe_comm_overlap=True)), cluster, knobs, moe=True)
    compute = plain.forward + plain.backward + plain.recompute
    assert hidden.ep_comm == pytest.approx(cluster.gpu.exposed(plain.ep_comm, compute))
    assert (1 - cluster.gpu.overlap_efficiency) * plain.ep_comm <= hidden.ep_comm < plain.ep_comm


@pytest.mark.parametrize("seed", range(40))
def test_layer_kind_milp_equals_brute_force(seed: int) -> None:
    """The per-layer MILP (HiGHS and CP-SAT) finds the DP's optimum on the same instances."""
    from planner.search.ilp_kinds import solve_cpsat_kinds, solve_highs_kinds

    p = _kind_instance(seed)
    ref = brute_force_kinds(p)
    highs, cpsat = solve_highs_kinds(p).split, solve_cpsat_kinds(p).split
    assert (ref is None) == (highs is None) == (cpsat is None)
    if ref is not None:
        for other in (highs, cpsat):
            assert other is not None and other.objective == pytest.approx(ref.objective, rel=1e-9)


def test_deduplicated_dispatch_crosses_each_node_once() -> None:
    """DeepEP-style dispatch: a token goes once to each remote node holding its experts; with 8 nodes and
    k = 8 uniformly routed copies that is 8(1 − (7/8)^8)·7/8 ≈ 4.6 NIC crossings instead of 7, and DeepSeek-V3's
    group-limited routing (4 of 8 groups, one group per node at EP64) caps it at 4·7/8 = 3.5."""
    from cost_models.comm.collectives import dedup_dispatch_time
    from cost_models.compute.moe import node_limit

    cluster = load_hardware("h800", 2048)
    out, up = cluster.scale_out, cluster.scale_up
    nbytes = 64e6
    alpha = out.latency_us * 1e-6 * (7 + 7)
    touched = 8 * (1 - (7 / 8) ** 8)
    assert dedup_dispatch_time(nbytes, 8, 64, 1, cluster) == pytest.approx(
        alpha + nbytes * touched * 7 / 8 / out.bus_bytes_per_s)
    limited = dedup_dispatch_time(nbytes, 8, 64, 1, cluster, 4)
    assert limited == pytest.approx(alpha + nbytes * 3.5 / out.bus_bytes_per_s)
    inside = dedup_dispatch_time(nbytes, 8, 8, 1, cluster)
    assert inside == pytest.approx(7 * up.latency_us * 1e-6 + nbytes * 8 * 7 / 8 / up.bus_bytes_per_s)
    model = load_model("deepseek-v3")
    assert [node_limit(model, ep, 1, cluster) for ep in (8, 16, 64)] == [0, 2, 4]
    plain = evaluate_layout(*_deepseek(PUBLISHED))
    dedup = evaluate_layout(*_deepseek(PUBLISHED, Runtime(moe_dedup_dispatch=True)))
    assert dedup.breakdown.ep_comm_s < 0.6 * plain.breakdown.ep_comm_s
    with pytest.raises(SpecError, match="cannot pad to a capacity factor"):
        Runtime(moe_dedup_dispatch=True, moe_capacity_factor=1.25)


def test_expert_pins_the_model_rules_out_are_named() -> None:
    """`plan --ep/--etp` pins that the model alone rules out fail as layout errors (exit 2), not as 'nothing fits'."""

    with pytest.raises(LayoutError, match="need a mixture-of-experts model"):
        run_plan("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8, spec=SearchSpec(ep=2))
    with pytest.raises(LayoutError, match="experts 8 not divisible by ep 3"):
        run_plan("mixtral-8x7b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8, spec=SearchSpec(ep=3))
    with pytest.raises(LayoutError, match="etp x ep must divide tp x cp x dp"):
        run_plan("mixtral-8x7b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8, spec=SearchSpec(ep=8, etp=2,
                                                                                                   tp=1))


def test_v_placed_split_of_a_mixed_stack_competes_with_balanced_chunks() -> None:
    """On Llama 4's alternating dense/MoE stack a ZB-V layout is also offered the per-rank split (rank 0 holds
    embedding and head, so it gets fewer layers); the cost model prices it as the chunks really fall and it
    beats the balanced chunks here."""
    from meshcore import Schedule

    result = run_plan("llama4-maverick", "h100-sxm", gpus=256, seq_len=8192, global_batch=512, runtime=ANY,
                      spec=SearchSpec(pp=4, tp=1, cp=4, ep=64, schedule=Schedule.ZB_V, top_k=1))
    best = result.best
    assert best.layout.stage_layers is not None
    per_rank = best.layout.rank_layers(48)
    assert per_rank[0] < max(per_rank)
    balanced = make_layout(resolve("llama4-maverick", "h100-sxm", gpus=256, seq_len=8192, global_batch=512,
                                   runtime=ANY),
                           tp=1, pp=4, cp=4, vpp=2, mbs=best.layout.mbs, zero=int(best.layout.zero), ep=64,
                           schedule="zb-v", recompute=best.layout.recompute.value)
    model, hw = load_model("llama4-maverick"), load_hardware("h100-sxm", 256)
    assert best.prediction.step_time_s < evaluate_layout(model, hw, JobSpec(seq_len=8192, global_batch=512),
                                                         balanced).step_time_s
