"""Measured per-layer costs from a cost table (read by `cost_models.profile.tables`): with them the step is priced from
the rows instead of the analytical compute model."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore.errors import InputError


@dataclass(frozen=True)
class MeasuredLayer:
    forward_s: float
    backward_s: float
    activation_bytes: float
    params: float


@dataclass(frozen=True)
class MeasuredCosts:
    """Rows of a cost table keyed by (kind, tp, mbs); frozen and hashable so layouts can cache on it."""

    rows: tuple[tuple[tuple[str, int, int], MeasuredLayer], ...]
    seq_len: int
    source: str
    device: str = ""  # the table's `device` column (what measured it; informational, not kept in plan files)

    @property
    def on_cpu(self) -> bool:
        """Whether the table says a CPU measured it (`meshplan profile layers --device cpu` writes 'cpu (...)')."""
        return "cpu" in self.device.lower()

    def get(self, kind: str, tp: int, mbs: int) -> MeasuredLayer:
        for key, layer in self.rows:
            if key == (kind, tp, mbs):
                return layer
        raise InputError(f"cost table {self.source} has no {kind} row for tp {tp}, mbs {mbs}; measured: "
                         f"{sorted({(k[1], k[2]) for k, _ in self.rows})} (tp, mbs)")

    def params(self, kind: str, tp: int) -> float:
        for key, layer in self.rows:
            if key[0] == kind and key[1] == tp:
                return layer.params
        raise InputError(f"cost table {self.source} has no {kind} row for tp {tp}")

    def tp_degrees(self) -> tuple[int, ...]:
        return tuple(sorted({k[1] for k, _ in self.rows if k[0] == "decoder"}))

    def micro_batches(self) -> tuple[int, ...]:
        return tuple(sorted({k[2] for k, _ in self.rows if k[0] == "decoder"}))
