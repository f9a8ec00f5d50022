"""planner.inputs.runlogs on sample logs written with the launchers' own format strings.

Sources of the formats (the strings below are copied from them, not invented):
- Megatron-LM (NVIDIA/Megatron-LM) HEAD d98e8a64ddf34856e74b24714e3bedb2f5a39553 and core_v0.16.1
  55ac7082517c3878ae653c07c09c534b8aed49f6: megatron/training/training.py `training_log`,
  megatron/training/utils/common_utils.py (utils.py in 0.16.1) `report_memory`, megatron/training/arguments.py
  `_print_args`; core_v0.4.0 38879f8b3f0edc4ed4f50ac2f3271010b12c549f: megatron/training.py, megatron/utils.py;
  megatron/core/tokenizers/utils/build_tokenizer.py `vocab_size_with_padding` (padded vocab line).
- torchtitan (pytorch/torchtitan) HEAD b5bcd76c66d0acb1a08b176d9639425bc55e0b2a: torchtitan/components/metrics.py
  `MetricsProcessor.log` / `log_validation`, torchtitan/tools/utils.py `Color`, torchtitan/tools/logging.py,
  torchtitan/trainer.py ("Trainer is initialized with"); v0.1.0 f7084fc78567f865d0c411f2c7b9bbbef6b155ac and
  2024 tree eef8bb2b1b6f0875ab0581079e1511d51654910e (train.py, `wps:`).
- DeepSpeed (deepspeedai/DeepSpeed) HEAD edaa7221267243c7be7fb49c5d5f5c4fb97b4641: deepspeed/utils/timer.py
  `ThroughputTimer.stop` and `SynchronizedWallClockTimer.log`, deepspeed/runtime/pipe/engine.py `train_batch`,
  deepspeed/runtime/config.py `DeepSpeedConfig.print`, deepspeed/utils/logging.py (formatter, `[Rank N]`).
"""

# The launchers' str.format calls are kept as written there, so that the samples are their lines.
# ruff: noqa: UP032
from __future__ import annotations

from collections.abc import Mapping

import pytest

from meshcore.errors import InputError
from planner.inputs.runlogs import (
    DeepSpeedLog,
    Launcher,
    MegatronLog,
    TorchtitanLog,
    detect_launcher,
    megatron_layout_args,
    parse_deepspeed_log,
    parse_log,
    parse_megatron_log,
    parse_torchtitan_log,
)

# ---- Megatron-LM ---------------------------------------------------------------------------------------------


def _args_block(args: Mapping[str, object]) -> str:
    """arguments.py `_print_args("arguments", args)`."""
    lines = ['------------------------ arguments ------------------------']
    str_list = ['  {} {} {}'.format(arg, '.' * (48 - len(arg)), value) for arg, value in args.items()]
    lines += sorted(str_list, key=lambda x: x.lower())
    lines.append('-------------------- end of arguments ---------------------')
    return "\n".join(lines)


def _iteration_new(iteration: int, ms: float) -> str:
    """training.py `training_log` at core_v0.16.1 / HEAD (timestamp with microseconds, --log-throughput)."""
    s = " [2026-03-16 10:00:00.123456]"
    s += ' iteration {:8d}/{:8d} |'.format(iteration, 100)
    s += ' consumed samples: {:12d} |'.format(iteration * 512)
    s += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)
    s += f' throughput per GPU (TFLOP/s/GPU): {401.25:.1f} |'
    s += f' learning rate: {3e-4:.6E} |'
    s += f' global batch size: {512:5d} |'
    s += ' {}: {:.6E} |'.format('lm loss', 7.5)
    s += f' loss scale: {1.0:.1f} |'
    s += f' grad norm: {1.234:.3f} |'
    s += ' number of skipped iterations: {:3d} |'.format(0)
    s += ' number of nan iterations: {:3d} |'.format(0)
    return s


def _iteration_v04(iteration: int, ms: float) -> str:
    """megatron/training.py `training_log` at core_v0.4.0 (no timestamp, no throughput, lr as {:.3E})."""
    s = ' iteration {:8d}/{:8d} |'.format(iteration, 30)
    s += ' consumed samples: {:12d} |'.format(iteration * 256)
    s += ' elapsed time per iteration (ms): {:.1f} |'.format(ms)
    s += ' learning rate: {:.3E} |'.format(1.5e-4)
    s += ' global batch size: {:5d} |'.format(256)
    s += ' {}: {:.6E} |'.format('lm loss', 9.1)
    s += ' loss scale: {:.1f} |'.format(4096.0)
    s += ' grad norm: {:.3f} |'.format(3.2)
    s += ' number of skipped iterations: {:3d} |'.format(0)
    s += ' number of nan iterations: {:3d} |'.format(0)
    return s


def _memory_new(rank: int, iteration: int, alloc: float, max_alloc: float, res: float, max_res: float) -> str:
    """common_utils.py `report_memory` at HEAD (values formatted .2f)."""
    string = f'(after {iteration} iterations)' + ' memory (MB)'
    string += f" | allocated: {alloc:.2f}"
    string += f" | max allocated: {max_alloc:.2f}"
    string += f" | reserved: {res:.2f}"
    string += f" | max reserved: {max_res:.2f}"
    return "[Rank {}] {}".format(rank, string)


def _memory_v04(rank: int, iteration: int, alloc: float, max_alloc: float, res: float, max_res: float) -> str:
    """megatron/utils.py `report_memory` at core_v0.4.0 (values as unformatted floats)."""
    string = f'(after {iteration} iterations)' + ' memory (MB)'
    string += ' | allocated: {}'.format(alloc)
    string += ' | max allocated: {}'.format(max_alloc)
    string += ' | reserved: {}'.format(res)
    string += ' | max reserved: {}'.format(max_res)
    return "[Rank {}] {}".format(rank, string)


NEW_ARGS = {
    "world_size": 64, "data_parallel_size": 2, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4,
    "context_parallel_size": 1, "expert_model_parallel_size": 1, "expert_tensor_parallel_size": 8,
    "virtual_pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": None,
    "num_virtual_stages_per_pipeline_rank": 2, "decoder_first_pipeline_num_layers": None,
    "decoder_last_pipeline_num_layers": None, "sequence_parallel": True, "micro_batch_size": 1,
    "global_batch_size": 512, "seq_length": 8192, "use_distributed_optimizer": True, "use_torch_fsdp2": False,
    "use_megatron_fsdp": False, "use_custom_fsdp": False, "data_parallel_sharding_strategy": "optim_grads_params",
    "recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
    "recompute_modules": ["core_attn", "mlp"], "fp8": "hybrid", "bf16": True, "fp16": False, "num_layers": 80,
    "hidden_size": 8192, "ffn_hidden_size": 28672, "num_attention_heads": 64, "group_query_attention": True,
    "num_query_groups": 8, "kv_channels": 128, "padded_vocab_size": None, "vocab_size": None, "swiglu": True,
    "untie_embeddings_and_output_weights": True, "normalization": "RMSNorm", "num_experts": None,
    "moe_router_topk": 2, "moe_ffn_hidden_size": None, "moe_shared_expert_intermediate_size": None,
    "position_embedding_type": "rope", "lr": 0.0003, "data_path": ["1.0", "/data/a_text_document"],
    # a name of 48+ characters gets no dots: '  name  value'
    "overlap_param_gather_with_optimizer_step_and_more_words": False,
}


def _megatron_new_log() -> str:
    # core_v0.16.1+: iteration 1 logged by itself, then every --log-interval 5 (the line at 5 averages 1-5)
    times = {1: 9000.0, 5: 2400.0, 10: 1234.5, 15: 1250.5, 20: 1240.0}
    lines = [_args_block(NEW_ARGS), " > padded vocab (size: 128256) with 0 dummy tokens (new size: 128256)",
             "[after dataloaders are built] datetime: 2026-03-16 09:59:59"]
    for it, ms in times.items():
        lines.append(_iteration_new(it, ms))
        if it in (1, 5):
            lines.append(_memory_new(0, it, 30000.0, 61234.56 + it, 62000.0, 65000.0 + it))
            lines.append(_memory_new(8, it, 29000.0, 60000.0, 63000.0, 63500.0))
    return "\n".join(lines) + "\n"


def test_megatron_new_format_exact() -> None:
    log = parse_megatron_log(_megatron_new_log(), "run1/train.log")
    assert isinstance(log, MegatronLog)
    assert log.iterations == (1, 5, 10, 15, 20)
    assert log.step_times_s == (9.0, 2.4, 1.2345, 1.2505, 1.24)
    assert log.peak_memory_gib == float("61239.56") / 1024.0
    assert log.peak_reserved_gib == float("65005.00") / 1024.0
    assert log.padded_vocab_size == 128256
    assert log.args["tensor_model_parallel_size"] == "8"
    assert log.args["recompute_modules"] == "['core_attn', 'mlp']"
    assert log.args["overlap_param_gather_with_optimizer_step_and_more_words"] == "False"
    assert log.warmup_lines == 2  # iteration 1 and the line at 5, whose mean includes iteration 1
    assert log.steady_step_time_s() == 1.24  # median of 1.2345, 1.2505, 1.24


def test_megatron_core_v04_format_with_launcher_prefix() -> None:
    # core_v0.4.0, --log-interval 10, each line prefixed by torchrun's --tee ('[default7]:')
    body = [_args_block({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "world_size": 8,
                         "use_distributed_optimizer": False, "num_layers_per_virtual_pipeline_stage": None,
                         "virtual_pipeline_model_parallel_size": None, "num_attention_heads": 32,
                         "num_query_groups": 1, "group_query_attention": False})]
    body += [_iteration_v04(10, 3012.5), _memory_v04(0, 10, 9554.87939453125, 12003.60400390625, 12232.0, 12232.0),
             _iteration_v04(20, 2500.0), _iteration_v04(30, 2600.0)]
    log = parse_megatron_log("\n".join("[default7]:" + line for line in "\n".join(body).splitlines()))
    assert log.iterations == (10, 20, 30)
    assert log.step_times_s == (3.0125, 2.5, 2.6)
    assert log.peak_memory_gib == 12003.60400390625 / 1024.0
    assert log.warmup_lines == 1
    assert log.steady_step_time_s() == 2.55
    layout = log.layout()
    assert layout["tensor_model_parallel_size"] == 2
    assert layout["zero_stage"] == 0
    assert layout["virtual_pipeline_model_parallel_size"] == 1  # printed as None: no interleaving
    assert layout["num_query_groups"] == 32  # group_query_attention off: one KV head per attention head
    assert layout["swiglu"] is None  # not printed


def test_megatron_layout_args_typed() -> None:
    log = parse_megatron_log(_megatron_new_log())
    layout = megatron_layout_args(log.args, padded_vocab_size=log.padded_vocab_size)
    assert layout == log.layout()
    expected = {
        "world_size": 64, "data_parallel_size": 2, "tensor_model_parallel_size": 8,
        "pipeline_model_parallel_size": 4, "context_parallel_size": 1, "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": 8, "virtual_pipeline_model_parallel_size": 2,
        "num_layers_per_virtual_pipeline_stage": None, "num_virtual_stages_per_pipeline_rank": 2,
        "decoder_first_pipeline_num_layers": None, "decoder_last_pipeline_num_layers": None,
        "sequence_parallel": True, "micro_batch_size": 1, "global_batch_size": 512, "seq_length": 8192,
        "use_distributed_optimizer": True, "use_torch_fsdp2": False, "use_megatron_fsdp": False,
        "data_parallel_sharding_strategy": "optim_grads_params", "zero_stage": 1,
        "recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
        "recompute_modules": ("core_attn", "mlp"), "fp8": "hybrid", "bf16": True, "fp16": False,
        "num_layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672, "num_attention_heads": 64,
        "group_query_attention": True, "num_query_groups": 8, "kv_channels": 128, "padded_vocab_size": 128256,
        "vocab_size": None, "swiglu": True, "untie_embeddings_and_output_weights": True, "normalization": "RMSNorm",
        "num_experts": None, "moe_router_topk": 2, "moe_ffn_hidden_size": None,
        "moe_shared_expert_intermediate_size": None, "position_embedding_type": "rope",
    }
    assert layout == expected


@pytest.mark.parametrize(("printed", "zero"), [
    ({"use_torch_fsdp2": "True", "use_distributed_optimizer": "False"}, 3),
    ({"use_megatron_fsdp": "True", "use_distributed_optimizer": "True",
      "data_parallel_sharding_strategy": "optim_grads"}, 2),
    ({"use_custom_fsdp": "True", "data_parallel_sharding_strategy": "no_shard"}, 0),  # core_v0.12 name
    ({"use_distributed_optimizer": "True", "data_parallel_sharding_strategy": "optim_grads_params"}, 1),
    ({"use_distributed_optimizer": "False"}, 0),
    ({}, None),
])
def test_megatron_zero_stage(printed: dict[str, str], zero: int | None) -> None:
    assert megatron_layout_args(printed)["zero_stage"] == zero


def test_megatron_vpp_from_layers_per_virtual_stage() -> None:
    args = {"num_layers": "32", "pipeline_model_parallel_size": "4", "num_layers_per_virtual_pipeline_stage": "2"}
    assert megatron_layout_args(args)["virtual_pipeline_model_parallel_size"] == 4


def test_megatron_bad_argument_value() -> None:
    with pytest.raises(InputError, match="tensor_model_parallel_size is 'eight': expected an integer"):
        megatron_layout_args({"tensor_model_parallel_size": "eight"})


def test_megatron_without_iteration_lines() -> None:
    with pytest.raises(InputError, match=r"^run\.log: no 'elapsed time per iteration' lines: is this a Megatron-LM "
                                         r"log with --log-interval\?$"):
        parse_megatron_log(_args_block(NEW_ARGS), "run.log")


def test_megatron_only_warmup_line() -> None:
    log = parse_megatron_log(_iteration_new(1, 9000.0))
    with pytest.raises(InputError, match="1 logged iteration lines, all warm-up"):
        log.steady_step_time_s()


# ---- torchtitan ----------------------------------------------------------------------------------------------

# torchtitan/tools/utils.py `Color`
RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN = "\033[31m", "\033[32m", "\033[33m", "\033[34m", "\033[35m", "\033[36m"
RESET, ORANGE, TURQUOISE = "\033[39m", "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"


def _titan_prefix(rank: int) -> str:
    """torchrun's --local-ranks-filter/--tee prefix, then tools/logging.py's "[titan] %(asctime)s - ..." format."""
    return f"[rank{rank}]:[titan] 2026-08-22 10:00:00,123 - root - INFO - "


def _titan_step(step: int, tps: float, mem: float, mfu: float | None, rank: int = 0) -> str:
    """components/metrics.py `MetricsProcessor.log` at HEAD."""
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    return _titan_prefix(rank) + (
        f"{RED}step: {step:2}  "
        f"{GREEN}loss: {7.12345:8.5f}  "
        f"{ORANGE}grad_norm: {1.2345:7.4f}  "
        f"{TURQUOISE}memory: {mem:5.2f}GiB"
        f"({mem / 141.0 * 100:.2f}%)  "
        f"{BLUE}tps: {round(tps):,}  "
        f"{CYAN}tflops: {tps * 6e-3:,.2f}  "
        f"{MAGENTA}mfu: {mfu_str}{RESET}"
    )


def _titan_validation(step: int) -> str:
    """components/metrics.py `MetricsProcessor.log_validation` (must not be read as a training step)."""
    return _titan_prefix(0) + (
        f"{YELLOW}validate step: {step:2}  "
        f"{GREEN}loss: {3.0:7.4f}  "
        f"{TURQUOISE}memory: {99.0:5.2f}GiB"
        f"({70.0:.2f}%)  "
        f"{BLUE}tps: {round(99999.0):,}{RESET}"
    )


def _titan_head_log() -> str:
    lines = [
        _titan_prefix(0) + "Trainer is initialized with 16384 tokens per DP rank, 131072 tokens per train step, "
        "gradient accumulation steps 1, maximum context length 8192, total steps 30 (warmup 2)",
        _titan_prefix(0) + "Training starts at step 1",
        _titan_step(1, 375.4, 27.34, 2.2),
        _titan_step(10, 7034.4, 30.99, 41.19),
        _titan_step(10, 7001.0, 31.5, 41.0, rank=1),  # an unfiltered second rank: slower, more memory
        _titan_validation(10),
        _titan_step(20, 7100.0, 30.99, None),
        _titan_step(30, 12345.6, 30.99, 41.3),
    ]
    return "\n".join(lines) + "\n"


def test_torchtitan_head_format_exact() -> None:
    log = parse_torchtitan_log(_titan_head_log())
    assert isinstance(log, TorchtitanLog)
    assert log.steps == (1, 10, 20, 30)
    assert log.tokens_per_s_per_gpu == (375.0, 7001.0, 7100.0, 12346.0)
    assert log.peak_memory_gib == 31.5
    assert log.tokens_per_step == 131072
    assert log.steady_tokens_per_s_per_gpu() == 7100.0
    assert log.steady_step_time_s(8) == 131072 / (7100.0 * 8)


def test_torchtitan_v010_and_2024_formats() -> None:
    # v0.1.0 train.py: no grad_norm, loss {:7.4f}, yellow memory; set-up line with the global batch and sequence
    v010 = [_titan_prefix(0) + "Trainer is initialized with local batch size 2, global batch size 16, gradient "
            "accumulation steps 1, sequence length 4096, total steps 10 (warmup 2)."]
    for step, tps in ((1, 512.0), (2, 6000.0), (3, 6100.0)):
        v010.append(_titan_prefix(0) + f"{RED}step: {step:2}  {GREEN}loss: {8.1:7.4f}  {YELLOW}memory: {20.5:5.2f}GiB"
                    f"({14.5:.2f}%)  {BLUE}tps: {round(tps):,}  {CYAN}tflops: {300.0:,.2f}  "
                    f"{MAGENTA}mfu: {30.0:.2f}%{RESET}")
    log = parse_torchtitan_log("\n".join(v010))
    assert (log.steps, log.tokens_per_s_per_gpu, log.peak_memory_gib) == ((1, 2, 3), (512.0, 6000.0, 6100.0), 20.5)
    assert log.tokens_per_step == 16 * 4096
    # 2024 (eef8bb2b): `wps:`, cyan step, no [titan] prefix, colour printing off
    old = "\n".join(f"2024-10-03 15:01:18,520 - root - INFO - step: {s:2}  loss: {3.9:7.4f}  memory: {36.2:5.2f}GiB"
                    f"({81.5:.2f}%)  wps: {round(w):,}  mfu: {23.5:.2f}%" for s, w in ((1, 900), (2, 1710), (3, 1712)))
    log = parse_torchtitan_log(old)
    assert log.tokens_per_s_per_gpu == (900.0, 1710.0, 1712.0)
    assert log.tokens_per_step is None
    with pytest.raises(InputError, match="tokens per train step"):
        log.steady_step_time_s(8)


def test_torchtitan_without_step_lines() -> None:
    with pytest.raises(InputError, match="no 'step: N ... memory: ...GiB ... tps: ...' lines: is this a torchtitan"):
        parse_torchtitan_log(_titan_prefix(0) + "Training starts at step 1\n" + _titan_validation(10))


# ---- DeepSpeed -----------------------------------------------------------------------------------------------

def _ds_info(where: str, message: str) -> str:
    """deepspeed/utils/logging.py formatter: "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s]"."""
    return f"[2026-08-22 10:00:00,123] [INFO] [{where}] {message}"


def _ds_config(values: Mapping[str, object]) -> list[str]:
    """runtime/config.py `DeepSpeedConfig.print("DeepSpeedEngine configuration")`, then the json dump."""
    lines = [_ds_info("config.py:1009:print", "DeepSpeedEngine configuration:")]
    lines += [_ds_info("config.py:1013:print", "  {} {} {}".format(arg, "." * (29 - len(arg)), value))
              for arg, value in sorted(values.items())]
    lines += [_ds_info("config.py:999:print_user_config", '  json = {'), '    "train_batch_size":32', "}"]
    return lines


def _ds_throughput(step: int, curr: float, max_mem: float) -> str:
    """utils/timer.py `ThroughputTimer.stop` (logger.info, printed by every rank)."""
    return _ds_info("timer.py:264:stop", (
        "epoch={}/micro_step={}/global_step={}, RunningAvgSamplesPerSec={}, CurrSamplesPerSec={}, "
        "MemAllocated={}GB, MaxMemAllocated={}GB".format(0, step * 4, step, 250.1234, curr, round(1.234, 2),
                                                          round(max_mem, 2))))


def test_deepspeed_throughput_lines() -> None:
    lines = _ds_config({"train_batch_size": 32, "zero_optimization_stage": 2, "gradient_accumulation_steps": 4})
    lines += [_ds_throughput(3, 255.98112, 10.5), _ds_throughput(3, 250.0, 11.25),  # two ranks, same step
              _ds_throughput(4, 260.0, 10.5), _ds_throughput(5, 256.0, 10.5)]
    log = parse_deepspeed_log("\n".join(lines))
    assert isinstance(log, DeepSpeedLog)
    assert log.steps == (3, 4, 5)
    assert log.step_times_s == (32 / 250.0, 32 / 260.0, 32 / 256.0)
    assert log.peak_memory_gib == 11.25
    assert log.config["zero_optimization_stage"] == "2"
    assert log.warmup_lines == 0
    assert log.steady_step_time_s() == 32 / 256.0
    with pytest.raises(InputError, match="pass train_batch_size"):
        parse_deepspeed_log("\n".join(lines[5:]))
    assert parse_deepspeed_log("\n".join(lines[5:]), train_batch_size=64).step_times_s[0] == 64 / 250.0


def test_deepspeed_pipe_and_wall_clock_lines() -> None:
    # runtime/pipe/engine.py `train_batch`: print(...) on global rank 0
    pipe = "\n".join(f'steps: {n} loss: {2.3456:0.4f} iter time (s): {t:0.3f} samples/sec: {32 / t:0.3f}'
                     for n, t in ((10, 0.5), (20, 0.123), (30, 0.125)))
    log = parse_deepspeed_log(pipe)
    assert (log.steps, log.step_times_s, log.peak_memory_gib) == ((10, 20, 30), (0.5, 0.123, 0.125), None)
    assert log.steady_step_time_s() == 0.124
    # utils/timer.py `SynchronizedWallClockTimer.log` of the global timers, via print_dist's "[Rank 0] " prefix
    wall = []
    for fwd, bwd, step in ((100.0, 200.0, 50.0), (12.34, 23.45, 3.45), (12.0, 24.0, 4.0)):
        s = "time (ms)"
        for name, value in (("fwd", fwd), ("bwd", bwd), ("bwd_inner", 20.0), ("bwd_allreduce", 3.0), ("step", step)):
            s += " | {}: {:.2f}".format(name, value)
        wall += ["[Rank 0] time (ms) | fwd_microstep: 1.00 | bwd_microstep: 2.00 | step_microstep: 0.50",
                 "[Rank 0] " + s]
    log = parse_deepspeed_log("\n".join(wall))
    assert log.step_times_s == (0.35, sum([12.34, 23.45, 3.45]) / 1000.0, 0.04)
    assert log.warmup_lines == 1


def test_deepspeed_without_step_lines() -> None:
    with pytest.raises(InputError, match="is this a DeepSpeed log with steps_per_print or wall_clock_breakdown"):
        parse_deepspeed_log("\n".join(_ds_config({"train_batch_size": 32})))


# ---- detection -----------------------------------------------------------------------------------------------

def test_detect_launcher() -> None:
    assert detect_launcher(_megatron_new_log()) is Launcher.MEGATRON
    assert detect_launcher(_args_block(NEW_ARGS)) is Launcher.MEGATRON  # set-up only
    assert detect_launcher(_titan_head_log()) is Launcher.TORCHTITAN
    assert detect_launcher(_titan_prefix(0) + "Training starts at step 1") is Launcher.TORCHTITAN
    assert detect_launcher(_ds_throughput(3, 250.0, 1.0)) is Launcher.DEEPSPEED
    assert detect_launcher("\n".join(_ds_config({"train_batch_size": 8}))) is Launcher.DEEPSPEED
    # Megatron-DeepSpeed prints Megatron's iteration lines and DeepSpeed's timers: Megatron's line times the step
    assert detect_launcher(_iteration_v04(10, 1.0) + "\n" + _ds_throughput(10, 1.0, 1.0)) is Launcher.MEGATRON
    assert detect_launcher("Epoch 1: loss 0.3\n") is None


def test_parse_log_dispatches() -> None:
    assert isinstance(parse_log(_megatron_new_log()), MegatronLog)
    assert isinstance(parse_log(_titan_head_log()), TorchtitanLog)
    with pytest.raises(InputError, match="^x.log: not a Megatron-LM, torchtitan or DeepSpeed training log"):
        parse_log("hello\n", "x.log")
