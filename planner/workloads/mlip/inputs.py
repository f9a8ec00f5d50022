"""Cost tables of graph interatomic potentials (`meshplan mlip plan --costs table.csv`) -> MlipCostTable.

The format: `# key: value` lines first (the model's metadata), then a CSV with the header `atoms,step_s,memory_bytes`
and one row per profiled atom count:

    # name: mace-medium
    # layers: 2            message-passing layers
    # cutoff_a: 6.0        cutoff radius, Å
    # halo_bytes: 2048     node-feature bytes per ghost atom per layer
    # params: 4700000      trainable parameters
    # density: 0.1         atoms per Å^3 of the systems trained on
    # device: H100 SXM     (optional) where it was profiled
    # source: ...          (optional) profile or formula the numbers come from
    # mode: md             (optional) train (default: step_s is a training step) or md (one forces-only call)
    # ghost_depth_a: 5.0   (optional, MD) LAMMPS ghost cutoff in Å; default layers x cutoff_a (Allegro: cutoff_a)
    # md_scheme: ghosts    (optional, MD) ghosts (model run on owned + ghost atoms: pair_style mace) or
    #                      message_passing (owned atoms only, ghost features exchanged per layer: symmetrix, ML-IAP)
    # swap_s: 7e-5         (optional, MD) fixed seconds of each LAMMPS swap a multi-rank step adds (kernels, fences)
    atoms,step_s,memory_bytes
    1000,0.0093,1.6e9
"""

from __future__ import annotations

import csv
import io
from enum import Enum
from pathlib import Path
from typing import TypeVar

from meshcore.checks import finite, is_integer
from meshcore.errors import InputError, SpecError
from meshcore.inputfile import MAX_TABLE_BYTES, read_text, shown
from planner.workloads.mlip.spec import MAX_ATOMS, CostRow, MdScheme, MlipCostTable, MlipMode

E = TypeVar("E", bound=Enum)

META_REQUIRED = ("layers", "cutoff_a", "halo_bytes", "params", "density")
META_OPTIONAL = ("name", "device", "source", "mode", "ghost_depth_a", "md_scheme", "swap_s")
COLUMNS = ("atoms", "step_s", "memory_bytes")
_INTS = ("layers", "params")


def _number(text: str, where: str, integer: bool) -> float | int:
    try:
        value: float | int = int(text) if integer else float(text)
    except ValueError:
        raise InputError(f"{where} must be {'an integer' if integer else 'a number'}, got {text!r}") from None
    if not finite(value) or (integer and not is_integer(value)):
        raise InputError(f"{where} must be a finite number, got {text!r}")
    return value


def _member(kind: type[E], field: str, text: str, origin: str) -> E:
    """The member of `kind` whose value is `text`; else an InputError naming `field` and the allowed values."""
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise InputError(f"{origin}: {field} must be one of {allowed}, got {text!r}") from None


def parse_cost_table(text: str, origin: str) -> MlipCostTable:
    meta: dict[str, str] = {}
    body: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            key, sep, value = stripped.lstrip("#").partition(":")
            if not sep:
                continue  # a plain comment
            key = key.strip()
            if key not in META_REQUIRED + META_OPTIONAL:
                allowed = ", ".join(META_REQUIRED + META_OPTIONAL)
                raise InputError(f"{origin}:{n}: unknown key {key!r}; allowed: {allowed}")
            meta[key] = value.split("  ")[0].strip()
        elif stripped:
            body.append(line)
    missing = [k for k in META_REQUIRED if k not in meta]
    if missing:
        raise InputError(f"{origin}: missing keys {missing} (as '# key: value' lines); allowed: "
                         f"{', '.join(META_REQUIRED + META_OPTIONAL)}")
    reader = csv.reader(io.StringIO("\n".join(body)))
    header = [h.strip() for h in next(reader, [])]
    if tuple(header) != COLUMNS:
        raise InputError(f"{origin}: the header must be {','.join(COLUMNS)}, got {','.join(header) or 'nothing'}")
    rows = []
    for i, cells in enumerate(reader, 2):
        if len(cells) != len(COLUMNS):
            raise InputError(f"{origin}: row {i} has {len(cells)} cells, expected {len(COLUMNS)} ({','.join(COLUMNS)})")
        values = [_number(c.strip(), f"{origin}: row {i} {col}", col == "atoms") for c, col in zip(cells, COLUMNS,
                                                                                                   strict=True)]
        rows.append(values)
    try:
        return MlipCostTable(
            name=meta.get("name", Path(origin).stem),
            rows=tuple(CostRow(int(a), float(s), float(m)) for a, s, m in rows),
            **{k: _number(meta[k], f"{origin}: {k}", k in _INTS) for k in META_REQUIRED},  # type: ignore[arg-type]
            device=meta.get("device", "unknown"), source=meta.get("source", "unknown"),
            mode=_member(MlipMode, "mode", meta.get("mode", "train"), origin),
            md_scheme=_member(MdScheme, "md_scheme", meta.get("md_scheme", "ghosts"), origin),
            ghost_depth_a=float(_number(meta.get("ghost_depth_a", "0"), f"{origin}: ghost_depth_a", False)),
            swap_s=float(_number(meta.get("swap_s", "0"), f"{origin}: swap_s", False)))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def load_cost_table(path: str) -> MlipCostTable:
    """The MLIP cost table at `path` (any readable path: a file, /dev/stdin; at most MAX_TABLE_BYTES)."""
    return parse_cost_table(read_text(path, "cost table", MAX_TABLE_BYTES), shown(path))


def cost_table_text(table: MlipCostTable, comments: tuple[str, ...] = ()) -> str:
    """`table` in the format above (parse_cost_table reads it back equal), `comments` as plain `#` lines first;
    the MD-only keys are written only where they are set. A comment may not hold a colon (it would read as a key)."""
    if any(":" in c or "\n" in c for c in comments):
        raise ValueError(f"a cost table comment may not hold a colon or a newline: {comments!r}")
    lines = [f"# {c}" for c in comments]
    lines += [f"# name: {table.name}", f"# source: {table.source}", f"# device: {table.device}",
              f"# mode: {table.mode.value}", f"# layers: {table.layers}", f"# cutoff_a: {table.cutoff_a!r}",
              f"# halo_bytes: {table.halo_bytes!r}", f"# params: {table.params}", f"# density: {table.density!r}"]
    if table.mode is MlipMode.MD:
        lines.append(f"# md_scheme: {table.md_scheme.value}")
        lines += [f"# {k}: {getattr(table, k)!r}" for k in ("ghost_depth_a", "swap_s") if getattr(table, k)]
    lines.append(",".join(COLUMNS))
    lines += [f"{r.atoms},{r.step_s!r},{r.memory_bytes!r}" for r in table.rows]
    return "\n".join(lines) + "\n"


MAX_STRUCTURES = 100_000  # structures in one step's size list


def parse_sizes(text: str, origin: str) -> tuple[int, ...]:
    """A training step's structure sizes from CSV `atoms,count` (count structures of that many atoms each, `#`
    lines ignored), expanded in the file's order."""
    body = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.reader(io.StringIO("\n".join(body)))
    header = [h.strip() for h in next(reader, [])]
    if header != ["atoms", "count"]:
        raise InputError(f"{origin}: the header must be atoms,count, got {','.join(header) or 'nothing'}")
    sizes: list[int] = []
    for i, cells in enumerate(reader, 2):
        if len(cells) != 2:
            raise InputError(f"{origin}: row {i} has {len(cells)} cells, expected 2 (atoms,count)")
        atoms, count = (_number(c.strip(), f"{origin}: row {i} {k}", True) for c, k in zip(cells, header, strict=True))
        if not 1 <= atoms <= MAX_ATOMS or not 1 <= count <= MAX_STRUCTURES:
            raise InputError(f"{origin}: row {i} needs 1 <= atoms <= {MAX_ATOMS:g} and 1 <= count <= "
                             f"{MAX_STRUCTURES}, got {atoms},{count}")
        sizes += [int(atoms)] * int(count)
        if len(sizes) > MAX_STRUCTURES:
            raise InputError(f"{origin}: more than {MAX_STRUCTURES} structures in one step")
    if not sizes:
        raise InputError(f"{origin}: no rows after the atoms,count header")
    return tuple(sizes)


def load_sizes(path: str) -> tuple[int, ...]:
    """The structure sizes at `path` (parse_sizes' format)."""
    return parse_sizes(read_text(path, "size list", MAX_TABLE_BYTES), shown(path))
