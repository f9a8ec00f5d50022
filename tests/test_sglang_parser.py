"""SGLang's own argument parser reads the serving plan's `python -m sglang.launch_server` lines (issue 34: emitted
configs pass their packages' parsers). sglang's wheel pulls a CUDA PyTorch and its kernels, so CI installs it
without dependencies (.ci/run: sglang 0.5.4 --no-deps) and the test loads only sglang/srt/server_args.py, the file
that defines ServerArgs.add_cli_args, with every other sglang import (and orjson) stubbed: the parser's flags,
types and choices are SGLang's own. vLLM's parser (vllm/engine/arg_utils.py) imports vLLM's CUDA build and
is not checked here."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest
from stubbed_load import load_with_stubs

from meshcore.inference import KvFormat, ReplicaLayout, WeightFormat
from planner.workloads.serving.launch import sglang_commands
from planner.workloads.serving.spec import ServingJob, ServingLayout

STUBBED = ("sglang", "orjson")


class _Anything:
    """Whatever server_args.py takes from a stubbed module: attributes, calls, iteration (empty), a list to extend
    and a base class all work."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Anything()

    def __iter__(self) -> Any:
        return iter(())

    def __add__(self, other: list[Any]) -> list[Any]:
        return list(other)

    def __radd__(self, other: list[Any]) -> list[Any]:
        return list(other)

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    module: Any = load_with_stubs("sglang", "sglang/srt/server_args.py", "_sglang_server_args", STUBBED,
                                  lambda name: _Anything(), "pip install --no-deps sglang==0.5.4, as .ci/run does")
    parser = argparse.ArgumentParser(exit_on_error=False)
    module.ServerArgs.add_cli_args(parser)
    return parser


CASES = (
    ("tp 8, co-located", ServingJob(4000, 500), ServingLayout(ReplicaLayout(8), 1, 64)),
    ("tp 2 x 4 replicas, fp8 weights and KV", ServingJob(4000, 500, weights=WeightFormat.FP8, kv=KvFormat.FP8),
     ServingLayout(ReplicaLayout(2), 4, 32)),
    ("tp 4 pp 2", ServingJob(1000, 200), ServingLayout(ReplicaLayout(4, 2), 1, 16)),
    ("disaggregated, EP 16 over tp 8 x dp-attention 2", ServingJob(2000, 300),
     ServingLayout(ReplicaLayout(8, 1, 16, 2), 2, 128, ReplicaLayout(8), 3)),
)


@pytest.mark.parametrize(("label", "job", "layout"), CASES, ids=[c[0] for c in CASES])
def test_sglangs_parser_reads_every_launch_line(sglang_parser: argparse.ArgumentParser, label: str,
                                               job: ServingJob, layout: ServingLayout) -> None:
    lines = [ln for ln in sglang_commands("meta-llama/Llama-3.1-70B", job, layout).splitlines()
             if ln and not ln.startswith("#")]
    assert lines
    for line in lines:
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "sglang.launch_server"]
        args = sglang_parser.parse_args(words[3:])
        assert args.model_path == "meta-llama/Llama-3.1-70B"
        assert args.tensor_parallel_size == int(words[words.index("--tp-size") + 1])
        assert args.mem_fraction_static == pytest.approx(job.gpu_memory_utilization)
        assert args.context_length == job.context_len and args.page_size == job.block_size
        if "--max-running-requests" in words:
            assert args.max_running_requests == layout.batch
        if layout.decode.ep > 1 and "decode" in words:
            assert args.enable_dp_attention and args.expert_parallel_size == layout.decode.ep
        if "--pp-size" in words:
            assert args.pipeline_parallel_size == layout.decode.pp
        if job.kv is KvFormat.FP8:
            assert args.kv_cache_dtype == "fp8_e4m3"


def test_sglangs_parser_refuses_a_misspelt_flag(sglang_parser: argparse.ArgumentParser) -> None:
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        sglang_parser.parse_args(["--model-path", "m", "--tp-sizes", "2"])
