"""The Megatron-LM arguments meshplan emits build the model meshplan priced (issues 28 and 29): megatron-core's own
GPTModel is built from them on the meta device (no memory, a fraction of a second even for 175B), in one gloo
process with tensor, pipeline and context parallelism 1, and its parameter count must equal meshplan's count of
the model. The parallel degrees themselves are checked by TransformerConfig (tests/test_emitters.py) and by
megatron-core's process groups on four processes (tests/test_launcher_training.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_emitters import CASES, _megatron_kwargs, golden_plan

import planner
from cost_models.compute.flops import total_params
from meshcore.errors import UnsupportedModelError
from planner.outputs.emitters import Target, emit
from planner.outputs.plan import Plan
from planner.search.space import SearchSpec

BUILD = r"""
import json, os, socket, sys, warnings
from unittest import mock
warnings.filterwarnings("ignore")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = str(s.getsockname()[1])
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
import torch, torch.distributed as dist
import megatron.core.extensions.transformer_engine as te_extension
import megatron.core.transformer.multi_latent_attention as mla_module
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_decoder_block_spec, get_gpt_layer_local_spec,
                                                      get_gpt_mtp_block_spec)
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.transformer_config import MLATransformerConfig
dist.init_process_group("gloo", rank=0, world_size=1)
parallel_state.initialize_model_parallel(1, 1)
mla_module.HAVE_TE = te_extension.HAVE_TE  # shim 2 (test_megatron_core_builds_deepseek_v3)

class MLACoreAttention(DotProductAttention):  # shim 3: takes the head widths MLA hands its core attention
    def __init__(self, *args, k_channels=None, v_channels=None, **kwargs):
        super().__init__(*args, **kwargs)
        if v_channels is not None:
            self.hidden_size_per_partition = v_channels * self.num_attention_heads_per_partition

def model_state(model):  # parameters and persistent buffers: what a checkpoint of the model holds
    buffers = (b for m in model.modules() for n, b in m._buffers.items()
               if b is not None and n not in m._non_persistent_buffers_set)
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in buffers)

counts = []
for job in json.loads(sys.stdin.read()):
    cfg, model = job["config"], job["model"]
    act = {"swiglu": torch.nn.functional.silu, "squared_relu": lambda x: torch.relu(x) ** 2}.get(model["activation"])
    if act is not None:
        cfg["activation_func"] = act
    mla = cfg.pop("multi_latent_attention", False)
    cfg["moe_grouped_gemm"] = False  # SequentialMLP: GroupedMLP's weights as one linear pair per expert
    config = (MLATransformerConfig if mla else TransformerConfig)(**cfg, init_model_with_meta_device=True,
                                                                  use_cpu_initialization=True)
    if config.num_moe_experts:  # as Megatron-LM's pretrain_gpt.py: a spec per layer, dense or MoE
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=cfg["normalization"])
        layers = spec.layer_specs
    else:
        spec = get_gpt_layer_local_spec(qk_layernorm=config.qk_layernorm, multi_latent_attention=mla,
                                        normalization=cfg["normalization"])
        layers = [spec]
    if mla:
        for layer in layers:
            layer.submodules.self_attention.submodules.core_attention = MLACoreAttention
    mtp = get_gpt_mtp_block_spec(config, layers[-1], use_transformer_engine=False) if config.mtp_num_layers else None
    with torch.device("meta"), mock.patch.object(torch.cuda, "current_device", lambda: "cpu"):  # shim 1
        gpt = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=model["vocab_size"],
                       max_sequence_length=model["max_positions"], position_embedding_type=model["positions"],
                       share_embeddings_and_output_weights=model["tied"], mtp_block_spec=mtp)
    assert all(p.is_meta for p in gpt.parameters()), "a parameter was built off the meta device"
    counts.append(model_state(gpt))
print(json.dumps(counts))
"""

PRESETS = ["llama3-8b", "llama2-7b", "qwen2.5-7b", "mistral-7b", "gpt3-175b", "llama2-70b", "megatron-1.7b",
           "mixtral-8x7b", "qwen3-30b-a3b"]
PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "sequence_parallel", "virtual_pipeline_model_parallel_size", "num_layers_in_first_pipeline_stage",
            "num_layers_in_last_pipeline_stage", "pipeline_model_parallel_layout", "expert_model_parallel_size",
            "expert_tensor_parallel_size", "pipeline_dtype", "recompute_granularity", "recompute_method",
            "recompute_num_layers", "recompute_modules", "moe_token_dispatcher_type")


def _job(preset: str) -> dict:
    return _job_of(planner.plan(preset, "h100-sxm", gpus=64, seq_len=2048, global_batch=64, spec=SearchSpec(top_k=1)))


def _job_of(plan: Plan) -> dict:
    """The model half of the emitted arguments (parallel degrees set to 1) and what GPTModel takes beside them."""
    emit(plan, Target.MEGATRON)  # the script itself must be written; its values are read back below
    cfg, _ = _megatron_kwargs(plan)
    args = dict(__import__("planner.outputs.emitters.megatron", fromlist=["arguments"]).arguments(plan))
    cfg = {k: v for k, v in cfg.items() if k not in PARALLEL and v is not None}
    cfg["normalization"] = args["--normalization"]
    cfg.pop("gated_linear_unit", None)
    m = plan.model
    cfg["gated_linear_unit"] = "--swiglu" in args
    return {"config": cfg, "model": {
        "vocab_size": args["--vocab-size"], "max_positions": args["--max-position-embeddings"],
        "positions": args["--position-embedding-type"], "tied": "--untie-embeddings-and-output-weights" not in args,
        "activation": "swiglu" if "--swiglu" in args else "squared_relu" if "--squared-relu" in args else "gelu"},
        "expected": total_params(m)}


def built_counts(jobs: list[dict]) -> list[int]:
    """Parameters of the GPTModel megatron-core builds from each job's arguments (one subprocess for all)."""
    done = subprocess.run([sys.executable, "-c", BUILD], input=json.dumps([{k: j[k] for k in ("config", "model")}
                                                                           for j in jobs]),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counts: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def test_megatron_core_builds_the_model_meshplan_priced() -> None:
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    jobs = [_job(p) for p in PRESETS]
    counts = built_counts(jobs)
    mismatched = {p: (c, j["expected"]) for p, c, j in zip(PRESETS, counts, jobs, strict=True) if c != j["expected"]}
    assert not mismatched, f"megatron-core builds / meshplan counts: {mismatched}"


MLA_CASE = "deepseek-v3_2048xh800"
BUILT_CASES = [case for case in CASES if case != MLA_CASE]


def _golden_counts(cases: list[str]) -> dict[str, tuple[int, int]]:
    """{case: (what megatron-core builds, what meshplan counts)} for the cases where the two differ."""
    jobs = [_job_of(golden_plan(case, Target.MEGATRON)) for case in cases]
    counts = built_counts(jobs)
    return {p: (c, j["expected"]) for p, c, j in zip(cases, counts, jobs, strict=True) if c != j["expected"]}


def test_megatron_core_builds_the_golden_plans() -> None:
    """The Megatron-LM scripts of the golden files (tests/golden/plans; Llama-3 8B, 70B, 405B and Qwen3-30B-A3B's
    MoE) build the model meshplan priced."""
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    mismatched = _golden_counts(BUILT_CASES)
    assert not mismatched, f"megatron-core builds / meshplan counts: {mismatched}"


@pytest.mark.slow
def test_megatron_core_builds_deepseek_v3() -> None:
    """DeepSeek-V3's golden script builds the model meshplan priced: all 61 layers (3 dense, 58 with 256 experts),
    MLA and the multi-token-prediction layer, 682,636,487,424 = 671,026,419,200 (DeepSeek's published 671B) +
    11,610,068,224 (MTP); about a minute of CPU, module by module. The count is parameters plus persistent buffers:
    megatron-core keeps the router's score-correction bias (DeepSeek's e_score_correction_bias, 256 per MoE
    layer, which the 671B counts) as the persistent buffer `expert_bias` (moe/router.py:173), not a Parameter.

    megatron-core 0.16.1 (the newest release on PyPI) cannot build MLA without CUDA and Transformer Engine; three
    shims in BUILD, none of which makes or changes a parameter:
    1. torch.cuda.current_device returns "cpu" while GPTModel is constructed: MLA builds its YaRN rotary table on
       it whatever use_cpu_initialization says (multi_latent_attention.py:138 passes no such flag;
       yarn_rotary_pos_embedding.py:76, 122, 126), and so do the router's expert-bias buffers
       (moe/router.py:164-180). These are buffers; BUILD asserts every parameter is still on the meta device.
    2. multi_latent_attention.HAVE_TE is set to megatron-core's own answer (extensions/transformer_engine.py:
       False without TE): multi_latent_attention.py:55-62 sets it True because the import of the extension module
       succeeds (it stands a MagicMock in for TE), and line 185 then fails on isinstance(..., TELinear).
    3. MLA's core attention is DotProductAttention taking the k_channels and v_channels that
       multi_latent_attention.py:155-166 hands it when it builds it a second time, after attention.py:318 (the
       local spec's DotProductAttention takes neither:
       NVIDIA/Megatron-LM issue 1589, pull request 6564 unmerged); it holds no parameter (vanilla softmax), and
       its output width is set to v_channels per head as TE's DotProductAttention does.
    Beside these, BUILD builds GroupedMLP's experts as SequentialMLP (grouped_gemm is a CUDA package), the same
    weights per expert, as for Qwen3's MoE above."""
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    mismatched = _golden_counts([MLA_CASE])
    assert not mismatched, f"megatron-core builds / meshplan counts: {mismatched}"


def test_a_sequence_longer_than_a_learned_position_table_is_refused() -> None:
    """GPT-3's learned table has 2,048 positions: at 4,096 Megatron-LM would build a 4,096-row table (25M more
    parameters than the model priced), so a plan for a runtime refuses it; the research mode prices it as given."""
    with pytest.raises(UnsupportedModelError, match="learned position table of 2048"):
        planner.plan("gpt3-175b", "h100-sxm", gpus=256, seq_len=4096, global_batch=256)
    research = planner.plan("gpt3-175b", "h100-sxm", gpus=256, seq_len=4096, global_batch=256,
                            runtime=planner.Runtime(framework="any"), spec=SearchSpec(top_k=1))
    assert research.best.prediction.fits
