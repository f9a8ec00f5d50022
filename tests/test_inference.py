"""`meshplan infer`: each family's exact search equals brute force on small cases, predicted memory stays under
capacity, the launch arguments use documented flags, plan files round-trip through `explain`, bad input exits 2."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from hardware_profiles import load_hardware
from meshcore import GIB, ModelSpec
from meshcore.inference import KvFormat, Objective, WeightFormat
from planner.inputs.loaders import load_model
from planner.workloads.diffusion.cost import transformer_params
from planner.workloads.diffusion.inputs import load_diffusion_model
from planner.workloads.diffusion.search import search_diffusion
from planner.workloads.diffusion.spec import DiffusionJob
from planner.workloads.edge.search import brute_force, search_edge
from planner.workloads.edge.spec import EdgeJob
from planner.workloads.serving.launch import sglang_commands, vllm_commands
from planner.workloads.serving.search import search_serving
from planner.workloads.serving.spec import PoolMode, ServingJob

runner = CliRunner()
TINY = ModelSpec(name="tiny", num_layers=6, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
                 num_kv_heads=4, head_dim=64, vocab_size=32000, gated_mlp=True, tied_embeddings=False)

# Flags the projects document: vLLM "Engine Arguments" (docs.vllm.ai/en/latest/serving/engine_args.html, v0.8+,
# with --data-parallel-size, --enable-expert-parallel, --kv-transfer-config) and SGLang "Server Arguments"
# (docs.sglang.io/advanced_features/server_arguments.html).
VLLM_FLAGS = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
              "--max-num-seqs", "--gpu-memory-utilization", "--kv-cache-dtype", "--quantization", "--max-model-len",
              "--block-size", "--kv-transfer-config"}
SGLANG_FLAGS = {"--model-path", "--tp-size", "--dp-size", "--ep-size", "--enable-dp-attention", "--pp-size",
                "--max-running-requests", "--mem-fraction-static", "--kv-cache-dtype", "--quantization",
                "--context-length", "--page-size", "--disaggregation-mode"}


def _key(job: ServingJob, c):  # type: ignore[no-untyped-def]
    p = c.prediction
    return (round(p.tokens_per_s, 6), round(p.e2e_s, 9)) if job.objective is Objective.THROUGHPUT else (
        round(p.e2e_s, 9), round(p.tokens_per_s, 6))


@pytest.mark.parametrize("job", [
    ServingJob(512, 128, tpot_slo_s=0.02, max_num_seqs=96),
    ServingJob(512, 128, ttft_slo_s=0.05, max_num_seqs=64, mode=PoolMode.DISAGGREGATED),
    ServingJob(256, 64, objective=Objective.LATENCY, rate=30.0, max_num_seqs=64),
    ServingJob(256, 64, batch=40, kv=KvFormat.FP8, weights=WeightFormat.FP8, max_num_seqs=64),
])
def test_serving_search_equals_brute_force(job: ServingJob) -> None:
    cluster = load_hardware("l40s", 4)
    fast = search_serving(TINY, cluster, job, 4, top_k=1)
    slow = search_serving(TINY, cluster, job, 4, top_k=1, exhaustive=True)
    assert _key(job, fast.best) == _key(job, slow.best)


def test_serving_memory_under_capacity_and_moe_plans() -> None:
    """Weights + KV of the chosen batch + workspace fit the engine's share on every preset layout found."""
    for name, hw, gpus in (("llama3-8b", "a100-80gb", 2), ("mixtral-8x7b", "h100-sxm", 8), ("deepseek-v3", "h200", 16)):
        model, cluster = load_model(name), load_hardware(hw, gpus)
        job = ServingJob(1024, 256, tpot_slo_s=0.1, kv=KvFormat.FP8, weights=WeightFormat.FP8)
        for cand in search_serving(model, cluster, job, gpus, top_k=3).ranked:
            mem, lay = cand.prediction.memory, cand.layout
            per_rank = -(-lay.batch // lay.decode.dp)
            used = mem.weights + mem.workspace + per_rank * mem.kv_per_sequence
            assert used <= mem.capacity <= cluster.gpu.memory_gib * GIB
            assert cand.prediction.tpot_s <= 0.1 and cand.prediction.meets_slo


def test_serving_physics() -> None:
    """Decode is bandwidth-bound (batch 1 TPOT ~ weights / HBM), prefill compute-bound, MLA's KV is small."""
    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 1)
    job = ServingJob(1024, 128, batch=1, objective=Objective.LATENCY)
    best = search_serving(model, cluster, job, 1).best.prediction
    no_embedding = 16.06e9 - 128256 * 4096 * 2  # decode reads one embedding row, not the table
    weights_s = no_embedding / (cluster.gpu.hbm_gbs * 1e9 * cluster.gpu.memory_efficiency)
    assert weights_s < best.tpot_s < 1.3 * weights_s
    flops_s = 2 * 8.03e9 * 1024 / (cluster.gpu.peak_bf16_tflops * 1e12)
    assert flops_s < best.ttft_s < 4 * flops_s
    from cost_models.inference import kv_bytes_per_token_layer
    ds = load_model("deepseek-v3")
    assert kv_bytes_per_token_layer(ds, 8, KvFormat.BF16) == (512 + 64) * 2


def test_launch_arguments_use_documented_flags() -> None:
    model, cluster = load_model("mixtral-8x7b"), load_hardware("h100-sxm", 8)
    for mode in (PoolMode.COLOCATED, PoolMode.DISAGGREGATED):
        job = ServingJob(1024, 256, tpot_slo_s=0.05, kv=KvFormat.FP8, weights=WeightFormat.FP8, mode=mode)
        for cand in search_serving(model, cluster, job, 8, top_k=5).ranked:
            for text, allowed in ((vllm_commands("m", job, cand.layout), VLLM_FLAGS),
                                  (sglang_commands("m", job, cand.layout), SGLANG_FLAGS)):
                for line in text.splitlines():
                    if not line.startswith("#"):
                        assert {w for w in shlex.split(line) if w.startswith("--")} <= allowed, line
    ep = next(c for c in search_serving(model, cluster, ServingJob(1024, 256, mode=PoolMode.COLOCATED), 8,
                                        top_k=50).ranked if c.layout.decode.ep > 1)
    assert "--enable-expert-parallel" in vllm_commands("m", job, ep.layout)


@pytest.mark.parametrize("objective", [Objective.LATENCY, Objective.THROUGHPUT])
def test_edge_dp_equals_brute_force(objective: Objective) -> None:
    devices = [load_hardware(n, 1) for n in ("orin-nx-16gb", "orin-nano-8gb", "orin-agx-64gb")]
    small = dataclasses.replace(TINY, num_layers=7, hidden_size=2048, ffn_hidden_size=8192, num_kv_heads=16,
                                head_dim=128)
    for reserve in (2.0, 14.2, 6.0):  # roomy, then memory binding on the small devices
        job = EdgeJob(256, 64, batch=3, objective=objective, weights=WeightFormat.BF16, reserve_gib=reserve)
        try:
            plan = search_edge(small, devices, job)
        except Exception:
            assert brute_force(small, devices, job) == float("inf")
            continue
        assert plan.objective_value == pytest.approx(brute_force(small, devices, job), rel=1e-12)
        assert all(s.memory_gib <= s.capacity_gib for s in plan.stages)
        assert sum(s.num_layers for s in plan.stages) == small.num_layers


def test_edge_70b_over_three_jetsons_fits() -> None:
    devices = [load_hardware(n, 1) for n in ("orin-nx-16gb", "orin-nx-16gb", "orin-nx-16gb")]
    plan = search_edge(load_model("llama3-8b"), devices, EdgeJob(512, 128, weights=WeightFormat.BF16))
    assert len(plan.stages) >= 2 and all(s.memory_gib <= s.capacity_gib for s in plan.stages)


@pytest.mark.parametrize("name, gpus, objective", [("flux1-dev", 8, Objective.LATENCY),
                                                  ("sd3-medium", 8, Objective.THROUGHPUT),
                                                  ("sd3-medium", 4, Objective.LATENCY)])
def test_diffusion_search_equals_brute_force(name: str, gpus: int, objective: Objective) -> None:
    model, cluster = load_diffusion_model(name), load_hardware("h100-sxm", gpus)
    job = DiffusionJob(1024, 20, objective=objective)
    fast = search_diffusion(model, cluster, job, gpus, top_k=1)
    slow = search_diffusion(model, cluster, job, gpus, top_k=1, exhaustive=True)
    assert fast.best.prediction == slow.best.prediction
    assert fast.best.prediction.memory_gib <= cluster.gpu.memory_gib
    assert fast.priced <= slow.priced


def test_diffusion_parameters_match_published() -> None:
    assert transformer_params(load_diffusion_model("flux1-dev")) == pytest.approx(12.0e9, rel=0.02)
    assert transformer_params(load_diffusion_model("sd3-medium")) == pytest.approx(2.0e9, rel=0.05)
    assert transformer_params(load_diffusion_model("dit-xl-2")) == pytest.approx(0.675e9, rel=0.02)


def test_cli_plans_and_explain(tmp_path: Path) -> None:
    cases = {
        "s.yaml": ["infer", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "4", "--prompt-len",
                   "1024", "--output-len", "256", "--tpot-slo", "0.05", "--emit", "sglang"],
        "e.json": ["infer", "edge", "--model", "llama3-8b", "--devices", "orin-nx-16gb,orin-nano-8gb",
                   "--prompt-len", "256", "--output-len", "64"],
        "d.yaml": ["infer", "diffusion", "--model", "flux1-schnell", "--hardware", "h100-sxm", "--gpus", "4"],
    }
    for name, args in cases.items():
        res = runner.invoke(app, [*args, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        text = (tmp_path / name).read_text()
        data = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        assert data["workload"] == "inference" and data["inference"]["prediction"]
        shown = runner.invoke(app, ["explain", str(tmp_path / name)])
        assert shown.exit_code == 0 and "plan:" in shown.output, shown.output
    assert "sglang.launch_server" in runner.invoke(app, cases["s.yaml"]).output
    refused = runner.invoke(app, ["emit", str(tmp_path / "s.yaml"), "--to", "megatron"])
    assert refused.exit_code == 2 and "inference plan" in refused.output


def test_cli_bad_input_one_line(tmp_path: Path) -> None:
    undecodable = tmp_path / "dit.yaml"
    undecodable.write_bytes(b"\xff\xfe not utf-8")
    base = ["infer", "serve", "--model", "llama3-70b", "--hardware", "h100-sxm", "--prompt-len", "512",
            "--output-len", "64"]
    for args, code, message in (
        ([*base, "--gpus", "1"], 3, "does not fit"),
        ([*base, "--gpus", "8", "--tpot-slo", "0.0001"], 3, "no deployment on 8 GPUs meets --tpot-slo"),
        ([*base, "--gpus", "8", "--gpu-memory-utilization", "1.5"], 2, "--gpu-memory-utilization"),
        ([*base, "--gpus", "8", "--emit", "trt"], 2, "--emit must be vllm or sglang"),
        (["infer", "diffusion", "--model", "flux1-dev", "--hardware", "h100-sxm", "--gpus", "2", "--resolution",
          "1000"], 2, "multiple of"),
        (["infer", "diffusion", "--model", "nope", "--hardware", "h100-sxm", "--gpus", "2"], 2, "unknown diffusion"),
        (["infer", "diffusion", "--model", str(undecodable), "--hardware", "h100-sxm", "--gpus", "2"], 2,
         "cannot read"),
        (["infer", "edge", "--model", "llama3-70b", "--devices", "orin-nano-8gb", "--prompt-len", "8",
          "--output-len", "8"], 3, "does not fit"),
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == code, (args, res.output)
        assert message in res.output and "Traceback" not in res.output


def test_infer_loads_no_heavy_modules() -> None:
    code = ("import sys; from cli import app; from typer.testing import CliRunner; r = CliRunner().invoke(app, "
            "['infer', 'serve', '--model', 'llama3-8b', '--hardware', 'h100-sxm', '--gpus', '2', '--prompt-len', "
            "'128', '--output-len', '32']); assert r.exit_code == 0, r.output; "
            "heavy = ('pandas', 'ortools', 'pulp', 'torch', 'jsonschema', 'scipy'); "
            "print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
