"""Launch arguments for vLLM (`vllm serve`) and SGLang (`python -m sglang.launch_server`) from a serving plan: pure
layout -> text functions.

SGLang's own argument parser (sglang 0.5.4's ServerArgs.add_cli_args) reads every SGLang line in
tests/test_sglang_parser.py. vLLM's is not run: vllm/engine/arg_utils.py imports vLLM's CUDA build; the vLLM flags
are the ones its documentation lists (docs.vllm.ai "Engine Arguments"), which tests/test_inference.py checks.

Mapping. vLLM: --tensor-parallel-size tp, --pipeline-parallel-size pp, --data-parallel-size (the engine's dp
attention ranks with --enable-expert-parallel, else the co-located replicas), --max-num-seqs (the batch per
replica), --gpu-memory-utilization, --kv-cache-dtype fp8, --quantization fp8, --max-model-len, --block-size;
disaggregated pools add --kv-transfer-config with the NIXL connector. SGLang: --tp-size is the engine's GPUs
per stage (tp x dp with --enable-dp-attention), --dp-size, --ep-size, --pp-size, --max-running-requests,
--mem-fraction-static, --kv-cache-dtype fp8_e4m3, --context-length, --page-size, --disaggregation-mode.
"""

from __future__ import annotations

import shlex

from meshcore.inference import KvFormat, ReplicaLayout, WeightFormat
from meshcore.text import comment
from planner.workloads.serving.spec import ServingJob, ServingLayout

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def _common_vllm(job: ServingJob) -> list[str]:
    args = ["--gpu-memory-utilization", f"{job.gpu_memory_utilization:g}", "--max-model-len", str(job.context_len),
            "--block-size", str(job.block_size)]
    if job.kv is KvFormat.FP8:
        args += ["--kv-cache-dtype", "fp8"]
    if job.weights is WeightFormat.FP8:
        args += ["--quantization", "fp8"]
    return args


def _vllm_engine(r: ReplicaLayout, replicas: int, batch: int | None) -> list[str]:
    args = ["--tensor-parallel-size", str(r.tp), "--pipeline-parallel-size", str(r.pp)]
    if r.ep > 1:
        args += ["--data-parallel-size", str(r.dp), "--enable-expert-parallel"]
    elif replicas > 1:
        args += ["--data-parallel-size", str(replicas)]
    return [*args, "--max-num-seqs", str(batch)] if batch else args


def _line(head: list[str], args: list[str], note: str) -> str:
    return comment(note) + "\n" + shlex.join([*head, *args])


def vllm_commands(model: str, job: ServingJob, layout: ServingLayout) -> str:
    """`vllm serve` command lines, one per pool (a comment says how many servers of each)."""
    head = ["vllm", "serve", model]
    common = _common_vllm(job)  # int8/int4: the method (AWQ, GPTQ) comes from the checkpoint's config
    d, p = layout.decode, layout.prefill
    if p is None:
        return _line(head, _vllm_engine(d, layout.replicas, layout.batch) + common,
                     f"{layout.replicas if d.ep > 1 else 1} server(s), co-located prefill and decode")
    decode = _line(head, _vllm_engine(d, 1, layout.batch) + common + ["--kv-transfer-config", NIXL],
                   f"decode pool: {layout.replicas} server(s)")
    prefill = _line(head, _vllm_engine(p, 1, None) + common + ["--kv-transfer-config", NIXL],
                    f"prefill pool: {layout.prefill_replicas} server(s)")
    return prefill + "\n" + decode


def _sglang_engine(r: ReplicaLayout, replicas: int, batch: int | None) -> list[str]:
    if r.ep > 1:
        args = ["--tp-size", str(r.tp * r.dp), "--dp-size", str(r.dp), "--enable-dp-attention",
                "--ep-size", str(r.ep)]
    else:
        args = ["--tp-size", str(r.tp)] + (["--dp-size", str(replicas)] if replicas > 1 else [])
    if r.pp > 1:
        args += ["--pp-size", str(r.pp)]
    return [*args, "--max-running-requests", str(batch)] if batch else args


def sglang_commands(model: str, job: ServingJob, layout: ServingLayout) -> str:
    """`python -m sglang.launch_server` command lines, one per pool."""
    head = ["python", "-m", "sglang.launch_server", "--model-path", model]
    common = ["--mem-fraction-static", f"{job.gpu_memory_utilization:g}", "--context-length", str(job.context_len),
              "--page-size", str(job.block_size)]
    common += ["--kv-cache-dtype", "fp8_e4m3"] if job.kv is KvFormat.FP8 else []
    common += ["--quantization", "fp8"] if job.weights is WeightFormat.FP8 else []
    d, p = layout.decode, layout.prefill
    if p is None:
        return _line(head, _sglang_engine(d, layout.replicas, layout.batch) + common,
                     f"{layout.replicas if d.ep > 1 else 1} server(s), co-located prefill and decode")
    decode = _line(head, _sglang_engine(d, 1, layout.batch) + common + ["--disaggregation-mode", "decode"],
                   f"decode pool: {layout.replicas} server(s)")
    prefill = _line(head, _sglang_engine(p, 1, None) + common + ["--disaggregation-mode", "prefill"],
                    f"prefill pool: {layout.prefill_replicas} server(s)")
    return prefill + "\n" + decode
