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

Every cell is checked before it is used (`checked_rows`): counts, degrees, sizes and shapes are whole numbers
in the ranges of meshcore.checks (1.0 is read as 1, 1.5 is refused), times and byte counts finite and
non-negative; a row of each kind for every measured (tp, mbs), one seq_len and one model shape per table, no
(kind, tp, mbs) twice. A bad table is refused with one line naming the row (counted from 1 after the header),
the column, the value and what is allowed.
"""

from __future__ import annotations

import contextlib
import io
import math
import numbers
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from meshcore import MeasuredCosts, MeasuredLayer, ModelSpec
from meshcore.checks import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_WIDTH,
    integer,
    path_argument,
    real,
)
from meshcore.errors import InputError, MeshplanError
from meshcore.inputfile import MAX_TABLE_BYTES, read_bytes

COLUMNS = ("kind", "count", "tp", "mbs", "seq_len", "forward_ms", "backward_ms", "activation_bytes", "params",
           "output_bytes", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size",
           "device")
KINDS = ("embedding", "decoder", "lm_head")
SHAPE_COLUMNS = ("hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size")
MAX_LAYER_MS = 8.64e7  # one layer, one micro-batch: a day, far above any measurement
MIN_LAYER_MS = 1e-6  # forward + backward of one layer: a nanosecond (a step of no time has no throughput)
MAX_BYTES = 1e18  # activations, outputs and parameters of one layer (an exabyte)
# the whole-number columns and their largest values (the smallest is 1)
INTEGER_COLUMNS = {"count": MAX_LAYERS, "tp": MAX_GPUS, "mbs": MAX_GLOBAL_BATCH, "seq_len": MAX_SEQ_LEN,
                   **{c: MAX_WIDTH for c in SHAPE_COLUMNS}}
# the real-valued columns and their largest values (the smallest is 0)
REAL_COLUMNS = {"forward_ms": MAX_LAYER_MS, "backward_ms": MAX_LAYER_MS, "activation_bytes": MAX_BYTES,
                "params": MAX_BYTES, "output_bytes": MAX_BYTES}


def read_frame(path: str | Path) -> pd.DataFrame:
    """A cost table as a DataFrame (CSV, or parquet by suffix), or an InputError naming the problem."""
    import pandas as pd  # only cost tables need pandas: kept out of every command's start-up

    path_argument(path, "costs", "a cost table")
    target = Path(path)
    data = io.BytesIO(read_bytes(target, "cost table", MAX_TABLE_BYTES))
    try:
        frame = (pd.read_parquet(data) if target.suffix == ".parquet"
                 else pd.read_csv(data, dtype={"kind": str}))  # a kind named 1 stays the name "1"
    except (OSError, ValueError, ImportError) as exc:
        raise InputError(f"cannot read cost table {target}: {str(exc).splitlines()[0] if str(exc) else exc!r}") \
            from None
    if "kind" not in frame.columns:
        raise InputError(f"cost table {target}: no 'kind' column; columns: {', '.join(COLUMNS)}")
    if frame.empty:
        raise InputError(f"cost table {target}: no rows; one row per (kind, tp, mbs) is needed")
    return frame


def _whole(value: Any) -> Any:
    """A float that holds a whole number as that int (CSV columns with a gap are read as floats); else as is."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and math.isfinite(value) \
            and float(value).is_integer():
        return int(float(value))
    return value


def _cell(value: Any, column: str, where: str) -> int | float:
    """One numeric cell checked against its column's range; a string that is a number counts as one."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value) if any(c in value.lower() for c in ".ein") else int(value)
    name = f"{where} {column}"
    if column in INTEGER_COLUMNS:
        return integer(_whole(value), name, 1, INTEGER_COLUMNS[column])
    return real(value, name, 0.0, REAL_COLUMNS[column], low_open=False)


def checked_rows(frame: pd.DataFrame, source: str, columns: Iterable[str]) -> list[dict[str, Any]]:
    """The rows as {column: value} (and "row": the row's number, from 1): `kind` a non-empty name, each of `columns`
    checked by `_cell` (`columns` include the times), the first bad cell refused with an InputError naming its row,
    column, value and range; every layer takes some time; no (kind, tp, mbs) twice."""
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, int, int], int] = {}
    for n, raw in enumerate(frame.to_dict("records"), 1):
        where = f"cost table {source}: row {n}"
        kind = raw["kind"]
        if not isinstance(kind, str) or not kind.strip():
            raise InputError(f"{where} kind must be the name of a layer kind, got {kind!r}")
        row: dict[str, Any] = {"row": n, "kind": kind, **{c: _cell(raw[c], c, f"{where} ({kind})") for c in columns}}
        if row["forward_ms"] + row["backward_ms"] < MIN_LAYER_MS:
            raise InputError(f"{where} ({kind}) forward_ms + backward_ms must be at least {MIN_LAYER_MS:g} ms (a "
                             f"measured layer takes time), got {row['forward_ms']:g} + {row['backward_ms']:g}")
        key = (kind, row["tp"], row["mbs"])
        if key in seen:
            raise InputError(f"{where} repeats row {seen[key]}: kind {kind}, tp {key[1]}, mbs {key[2]}; one row per "
                             f"(kind, tp, mbs)")
        seen[key] = n
        rows.append(row)
    return rows


def same_value(rows: list[dict[str, Any]], column: str, source: str, what: str) -> int:
    """The one value of `column` across `rows` (which are all the table's rows of `what`), or an InputError naming
    the first row that differs."""
    first = rows[0]
    for row in rows:
        if row[column] != first[column]:
            raise InputError(f"cost table {source}: row {row['row']} ({row['kind']}) {column} {row[column]} differs "
                             f"from {first[column]} in row {first['row']}; {what} must give one {column}")
    return int(first[column])


def _kinds(rows: list[dict[str, Any]], source: str) -> None:
    """Only the transformer's three kinds, each of them, and a row of each for every measured (tp, mbs)."""
    for row in rows:
        if row["kind"] not in KINDS:
            raise InputError(f"cost table {source}: row {row['row']} kind must be one of {', '.join(KINDS)}, got "
                             f"{row['kind']!r}")
    present = {row["kind"] for row in rows}
    for kind in KINDS:
        if kind not in present:
            raise InputError(f"cost table {source}: no {kind} rows; a transformer's cost table needs rows of every "
                             f"kind ({', '.join(KINDS)}), got {', '.join(k for k in KINDS if k in present)}")
    tps, mbss = sorted({row["tp"] for row in rows}), sorted({row["mbs"] for row in rows})
    have = {(row["kind"], row["tp"], row["mbs"]) for row in rows}
    for kind in KINDS:
        for tp in tps:
            for mbs in mbss:
                if (kind, tp, mbs) not in have:
                    raise InputError(f"cost table {source}: no {kind} row for tp {tp}, mbs {mbs}; every kind needs a "
                                     f"row for each measured tp {tps} and mbs {mbss}")


def least_decoder_activation(seq_len: int, mbs: int, hidden_size: int) -> int:
    """Bytes a decoder layer keeps for backward at the least: its 16-bit input, whole (no sequence parallelism),
    which is also all that full recomputation keeps; a table below it would make recomputation save negative
    memory."""
    return 2 * seq_len * mbs * hidden_size


def _activations(rows: list[dict[str, Any]], hidden: int, source: str) -> None:
    for row in rows:
        least = least_decoder_activation(row["seq_len"], row["mbs"], hidden)
        if row["kind"] == "decoder" and row["activation_bytes"] < least:
            raise InputError(f"cost table {source}: row {row['row']} (decoder) activation_bytes must be at least "
                             f"the layer's 16-bit input, 2 x seq_len {row['seq_len']} x mbs {row['mbs']} x "
                             f"hidden_size {hidden} = {least}, got {row['activation_bytes']:g}")


def _counts(rows: list[dict[str, Any]], source: str) -> int:
    """Decoder layers in the model: the decoder rows' one count (embedding and lm_head rows count 1)."""
    for row in rows:
        if row["kind"] != "decoder" and row["count"] != 1:
            raise InputError(f"cost table {source}: row {row['row']} ({row['kind']}) count must be 1, got "
                             f"{row['count']}; only decoder rows count layers")
    return same_value([r for r in rows if r["kind"] == "decoder"], "count", source, "the decoder rows")


def _model(rows: list[dict[str, Any]], source: str, name: str) -> ModelSpec:
    """The model the table's shape columns describe (one shape per table)."""
    shape = {c: same_value(rows, c, source, "the table") for c in SHAPE_COLUMNS}
    hidden, heads = shape["hidden_size"], shape["num_attention_heads"]
    if hidden % heads:
        raise InputError(f"cost table {source}: hidden_size {hidden} must be a multiple of num_attention_heads "
                         f"{heads} (the head size is hidden_size / num_attention_heads)")
    layers = _counts(rows, source)
    _activations(rows, hidden, source)
    try:
        return ModelSpec(name=name, num_layers=layers, hidden_size=hidden,
                         ffn_hidden_size=shape["ffn_hidden_size"], num_attention_heads=heads,
                         num_kv_heads=shape["num_kv_heads"], head_dim=hidden // heads,
                         vocab_size=shape["vocab_size"], gated_mlp=True, tied_embeddings=False)
    except MeshplanError as exc:
        raise InputError(f"cost table {source}: {exc}") from None


def read_costs(path: str | Path) -> tuple[ModelSpec, MeasuredCosts]:
    """Read and check a cost table; the model it describes comes back as a ModelSpec."""
    path_argument(path, "costs", "a cost table")
    target = Path(path)
    frame = read_frame(target)
    missing = [c for c in COLUMNS if c not in frame.columns]
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if missing or unknown:
        problem = f"missing columns {missing}" if missing else f"unknown columns {unknown}"
        raise InputError(f"cost table {target}: {problem}; a transformer's cost table (kinds {', '.join(KINDS)}) has "
                         f"the columns {', '.join(COLUMNS)}")
    rows = checked_rows(frame, str(target), [c for c in COLUMNS if c not in ("kind", "device")])
    _kinds(rows, str(target))
    seq_len = same_value(rows, "seq_len", str(target), "the table")
    model = _model(rows, str(target), f"table:{target.stem}")
    measured = tuple(((r["kind"], r["tp"], r["mbs"]),
                      MeasuredLayer(r["forward_ms"] / 1e3, r["backward_ms"] / 1e3, r["activation_bytes"],
                                    r["params"]))
                     for r in rows)
    devices = sorted({str(d) for d in frame["device"] if isinstance(d, str) and d.strip()})
    return model, MeasuredCosts(measured, seq_len, str(target), "; ".join(devices))
