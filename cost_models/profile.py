"""Profiled cost tables: measured per-layer costs that replace the analytical compute model.

A cost table is a CSV (or parquet) with one row per (layer kind, TP degree, micro-batch size), written
by `meshplan profile layers` or by hand or another profiler. Columns (units in the names):

  kind             embedding | decoder | lm_head        the chain is embedding, `count` x decoder, lm_head
  count            layers of this kind in the chain     (1 for embedding and lm_head)
  tp               tensor-parallel degree the row was measured for (one rank's shard)
  mbs              micro-batch size (sequences)
  seq_len          tokens per sequence
  forward_ms       forward time of one layer, one micro-batch, one GPU
  backward_ms      backward time (input and weight gradients)
  activation_bytes bytes kept for backward by one layer and micro-batch (no recomputation)
  params           parameters of one layer on one TP rank
  output_bytes     bytes of the layer's output (what a pipeline stage sends)
  hidden_size, ffn_hidden_size, num_attention_heads, num_kv_heads, vocab_size   the model's shape
  device           what measured it (informational)

With a table, times come from the rows and communication stays analytical (TP collectives and
pipeline sends are priced from the hardware profile; the table's device may not be the cluster's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from planner.errors import InputError
from planner.specs import ModelSpec

COLUMNS = ("kind", "count", "tp", "mbs", "seq_len", "forward_ms", "backward_ms", "activation_bytes", "params",
           "output_bytes", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size",
           "device")
KINDS = ("embedding", "decoder", "lm_head")


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


def read_frame(path: str | Path) -> pd.DataFrame:
    """A cost table as a DataFrame (CSV, or parquet by suffix), or an InputError naming the problem."""
    import pandas as pd  # only cost tables need pandas: kept out of every command's start-up

    target = Path(path)
    try:
        frame = pd.read_parquet(target) if target.suffix == ".parquet" else pd.read_csv(target)
    except (OSError, ValueError, ImportError) as exc:
        raise InputError(f"cannot read cost table {target}: {str(exc).splitlines()[0]}") from None
    if "kind" not in frame.columns:
        raise InputError(f"cost table {target}: no 'kind' column; columns: {', '.join(COLUMNS)}")
    return frame


def read_costs(path: str | Path) -> tuple[ModelSpec, MeasuredCosts]:
    """Read and check a cost table; the model it describes comes back as a ModelSpec."""
    target = Path(path)
    frame = read_frame(target)
    missing = [c for c in COLUMNS if c not in frame.columns]
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if missing or unknown:
        problem = f"missing columns {missing}" if missing else f"unknown columns {unknown}"
        raise InputError(f"cost table {target}: {problem}; columns: {', '.join(COLUMNS)}")
    if frame.empty or not set(frame["kind"]) <= set(KINDS) or set(KINDS) - set(frame["kind"]):
        raise InputError(f"cost table {target}: needs rows of every kind {KINDS}, got {sorted(set(frame['kind']))}")
    numeric = [c for c in COLUMNS if c not in ("kind", "device")]
    if frame[numeric].isna().any().any() or (frame[numeric] < 0).any().any():
        raise InputError(f"cost table {target}: numbers must be present and non-negative in {numeric}")
    if frame["seq_len"].nunique() != 1:
        raise InputError(f"cost table {target}: one seq_len per table, got {sorted(set(frame['seq_len']))}")
    first = frame.iloc[0]
    decoder = frame[frame["kind"] == "decoder"]
    if decoder["count"].nunique() != 1:
        raise InputError(f"cost table {target}: decoder rows disagree on count")
    heads, kv = int(first["num_attention_heads"]), int(first["num_kv_heads"])
    model = ModelSpec(
        name=f"table:{target.stem}", num_layers=int(decoder["count"].iloc[0]), hidden_size=int(first["hidden_size"]),
        ffn_hidden_size=int(first["ffn_hidden_size"]), num_attention_heads=heads, num_kv_heads=kv,
        head_dim=int(first["hidden_size"]) // heads, vocab_size=int(first["vocab_size"]), gated_mlp=True,
        tied_embeddings=False)
    rows = tuple(((str(r.kind), int(r.tp), int(r.mbs)),
                  MeasuredLayer(float(r.forward_ms) / 1e3, float(r.backward_ms) / 1e3, float(r.activation_bytes),
                                float(r.params)))
                 for r in frame.itertuples())
    return model, MeasuredCosts(rows, int(first["seq_len"]), str(target))
