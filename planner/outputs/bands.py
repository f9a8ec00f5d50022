"""Error bands of the step-time prediction, from the calibration residuals of the prediction's regime.

A regime is (runtime, GPU architecture, dtype, dense or MoE, sequence-length band). Calibration compares
published measured runs with the model's prediction of their layouts; each run leaves a relative
residual r = t_measured / t_predicted − 1. For a coverage c (0.9 by default) the band of a regime is
the empirical (1 − c)/2 and (1 + c)/2 quantiles of its residuals, widened to contain 0 and at least
±2 %, so that a prediction t reads "the measured step time lies in [t·(1 + low), t·(1 + high)] for a
fraction c of the runs in this regime". The most specific key is the runtime's own (runtime, architecture,
dense/MoE: torchtitan's runs err otherwise than Megatron-LM's); a regime with fewer than MIN_RESIDUALS residuals
there falls back to the keys every runtime shares: architecture, dtype, dense/MoE and sequence band, without the
sequence band, then without dtype, then without dense/MoE, then "any"
(every residual); an architecture that reaches "any" (none, or too few, of its runs were calibrated)
gets that band widened by UNCALIBRATED_WIDENING and says so.

The band table is data, written by calibration (`save_bands`) and read from the packaged
planner/outputs/error_bands.yaml (`load_bands`); the functions that fit and look up bands are pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from meshcore import ClusterSpec, Dtype, JobSpec, ModelSpec
from meshcore.errors import InputError
from meshcore.inputfile import MAX_SPEC_BYTES, parse_yaml, read_text, safe_load, shown

MIN_RESIDUALS = 4  # fewer residuals than this do not make a quantile band: fall back to a coarser key
MIN_HALF_WIDTH = 0.02  # no band is narrower than ±2 %: published step times themselves vary that much
UNCALIBRATED_WIDENING = 1.5  # an architecture without its own band gets the all-regime band x 1.5
ANY = "any"
WILDCARD = "*"
BANDS_FILE = "error_bands.yaml"
TABLE_KEYS = ("coverage", "held_out", "residuals", "bands")
BAND_KEYS = ("regime", "level", "low", "high", "n")


class SeqBand(str, Enum):
    """Sequence-length band of a regime: SHORT ≤ 4096 < MEDIUM ≤ 16384 < LONG tokens."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"

    @classmethod
    def of(cls, seq_len: int) -> SeqBand:
        return cls.SHORT if seq_len <= 4096 else cls.MEDIUM if seq_len <= 16384 else cls.LONG


class BandLevel(str, Enum):
    """How specific the key a band was fitted on is, most specific first (the fallback order)."""

    RUNTIME = "runtime"  # the runtime's own runs: runtime, architecture, dense/MoE
    REGIME = "regime"  # architecture, dtype, dense/MoE, sequence band
    NO_SEQ_BAND = "no-seq-band"  # architecture, dtype, dense/MoE
    NO_DTYPE = "no-dtype"  # architecture, dense/MoE
    ARCHITECTURE = "architecture"  # architecture only
    ANY = "any"  # every residual


@dataclass(frozen=True)
class Regime:
    """What the model's error is believed to depend on: GPU generation, precision, MoE, sequence length."""

    architecture: str
    dtype: Dtype
    moe: bool
    seq_band: SeqBand
    runtime: str = ""  # the framework that runs it (Runtime.framework); "" looks up the shared keys only

    def lookup_keys(self) -> tuple[tuple[BandLevel, str], ...]:
        """The band-table keys of this regime in fallback order, e.g. hopper/fp8/dense/short,
        hopper/fp8/dense/*, hopper/*/dense/*, hopper/*/*/*, any."""
        kind = "moe" if self.moe else "dense"
        fields = ((self.architecture, self.dtype.value, kind, self.seq_band.value),
                  (self.architecture, self.dtype.value, kind, WILDCARD),
                  (self.architecture, WILDCARD, kind, WILDCARD),
                  (self.architecture, WILDCARD, WILDCARD, WILDCARD))
        levels = (BandLevel.REGIME, BandLevel.NO_SEQ_BAND, BandLevel.NO_DTYPE, BandLevel.ARCHITECTURE)
        own = ((BandLevel.RUNTIME, f"{self.runtime}/{self.architecture}/{kind}"),) if self.runtime else ()
        return (*own, *((lv, "/".join(f)) for lv, f in zip(levels, fields, strict=True)), (BandLevel.ANY, ANY))

    @property
    def label(self) -> str:
        return self.lookup_keys()[1 if self.runtime else 0][1]


def regime_of(model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> Regime:
    """The regime of one prediction; fitting and lookup both derive it here, so they cannot disagree."""
    return Regime(cluster.gpu.architecture, job.dtype, model.moe is not None, SeqBand.of(job.seq_len),
                  job.runtime.framework.value)


@dataclass(frozen=True)
class Residual:
    """One calibration run: r = measured step time / predicted step time − 1 (positive: the model was fast)."""

    regime: Regime
    r: float
    run_id: str
    source: str


@dataclass(frozen=True)
class Band:
    """Relative band [low, high] around a predicted step time (low ≤ 0 ≤ high), fitted on n residuals of
    the key `regime` at `level`, held out of the fit or not; `note` says when it was widened for an
    uncalibrated architecture."""

    low: float
    high: float
    n: int
    level: BandLevel
    regime: str
    coverage: float
    held_out: bool
    note: str = ""


@dataclass(frozen=True)
class BandTable:
    """Bands of every key with at least MIN_RESIDUALS residuals; `held_out` says whether the residuals come
    from runs left out of the fit (cross-validated) or from the fit itself; `residuals` describes them."""

    coverage: float
    held_out: bool
    residuals: str
    bands: tuple[Band, ...]

    def get(self, key: str) -> Band | None:
        return next((b for b in self.bands if b.regime == key), None)


@dataclass(frozen=True)
class StepBand:
    """A predicted step time with its band in seconds."""

    step_s: float
    low_s: float
    high_s: float
    band: Band

    def overlaps(self, other: StepBand) -> bool:
        """Two predictions the model cannot tell apart: their bands share a point."""
        return self.low_s <= other.high_s and other.low_s <= self.high_s


def quantile(values: Sequence[float], p: float) -> float:
    """Empirical quantile with linear interpolation between order statistics (Hyndman & Fan 1996, type 7;
    numpy's default): for sorted x_0..x_{n-1}, h = (n − 1)·p, q = x_⌊h⌋ + (h − ⌊h⌋)·(x_⌊h⌋+1 − x_⌊h⌋)."""
    xs = sorted(values)
    h = (len(xs) - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def _band(rs: Sequence[float], coverage: float, held_out: bool, level: BandLevel, key: str) -> Band:
    low = min(quantile(rs, (1 - coverage) / 2), -MIN_HALF_WIDTH)
    high = max(quantile(rs, (1 + coverage) / 2), MIN_HALF_WIDTH)
    return Band(low, high, len(rs), level, key, coverage, held_out)


def fit_bands(residuals: Iterable[Residual], coverage: float = 0.9, *, held_out: bool = True,
              description: str = "leave-one-source-out") -> BandTable:
    """Per key (every fallback level of every residual's regime) with at least MIN_RESIDUALS residuals,
    the quantile band [q_(1−c)/2, q_(1+c)/2] of r, widened to [min(q, −2 %), max(q, +2 %)]."""
    if not 0 < coverage < 1:
        raise InputError(f"coverage must lie strictly between 0 and 1, got {coverage}")
    groups: dict[tuple[BandLevel, str], list[float]] = {}
    count = 0
    for res in residuals:
        if not math.isfinite(res.r) or res.r <= -1:
            raise InputError(f"residual of {res.run_id} must be a finite number > -1, got {res.r}")
        count += 1
        for key in res.regime.lookup_keys():
            groups.setdefault(key, []).append(res.r)
    if count < MIN_RESIDUALS:
        raise InputError(f"fit_bands needs at least {MIN_RESIDUALS} residuals, got {count}")
    order = list(BandLevel)
    bands = tuple(_band(rs, coverage, held_out, level, key)
                  for (level, key), rs in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1]))
                  if len(rs) >= MIN_RESIDUALS)
    return BandTable(coverage, held_out, description, bands)


def lookup(table: BandTable, regime: Regime) -> Band:
    """The band of the most specific key of `regime` the table has; the "any" band, widened by
    UNCALIBRATED_WIDENING, for an architecture without a band of its own."""
    for level, key in regime.lookup_keys():
        band = table.get(key)
        if band is None:
            continue
        if level is BandLevel.ANY:
            return replace(band, low=band.low * UNCALIBRATED_WIDENING, high=band.high * UNCALIBRATED_WIDENING,
                           note=f"no calibrated band for {regime.architecture} GPUs: the all-regime band "
                                f"widened {UNCALIBRATED_WIDENING:g}x")
        return band
    raise InputError(f"the error-band table has no '{ANY}' band")


def band_for(table: BandTable, model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> Band:
    """The band of a prediction for this model, cluster and job."""
    return lookup(table, regime_of(model, cluster, job))


def step_time_band(pred_step_s: float, band: Band) -> tuple[float, float]:
    """(t·(1 + low), t·(1 + high)) for a predicted step time t."""
    return pred_step_s * (1 + band.low), pred_step_s * (1 + band.high)


def step_band(pred_step_s: float, band: Band) -> StepBand:
    low_s, high_s = step_time_band(pred_step_s, band)
    return StepBand(pred_step_s, low_s, high_s, band)


def describe(step: StepBand) -> str:
    """For the readable output: the band in seconds, its coverage, regime and size."""
    b = step.band
    runs = "held-out" if b.held_out else "in-sample calibration"
    text = (f"model error band {step.low_s:.4g}-{step.high_s:.4g} s, {100 * b.coverage:g} % of {runs} runs "
            f"in regime {b.regime}, n={b.n}")
    return f"{text}; {b.note}" if b.note else text


def band_dict(step: StepBand) -> dict[str, Any]:
    """The JSON form: relative limits in percent, the key the band came from, its size and coverage."""
    b = step.band
    return {"low_pct": 100 * b.low, "high_pct": 100 * b.high, "regime": b.regime, "level": b.level.value,
            "residuals": b.n, "coverage_pct": 100 * b.coverage, "note": b.note or None}


def table_mapping(table: BandTable) -> dict[str, Any]:
    return {"coverage": table.coverage, "held_out": table.held_out, "residuals": table.residuals,
            "bands": [{"regime": b.regime, "level": b.level.value, "low": b.low,
                       "high": b.high, "n": b.n} for b in table.bands]}


def _fail(origin: str, what: str) -> InputError:
    return InputError(f"{origin}: {what}")


def _number(value: Any, origin: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(origin, f"{what} must be a number, got {value!r}")
    return float(value)


def _parse_band(item: Any, i: int, coverage: float, held_out: bool, origin: str) -> Band:
    where = f"bands[{i}]"
    if not isinstance(item, dict):
        raise _fail(origin, f"{where} must be a mapping with keys {', '.join(BAND_KEYS)}")
    if sorted(item) != sorted(BAND_KEYS):
        raise _fail(origin, f"{where} has keys {', '.join(sorted(map(str, item)))}; "
                            f"expected exactly {', '.join(BAND_KEYS)}")
    try:
        level = BandLevel(item["level"])
    except ValueError:
        raise _fail(origin, f"{where}.level must be one of {', '.join(v.value for v in BandLevel)}, "
                            f"got {item['level']!r}") from None
    low, high = _number(item["low"], origin, f"{where}.low"), _number(item["high"], origin, f"{where}.high")
    n = item["n"]
    if not -1 < low <= 0 <= high:
        raise _fail(origin, f"{where} must satisfy -1 < low <= 0 <= high, got low {low}, high {high}")
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_RESIDUALS:
        raise _fail(origin, f"{where}.n must be an integer >= {MIN_RESIDUALS}, got {n!r}")
    if not isinstance(item["regime"], str):
        raise _fail(origin, f"{where}.regime must be a string, got {item['regime']!r}")
    return Band(low, high, n, level, item["regime"], coverage, held_out)


def parse_bands(data: Any, origin: str) -> BandTable:
    """Check a parsed band file and build its table; any defect is one InputError naming the key."""
    if not isinstance(data, dict):
        raise _fail(origin, f"must be a mapping with keys {', '.join(TABLE_KEYS)}")
    unknown = sorted(set(map(str, data)) - set(TABLE_KEYS))
    missing = [k for k in TABLE_KEYS if k not in data]
    if unknown or missing:
        raise _fail(origin, f"unknown keys {', '.join(unknown) or '-'}, missing {', '.join(missing) or '-'}; "
                            f"allowed: {', '.join(TABLE_KEYS)}")
    coverage = _number(data["coverage"], origin, "coverage")
    if not 0 < coverage < 1:
        raise _fail(origin, f"coverage must lie strictly between 0 and 1, got {coverage}")
    if not isinstance(data["held_out"], bool) or not isinstance(data["residuals"], str):
        raise _fail(origin, "held_out must be true or false and residuals a string")
    if not isinstance(data["bands"], list):
        raise _fail(origin, "bands must be a list")
    bands = tuple(_parse_band(item, i, coverage, data["held_out"], origin) for i, item in enumerate(data["bands"]))
    if not any(b.regime == ANY for b in bands):
        raise _fail(origin, f"no '{ANY}' band (the fallback of every regime)")
    return BandTable(coverage, data["held_out"], data["residuals"], bands)


def dumps_bands(table: BandTable) -> str:
    kind = "held-out" if table.held_out else "in-sample"
    header = ("# Error bands of meshplan's step-time prediction (planner/outputs/bands.py), one per regime key\n"
              "# (architecture/dtype/dense|moe/seq band, '*' where a coarser fallback key drops the field).\n"
              "# Written by `python benchmarks/calibration.py --write-bands` from leave-one-source-out residuals,\n"
              "# and replaced each time calibration is rerun.\n"
              f"# This file: coverage {table.coverage:g}, {kind}; residuals: {table.residuals}\n")
    return header + str(yaml.safe_dump(table_mapping(table), sort_keys=False, width=120))


def save_bands(table: BandTable, path: str | Path) -> None:
    """Write the table as YAML, atomically."""
    from meshcore.fileio import write_text_atomic

    write_text_atomic(Path(path), dumps_bands(table))


def read_bands(path: str | Path) -> BandTable:
    """Read and check a band file."""
    return parse_bands(parse_yaml(read_text(path, "error-band file", MAX_SPEC_BYTES), shown(path)), str(path))


def _parse_text(text: str, origin: str) -> BandTable:
    try:
        data = safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{origin}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_bands(data, origin)


def load_bands() -> BandTable:
    """The packaged table, planner/outputs/error_bands.yaml (written by calibration)."""
    return _parse_text((resources.files("planner.outputs") / BANDS_FILE).read_text(), f"planner/outputs/{BANDS_FILE}")
