"""A serving engine as data (`meshplan infer serve --engine`): what an engine adds to the GPU's roofline each
iteration, read from hardware_profiles/engines/NAME.yaml (schema: hardware_profiles/engines/README.md).

Times are seconds. The host time is the CPU work of one scheduler call that the GPU waits for (scheduling, input
preparation, sampling's host side, output processing, detokenisation) when the engine does not overlap it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import integer, real
from meshcore.errors import SpecError


class Engine(str, Enum):
    """The engines `--engine` names; each has one packaged profile (its version named in the profile)."""

    VLLM = "vllm"
    SGLANG = "sglang"


class PrefillPolicy(str, Enum):
    """How a new prompt meets the running decodes. PREFILL_FIRST: a prompt runs in a prefill-only iteration as soon
    as the scheduler is next called, stalling every decode for its length (vLLM's default scheduler without
    chunked prefill; SGLang without --enable-mixed-chunk). CHUNKED: prompt chunks ride in the decode iterations
    (Sarathi-Serve, Agrawal et al. OSDI'24; vLLM --enable-chunked-prefill) and stretch them instead."""

    PREFILL_FIRST = "prefill_first"
    CHUNKED = "chunked"


@dataclass(frozen=True)
class EngineProfile:
    """One engine at one version. `host_fixed_s` + `host_per_seq_s` x batch: host time of one scheduler call;
    `scheduler_steps`: decode iterations per scheduler call (vLLM --num-scheduler-steps; 1 elsewhere), which also
    sets how long a new request waits for the scheduler; `overlap`: whether the host time of a call hides behind the
    GPU's work (SGLang >= 0.4's overlap scheduler); `cuda_graph_max_batch`: the largest decode batch replayed from a
    CUDA graph (larger batches and every prefill launch kernel by kernel); `kernels_per_layer` and `launch_s`:
    kernels one decoder layer launches eagerly and the host time of one launch, the floor of an eager iteration;
    `kernel_s`: GPU time every kernel of a pass costs beyond its bytes and FLOPs (the launch inside a CUDA graph,
    the ramp to full bandwidth and the tail wave); `max_num_seqs`: the engine's default cap on running sequences per
    scheduler (vLLM --max-num-seqs 256; 0 when only memory caps it, SGLang's --max-running-requests)."""

    engine: Engine
    version: str
    host_fixed_s: float
    host_per_seq_s: float
    scheduler_steps: int
    overlap: bool
    cuda_graph_max_batch: int
    kernels_per_layer: int
    launch_s: float
    kernel_s: float
    policy: PrefillPolicy
    max_num_seqs: int
    source: str

    def __post_init__(self) -> None:
        real(self.host_fixed_s, "host_fixed_s", 0.0, 1.0, low_open=False, error=SpecError)
        real(self.host_per_seq_s, "host_per_seq_s", 0.0, 0.01, low_open=False, error=SpecError)
        integer(self.scheduler_steps, "scheduler_steps", 1, 256, SpecError)
        integer(self.cuda_graph_max_batch, "cuda_graph_max_batch", 0, 65536, SpecError)
        integer(self.kernels_per_layer, "kernels_per_layer", 1, 1000, SpecError)
        real(self.launch_s, "launch_s", 0.0, 0.01, low_open=False, error=SpecError)
        real(self.kernel_s, "kernel_s", 0.0, 0.001, low_open=False, error=SpecError)
        integer(self.max_num_seqs, "max_num_seqs", 0, 1 << 20, SpecError)

    @property
    def label(self) -> str:
        return f"{self.engine.value} {self.version}"
