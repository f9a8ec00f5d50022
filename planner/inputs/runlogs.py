"""Training logs of Megatron-LM, torchtitan and DeepSpeed read into measured step times and peak memory.

Pure text -> frozen records: no file I/O (the caller reads the file and passes its name as `source` for messages).
Each launcher's line formats were read from its own logging code; what changed across versions is handled:

Megatron-LM (NVIDIA/Megatron-LM; training.py `training_log`, utils `report_memory`, arguments.py `_print_args`):
- iteration line, one per --log-interval, printed by the last rank:
  ` [2026-03-16 10:00:00.123456] iteration       10/     100 | consumed samples: ... | elapsed time per iteration
  (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 401.2 | ... | global batch size:   512 | lm loss: ... |`.
  The `[date]` prefix came with core_v0.6.0 (cac60ce4, seconds) and gained microseconds by core_v0.16.1 (55ac7082);
  core_v0.4.0 (38879f8b) and v2.5 (e269e200) start at ` iteration`. The value is the interval's mean per iteration.
  From core_v0.16.0 (commit c40b6ea0) iteration 1 is also logged and does not reset the interval timer, so the
  next line's mean still contains iteration 1.
- memory line, per data-parallel rank 0 of every tensor/pipeline rank: `[Rank 0] (after 10 iterations) memory (MB)
  | allocated: 9554.88 | max allocated: 12003.60 | reserved: 12232.00 | max reserved: 12232.00` (values unformatted
  floats up to core_v0.12.0, `.2f` from core_v0.16.1; MB means MiB: bytes / 1024**2).
- arguments block between `------------------------ arguments ------------------------` and `-------------------- end
  of arguments ---------------------`, one `  name .... value` line per argument (dots pad the name to 48 characters,
  none when the name is longer), values as Python's str(): None, True, 8, ['core_attn'].
- ` > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)`: the tokenizer's padded vocabulary, printed
  when padded_vocab_size was still None in the arguments block.
torchtitan (pytorch/torchtitan; components/metrics.py `MetricsProcessor.log`, tools/utils.py `Color`):
- `[titan] <time> - root - INFO - step: 10  loss:  7.12345  grad_norm:  1.2345  memory: 30.99GiB(32.62%)  tps: 7,034
  tflops: 407.35  mfu: 41.19%` at step 1 and every --metrics.log_freq steps, wrapped in ANSI colour codes unless
  --metrics.disable_color_printing (HEAD b5bcd76c, v0.2.2 73a0e697; mfu may be `N/A` at HEAD). v0.1.0 (f7084fc7) has
  no grad_norm; 2024 trees (eef8bb2b) print `wps:` for the same tokens per second per GPU, no tflops, no `[titan]`.
  Memory is torch's max_reserved over the interval; tps is this rank's tokens / (seconds · non-data-parallel size).
- `Trainer is initialized with ... N tokens per train step` (HEAD) or `... global batch size G, ... sequence
  length S, ...` (v0.1.0-v0.2.2; `Training starts at step 1, with ...` before): the tokens of one optimizer step.
DeepSpeed (deepspeedai/DeepSpeed; utils/timer.py `ThroughputTimer.stop`, `SynchronizedWallClockTimer.log`,
runtime/pipe/engine.py `train_batch`, runtime/config.py `DeepSpeedConfig.print`; HEAD edaa7221, v0.14.0 ce78a632):
- `epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., MemAllocated=1.2GB,
  MaxMemAllocated=3.4GB` every steps_per_print global steps, from every rank; CurrSamplesPerSec is train_batch_size
  over that one step's time; the timer starts at the third global step (start_step=2); GB are GiB.
- pipeline engine: `steps: 10 loss: 2.3456 iter time (s): 0.123 samples/sec: 260.163`, mean over steps_per_print.
- wall_clock_breakdown: `[Rank 0] time (ms) | fwd: 12.34 | bwd: 23.45 | bwd_inner: ... | step: 3.45` per step.
- `DeepSpeedEngine configuration:` then `  train_batch_size ............. 32` lines (dots pad to 29).
"""

from __future__ import annotations

import ast
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

from meshcore.errors import InputError

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MEG_ITER = re.compile(rf"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?elapsed time per iteration \(ms\):\s*({_NUM})")
_MEG_MEM = re.compile(rf"memory \(MB\)\s*\|\s*allocated:\s*{_NUM}\s*\|\s*max allocated:\s*({_NUM})"
                      rf"(?:\s*\|\s*reserved:\s*{_NUM}\s*\|\s*max reserved:\s*({_NUM}))?")
_MEG_ARGS_START = re.compile(r"-{8,} arguments -{8,}")
_MEG_ARGS_END = re.compile(r"-{8,} end of arguments -{8,}")
_ARG_LINE = re.compile(r"  ([A-Za-z_]\w*) \.*(?: (.*))?$")
_MEG_VOCAB = re.compile(r"> padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
_TITAN_STEP = re.compile(rf"(?<!validate )step:\s*(\d+)\s.*?memory:\s*({_NUM})GiB.*?[tw]ps:\s*([\d,]+)")
_TITAN_TOKENS = re.compile(r"(\d+) tokens per train step")
_TITAN_BATCH = re.compile(r"global batch size (\d+),.*?sequence length (\d+)")
_DS_TPUT = re.compile(rf"global_step=(\d+), RunningAvgSamplesPerSec=\S+, CurrSamplesPerSec=({_NUM}),"
                      rf"\s*MemAllocated=\S+?GB, MaxMemAllocated=({_NUM})GB")
_DS_PIPE = re.compile(rf"steps: (\d+) loss: .*?iter time \(s\): ({_NUM}) samples/sec: ({_NUM})")
_DS_WALL = re.compile(rf"time \(ms\) \| fwd: ({_NUM}) \| bwd: ({_NUM})(?: \| [^|]*)*? \| step: ({_NUM})")
_DS_CONFIG_START = "DeepSpeedEngine configuration:"


class Launcher(str, Enum):
    """The launcher that wrote a log (values match planner.studies.trial.TrialLauncher's)."""

    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"


def _lines(text: str) -> list[str]:
    return _ANSI.sub("", text).splitlines()


def _per_step(rows: Iterable[tuple[int, float]], pick: Callable[[Iterable[float]], float]) -> dict[int, float]:
    """One value per step in order of first appearance: a log of several ranks repeats each step once per rank."""
    grouped: dict[int, list[float]] = {}
    for step, value in rows:
        grouped.setdefault(step, []).append(value)
    return {step: pick(values) for step, values in grouped.items()}


def _steady(values: Sequence[float], skip: int, what: str, source: str) -> float:
    """Median of `values` after the first `skip` (warm-up) entries; at least one must remain."""
    if len(values) <= skip:
        raise InputError(f"{source}: {len(values)} logged {what}, all warm-up: the steady state needs at least one "
                         f"more; train more steps")
    return float(statistics.median(values[skip:]))


# ---- Megatron-LM ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MegatronLog:
    """A Megatron-LM log: the printed arguments (raw strings) and one entry per logged iteration line.

    `peak_memory_gib` is the largest `max allocated` of the memory reports (torch.cuda.max_memory_allocated, a
    peak since start, over every tensor/pipeline rank that reports): tensor bytes, what meshplan's memory model
    predicts; `peak_reserved_gib` (`max reserved`) adds the caching allocator's slack and fragmentation.
    """

    args: Mapping[str, str]
    iterations: tuple[int, ...]
    step_times_s: tuple[float, ...]
    peak_memory_gib: float | None
    peak_reserved_gib: float | None = None
    padded_vocab_size: int | None = None
    source: str = "log"

    @property
    def warmup_lines(self) -> int:
        """Leading lines whose interval contains the run's first iteration: those before first + log interval.

        The log interval is the commonest gap between logged iterations (not counting the first gap, which is
        short when Megatron-LM >= core_v0.16 logs iteration 1 by itself). Iterations 10, 20, 30 (interval 10) drop
        10; 1, 10, 20, 30 drop 1 and 10 (the line at 10 averages iterations 1-10); 1, 2, 3 (interval 1) drop 1.
        """
        its = self.iterations
        if len(its) < 2:
            return len(its)
        gaps = [b - a for a, b in zip(its, its[1:], strict=False)]
        interval = max(1, Counter(gaps[1:] or gaps).most_common(1)[0][0])
        cut = its[0] + interval
        return next((k for k, it in enumerate(its) if it >= cut), len(its))

    def steady_step_time_s(self) -> float:
        """Median seconds per iteration over the logged lines after the warm-up ones (`warmup_lines`)."""
        return _steady(self.step_times_s, self.warmup_lines, "iteration lines", self.source)

    def layout(self) -> dict[str, Any]:
        """`megatron_layout_args` of this log's arguments, with the tokenizer's padded vocabulary as fallback."""
        return megatron_layout_args(self.args, padded_vocab_size=self.padded_vocab_size)


def _megatron_args(lines: Sequence[str]) -> dict[str, str]:
    """The first arguments block: name -> printed value (other ranks' lines interleaved in it are skipped)."""
    args: dict[str, str] = {}
    inside = False
    for line in lines:
        if not inside:
            inside = bool(_MEG_ARGS_START.search(line))
            continue
        if _MEG_ARGS_END.search(line):
            break
        match = _ARG_LINE.search(line)
        if match:
            args.setdefault(match.group(1), (match.group(2) or "").strip())
    return args


def parse_megatron_log(text: str, source: str = "log") -> MegatronLog:
    """Read a Megatron-LM log (stdout of the last rank, or all ranks'); see the module docstring for the lines."""
    lines = _lines(text)
    rows = [(int(m.group(1)), float(m.group(2)) / 1000.0) for m in map(_MEG_ITER.search, lines) if m]
    if not rows:
        raise InputError(f"{source}: no 'elapsed time per iteration' lines: is this a Megatron-LM log with "
                         f"--log-interval?")
    steps = _per_step(rows, max)
    allocated: list[float] = []
    reserved: list[float] = []
    for match in filter(None, map(_MEG_MEM.search, lines)):
        allocated.append(float(match.group(1)) / 1024.0)
        if match.group(2) is not None:
            reserved.append(float(match.group(2)) / 1024.0)
    vocab = [int(m.group(1)) for m in map(_MEG_VOCAB.search, lines) if m]
    return MegatronLog(args=MappingProxyType(_megatron_args(lines)), iterations=tuple(steps),
                       step_times_s=tuple(steps.values()), peak_memory_gib=max(allocated, default=None),
                       peak_reserved_gib=max(reserved, default=None), padded_vocab_size=vocab[0] if vocab else None,
                       source=source)


# Megatron argument name -> how to read its printed value
_INT, _BOOL, _STR, _LIST = "int", "bool", "str", "list"
_MEGATRON_FIELDS: Mapping[str, str] = MappingProxyType({
    "world_size": _INT, "data_parallel_size": _INT, "tensor_model_parallel_size": _INT,
    "pipeline_model_parallel_size": _INT, "context_parallel_size": _INT, "expert_model_parallel_size": _INT,
    "expert_tensor_parallel_size": _INT, "virtual_pipeline_model_parallel_size": _INT,
    "num_layers_per_virtual_pipeline_stage": _INT, "num_virtual_stages_per_pipeline_rank": _INT,
    "decoder_first_pipeline_num_layers": _INT, "decoder_last_pipeline_num_layers": _INT,
    "sequence_parallel": _BOOL, "micro_batch_size": _INT, "global_batch_size": _INT, "seq_length": _INT,
    "use_distributed_optimizer": _BOOL, "use_torch_fsdp2": _BOOL, "use_megatron_fsdp": _BOOL,
    "use_custom_fsdp": _BOOL, "data_parallel_sharding_strategy": _STR,
    "recompute_granularity": _STR, "recompute_method": _STR, "recompute_num_layers": _INT, "recompute_modules": _LIST,
    "fp8": _STR, "bf16": _BOOL, "fp16": _BOOL,
    "num_layers": _INT, "hidden_size": _INT, "ffn_hidden_size": _INT, "num_attention_heads": _INT,
    "group_query_attention": _BOOL, "num_query_groups": _INT, "kv_channels": _INT, "padded_vocab_size": _INT,
    "vocab_size": _INT, "swiglu": _BOOL, "untie_embeddings_and_output_weights": _BOOL, "normalization": _STR,
    "num_experts": _INT, "moe_router_topk": _INT, "moe_ffn_hidden_size": _INT,
    "moe_shared_expert_intermediate_size": _INT, "position_embedding_type": _STR,
})
# Megatron-FSDP's --data-parallel-sharding-strategy -> the ZeRO stage it is
_FSDP_ZERO: Mapping[str, int] = MappingProxyType({"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3})


def _typed(name: str, raw: str, kind: str) -> Any:
    if raw == "None":
        return None
    if kind == _STR:
        return raw
    if kind == _BOOL and raw in ("True", "False"):
        return raw == "True"
    if kind == _INT and re.fullmatch(r"[-+]?\d+", raw):
        return int(raw)
    if kind == _LIST:
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = None
        if isinstance(value, (list, tuple)):
            return tuple(str(v) for v in value)
    allowed = {_INT: "an integer", _BOOL: "True or False", _LIST: "a list"}[kind]
    raise InputError(f"Megatron argument {name} is {raw!r}: expected {allowed} or None")


def megatron_layout_args(args: Mapping[str, str], *, padded_vocab_size: int | None = None) -> dict[str, Any]:
    """What a planner needs from a Megatron-LM arguments block, typed; None for what the block does not print.

    Keys are Megatron's argument names (see `_MEGATRON_FIELDS`), read as int, bool, str or tuple of str, plus:
    - `virtual_pipeline_model_parallel_size`: model chunks per pipeline rank, as printed (validate_args derives it
      before printing), else num_virtual_stages_per_pipeline_rank, else num_layers / pp /
      num_layers_per_virtual_pipeline_stage; 1 when the block prints them all as None (no interleaving);
    - `use_megatron_fsdp`: also true for its earlier name use_custom_fsdp (core_v0.12-0.13);
    - `zero_stage`: 3 with use_torch_fsdp2; with Megatron-FSDP the data_parallel_sharding_strategy's stage
      (no_shard 0, optim 1, optim_grads 2, optim_grads_params 3); else 1 with use_distributed_optimizer, 0 without;
    - `num_query_groups`: the key/value heads, i.e. num_attention_heads unless group_query_attention is on (Megatron
      ignores num_query_groups without it);
    - `padded_vocab_size`: as printed, else the keyword (the tokenizer's ` > padded vocab` line).
    """
    out: dict[str, Any] = {name: _typed(name, args[name], kind) if name in args else None
                           for name, kind in _MEGATRON_FIELDS.items()}
    custom = out.pop("use_custom_fsdp")
    if custom is not None and not out["use_megatron_fsdp"]:
        out["use_megatron_fsdp"] = custom
    vpp_keys = ("virtual_pipeline_model_parallel_size", "num_virtual_stages_per_pipeline_rank",
                "num_layers_per_virtual_pipeline_stage")
    vpp = out[vpp_keys[0]] or out[vpp_keys[1]]
    layers, pp, per_chunk = out["num_layers"], out["pipeline_model_parallel_size"], out[vpp_keys[2]]
    if vpp is None and per_chunk and layers and pp:
        vpp = layers // pp // per_chunk
    if vpp is None and any(key in args for key in vpp_keys):
        vpp = 1
    out["virtual_pipeline_model_parallel_size"] = vpp
    out["zero_stage"] = _zero_stage(out)
    if out["num_attention_heads"] is not None and not out["group_query_attention"]:
        out["num_query_groups"] = out["num_attention_heads"]
    if out["padded_vocab_size"] is None:
        out["padded_vocab_size"] = padded_vocab_size
    return out


def _zero_stage(out: Mapping[str, Any]) -> int | None:
    if out["use_torch_fsdp2"]:
        return 3
    if out["use_megatron_fsdp"]:
        strategy = out["data_parallel_sharding_strategy"] or "optim_grads_params"
        if strategy not in _FSDP_ZERO:
            raise InputError(f"Megatron argument data_parallel_sharding_strategy is {strategy!r}: expected one of "
                             f"{', '.join(_FSDP_ZERO)}")
        return _FSDP_ZERO[strategy]
    if out["use_distributed_optimizer"] is None:
        return None
    return 1 if out["use_distributed_optimizer"] else 0


# ---- torchtitan ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchtitanLog:
    """A torchtitan log: one entry per logged training step (validation steps are not read).

    `tokens_per_s_per_gpu` is torchtitan's `tps`, the slowest rank's where several ranks log the same step.
    `peak_memory_gib` is the largest `memory:` value, torch's max_reserved (the caching allocator's peak, reset at
    every log): the only counter torchtitan prints, so it includes allocator slack that Megatron's `max allocated`
    leaves out. `tokens_per_step` (global, one optimizer step) is None when the log does not print it.
    """

    steps: tuple[int, ...]
    tokens_per_s_per_gpu: tuple[float, ...]
    peak_memory_gib: float | None
    tokens_per_step: int | None = None
    source: str = "log"

    @property
    def warmup_lines(self) -> int:
        """The first logged step (step 1, with compilation and allocation); torchtitan resets its timer at every
        log, so the next line's interval starts clean."""
        return 1

    def steady_tokens_per_s_per_gpu(self) -> float:
        """Median tps over the logged steps after the first."""
        return _steady(self.tokens_per_s_per_gpu, self.warmup_lines, "steps", self.source)

    def steady_step_time_s(self, gpus: int) -> float:
        """Seconds per step: tokens_per_step / (steady tps · gpus), since tps = global tokens / (seconds · world)."""
        if self.tokens_per_step is None:
            raise InputError(f"{self.source}: no 'tokens per train step' or 'global batch size ..., sequence length' "
                             f"line: the step time needs the tokens of a step")
        if gpus < 1:
            raise InputError(f"{self.source}: gpus must be a positive integer, got {gpus}")
        return self.tokens_per_step / (self.steady_tokens_per_s_per_gpu() * gpus)


def parse_torchtitan_log(text: str, source: str = "log") -> TorchtitanLog:
    """Read a torchtitan log (colour codes and `[rankN]:` prefixes allowed); see the module docstring."""
    lines = _lines(text)
    matches = [m for m in map(_TITAN_STEP.search, lines) if m]
    if not matches:
        raise InputError(f"{source}: no 'step: N ... memory: ...GiB ... tps: ...' lines: is this a torchtitan log "
                         f"with --metrics.log_freq?")
    tps = _per_step(((int(m.group(1)), float(m.group(3).replace(",", ""))) for m in matches), min)
    return TorchtitanLog(steps=tuple(tps), tokens_per_s_per_gpu=tuple(tps.values()),
                         peak_memory_gib=max(float(m.group(2)) for m in matches), tokens_per_step=_titan_tokens(lines),
                         source=source)


def _titan_tokens(lines: Sequence[str]) -> int | None:
    """Tokens of one optimizer step, from the trainer's set-up line, the first that prints them."""
    for line in lines:
        if match := _TITAN_TOKENS.search(line):
            return int(match.group(1))
        if ("Trainer is initialized" in line or "Training starts" in line) and (match := _TITAN_BATCH.search(line)):
            return int(match.group(1)) * int(match.group(2))
    return None


# ---- DeepSpeed -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeepSpeedLog:
    """A DeepSpeed log: one entry per logged global step, from the first kind of line present of: the throughput
    timer's (train_batch_size / CurrSamplesPerSec, the slowest rank's), the pipeline engine's `iter time (s)`, the
    wall-clock breakdown's fwd + bwd + step (which leaves out data loading and anything between them).

    `peak_memory_gib` is the largest MaxMemAllocated (torch max_memory_allocated, GiB, rounded to 0.01) of the
    throughput lines; None for the other kinds. `config` is the `DeepSpeedEngine configuration` block, raw.
    """

    steps: tuple[int, ...]
    step_times_s: tuple[float, ...]
    peak_memory_gib: float | None
    config: Mapping[str, str]
    warmup_lines: int
    source: str = "log"

    def steady_step_time_s(self) -> float:
        """Median over the logged steps after `warmup_lines`: none for the throughput timer (it starts timing at
        the third step), the first line otherwise (it contains the first step)."""
        return _steady(self.step_times_s, self.warmup_lines, "steps", self.source)


def _deepspeed_config(lines: Sequence[str]) -> dict[str, str]:
    config: dict[str, str] = {}
    start = next((k for k, line in enumerate(lines) if _DS_CONFIG_START in line), None)
    for line in lines[start + 1:] if start is not None else ():
        match = _ARG_LINE.search(line)
        if not match:
            break
        config[match.group(1)] = (match.group(2) or "").strip()
    return config


def parse_deepspeed_log(text: str, source: str = "log", *, train_batch_size: int | None = None) -> DeepSpeedLog:
    """Read a DeepSpeed log. The throughput timer gives samples per second, so its step time needs the global
    batch: the configuration block's train_batch_size, else the keyword."""
    lines = _lines(text)
    config = _deepspeed_config(lines)
    tput = [m for m in map(_DS_TPUT.search, lines) if m]
    pipe = [m for m in map(_DS_PIPE.search, lines) if m]
    wall = [m for m in map(_DS_WALL.search, lines) if m]
    memory = max((float(m.group(3)) for m in tput), default=None)
    if tput:
        batch = int(config["train_batch_size"]) if config.get("train_batch_size", "").isdigit() else train_batch_size
        if batch is None:
            raise InputError(f"{source}: DeepSpeed's throughput lines give samples per second but the log prints no "
                             f"train_batch_size (no 'DeepSpeedEngine configuration' block): pass train_batch_size")
        rows = _per_step(((int(m.group(1)), batch / float(m.group(2))) for m in tput), max)
        skip = 0
    elif pipe:
        rows = _per_step(((int(m.group(1)), float(m.group(2))) for m in pipe), max)
        skip = 1
    elif wall:
        rows = {k + 1: sum(float(v) for v in m.groups()) / 1000.0 for k, m in enumerate(wall)}
        skip = 1
    else:
        raise InputError(f"{source}: no 'CurrSamplesPerSec=', 'iter time (s):' or 'time (ms) | fwd:' lines: is this "
                         f"a DeepSpeed log with steps_per_print or wall_clock_breakdown?")
    return DeepSpeedLog(steps=tuple(rows), step_times_s=tuple(rows.values()), peak_memory_gib=memory,
                        config=MappingProxyType(config), warmup_lines=skip, source=source)


# ---- which launcher ------------------------------------------------------------------------------------------

# strongest evidence first: a launcher's own step line; then its set-up lines
_SIGNATURES: tuple[tuple[Launcher, re.Pattern[str]], ...] = (
    (Launcher.MEGATRON, _MEG_ITER),
    (Launcher.TORCHTITAN, _TITAN_STEP),
    (Launcher.DEEPSPEED, re.compile(f"{_DS_TPUT.pattern}|{_DS_PIPE.pattern}|{_DS_WALL.pattern}")),
    (Launcher.MEGATRON, re.compile(f"{_MEG_ARGS_START.pattern}|{_MEG_MEM.pattern}")),
    (Launcher.TORCHTITAN, re.compile(r"\[titan\]")),
    (Launcher.DEEPSPEED, re.compile(re.escape(_DS_CONFIG_START))),
)


def detect_launcher(text: str) -> Launcher | None:
    """The launcher whose lines the log holds, or None. A Megatron-DeepSpeed log, which holds both Megatron's
    iteration lines and DeepSpeed's timers, is Megatron-LM: its iteration line times the whole step."""
    lines = _lines(text)
    for launcher, pattern in _SIGNATURES:
        if any(pattern.search(line) for line in lines):
            return launcher
    return None


def parse_log(text: str, source: str = "log") -> MegatronLog | TorchtitanLog | DeepSpeedLog:
    """Detect the launcher and parse with its reader (a DeepSpeed log without its configuration block needs
    parse_deepspeed_log's train_batch_size)."""
    launcher = detect_launcher(text)
    if launcher is None:
        raise InputError(f"{source}: not a Megatron-LM, torchtitan or DeepSpeed training log (none of 'elapsed time "
                         f"per iteration', 'step: ... tps:', 'CurrSamplesPerSec=' found)")
    readers: dict[Launcher, Callable[[str, str], MegatronLog | TorchtitanLog | DeepSpeedLog]] = {
        Launcher.MEGATRON: parse_megatron_log, Launcher.TORCHTITAN: parse_torchtitan_log,
        Launcher.DEEPSPEED: parse_deepspeed_log}
    return readers[launcher](text, source)
