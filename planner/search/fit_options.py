"""When nothing fits: which of the options that free GPU memory would make the job fit, each one checked by a search.

A no-fit error names the tightest resource (planner.search.nofit); the options it could suggest (offloading to the
host or NVMe, DeepSpeed's weight and gradient offload, LoRA, and the two together) are searched again here, each with
the job otherwise as given, and the message names only those that fit, with the best step time of each, or says
that none of them does. The least intrusive option that fits comes first (offloading keeps full fine-tuning; LoRA
changes what is trained), and once one option fits, options that only add to it are not tried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from meshcore import Runtime
from meshcore.errors import InfeasibleError
from meshcore.framework import Framework
from planner.search.nofit import HINTS_PREFIX
from planner.search.searchspec import SearchSpec

LORA_RANK = 16  # the rank suggested (a common LoRA default; PEFT's is 8)


@dataclass(frozen=True)
class FitOption:
    """One option that frees GPU memory: its command-line words and how it changes the search."""

    words: str
    offload_auto: bool
    deepspeed: bool
    lora: bool


def fit_options(spec: SearchSpec | None, runtime: Runtime, lora_rank: int) -> list[FitOption]:
    """The options the user left out, least intrusive first: `--offload auto` (the runtime's offload forms),
    `--runtime deepspeed --offload auto` (weights and gradients too, where the runtime offloads only the optimizer),
    `--lora-rank 16`, then LoRA with offloading."""
    chose_offload = spec is not None and (spec.offload is not None or spec.offload_auto)
    deepspeed = runtime.framework is Framework.DEEPSPEED
    out = []
    for lora in (False, True) if not lora_rank else (False,):
        if lora:
            out.append(FitOption(f"--lora-rank {LORA_RANK}", False, False, True))
        if not chose_offload:
            out.append(FitOption(" ".join(w for w in (f"--lora-rank {LORA_RANK}" if lora else "", "--offload auto")
                                          if w), True, False, lora))
            if not deepspeed:
                out.append(FitOption(" ".join(w for w in ("--runtime deepspeed", f"--lora-rank {LORA_RANK}" if lora
                                                          else "", "--offload auto") if w), True, True, lora))
    return out


def _covers(option: FitOption, found: FitOption) -> bool:
    """`option` only adds to `found`, which fits already."""
    return (option.offload_auto >= found.offload_auto and option.deepspeed >= found.deepspeed
            and option.lora >= found.lora)


def checked_message(error: InfeasibleError, spec: SearchSpec | None, runtime: Runtime, lora_rank: int,
                    replan: Callable[[SearchSpec, Runtime, int], float]) -> str:
    """`error`'s message with its untested suggestions replaced by the options that fit (`replan` searches the job
    with a spec, runtime and LoRA rank, and gives its best step time), each with that time, or by a sentence saying
    none of them fits."""
    message = str(error).split(HINTS_PREFIX)[0]
    options = fit_options(spec, runtime, lora_rank)
    if not options:
        return message
    base = spec if spec is not None else SearchSpec()
    fitting: list[tuple[FitOption, float]] = []
    for option in options:
        if any(_covers(option, found) for found, _ in fitting):
            continue
        tried_spec = replace(base, top_k=1, offload_auto=base.offload_auto or option.offload_auto)
        tried_runtime = (replace(runtime, framework=Framework.DEEPSPEED, execution=None) if option.deepspeed
                         else runtime)
        try:
            step = replan(tried_spec, tried_runtime, LORA_RANK if option.lora else lora_rank)
        except InfeasibleError:
            continue
        fitting.append((option, step))
    if not fitting:
        return (f"{message}; none of {', '.join(o.words for o in options)} fits either (each searched): more or "
                "larger GPUs, more host memory or an NVMe tier")
    found = " or ".join(f"{o.words} (best layout {s:.3g} s per step)" for o, s in fitting)
    return f"{message}; this fits with {found}"


__all__ = ["LORA_RANK", "FitOption", "checked_message", "fit_options"]
