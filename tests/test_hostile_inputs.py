"""Hostile input, round 3 (issue 37, items 3 and 4): each case ends with exit code 2 and one line `error: ...` naming
the field or path and what is allowed, no traceback, at once. Devices and FIFOs go through a real process where it
matters (standard error alone, the exit code of the installed entry point); the rest through typer's CliRunner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from meshcore.errors import InputError
from meshcore.inputfile import MAX_NESTING, MAX_SPEC_BYTES
from planner.search.space import SearchSpec

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
JOB = ["--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096", "--global-batch", "8"]
TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
        "vocab_size": 1000, "gated_mlp": True, "tied_embeddings": False}
LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000}
QUICK_S = 5.0  # each refusal takes ~0.1 s here; the margin is for a loaded 2-core machine, not for a slow path


def refused(args: list[str], *names: str) -> str:
    """The command exits 2 with one `error:` line naming each of `names`, no traceback, quickly; the line."""
    start = time.perf_counter()
    res = runner.invoke(app, args)
    elapsed = time.perf_counter() - start
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert res.exit_code == 2, (args, res.output)
    assert "Traceback" not in res.output, (args, res.output)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, res.output)
    assert all(n in lines[0] for n in names), (names, lines[0])
    assert elapsed < QUICK_S, (args, elapsed)
    return lines[0]


def refused_by_process(args: list[str], *names: str) -> str:
    """`refused`, run as its own process: standard error holds the one line, standard output nothing."""
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    elapsed = time.perf_counter() - start
    assert res.returncode == 2, (args, res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and res.stdout == "", (args, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, res.stderr)
    assert all(n in lines[0] for n in names), (names, lines[0])
    assert elapsed < 2 * QUICK_S, (args, elapsed)  # a new interpreter imports meshplan first (~1 s)
    return lines[0]


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data) if name.endswith(".json")
                    else yaml.safe_dump(data))
    return str(path)


# 1. enum fields of a model YAML given a list or a mapping were a TypeError (unhashable)
@pytest.mark.parametrize("key,value", [("norm", [1]), ("norm", {}), ("norm", 3), ("activation", ["gelu"]),
                                       ("activation", {}), ("activation", True)])
def test_enum_fields_refuse_lists_and_mappings(tmp_path: Path, key: str, value: Any) -> None:
    model = write(tmp_path, "m.yaml", {**TINY, key: value})
    line = refused(["evaluate", "--model", model, *JOB], f"{key} must be one of")
    assert ("layernorm, rmsnorm" if key == "norm" else "swiglu, geglu, gelu, squared_relu") in line


# 2. nesting and size: a 5,000-deep value was a RecursionError, a 50 MB model YAML took 20 s to refuse
def test_deep_nesting_aliases_and_size_are_refused_at_once(tmp_path: Path) -> None:
    deep = write(tmp_path, "deep.yaml", "name: tiny\nnum_layers: " + "[" * 5000 + "]" * 5000 + "\n")
    refused(["evaluate", "--model", deep, *JOB], "deep.yaml", "nesting depth")
    block = write(tmp_path, "block.yaml", "name: tiny\nnum_layers:\n" + "".join("  " * i + "-\n" for i in range(300)))
    refused(["evaluate", "--model", block, *JOB], "block.yaml", f"nested more than {MAX_NESTING} deep")
    deep_json = write(tmp_path, "config.json", json.dumps(LLAMA)[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}")
    refused(["evaluate", "--model", deep_json, *JOB], "config.json", "nested too deep")
    laughs = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    refused(["evaluate", "--model", write(tmp_path, "laughs.yaml", laughs), *JOB], "laughs.yaml", "aliases")
    refused(["evaluate", "--model", write(tmp_path, "digits.yaml", "num_layers: " + "9" * 5000), *JOB],
            "digits.yaml", "more than 4300 digits")
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(TINY) + "# padding\n" * (50 * 2**20 // 10))  # 50 MB of real text
    refused(["evaluate", "--model", str(big), *JOB], "big.yaml", "model file may be at most 1 MiB")
    at_limit = tmp_path / "at-limit.yaml"  # a file of exactly the limit is read
    text = yaml.safe_dump(TINY)
    at_limit.write_text(text + "#" * (MAX_SPEC_BYTES - len(text) - 1) + "\n")
    assert runner.invoke(app, ["evaluate", "--model", str(at_limit), *JOB]).exit_code == 0


# 3. unbounded reads: --plan /dev/zero and --costs /dev/zero never returned
def test_devices_and_endless_fifos_are_read_bounded(tmp_path: Path) -> None:
    refused_by_process(["evaluate", "--plan", "/dev/zero"], "/dev/zero", "plan file may be at most 8 MiB")
    refused_by_process(["plan", "--costs", "/dev/zero", *JOB], "/dev/zero", "cost table may be at most 64 MiB")
    refused(["mlip", "plan", "--costs", "/dev/zero", "--hardware", "h100-sxm", "--gpus", "8", "--atoms", "1000"],
            "/dev/zero", "at most 64 MiB")
    refused(["calibrate", "/dev/zero", "--hardware", "h100-sxm"], "/dev/zero", "at most 256 MiB")
    refused(["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm,/dev/zero", *JOB[2:]], "hardware fragment",
            "at most 1 MiB")
    fifo = tmp_path / "endless.json"
    os.mkfifo(fifo)

    def endless() -> None:
        with open(fifo, "wb") as pipe:
            try:
                while True:
                    pipe.write(b" " * 65536)
            except BrokenPipeError:
                pass

    writer = threading.Thread(target=endless, daemon=True)
    writer.start()
    refused(["evaluate", "--plan", str(fifo)], "endless.json", "plan file may be at most 8 MiB")
    writer.join(timeout=10)


def test_a_pipe_carrying_a_plan_is_read_once(tmp_path: Path) -> None:
    """explain looks at its plan twice: from a pipe (bash's <(...), /dev/stdin) the second look gets the same
    bytes, instead of waiting for a writer that has gone."""
    plan = tmp_path / "p.yaml"
    assert runner.invoke(app, ["plan", "--model", "llama3-8b", *JOB, "--out", str(plan)]).exit_code == 0
    res = subprocess.run(f"{sys.executable} -m planner explain /dev/stdin < /dev/stdin", shell=True, cwd=ROOT,
                         input=plan.read_text(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "llama3-8b on 8 x h100-sxm" in res.stdout, res.stderr


# 4. SearchSpec's fields of several values given a number or a wrong member were a TypeError
@pytest.mark.parametrize("field,value,allowed", [
    ("schedule_choices", 0, "gpipe, 1f1b"), ("schedule_choices", "1f1b", "gpipe, 1f1b"),
    ("schedule_choices", (), "non-empty"), ("schedule_choices", [[1]], "gpipe, 1f1b"),
    ("tp_choices", 0, "integers in [1, "), ("tp_choices", ("a",), "an integer in [1, "),
    ("mbs_choices", [1.5], "an integer in [1, "), ("zero_choices", {1: 2}, "integers in [0, 3]"),
    ("recompute_modules", 3, "core_attn"), ("recompute_modules", [{}], "core_attn"),
    ("offload", 1, "optimizer, params, activations"), ("offload", "optimizer", "optimizer, params, activations"),
])
def test_search_spec_fields_of_several_values(field: str, value: Any, allowed: str) -> None:
    with pytest.raises(InputError, match=field) as raised:
        SearchSpec(**{field: value})
    assert allowed in str(raised.value) and "\n" not in str(raised.value)


# 5. HF config: num_key_value_heads of 0, "" or false was taken as absent
@pytest.mark.parametrize("value", [0, "", False, -2, 2.5])
def test_hf_num_key_value_heads_must_be_null_or_positive(tmp_path: Path, value: Any) -> None:
    config = write(tmp_path, "config.json", {**LLAMA, "num_key_value_heads": value})
    refused(["evaluate", "--model", config, *JOB], "num_key_value_heads", "must be an integer in [1, ")


def test_hf_num_key_value_heads_null_means_one_per_head(tmp_path: Path) -> None:
    from planner.inputs.loaders import load_model

    assert load_model(write(tmp_path, "config.json", {**LLAMA, "num_key_value_heads": None})).num_kv_heads == 8
    missing = {k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}
    assert load_model(write(tmp_path, "config.json", missing)).num_kv_heads == 8


# 6. a directory or a device given as an input was "unknown model"
def test_directories_and_devices_are_named_as_such(tmp_path: Path) -> None:
    folder = tmp_path / "llama.yaml"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    line = refused(["evaluate", "--model", str(folder), *JOB], "model", "is a directory", "config.json")
    assert "give a preset" in line
    refused(["evaluate", "--model", "/dev/null", *JOB], "model /dev/null is not a regular file")
    refused(["evaluate", "--model", "llama3-8b", "--hardware", str(folder), *JOB[2:]], "hardware", "is a directory")
    refused(["plan", "--cluster", str(folder), "--model", "llama3-8b", "--seq-len", "4096", "--global-batch", "8"],
            "cluster file", "is a directory")
    refused(["plan", "--costs", str(folder), *JOB], "cost table", "it is a directory")
    refused(["evaluate", "--plan", str(folder)], "plan file", "it is a directory")
    refused(["infer", "diffusion", "--model", str(folder), "--hardware", "h100-sxm", "--gpus", "2"],
            "diffusion model", "is a directory")
    refused(["recsys", "plan", "--model", "/dev/zero", "--hardware", "h100-sxm", "--gpus", "8", "--batch", "1024"],
            "recommendation model /dev/zero is not a regular file")


# 7. floats bounded by physics: a denormal bandwidth divided by zero, a capacity factor of 1e308 became NaN
@pytest.mark.parametrize("args,message", [
    (["evaluate", "--model", "llama3-8b", *JOB, "--inter-node-gbps", "5e-324"],
     "--inter-node-gbps must be a finite number in [0.01, 1e+06]"),
    (["plan", "--model", "llama3-8b", *JOB, "--inter-node-gbps", "5e-324"], "--inter-node-gbps"),
    (["plan", "--model", "mixtral-8x7b", *JOB, "--moe-capacity-factor", "1e308"],
     "--moe-capacity-factor must be a finite number in [1, 64]"),
    (["plan", "--model", "mixtral-8x7b", *JOB, "--moe-load-imbalance", "1e300"], "--moe-load-imbalance"),
    (["plan", "--model", "mixtral-8x7b", *JOB, "--moe-capacity-factor", "0.5"], "in [1, 64]"),
    (["plan", "--model", "llama3-8b", *JOB, "--memory-gib", "5e-324"], "--memory-gib must be a finite number in"),
    (["plan", "--model", "llama3-8b", *JOB, "--time-limit", "1e-300"], "--time-limit"),
    (["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "4096", "--global-batch", "8",
      "--tokens", "1e12", "--days", "5e-324"], "--days must be a finite number in [0.001, 36525]"),
    (["sweep", "--model", "llama3-8b", *JOB, "--vary", "inter-node-gbps", "--values", "5e-324"], "--inter-node-gbps"),
    (["recsys", "plan", "--model", "dlrm-criteo-1tb", "--hardware", "h100-sxm", "--gpus", "8", "--batch", "65536",
      "--host-gib", "10", "--host-gbs", "5e-324"], "--host-gbs must be a finite number in [0.001, "),
    (["infer", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--prompt-len", "64",
      "--output-len", "8", "--rate", "5e-324"], "--rate must be a finite number in [1e-06, "),
])
def test_floats_are_bounded_by_physics(args: list[str], message: str) -> None:
    refused(args, message)


def test_hardware_profile_numbers_are_bounded_by_physics(tmp_path: Path) -> None:
    profile = yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text())
    for section, key, value, allowed in (("network", "nic_gbps_per_gpu", 5e-324, "[0.01, 1e+06]"),
                                         ("gpu", "hbm_gbs", 1e300, "[0.001, 1e+06]"),
                                         ("gpu", "peak_bf16_tflops", 5e-324, "[0.001, 1e+06]"),
                                         ("gpu", "attention_efficiency", 1e-9, "[0.001, 1]"),
                                         ("node", "scale_up_gbs", 5e-324, "[0.001, 1e+06]")):
        data = {**profile, section: {**profile[section], key: value}}
        path = write(tmp_path, "hw.yaml", data)
        refused(["evaluate", "--model", "llama3-8b", "--hardware", path, *JOB[2:]], f"{section}: {key}", allowed)


def test_every_hardware_preset_is_inside_the_physical_ranges() -> None:
    from hardware_profiles import load_hardware, preset_names

    for name in preset_names():  # edge devices (Jetson Orin on 1 GbE) as much as GB200
        load_hardware(name, 1)


# 8. a name too long for the system was a traceback (File name too long)
@pytest.mark.parametrize("option", ["mlip", "model", "hardware", "costs", "plan", "cluster", "calibrate"])
def test_over_long_paths_are_one_line_errors(option: str) -> None:
    path = "a" * 300 + ".yaml"
    args = {"mlip": ["mlip", "plan", "--costs", path, "--hardware", "h100-sxm", "--gpus", "8", "--atoms", "1000"],
            "model": ["evaluate", "--model", path, *JOB],
            "hardware": ["evaluate", "--model", "llama3-8b", "--hardware", path, *JOB[2:]],
            "costs": ["plan", "--costs", path, *JOB], "plan": ["evaluate", "--plan", path],
            "cluster": ["plan", "--cluster", path, "--model", "llama3-8b", "--seq-len", "4096", "--global-batch", "8"],
            "calibrate": ["calibrate", path, "--hardware", "h100-sxm"]}[option]
    refused(args, "File name too long", path)


# 9. infer diffusion --steps 0 planned with the model's default steps
def test_diffusion_steps_must_be_positive() -> None:
    base = ["infer", "diffusion", "--model", "flux1-dev", "--hardware", "h100-sxm", "--gpus", "2"]
    refused([*base, "--steps", "0"], "--steps must be an integer in [1, 10000], got 0")
    refused([*base, "--steps", "-3"], "--steps")
    assert runner.invoke(app, base).exit_code == 0  # absent: the model's own steps
