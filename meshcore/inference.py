"""What is served, and how: the specs of inference planning (`meshplan infer`), validated on construction.

Three families share the number formats and objectives here: LLM serving on GPU clusters (`ServingJob`,
`ReplicaLayout`, `ServingLayout`), a transformer pipelined over a few edge devices (`EdgeJob`) and diffusion
transformers (meshcore.diffusion). Times are seconds, memory bytes unless a name says GiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_SEQ_LEN, integer, real
from meshcore.engine import EngineProfile
from meshcore.errors import LayoutError, SpecError

MIN_SLO_S, MAX_SLO_S = 1e-6, 86400.0  # a microsecond (below any kernel launch) to a day
MIN_RATE, MAX_RATE = 1e-6, 1e9  # requests per second: one in 11.6 days to a billion


class WeightFormat(str, Enum):
    """How the weights are stored. int8/int4 are weight-only quantisation (the GEMMs dequantise to 16 bits and run
    at the 16-bit peak: AWQ, GPTQ, MLC's q4f16); fp8 runs the GEMMs in fp8 where the GPU has fp8 units."""

    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"

    @property
    def bytes_per_param(self) -> float:
        """Bytes per weight. int4: 4 bits plus one fp16 scale and one fp16 zero point per group of 128 weights
        (AWQ, Lin et al. 2024, and GPTQ, Frantar et al. 2023, default group size 128): 0.5 + 4/128."""
        return {WeightFormat.BF16: 2.0, WeightFormat.FP8: 1.0, WeightFormat.INT8: 1.0,
                WeightFormat.INT4: 0.5 + 4.0 / 128}[self]


class KvFormat(str, Enum):
    """Number format of the KV cache (vLLM --kv-cache-dtype auto|fp8, SGLang --kv-cache-dtype)."""

    BF16 = "bf16"
    FP8 = "fp8"

    @property
    def bytes(self) -> float:
        return 2.0 if self is KvFormat.BF16 else 1.0


class Objective(str, Enum):
    """Throughput (tokens or images per second per GPU under the latency SLOs) or latency (per request or image,
    under the rate target)."""

    THROUGHPUT = "throughput"
    LATENCY = "latency"


class PoolMode(str, Enum):
    """Serving: prefill and decode on the same replicas (vLLM/SGLang default, chunked prefill), in separate pools
    (DistServe, Zhong et al. OSDI'24; Splitwise, Patel et al. ISCA'24), or the better of the two."""

    COLOCATED = "colocated"
    DISAGGREGATED = "disaggregated"
    ANY = "any"


class Family(str, Enum):
    """The kind of inference plan (the plan file's `inference.family`)."""

    SERVING = "serving"
    EDGE = "edge"
    DIFFUSION = "diffusion"


def _positive(value: object, name: str, low: float, high: float) -> float:
    return real(value, name, low, high, low_open=False, error=SpecError)


@dataclass(frozen=True)
class ServingJob:
    """The requests: `prompt_len` tokens in, `output_len` out. `batch`: concurrent requests over the whole
    deployment (None: the planner picks the largest that meets the SLOs); `rate`: requests per second the
    deployment must sustain (None: no target). SLOs in seconds (None: none). `engine`: the serving engine whose
    host time, CUDA graphs and scheduler are priced (planner.inputs.engines.load_engine; None: the GPU roofline
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
class ReplicaLayout:
    """One model replica (engine) of tp x pp GPUs. `ep` > 1 splits the routed experts over ep GPUs instead of
    tensor-splitting them: vLLM's --enable-expert-parallel makes ep = tp x dp, the data-parallel ranks then
    running attention apart and the MoE layers together (one engine of `dp` attention replicas)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1  # attention replicas that form one engine (1 unless ep > 1)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp"):
            integer(getattr(self, name), name, 1, MAX_GPUS, LayoutError)
        if self.ep > 1 and self.ep != self.tp * self.dp:
            raise LayoutError(f"ep {self.ep} must equal tp {self.tp} x dp {self.dp} (vLLM/SGLang expert "
                              "parallelism spans the engine's tensor- and data-parallel ranks)")
        if self.ep == 1 and self.dp > 1:
            raise LayoutError(f"dp {self.dp} inside one engine needs expert parallelism; without it data-parallel "
                              "ranks are separate replicas")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> str:
        return f"tp{self.tp} pp{self.pp}" + (f" ep{self.ep} (dp-attention {self.dp})" if self.ep > 1 else "")


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


@dataclass(frozen=True)
class EdgeJob:
    """One request stream on a pipeline of edge devices: `prompt_len` in, `output_len` out, `batch` sequences in
    flight (the pipeline's micro-batches), `reserve_gib` of each device's memory kept for the OS and runtime."""

    prompt_len: int
    output_len: int
    batch: int = 1
    objective: Objective = Objective.LATENCY
    weights: WeightFormat = WeightFormat.INT4
    kv: KvFormat = KvFormat.BF16
    reserve_gib: float = 2.0

    def __post_init__(self) -> None:
        integer(self.prompt_len, "--prompt-len", 1, MAX_SEQ_LEN, SpecError)
        integer(self.output_len, "--output-len", 1, MAX_SEQ_LEN, SpecError)
        integer(self.batch, "--batch", 1, 4096, SpecError)
        real(self.reserve_gib, "--reserve-gib", 0.0, 1e6, low_open=False, error=SpecError)
