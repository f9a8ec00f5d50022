"""The NeMo target's output read by NeMo itself (issue 28 item 4): the NeMo-Run overrides of each golden case are
applied by NeMo-Run's own command-line parser to NeMo 2's pretraining recipe of that model, then NeMo's
MegatronStrategy and the model's GPTConfig (megatron-core's TransformerConfig, whose checks run) are built from
the result, and every value read back must be the one meshplan wrote.

NeMo 2.7.3 cannot share the project's environment (it needs transformers 4.57, the [validate] extra transformers
5): `.ci/nemo-env` builds .venv-nemo, in front of .venv, and this test runs there in a subprocess (or under the
interpreter MESHPLAN_NEMO_PYTHON names); without it the test skips and says so. The Megatron-Bridge overrides
(cfg.*) are not run: Megatron-Bridge 0.3.1 (the last for Python 3.11) imports transformer_engine.pytorch when it
loads and requires Transformer Engine's CUDA build; their names are checked against megatron-core's dataclasses in
tests/test_emitters.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from test_emitters import CASES, emit_case

from planner.outputs.emitters import Target

ROOT = Path(__file__).resolve().parents[1]
# meshplan's golden cases -> NeMo 2's recipe of the same model (nemo.collections.llm.recipes)
RECIPES = {"llama3-8b_8xh100": "llama3_8b", "llama3-70b_pp_vpp_cp": "llama3_70b",
           "llama3-405b_16384xh100": "llama31_405b", "deepseek-v3_2048xh800": "deepseek_v3",
           "qwen3-30b-a3b_32xh100": "qwen3_30b_a3b"}

READ_BACK = r"""
import inspect, json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import fiddle as fdl
from nemo.collections import llm
from nemo_run.cli.cli_parser import parse_cli_args

def read(node, path):
    for part in path.split("."):
        node = getattr(node, part)
    return node

def named(recipe, key):
    # whether the object a key sets takes it as a named argument (not into **kwargs, which would ignore a typo)
    parent, _, name = key.rpartition(".")
    params = inspect.signature(fdl.get_callable(read(recipe, parent))).parameters
    return name in params and params[name].kind is not inspect.Parameter.VAR_KEYWORD

# Transformer Engine's fused kernels, which the recipes switch on and megatron-core refuses without TE (no GPU
# here): kernel choices, not the layout the overrides set
NO_TE = {"apply_rope_fusion": False, "gradient_accumulation_fusion": False, "bias_activation_fusion": False,
         "bias_dropout_fusion": False, "masked_softmax_fusion": False, "persist_layer_norm": False,
         "cross_entropy_loss_fusion": False, "moe_permute_fusion": False}

results = []
for job in json.loads(sys.stdin.read()):
    try:
        recipe = getattr(llm, job["recipe"]).pretrain_recipe(name="meshplan", num_nodes=1, num_gpus_per_node=8)
        recipe = parse_cli_args(recipe, job["overrides"])
        unnamed = [key for key in job["keys"] if not named(recipe, key)]
        if unnamed:
            raise TypeError(f"not a named argument: {unnamed}")
        for field, value in NO_TE.items():
            if hasattr(recipe.model.config, field):
                setattr(recipe.model.config, field, value)
        strategy = fdl.build(recipe.trainer.strategy)
        config = fdl.build(recipe.model.config)  # TransformerConfig.__post_init__ checks the layout's fields
        values = {key: read(recipe, key) for key in job["keys"]}
        results.append({"values": values, "strategy": type(strategy).__name__, "config": type(config).__name__})
    except Exception as exc:  # reported per job, so that one refusal names its case
        results.append({"error": f"{type(exc).__name__}: {exc}"[:600]})
print(json.dumps(results, default=str))
"""


def nemo_python() -> str | None:
    named = os.environ.get("MESHPLAN_NEMO_PYTHON")
    local = ROOT / ".venv-nemo" / "bin" / "python"
    return named or (str(local) if local.exists() else None)


def nemo_run_overrides(text: str) -> dict[str, object]:
    """key -> value (JSON, as the NeMo emitter writes it) of the NeMo-Run block of an emitted file."""
    block = text.split("# Megatron-Bridge")[0]
    pairs = [line.split("=", 1) for line in block.splitlines() if line and not line.startswith("#")]
    return {key: json.loads(value) for key, value in pairs}


def read_back(jobs: list[dict[str, object]]) -> list[dict[str, object]]:
    python = nemo_python()
    if python is None:
        pytest.skip("NeMo 2 is not installed: bash .ci/nemo-env builds .venv-nemo (or set MESHPLAN_NEMO_PYTHON)")
    done = subprocess.run([python, "-c", READ_BACK], input=json.dumps(jobs), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def job(recipe: str, overrides: dict[str, object]) -> dict[str, object]:
    lines = [f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in overrides.items()]
    return {"recipe": recipe, "overrides": lines, "keys": list(overrides)}


def test_nemo_reads_back_the_emitted_overrides() -> None:
    """Every golden case's NeMo-Run overrides, applied to NeMo's recipe of its model, build NeMo's strategy and
    model config and read back as written (trainer.devices NeMo keeps as the string it parsed)."""
    written = {case: nemo_run_overrides(emit_case(case, Target.NEMO).text) for case in CASES}
    results = read_back([job(RECIPES[case], written[case]) for case in CASES]
                        + [job("llama3_8b", {"trainer.strategy.tensor_parallel_size": 2})])
    *cases, typo = results
    assert "error" in typo and "tensor_parallel_size" in str(typo["error"])  # a wrong name is refused
    for case, result in zip(CASES, cases, strict=True):
        assert "error" not in result, (case, result)
        assert result["strategy"] == "MegatronStrategy" and "Config" in str(result["config"]), result
        values = result["values"]
        assert isinstance(values, dict)
        expected = {key: str(v) if key == "trainer.devices" else v for key, v in written[case].items()}
        assert values == expected, case
