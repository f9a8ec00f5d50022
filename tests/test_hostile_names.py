"""Names are never code (issue 37): a name that reaches an emitted file is refused where it is read unless it is made
of the safe characters (meshcore.checks.identifier), and, independently of that, every emitter and `trial`
keeps any text on its comment line and quotes what it puts in shell words. The emitted shell scripts are parsed with
`bash -n` and run with stub launchers on PATH: no marker file may appear."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

import hardware_profiles
import planner
from cli import app
from meshcore.checks import MAX_NAME_LEN, identifier
from meshcore.errors import InputError
from meshcore.fileio import is_script
from planner.outputs.emitters import FRAMEWORK, Target, emit
from planner.outputs.emitters.common import UnsupportedPlanError
from planner.outputs.plan import Plan
from planner.search.space import SearchSpec
from planner.studies.trial import TrialLauncher, write_trials

BASH = shutil.which("bash")
# Each would run `touch MARKER` if it reached a shell unquoted, or escaped its comment line.
PAYLOADS = ("m\ntouch {marker}", "m\rtouch {marker}", "m$(touch {marker})", "m`touch {marker}`",
            "m'; touch {marker}; '", 'm"; touch {marker}; "', "m\u2028touch {marker}", "m\x85touch {marker}",
            "m\x1b]0;x\x07\ntouch {marker}")
TINY_MODEL = ("num_layers: 4\nhidden_size: 256\nffn_hidden_size: 1024\nnum_attention_heads: 8\nvocab_size: 1000\n"
              "gated_mlp: false\ntied_embeddings: true\n")


@pytest.mark.parametrize("name", ["llama3-8b", "meta-llama/Llama-3.1-8B", "B200 (GB200 superchip)", "h100-sxm+net",
                                  "table:base-costs", "Qwen/Qwen3-30B-A3B@main", "x" * MAX_NAME_LEN])
def test_real_names_are_identifiers(name: str) -> None:
    assert identifier(name, "model name") == name


@pytest.mark.parametrize("name", [*(p.format(marker="PWNED") for p in PAYLOADS), "", "   ", "x" * (MAX_NAME_LEN + 1),
                                  "a;b", "a|b", "a&b", "a>b", "$HOME", "~/m", "a#b", "naïve"])
def test_unsafe_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(InputError) as info:
        identifier(name, "gpu.name")
    message = str(info.value)
    assert message.startswith("gpu.name must be") and "\n" not in message and "\r" not in message


@pytest.mark.parametrize("value", [0, None, [], {}, True, 1.5])
def test_names_must_be_text(value: object) -> None:
    with pytest.raises(InputError, match=r"model name must be a text name"):
        identifier(value, "model name")


def _plan_cli(tmp_path: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["plan", "--gpus", "8", "--seq-len", "512", "--global-batch", "16", *args])
    return res.exit_code, res.output


@pytest.mark.parametrize("text", ['name: "m\\ntouch PWNED"', "name: 0", "name: null", "name: []", "name: {}",
                                  "name: true", 'name: "m$(id)"'])
def test_model_yaml_names_are_refused_at_load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(f"{text}\n{TINY_MODEL}")
    code, out = _plan_cli(tmp_path, "--model", str(path), "--hardware", "h100-sxm")
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and f"{path}: name must be" in lines[0]
    assert "Traceback" not in out


def test_hardware_and_hf_names_are_refused_at_load(tmp_path: Path) -> None:
    text = (Path(hardware_profiles.__file__).parent / "h100-sxm.yaml").read_text()
    bad = tmp_path / "hw.yaml"
    bad.write_text(text.replace('name: "H100 SXM5 80GB"', 'name: "H100`touch PWNED`"'))
    code, out = _plan_cli(tmp_path, "--model", "llama3-8b", "--hardware", str(bad))
    assert code == 2 and "gpu.name must be" in out and "Traceback" not in out
    config = tmp_path / "hf" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"model_type": "llama", "_name_or_path": "x\n$(touch PWNED)", "num_hidden_layers": 2,
                                  "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                                  "vocab_size": 1000}))
    code, out = _plan_cli(tmp_path, "--model", str(config), "--hardware", "h100-sxm")
    assert code == 2 and "_name_or_path must be" in out and "Traceback" not in out


def test_cluster_group_names_are_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text('groups:\n  - {name: "a\\ntouch PWNED", hardware: h100-sxm, nodes: 1}\n'
                    "  - {name: b, hardware: a100-80gb, nodes: 1}\n")
    res = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--cluster", str(path), "--seq-len", "4096",
                                   "--global-batch", "64"])
    assert res.exit_code == 2 and "group 0: name must be" in res.output and "Traceback" not in res.output


def _named(plan: Plan, name: str) -> Plan:
    """`plan` with `name` as its model, hardware and GPU name, put past the validation as a plan built by some
    other code path might carry it: the emitters must hold on their own."""
    model, cluster, gpu = copy.copy(plan.model), copy.copy(plan.cluster), copy.copy(plan.cluster.gpu)
    object.__setattr__(model, "name", name)
    object.__setattr__(gpu, "name", name)
    object.__setattr__(cluster, "name", name)
    object.__setattr__(cluster, "gpu", gpu)
    return dataclasses.replace(plan, model=model, cluster=cluster)


def _stubs(folder: Path) -> dict[str, str]:
    """An environment whose launchers (torchrun, deepspeed) are stubs that exit 0."""
    folder.mkdir()
    for tool in ("torchrun", "deepspeed"):
        stub = folder / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "TRAIN_SCRIPT": "train.py"}


def _run_script(path: Path, env: dict[str, str]) -> None:
    assert BASH is not None
    parsed = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert parsed.returncode == 0, parsed.stderr
    subprocess.run([BASH, str(path)], cwd=path.parent, env=env, capture_output=True, timeout=60)


def _comments_hold(text: str, marker: Path) -> None:
    """Every line that mentions the marker is a comment (or, in TOML, inside one quoted string value)."""
    for line in text.splitlines():
        if str(marker) in line:
            assert line.startswith("#") or line.startswith("description = "), line


@pytest.fixture(scope="module")
def plans() -> dict[Target, Plan]:
    return {t: planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                            runtime=planner.Runtime(framework=FRAMEWORK[t]), spec=SearchSpec(top_k=2))
            for t in (Target.MEGATRON, Target.TORCHTITAN, Target.DEEPSPEED)}


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_emitted_file_runs_a_name(tmp_path: Path, plans: dict[Target, Plan], payload: str) -> None:
    marker = tmp_path / "PWNED"
    name = payload.format(marker=marker)
    env = _stubs(tmp_path / "bin")
    for target in Target:
        base = plans.get(target, plans[Target.MEGATRON])
        plan = _named(base, name)
        try:
            text = emit(plan, target).text
        except UnsupportedPlanError:
            continue
        _comments_hold(text, marker)
        if target is Target.TORCHTITAN:
            parsed = tomllib.loads(text)
            assert set(parsed) == set(tomllib.loads(emit(base, target).text))
        out = tmp_path / f"out.{target.value}"
        out.write_text(text)
        if is_script(text):
            _run_script(out, env)
    for launcher in TrialLauncher:
        folder = tmp_path / f"trial-{launcher.value}"
        trials = write_trials(_named(plans[launcher.target], name), launcher, 2, 3, folder)
        _comments_hold((folder / "trials.yaml").read_text(), marker)
        for trial in trials:
            assert trial.script is not None
            _run_script(folder / trial.script, env)
    assert not marker.exists()


def test_a_substituted_megatron_script_keeps_its_interpreter_line(plans: dict[Target, Plan]) -> None:
    """emit writes the nearest layout Megatron-LM runs for a torchtitan plan; its NOTE goes after the `#!` line."""
    zbv = planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                       runtime=planner.Runtime(framework="any"),
                       spec=SearchSpec(top_k=1, schedule_choices=(planner.Schedule.ZB_V,), pp=2))
    emitted = emit(zbv, Target.MEGATRON)
    lines = emitted.text.splitlines()
    assert emitted.note is not None and lines[0] == "#!/usr/bin/env bash" and lines[1].startswith("# NOTE: ")
