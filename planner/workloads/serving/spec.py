"""What is served, and how: the request stream (`ServingJob`) and the deployment of replicas (`ServingLayout`) of
`meshplan infer serve`, validated on construction. One replica's layout and the number formats are shared with the
edge room (meshcore.inference). Times are seconds, memory bytes unless a name says GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN, integer, real
from meshcore.errors import LayoutError, SpecError
from meshcore.inference import KvFormat, Objective, ReplicaLayout, WeightFormat
from planner.workloads.serving.engine import EngineProfile

MIN_SLO_S, MAX_SLO_S = 1e-6, 86400.0  # a microsecond (below any kernel launch) to a day
MIN_RATE, MAX_RATE = 1e-6, 1e9  # requests per second: one in 11.6 days to a billion


class PoolMode(str, Enum):
    """Serving: prefill and decode on the same replicas (vLLM/SGLang default, chunked prefill), in separate pools
    (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24), or the better of the two."""

    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"
    ANY = "any"


def _positive(value: object, name: str, low: float, high: float) -> float:
    return real(value, name, low, high, low_open=False, error=SpecError)


@dataclass(frozen=True)
class ServingJob:
    """The requests: `prompt_len` tokens in, `output_len` out. `batch`: concurrent requests over the whole
    deployment (None: the planner picks the largest that meets the SLOs); `rate`: requests per second the
    deployment must sustain (None: no target). SLOs in seconds (None: none). `engine`: the serving engine whose
    host time, CUDA graphs and scheduler are priced (engines.load_engine; None: the GPU roofline
    alone, no engine)."""

    prompt_len: int
    output_len: int
    batch: int | None = None
    rate: float | None = None
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    objective: Objective = Objective.THROUGHPUT
    weights: WeightFormat = WeightFormat.BF16
    kv: KvFormat = KvFormat.BF16
    mode: PoolMode = PoolMode.ANY
    block_size: int = 16  # tokens per KV page (vLLM's default --block-size)
    gpu_memory_utilization: float = 0.9  # share of device memory the engine may take (vLLM's default)
    max_num_seqs: int = 1024  # the largest batch per replica the search considers
    prefill_chunk: int = 8192  # tokens per prefill chunk (activation workspace; vLLM --max-num-batched-tokens)
    engine: EngineProfile | None = None

    def __post_init__(self) -> None:
        integer(self.prompt_len, "--prompt-len", 1, MAX_SEQ_LEN, SpecError)
        integer(self.output_len, "--output-len", 1, MAX_SEQ_LEN, SpecError)
        if self.batch is not None:
            integer(self.batch, "--batch", 1, MAX_GLOBAL_BATCH, SpecError)
        if self.rate is not None:
            _positive(self.rate, "--rate", MIN_RATE, MAX_RATE)
        for name, value in (("--ttft-slo", self.ttft_slo_s), ("--tpot-slo", self.tpot_slo_s)):
            if value is not None:
                _positive(value, name, MIN_SLO_S, MAX_SLO_S)
        integer(self.block_size, "--block-size", 1, 4096, SpecError)
        real(self.gpu_memory_utilization, "--gpu-memory-utilization", 0.0, 1.0, error=SpecError)
        integer(self.max_num_seqs, "--max-num-seqs", 1, MAX_GLOBAL_BATCH, SpecError)
        integer(self.prefill_chunk, "prefill chunk", 1, MAX_SEQ_LEN, SpecError)

    @property
    def context_len(self) -> int:
        """Tokens a request holds in the KV cache when it finishes."""
        return self.prompt_len + self.output_len

    @property
    def mean_decode_context(self) -> float:
        """Keys a decode step attends to, averaged over the generation: prompt + half the output."""
        return self.prompt_len + self.output_len / 2


@dataclass(frozen=True)
class ServingLayout:
    """A deployment: `replicas` copies of `decode` (co-located: they also prefill), or, disaggregated,
    `prefill_replicas` copies of `prefill` beside them; `batch` concurrent requests per decode replica."""

    decode: ReplicaLayout
    replicas: int
    batch: int
    prefill: ReplicaLayout | None = None
    prefill_replicas: int = 0

    def __post_init__(self) -> None:
        integer(self.replicas, "decode replicas", 1, MAX_GPUS, LayoutError)
        integer(self.batch, "batch per replica", 1, MAX_GLOBAL_BATCH, LayoutError)
        if (self.prefill is None) != (self.prefill_replicas == 0):
            raise LayoutError("a disaggregated layout needs both a prefill layout and at least one prefill replica")

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def gpus(self) -> int:
        prefill = self.prefill.gpus * self.prefill_replicas if self.prefill is not None else 0
        return self.decode.gpus * self.replicas + prefill

    def describe(self) -> str:
        decode = f"{self.replicas} x [{self.decode.describe()}] batch {self.batch}"
        if self.prefill is None:
            return decode
        return f"prefill {self.prefill_replicas} x [{self.prefill.describe()}] + decode {decode}"
