"""Megatron's --recompute-modules: bytes each module frees (by hand on a small MLA + MoE model), FP8 activation
storage, the forward time each adds to backward, the CLI flag, the search's module sets and pins, and the
published DeepSeek-V3 layout fitting with the mechanisms its report lists."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from cli import app
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.layer import decoder_layer_time
from cost_models.compute.recompute import RecomputeTime, module_recompute_time
from cost_models.memory import footprint as M
from meshcore import AttentionKernel, Dtype, JobSpec, Layout, Recompute, RecomputeModule, ZeroStage
from meshcore.errors import LayoutError
from planner import evaluate, load_model, plan
from planner.api import resolve
from planner.search.space import Candidate, SearchSpec, module_family, module_sets, next_module_set, recompute_options

FLASH = AttentionKernel.FLASH
LN, UP, ACT = RecomputeModule.LAYERNORM, RecomputeModule.MLA_UP_PROJ, RecomputeModule.MOE_ACT
MOE, SHARED, MLP = RecomputeModule.MOE, RecomputeModule.SHARED_EXPERTS, RecomputeModule.MLP
DSV3 = dict(gpus=2048, seq_len=4096, global_batch=15360, tp=1, pp=16, ep=64, zero=1, mbs=1)


def small():
    """DeepSeek-V3's structure at toy sizes: h 64, 2 heads, MLA ranks 8/4, heads 4+2/4, 4 experts top-2 of width
    16, one shared expert of width 16, gated, no dropout."""
    m = load_model("deepseek-v3")
    return replace(m, hidden_size=64, num_attention_heads=2, num_kv_heads=2, head_dim=6, ffn_hidden_size=32,
                   moe=replace(m.moe, num_experts=4, top_k=2, ffn_hidden_size=16, shared_ffn_hidden_size=16,
                               groups=1, group_top_k=0),
                   mla=replace(m.mla, q_lora_rank=8, kv_lora_rank=4, qk_nope_head_dim=4, qk_rope_head_dim=2,
                               v_head_dim=4))


def per_token(modules: frozenset[RecomputeModule], fp8: bool = False) -> float:
    m, tokens = small(), 32
    got = M.layer_activation_bytes(m, 32, 1, 1, 1, False, Recompute.SELECTIVE, FLASH, moe=True, modules=modules,
                                   fp8=fp8)
    return got / tokens


def test_bytes_each_module_frees_by_hand() -> None:
    """Per token, bf16, tp 1. Attention kept: norm input 2h 128, LSE 4a 8, down-projection outputs 2(8+4) 24,
    k_rope 2·2 4, output 2·a·v 16 = 180; its norm output 2h 128 (layernorm); up-projection inputs 2·12 24 and
    Q, K, V 2·2·(2·6+4) 64 = 88 (mla_up_proj). MoE kept: norm input 128; norm output 128 (layernorm); per routed
    copy (2) FC2 input 2·16 (moe_act: 64); router probabilities 4·4 16 and per copy FC1 input 2h 128 and output
    4·16 64 = 400 (moe); shared FC1 output 64 and FC2 input 32 = 96 (shared_experts)."""
    total = 180 + 128 + 88 + 128 + 128 + 64 + 400 + 96
    assert per_token(frozenset()) == total == 1212
    assert total - per_token(frozenset({LN})) == 256
    assert total - per_token(frozenset({UP})) == 88
    assert total - per_token(frozenset({ACT})) == 64
    assert total - per_token(frozenset({SHARED})) == 96
    assert total - per_token(frozenset({MOE})) == 64 + 400 + 96
    assert total - per_token(frozenset({MOE, ACT, SHARED})) == 64 + 400 + 96  # moe already covers them
    assert total - per_token(frozenset({LN, UP, ACT})) == 256 + 88 + 64
    assert total - per_token(frozenset({RecomputeModule.CORE_ATTN})) == 0  # fused attention: nothing to free


def test_fp8_keeps_linear_inputs_as_one_byte_copies() -> None:
    """FP8: GEMM inputs saved for wgrad become 1 B; norm inputs, Q/K/V and the kernel's output stay 2 B. Attention:
    the MLA input norm feeds two FP8 down projections (2 x 1 B x h = 128, as bf16), up-projection inputs 12,
    the output projection adds its own copy a·v 8. MoE: routed FC1 inputs 2·64, FC2 inputs 2·16, shared FC2 input
    16, and the shared experts' copy of the norm output h 64 (freed by layernorm)."""
    bf16 = 1212
    fp8 = bf16 - 12 + 8 - 2 * 64 - 2 * 16 - 16 + 64
    assert per_token(frozenset(), fp8=True) == fp8 == 1096
    assert fp8 - per_token(frozenset({LN}), fp8=True) == 128 + 128 + 64
    assert fp8 - per_token(frozenset({ACT}), fp8=True) == 2 * 16


def test_dense_fp8_and_bf16_korthikanti_unchanged() -> None:
    """A dense model: FP8 saves the QKV and FC1 input copies (h each) and half the FC2 input (f), and adds the
    output projection's copy (a·d = h for Llama-3-8B): bf16 − fp8 = h + f per token; bf16 is Table 2's."""
    m = load_model("llama3-8b")
    h, f = m.hidden_size, m.ffn_hidden_size
    args = (m, 8192, 1, 1, 1, False, Recompute.NONE, FLASH)
    assert (M.layer_activation_bytes(*args) - M.layer_activation_bytes(*args, fp8=True)) / 8192 == h + f
    # layernorm is fused into the QKV and FC1 GEMMs of a dense layer (Megatron's TE spec): it frees nothing
    assert M.layer_activation_bytes(*args[:6], Recompute.SELECTIVE, FLASH, modules=frozenset({LN})) == \
        M.layer_activation_bytes(*args)


def test_time_each_module_adds_is_positive_and_ordered() -> None:
    """DeepSeek-V3 MoE layer, tp 1, ep 64: elementwise norms < the activation < the up-projection GEMMs < the
    whole MoE MLP, which alone repeats the all-to-alls."""
    problem = resolve("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360, dtype=Dtype.FP8)
    model, cluster, job = problem.model, problem.cluster, problem.job
    base = LayerKnobs(1, 1, False, 1, Recompute.SELECTIVE, 64, 1)
    redo = RecomputeTime(core_f=0.0, tp_collective=0.0, moe_forward=0.01, ep_forward=0.005)

    def added(*mods: RecomputeModule) -> tuple[float, float, float]:
        return module_recompute_time(model, job, cluster, replace(base, modules=frozenset(mods)), True, redo)

    times = {m: added(m)[0] for m in (LN, ACT, UP, SHARED, MOE)}
    assert all(t > 0 for t in times.values()), times
    assert times[LN] < times[ACT] < times[UP] < times[MOE], times
    assert times[SHARED] < times[MOE]
    assert added(ACT)[2] == 0 and added(MOE)[2] == redo.ep_forward
    layer = decoder_layer_time(model, job, cluster, replace(base, modules=frozenset({LN, UP, ACT})), moe=True)
    full = decoder_layer_time(model, job, cluster, replace(base, recompute=Recompute.FULL), moe=True)
    assert 0 < layer.recompute < full.recompute / 5


def test_deepseek_v3_published_layout_fits_with_its_reports_mechanisms() -> None:
    """TP1 PP16 EP64 ZeRO-1 on 2048 H800, seq 4096, mbs 1 (DeepSeek-V3 report, sections 3.2.3 and 3.3): with FP8
    activation caching and RMSNorm, MLA up-projection and SwiGLU recomputation it fits in 80 GiB without full
    recomputation; in bf16 without recomputation it does not."""
    def gib(dtype: str, recompute: str = "selective", modules: str | None = None) -> float:
        return evaluate("deepseek-v3", "h800", dtype=dtype, recompute=recompute, recompute_modules=modules,
                        **DSV3).peak_memory_gib

    mechanisms = gib("fp8", modules="layernorm,mla_up_proj,moe_act")
    none_bf16 = gib("bf16", "none")
    full = gib("fp8", "full")
    figures = f"fp8 + modules {mechanisms:.1f} GiB, bf16 none {none_bf16:.1f} GiB, fp8 full {full:.1f} GiB"
    assert mechanisms <= 80, figures
    assert none_bf16 > 80, figures
    assert full < mechanisms, figures


def test_module_rules() -> None:
    problem = resolve("llama3-8b", "h100-sxm", gpus=8, seq_len=8192, global_batch=64)
    for mods, message in (({UP}, "needs multi-latent attention"), ({ACT}, "needs a mixture-of-experts model")):
        lay = Layout(dp=8, recompute=Recompute.SELECTIVE, recompute_modules=frozenset(mods))
        with pytest.raises(LayoutError, match=message):
            lay.validate(problem.model, problem.job, 8)
    assert Layout(recompute=Recompute.SELECTIVE).recompute_modules == {RecomputeModule.CORE_ATTN}
    assert Layout(recompute=Recompute.FULL, recompute_modules=frozenset({LN})).recompute_modules == frozenset()
    with pytest.raises(LayoutError, match="allowed: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared"):
        RecomputeModule.parse("layernorm,rmsnorm")


runner = CliRunner()
EVAL = ["evaluate", "--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--seq-len", "4096",
        "--global-batch", "15360", "--pp", "16", "--ep", "64", "--zero", "1"]


def test_cli_recompute_modules() -> None:
    res = runner.invoke(app, [*EVAL, "--dtype", "fp8", "--recompute-modules", "layernorm,mla_up_proj,moe_act",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["fits"] and out["layout"]["recompute"] == "selective"
    assert out["layout"]["recompute_modules"] == ["moe_act", "layernorm", "mla_up_proj"]
    cases = {("--recompute-modules", "layernorm,rmsnorm"): "unknown recompute module(s) rmsnorm; allowed: core_attn",
             ("--recompute", "full", "--recompute-modules", "layernorm"): "needs --recompute selective",
             ("--recompute-modules", "mlp,nope"): "allowed: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe"}
    for args, message in cases.items():
        res = runner.invoke(app, [*EVAL, *args])
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    dense = ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "8192",
             "--global-batch", "64", "--recompute-modules", "mla_up_proj"]
    res = runner.invoke(app, dense)
    assert res.exit_code == 2 and "needs multi-latent attention" in res.output


def test_search_offers_module_sets_only_where_they_free_memory() -> None:
    assert module_sets(load_model("llama3-8b"), FLASH) == []
    assert module_sets(load_model("deepseek-v3"), FLASH) == [
        frozenset({LN}), frozenset({LN, ACT}), frozenset({LN, ACT, UP})]
    assert module_sets(load_model("mixtral-8x7b"), FLASH) == [frozenset({LN}), frozenset({LN, ACT})]
    job = JobSpec(seq_len=4096, global_batch=64)
    llama, dsv3 = load_model("llama3-8b"), load_model("deepseek-v3")
    assert len(recompute_options(llama, job, SearchSpec())) == len(recompute_options(dsv3, job, SearchSpec())) == 2
    assert module_family(llama, job, SearchSpec()) == []  # dense models: the search is unchanged
    assert len(module_family(dsv3, job, SearchSpec())) == 3
    assert module_family(dsv3, job, SearchSpec(module_recompute=False)) == []
    pinned = frozenset({LN, UP})
    assert recompute_options(dsv3, job, SearchSpec(recompute_modules=pinned)) == [(Recompute.SELECTIVE, pinned)]
    assert module_family(dsv3, job, SearchSpec(recompute_modules=pinned)) == []
    c = Candidate(1, 1, 16, 128, 1, 1, ZeroStage.OPTIMIZER, Recompute.NONE, False, ep=64)
    chain = []
    while (c := next_module_set(c, module_family(dsv3, job, SearchSpec()), job)) is not None:
        chain.append(c.modules)
    assert chain == module_sets(dsv3, FLASH)


def test_plan_pins_recompute_modules() -> None:
    pinned = frozenset({LN, UP, ACT})
    p = plan("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360, dtype="fp8",
             spec=SearchSpec(tp=1, pp=16, cp=1, ep=64, zero=1, mbs=1, top_k=1, recompute=Recompute.SELECTIVE,
                             recompute_modules=pinned, partial_recompute=False))
    assert p.best.layout.recompute_modules == pinned and p.best.prediction.fits
    res = runner.invoke(app, ["plan", "--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--seq-len",
                              "4096", "--global-batch", "15360", "--tp", "1", "--pp", "16", "--cp", "1", "--ep", "64",
                              "--zero", "1", "--mbs", "1", "--top-k", "1", "--recompute-modules", "layernorm,moe_act",
                              "--no-partial-recompute", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["recompute"]["modules"] == ["moe_act", "layernorm"]
