"""The command line through typer's CliRunner: outputs, error messages and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

runner = CliRunner()
EVAL = ["evaluate", "--model", "gpt3-175b", "--hardware", "a100-80gb", "--gpus", "64", "--seq-len", "2048",
        "--global-batch", "64"]


def test_evaluate_json_fields() -> None:
    res = runner.invoke(app, [*EVAL, "--tp", "8", "--pp", "8", "--vpp", "3", "--mbs", "1", "--recompute",
                              "selective", "--sp", "--zero", "0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu",
                "peak_memory_gib", "fits", "bubble_fraction", "breakdown"):
        assert key in out
    assert sum(out["breakdown"].values()) == __import__("pytest").approx(out["step_time_s"], rel=1e-9)
    assert out["layout"]["dp"] == 1 and out["fits"] is True
    assert out["tokens_per_s"] == __import__("pytest").approx(64 * 2048 / out["step_time_s"])


def test_evaluate_table() -> None:
    res = runner.invoke(app, [*EVAL, "--tp", "8", "--pp", "8", "--mbs", "1", "--recompute", "full"])
    assert res.exit_code == 0
    assert "step time" in res.output and "MFU" in res.output and "per stage" in res.output


def test_rule_violations_exit_2_with_one_line() -> None:
    cases = {
        ("--tp", "7", "--pp", "8"): "world size 64 not divisible by tp 7 * pp 8",
        ("--tp", "8", "--pp", "8", "--mbs", "3"): "global batch 64 not divisible by mbs 3 * dp 1",
        ("--tp", "8", "--pp", "8", "--vpp", "3", "--global-batch", "60"): "micro-batches 60 divisible by pp 8",
        ("--tp", "1", "--pp", "1", "--sp"): "sequence parallelism needs tp > 1",
        ("--tp", "8", "--pp", "8", "--vpp", "13"): "layers 96 < pp 8 * vpp 13",
    }
    for args, message in cases.items():
        res = runner.invoke(app, [*EVAL, *args])
        assert res.exit_code == 2, (args, res.output)
        assert message in res.output and "Traceback" not in res.output


def test_context_parallel_sequence_rule() -> None:
    res = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "24",
                              "--seq-len", "4096", "--global-batch", "8", "--cp", "3"])
    assert res.exit_code == 2 and "seq_len 4096 not divisible by 2 * cp = 6" in res.output


def test_heads_rule_names_numbers() -> None:
    res = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "48",
                              "--seq-len", "4096", "--global-batch", "12", "--tp", "6"])
    assert res.exit_code == 2 and "attention heads 32 not divisible by tp 6" in res.output


def test_interleaved_needs_microbatches_multiple_of_pp() -> None:
    res = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "4096", "--global-batch", "6", "--pp", "4", "--vpp", "2", "--tp", "2"])
    assert res.exit_code == 2 and "micro-batches 6 divisible by pp 4" in res.output


def test_bad_model_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: tiny\nnum_layers: 4\nhiddn_size: 256\n")
    res = runner.invoke(app, ["evaluate", "--model", str(path), "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "512", "--global-batch", "16"])
    assert res.exit_code == 2 and "unknown keys ['hiddn_size']" in res.output
    assert "Traceback" not in res.output


def test_global_batch_tokens() -> None:
    base = ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096",
            "--tp", "8", "--json"]
    a = json.loads(runner.invoke(app, [*base, "--global-batch", "32"]).output)
    b = json.loads(runner.invoke(app, [*base, "--global-batch-tokens", str(32 * 4096)]).output)
    assert a["step_time_s"] == b["step_time_s"]
    res = runner.invoke(app, [*base, "--global-batch-tokens", "1000"])
    assert res.exit_code == 2 and "multiple of --seq-len 4096" in res.output
    res = runner.invoke(app, base)
    assert res.exit_code == 2 and "exactly one of --global-batch" in res.output


def test_bad_enum_values_are_usage_errors() -> None:
    res = runner.invoke(app, [*EVAL, "--tp", "8", "--recompute", "sometimes"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    res = runner.invoke(app, [*EVAL, "--tp", "8", "--zero", "4"])
    assert res.exit_code == 2


def test_listings() -> None:
    models = runner.invoke(app, ["models"])
    assert models.exit_code == 0 and "llama3-405b" in models.output and "405.85B" in models.output
    hw = runner.invoke(app, ["hardware"])
    assert hw.exit_code == 0 and "gb200-nvl72" in hw.output


def test_hardware_overrides_change_the_prediction() -> None:
    base = [*EVAL, "--tp", "8", "--pp", "8", "--mbs", "1", "--json"]
    small = json.loads(runner.invoke(app, [*base, "--memory-gib", "40"]).output)
    assert small["fits"] is False and small["memory_capacity_gib"] == 40


def _plan_file(tmp_path: Path) -> Path:
    out = tmp_path / "plan.yaml"
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len",
                              "4096", "--global-batch", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_output_files_honour_the_umask(tmp_path: Path) -> None:
    """Plan files and launcher configs get 0666 & ~umask, shell scripts 0777 & ~umask (issue 21 item 7)."""
    import os
    import stat

    for mask, plain, script in ((0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)):
        folder = tmp_path / f"umask{mask:03o}"
        folder.mkdir()
        old = os.umask(mask)
        try:
            plan = _plan_file(folder)
            for target, name in (("megatron", "launch.sh"), ("deepspeed", "ds.json")):
                res = runner.invoke(app, ["emit", str(plan), "--to", target, "--out", str(folder / name)])
                assert res.exit_code == 0, res.output
        finally:
            os.umask(old)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert modes == {"plan.yaml": plain, "launch.sh": script, "ds.json": plain}, (oct(mask), modes)
        assert (folder / "launch.sh").read_text().startswith("#!")


def _import_cli_with(hook: str) -> subprocess.CompletedProcess[str]:
    """`import cli` in a fresh interpreter whose import of one module is replaced by `hook` (it raises)."""
    code = ("import builtins, sys\n_real = builtins.__import__\n"
            f"def _hooked(name, *args, **kwargs):\n{hook}\n    return _real(name, *args, **kwargs)\n"
            "builtins.__import__ = _hooked\nimport cli\n")
    return subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True,
                          text=True, timeout=120)


def test_ctrl_c_while_loading_exits_130_without_traceback() -> None:
    """Ctrl-C while cli.py imports its modules, directly or turned into an ImportError by an extension's
    initialisation (ortools does that), exits 130 without a traceback; an unrelated ImportError still surfaces."""
    direct = _import_cli_with("    if name == 'typer':\n        raise KeyboardInterrupt")
    assert direct.returncode == 130 and "Traceback" not in direct.stderr, direct.stderr
    wrapped = _import_cli_with("    if name == 'cost_models.prediction':\n"
                               "        try:\n            raise KeyboardInterrupt\n"
                               "        except KeyboardInterrupt as exc:\n"
                               "            raise ImportError('initialization failed') from exc")
    assert wrapped.returncode == 130 and "Traceback" not in wrapped.stderr, wrapped.stderr
    broken = _import_cli_with("    if name == 'cost_models.prediction':\n        raise ImportError('broken install')")
    assert broken.returncode == 1 and "ImportError: broken install" in broken.stderr


def test_ctrl_c_while_typer_builds_the_command_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner import cli

    def interrupted(**_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 130


def test_optional_dependencies_checked_up_front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing torch is named before any work, a missing matplotlib after the text and HTML are written; any
    other ImportError surfaces as itself (issue 19: it used to read as 'needs matplotlib')."""
    import importlib.util

    import planner.outputs.explain

    plan = _plan_file(tmp_path)
    real_find_spec = importlib.util.find_spec
    missing: set[str] = {"matplotlib", "torch"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in missing else real_find_spec(name, *a))
    # the text and the HTML are written all the same, and the error says so (issue 31 item 7)
    res = runner.invoke(app, ["explain", str(plan), "--png", str(tmp_path / "x.png"), "--html",
                              str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "error: --png needs matplotlib: pip install -e '.[plot]'" in res.output
    assert f"(the report and {tmp_path / 'x.html'} written; the PNG was not)" in res.output
    assert "binding constraint" in res.output and (tmp_path / "x.html").is_file()
    assert not (tmp_path / "x.png").exists()
    res = runner.invoke(app, ["profile", "layers", "--model", "llama3-8b", "--out", str(tmp_path / "c.csv")])
    assert res.exit_code == 2 and "error: profiling needs torch" in res.output

    missing.clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "matplotlib"
                        else real_find_spec(name, *a))

    def broken(_: object) -> bytes:
        raise ImportError("cannot import name 'helper' from 'somewhere'")

    monkeypatch.setattr(planner.outputs.explain, "render_png", broken)
    res = runner.invoke(app, ["explain", str(plan), "--png", str(tmp_path / "x.png")])
    assert isinstance(res.exception, ImportError) and "helper" in str(res.exception)
    assert "needs matplotlib" not in res.output


def test_plan_loads_no_heavy_library_it_does_not_use() -> None:
    """Start-up (issue 20): a plan of a preset on the DP solver needs none of pandas (cost tables, sweeps),
    OR-Tools and PuLP (the ILP solvers), matplotlib, torch, scipy (calibration) or jsonschema (reading plans)."""
    heavy = ("pandas", "ortools", "pulp", "matplotlib", "torch", "scipy", "jsonschema")
    code = ("import sys, cli\n"
            "sys.argv = ['meshplan', 'plan', '--model', 'llama3-8b', '--hardware', 'h100-sxm', '--gpus', '8',"
            " '--seq-len', '4096', '--global-batch', '64']\n"
            "try:\n    cli.main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            f"print('LOADED', sorted(m for m in {heavy!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"


PLAN_ARGS = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096",
             "--global-batch", "64"]


@pytest.mark.parametrize("where", ["a-folder", "missing/parent/plan.yaml"])
def test_out_to_a_folder_or_a_missing_parent_fails_cleanly(tmp_path: Path, where: str) -> None:
    (tmp_path / "a-folder").mkdir()
    before = sorted(tmp_path.rglob("*"))
    result = CliRunner().invoke(app, [*PLAN_ARGS, "--out", str(tmp_path / where)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"error: cannot write {tmp_path / where}")
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, no temporary file left behind


def test_a_yaml_tag_that_constructs_objects_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "model.yaml"
    model.write_text('name: !!python/object/apply:os.system ["echo constructed"]\nnum_layers: 2\n')
    result = CliRunner().invoke(app, ["evaluate", "--model", str(model), "--hardware", "h100-sxm", "--gpus", "8",
                                      "--seq-len", "4096", "--global-batch", "8"])
    assert result.exit_code == 2 and "constructed" not in result.output
    assert result.output.strip() == (f"error: {model}: not valid YAML (could not determine a constructor for the "
                                     "tag 'tag:yaml.org,2002:python/object/apply:os.system')")


def test_plans_are_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    """Sets (recompute modules) and dicts must not leak hash order into a plan file."""
    files = []
    for seed in ("1", "2"):
        out = tmp_path / f"plan-{seed}.yaml"
        args = [*PLAN_ARGS, "--recompute-modules", "mlp,layernorm,core_attn", "--top-k", "3", "--out", str(out)]
        code = f"import sys, cli; sys.argv = ['meshplan', *{args!r}]; cli.main()"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[1], env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr
        files.append(out.read_bytes())
    assert files[0] == files[1]


def test_long_stage_tables_say_what_they_leave_out() -> None:
    """Issue 31 item 6: past six stages the table shows the first, the heaviest and the last with '...' rows where
    stages are left out, and says so (it dropped the middle stages without a word)."""
    res = runner.invoke(app, ["evaluate", "--model", "llama3-70b", "--hardware", "h100-sxm", "--gpus", "128",
                                   "--seq-len", "4096", "--global-batch", "128", "--tp", "8", "--pp", "8",
                                   "--zero", "1"])
    assert res.exit_code == 0, res.output
    assert "    ..." in res.output and "(3 of 8 stages shown" in res.output


def test_hardware_columns_stay_aligned_with_long_names() -> None:
    """Issue 31 item 6: the memory column ends at one place in every row, whatever the preset's name length."""
    rows = [line for line in runner.invoke(app, ["hardware"]).output.splitlines()[1:] if line.strip()]
    assert any(len(row.split()[0]) > 12 for row in rows)  # a name longer than the old fixed column
    assert len({row.index("G ") for row in rows}) == 1


def test_every_command_is_listed_with_its_own_help() -> None:
    """The lazy root group (planner.commands.lazy) lists each command from a table without importing its module: the
    table names every command the modules register, each with the first paragraph of that command's own help."""
    import importlib
    import inspect

    from planner.commands.common import app as registered
    from planner.commands.lazy import COMMANDS, build

    for module in {m for m, _ in COMMANDS.values()}:
        importlib.import_module(f"planner.commands.{module}")
    names = [c.name or c.callback.__name__ for c in registered.registered_commands if c.callback is not None]
    assert set(names) | {g.name for g in registered.registered_groups} == set(COMMANDS)
    for name, (_, text) in COMMANDS.items():
        command = build(name, "rich")
        assert command is not None and command.name == name
        assert inspect.cleandoc(command.help or "").split("\n\n")[0] == text, name


def test_each_command_loads_only_its_own_module() -> None:
    """Start-up (issue 36): `meshplan --help` imports no command module (nor numpy), `models` only the catalog, and
    `plan` none of the study, inference, profiling, recommendation or MLIP commands."""
    modules = ("catalog", "planning", "studies", "profiling", "inference", "mlip", "recsys")
    code = ("import sys, cli\n"
            "sys.argv = ['meshplan'] + sys.argv[1:]\n"
            "try:\n    cli.main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            f"print('LOADED', sorted(m for m in {modules!r} if 'planner.commands.' + m in sys.modules),"
            " 'numpy' in sys.modules)\n")

    def loaded(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1], timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert loaded("--help") == "LOADED [] False"
    assert loaded("models") == "LOADED ['catalog'] False"
    assert loaded(*PLAN_ARGS).startswith("LOADED ['planning']")
