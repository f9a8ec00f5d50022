"""What the inference workloads share, validated on construction: number formats of weights and KV cache, the
objective, the plan family, and one LLM replica's parallel layout (`ReplicaLayout`, priced by
cost_models.inference). The workloads' own jobs live in their rooms: planner.workloads.serving (`ServingJob`,
`ServingLayout`), planner.workloads.edge (`EdgeJob`), planner.workloads.diffusion.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import MAX_GPUS, integer
from meshcore.errors import LayoutError


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


class Family(str, Enum):
    """The kind of inference plan (the plan file's `inference.family`)."""

    SERVING = "serving"
    EDGE = "edge"
    DIFFUSION = "diffusion"


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
