"""What an edge pipeline serves: one request stream over a few edge devices (`meshplan infer edge`), validated on
construction."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore.checks import MAX_SEQ_LEN, integer, real
from meshcore.errors import SpecError
from meshcore.inference import KvFormat, Objective, WeightFormat


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
