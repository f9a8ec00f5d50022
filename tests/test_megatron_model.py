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
warnings.filterwarnings("ignore")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = str(s.getsockname()[1])
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
import torch, torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
dist.init_process_group("gloo", rank=0, world_size=1)
parallel_state.initialize_model_parallel(1, 1)
counts = []
for job in json.loads(sys.stdin.read()):
    cfg, model = job["config"], job["model"]
    act = {"swiglu": torch.nn.functional.silu, "squared_relu": lambda x: torch.relu(x) ** 2}.get(model["activation"])
    if act is not None:
        cfg["activation_func"] = act
    config = TransformerConfig(**cfg, init_model_with_meta_device=True, use_cpu_initialization=True)
    spec = get_gpt_layer_local_spec(num_experts=cfg.get("num_moe_experts"), moe_grouped_gemm=False,
                                    qk_layernorm=cfg.get("qk_layernorm", False), normalization=cfg["normalization"])
    with torch.device("meta"):
        gpt = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=model["vocab_size"],
                       max_sequence_length=model["max_positions"], position_embedding_type=model["positions"],
                       share_embeddings_and_output_weights=model["tied"])
    counts.append(sum(p.numel() for p in gpt.parameters()))
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


# DeepSeek-V3's MLA is not built: megatron-core 0.16.1's MLA puts its rotary table on torch.cuda.current_device()
# whatever use_cpu_initialization says, and its local (no Transformer Engine) spec hands DotProductAttention a
# k_channels argument it does not take; MLATransformerConfig checks its fields (tests/test_emitters.py)
BUILT_CASES = [case for case in CASES if not case.startswith("deepseek-v3")]


def test_megatron_core_builds_the_golden_plans() -> None:
    """The Megatron-LM scripts of the golden files (tests/golden/plans; Llama-3 8B, 70B, 405B and Qwen3-30B-A3B's
    MoE) build the model meshplan priced."""
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    jobs = [_job_of(golden_plan(case, Target.MEGATRON)) for case in BUILT_CASES]
    counts = built_counts(jobs)
    mismatched = {p: (c, j["expected"]) for p, c, j in zip(BUILT_CASES, counts, jobs, strict=True)
                  if c != j["expected"]}
    assert not mismatched, f"megatron-core builds / meshplan counts: {mismatched}"


def test_a_sequence_longer_than_a_learned_position_table_is_refused() -> None:
    """GPT-3's learned table has 2,048 positions: at 4,096 Megatron-LM would build a 4,096-row table (25M more
    parameters than the model priced), so a plan for a runtime refuses it; the research mode prices it as given."""
    with pytest.raises(UnsupportedModelError, match="learned position table of 2048"):
        planner.plan("gpt3-175b", "h100-sxm", gpus=256, seq_len=4096, global_batch=256)
    research = planner.plan("gpt3-175b", "h100-sxm", gpus=256, seq_len=4096, global_batch=256,
                            runtime=planner.Runtime(framework="any"), spec=SearchSpec(top_k=1))
    assert research.best.prediction.fits
