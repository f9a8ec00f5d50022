"""The attention and norm details of a model that change its cost or its launch: sliding-window attention (and
which layers keep full attention), the rotary base and the norms' epsilon. Model-YAML keys, what a Hugging Face
config.json says of them, and the inverse for plan files.

  sliding_window           keys a query sees (0 or absent: all)
  global_attention_every   with a window, every k-th layer sees all keys (0 or absent: every layer is windowed)
  rope_theta, norm_eps     stated where the source states them (absent: the runtime's default)

Hugging Face: `sliding_window` (Mistral, Qwen2 only with `use_sliding_window`), Gemma 2's alternating layers
(every second layer global), Gemma 3's `sliding_window_pattern` (every k-th global), `rope_theta`,
`rms_norm_eps` / `layer_norm_eps` / `layer_norm_epsilon`.
"""

from __future__ import annotations

from typing import Any

from meshcore import ModelSpec
from meshcore.checks import finite, is_integer
from meshcore.errors import InputError

ATTENTION_KEYS = ("sliding_window", "global_attention_every", "rope_theta", "norm_eps")
_HF_EPS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")


def attention_fields(data: dict[str, Any], origin: str) -> dict[str, Any]:
    """The ModelSpec fields of a model-YAML mapping's attention keys, type-checked (ranges: ModelSpec)."""
    out: dict[str, Any] = {}
    for key in ("sliding_window", "global_attention_every"):
        if data.get(key) is not None:
            if not is_integer(data[key]):
                raise InputError(f"{origin}: {key} must be an integer >= 0, got {data[key]!r}")
            out[key] = int(data[key])
    for key in ("rope_theta", "norm_eps"):
        if data.get(key) is not None:
            if not finite(data[key]):
                raise InputError(f"{origin}: {key} must be a finite number > 0, got {data[key]!r}")
            out[key] = float(data[key])
    return out


def hf_attention_keys(config: dict[str, Any], kind: str) -> dict[str, Any]:
    """Model-YAML attention keys of a Hugging Face config (validated later by `attention_fields`)."""
    out: dict[str, Any] = {}
    window = config.get("sliding_window")
    if window and config.get("use_sliding_window", True) is not False:
        out["sliding_window"] = window
        if kind == "gemma2":
            out["global_attention_every"] = 2
        elif config.get("sliding_window_pattern"):
            out["global_attention_every"] = config["sliding_window_pattern"]
    if config.get("rope_theta") is not None:
        out["rope_theta"] = config["rope_theta"]
    eps = next((config[k] for k in _HF_EPS if config.get(k) is not None), None)
    if eps is not None:
        out["norm_eps"] = eps
    return out


def attention_mapping(model: ModelSpec) -> dict[str, Any]:
    """The inverse of `attention_fields`: only the keys a model states."""
    out: dict[str, Any] = {}
    if model.sliding_window:
        out["sliding_window"] = model.sliding_window
        if model.global_attention_every:
            out["global_attention_every"] = model.global_attention_every
    out.update({k: getattr(model, k) for k in ("rope_theta", "norm_eps") if getattr(model, k) is not None})
    return out
