"""Bad input, fixed and seeded-random (issue 21): the command line answers with one line naming the problem and a
non-zero exit code, never a traceback; the Python API raises meshplan's own errors naming the argument, never a
raw TypeError, ValueError or ZeroDivisionError; hardware profiles refuse every number that is not finite and in
range. Every case fails before any search runs, so the whole file takes a few seconds."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import planner
from cli import app
from hardware_profiles import HardwareOverrides, load_hardware
from meshcore.errors import InputError, MeshplanError
from planner.search.space import SearchSpec

runner = CliRunner()
SEED = 21
JOB = ["--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096", "--global-batch", "8"]
EVALUATE, PLAN = ["evaluate", *JOB], ["plan", *JOB]
SWEEP = ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "4096", "--global-batch", "8"]
TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
        "vocab_size": 1000, "gated_mlp": True, "tied_embeddings": False}
TINY_MOE = {**TINY, "moe_num_experts": 8, "moe_top_k": 2, "moe_ffn_hidden_size": 256}
HUGE = 10**20


def assert_clean_failure(args: list[str], *names: str) -> str:
    """The invocation fails with a non-zero exit code, no traceback and one line naming one of `names` (our own
    `error:` line, or click's usage error for a value its type or range refuses)."""
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert res.exit_code != 0, (args, res.output)
    assert "Traceback" not in res.output, (args, res.output)
    if "Invalid value for" in res.output:  # click's usage error, in its own box
        assert res.exit_code == 2 and any(n in res.output for n in names), (args, res.output)
        return res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, res.output)
    assert any(n in lines[0] for n in names), (args, names, lines[0])
    return lines[0]


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(path)


# item 1: the inputs that gave tracebacks
def test_tracebacks_of_issue_21_are_one_line_errors(tmp_path: Path) -> None:
    huge_yaml = write(tmp_path, "huge.yaml", {**TINY, "num_layers": HUGE})
    huge_hf = write(tmp_path, "config.json", {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": HUGE,
                                              "num_attention_heads": 32, "intermediate_size": 14336,
                                              "vocab_size": 128256})
    cases = {
        ("evaluate", "--model", huge_yaml, *JOB[2:]): "num_layers must be an integer in [1, 10000]",
        ("evaluate", "--model", huge_hf, *JOB[2:]): "num_layers must be an integer in [1, 10000]",
        (*PLAN, "--cp", "0"): "--cp must be an integer in [1, 10000000], got 0",
        (*SWEEP, "--gpus", "8", "--vary", "gpus", "--values", ""): "--values must name at least one gpus value",
        (*SWEEP, "--gpus", "8", "--vary", "gpus", "--values", " , "): "--values must name at least one gpus value",
        (*SWEEP, "--tokens", "1e12", "--days", "nan"): "--days must be a finite number in [0.001, 36525], got nan",
    }
    for args, message in cases.items():
        assert message in assert_clean_failure(list(args), message)


# items 3 and 6: out-of-range and non-finite options on the command line
def test_out_of_range_options_are_refused() -> None:
    cases = {
        (*PLAN, "--memory-gib", "nan"): "--memory-gib must be a finite number in [0.001, 1e+06], got nan",
        (*PLAN, "--inter-node-gbps", "nan"): "--inter-node-gbps must be a finite number in [0.01, 1e+06], got nan",
        (*EVALUATE, "--inter-node-gbps", "inf"): "--inter-node-gbps must be a finite number",
        (*EVALUATE, "--memory-gib", "-80"): "--memory-gib must be a finite number in [0.001, 1e+06], got -80",
        (*PLAN, "--gpus-per-node", "0"): "--gpus-per-node must be an integer in [1, 10000000], got 0",
        (*PLAN, "--time-limit", "-1"): "--time-limit must be a finite number in (0.01, 86400], got -1",
        (*PLAN, "--time-limit", "nan"): "--time-limit must be a finite number in (0.01, 86400], got nan",
        (*PLAN, "--max-tp", "0"): "--max-tp must be an integer in [1, 10000000], got 0",
        (*PLAN, "--gpus", str(HUGE)): f"--gpus must be an integer in [1, 10000000], got {HUGE}",
        (*PLAN, "--seq-len", str(HUGE)): f"--seq-len must be an integer in [1, 16777216], got {HUGE}",
        (*PLAN, "--global-batch", str(HUGE)): f"--global-batch must be an integer in [1, 100000000], got {HUGE}",
        (*EVALUATE, "--mbs", str(HUGE)): "--mbs must be an integer in [1, 100000000]",
        (*SWEEP, "--tokens", "inf", "--days", "30"): "--tokens must be a finite number",
        (*SWEEP, "--tokens", "1e12", "--days", "30", "--max-gpus", "0"): "--max-gpus must be an integer",
        (*PLAN, "--moe-load-imbalance", "nan"): "--moe-load-imbalance must be a finite number in [1, 64], got nan",
    }
    for args, message in cases.items():
        assert message in assert_clean_failure(list(args), message)


def test_model_file_ranges(tmp_path: Path) -> None:
    cases = {
        "every0.yaml": ({**TINY_MOE, "moe_every": 0}, "moe_every must be an integer in [1, 10000], got 0"),
        "dense_first.yaml": ({**TINY_MOE, "moe_first_dense_layers": 9},
                             "moe_first_dense_layers 9 and moe_every 1 leave no MoE layer among num_layers 4"),
        "wide.yaml": ({**TINY, "hidden_size": HUGE}, "hidden_size must be an integer in [1, 16777216]"),
        "mla.yaml": ({**TINY, "mla_q_lora_rank": 0, "mla_kv_lora_rank": -1, "mla_qk_nope_head_dim": 8,
                      "mla_qk_rope_head_dim": 8, "mla_v_head_dim": 8}, "mla_kv_lora_rank must be an integer"),
        "llama4.json": ({"model_type": "llama4_text", "hidden_size": 256, "num_hidden_layers": 4,
                         "num_attention_heads": 8, "intermediate_size": 256, "intermediate_size_mlp": 512,
                         "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 1,
                         "interleave_moe_layer_step": 0}, "interleave_moe_layer_step must be an integer >= 1"),
    }
    for name, (data, message) in cases.items():
        args = ["evaluate", "--model", write(tmp_path, name, data), *JOB[2:]]
        assert message in assert_clean_failure(args, message)


# item 8: pins that cannot work name the rule and the numbers
def test_impossible_pins_name_the_rule() -> None:
    cases = {
        ("--tp", "3"): "with tp 3: the first combination tried (tp 3, pp 1, cp 1) breaks a layout rule: world size 8 "
                       "not divisible by tp 3 * pp 1 * cp 1 = 3",
        ("--tp", "2", "--pp", "3"): "world size 8 not divisible by tp 2 * pp 3 * cp 1 = 6",
        ("--mbs", "3"): "global batch 8 not divisible by mbs 3 * dp 8",
        ("--tp", "8", "--cp", "2", "--pp", "2"): "world size 8 not divisible by tp 8 * pp 2 * cp 2 = 32",
    }
    for pins, message in cases.items():
        res = runner.invoke(app, [*PLAN, *pins])
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output


BAD_INTS = ["0", "-1", "-8", str(HUGE), str(2**63)]
BAD_REALS = ["nan", "inf", "-inf", "-1", "0", "1e400"]
INT_OPTIONS = {"evaluate": ["--gpus", "--seq-len", "--global-batch", "--global-batch-tokens", "--tp", "--pp", "--cp",
                            "--vpp", "--mbs", "--ep", "--etp", "--gpus-per-node"],
               "plan": ["--gpus", "--seq-len", "--global-batch", "--tp", "--pp", "--cp", "--vpp", "--mbs", "--ep",
                        "--etp", "--max-tp", "--max-mbs", "--top-k", "--gpus-per-node"],
               "sweep": ["--gpus", "--seq-len", "--global-batch", "--max-gpus"]}
REAL_OPTIONS = {"evaluate": ["--memory-gib", "--inter-node-gbps", "--moe-load-imbalance", "--moe-capacity-factor"],
                "plan": ["--memory-gib", "--inter-node-gbps", "--time-limit", "--moe-load-imbalance"],
                "sweep": ["--tokens", "--days"]}
BASES = {"evaluate": EVALUATE, "plan": PLAN,
         "sweep": [*SWEEP, "--gpus", "8", "--tokens", "1e12", "--days", "30"]}


def _random_cli_cases(n: int) -> list[tuple[list[str], str]]:
    rng = random.Random(SEED)
    cases = []
    for _ in range(n):
        command = rng.choice(sorted(BASES))
        if rng.random() < 0.6:
            option, value = rng.choice(INT_OPTIONS[command]), rng.choice(BAD_INTS)
        else:
            option, value = rng.choice(REAL_OPTIONS[command]), rng.choice(BAD_REALS)
        cases.append(([*BASES[command], option, value], option))
    return cases


@pytest.mark.parametrize(("args", "option"), _random_cli_cases(40))
def test_random_bad_options(args: list[str], option: str) -> None:
    """One option set to a value outside its range: refused, naming the option (or its field)."""
    assert_clean_failure(args, option, option[2:].replace("-", "_"))


# item 3: hardware profiles
H100 = yaml.safe_load((Path(__file__).parents[1] / "hardware_profiles" / "h100-sxm.yaml").read_text())
HW_NUMBERS = [("gpu", "memory_gib"), ("gpu", "hbm_gbs"), ("gpu", "peak_bf16_tflops"), ("gpu", "peak_fp8_tflops"),
              ("gpu", "attention_efficiency"), ("gpu", "memory_efficiency"), ("gpu", "overlap_efficiency"),
              ("node", "scale_up_gbs"), ("node", "scale_up_latency_us"), ("node", "scale_up_efficiency"),
              ("network", "nic_gbps_per_gpu"), ("network", "latency_us"), ("network", "efficiency"),
              ("node", "gpus_per_node"), ("node", "scale_up_size")]
HW_BAD = [math.nan, math.inf, -math.inf, -1.0, 0, 10**400, True, "fast"]


def _profile(section: str, key: str, value: Any) -> dict[str, Any]:
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in H100.items()}
    data[section][key] = value
    return data


@pytest.mark.parametrize(("section", "key"), HW_NUMBERS)
def test_hardware_numbers_must_be_finite_and_in_range(tmp_path: Path, section: str, key: str) -> None:
    rng = random.Random(f"{SEED}-{key}")
    for value in [*rng.sample(HW_BAD, 4), *([1.5] if "efficiency" in key else [])]:
        path = write(tmp_path, "hw.yaml", _profile(section, key, value))
        with pytest.raises(InputError, match=key) as info:
            load_hardware(path, 8)
        assert "\n" not in str(info.value)


def test_hardware_curve_and_cli(tmp_path: Path) -> None:
    for point in ([math.nan, 0.5], [1e12, math.inf], [math.inf, 0.9], [1e12, 1.5]):
        data = _profile("gpu", "matmul_efficiency", [point])
        with pytest.raises(InputError, match="matmul_efficiency|efficiency curve"):
            load_hardware(write(tmp_path, "curve.yaml", data), 8)
    path = write(tmp_path, "nan.yaml", _profile("gpu", "memory_gib", math.nan))
    args = ["evaluate", "--model", "llama3-8b", "--hardware", path, *JOB[4:]]
    assert "memory_gib must be a finite number in [0.001, 1e+06], got nan" in assert_clean_failure(args, "memory_gib")
    for kwargs in ({"memory_gib": math.nan}, {"inter_node_gbps": -1.0}, {"gpus_per_node": 2.0}):
        with pytest.raises(InputError, match=next(iter(kwargs)).replace("_", "-")):
            HardwareOverrides(**kwargs)


# item 5: the Python API checks types and ranges at the boundary
API_JOB = {"gpus": 8, "seq_len": 4096, "global_batch": 8}
API_CASES = [
    ("gpus", "8"), ("gpus", None), ("gpus", [8]), ("gpus", True), ("gpus", 0), ("gpus", HUGE),
    ("seq_len", 1.5), ("seq_len", math.nan), ("seq_len", HUGE), ("global_batch", HUGE), ("global_batch", 8.0),
    ("tp", 2.0), ("tp", 0), ("pp", "2"), ("cp", 0), ("vpp", True), ("mbs", -1), ("ep", 1.0), ("etp", 0),
    ("zero", True), ("zero", 4), ("sp", 1), ("dtype", "fp16"), ("recompute", "sometimes"), ("schedule", 3),
    ("recompute_modules", 5),
]


@pytest.mark.parametrize(("name", "value"), API_CASES)
def test_evaluate_checks_its_arguments(name: str, value: Any) -> None:
    with pytest.raises(InputError, match=name) as info:
        planner.evaluate("llama3-8b", "h100-sxm", **{**API_JOB, name: value})
    assert "\n" not in str(info.value) and ("must be" in str(info.value))


def test_api_boundary_refusals() -> None:
    calls = [
        (lambda: planner.plan("llama3-8b", "h100-sxm", **API_JOB, time_limit_s=math.nan), "time_limit_s"),
        (lambda: planner.plan("llama3-8b", "h100-sxm", **API_JOB, time_limit_s=-1), "time_limit_s"),
        (lambda: planner.plan("llama3-8b", "h100-sxm", **API_JOB, spec={"tp": 2}), "spec"),
        (lambda: planner.plan("llama3-8b", "h100-sxm", **API_JOB, solver="simplex"), "solver"),
        (lambda: planner.resolve(3, "h100-sxm", **API_JOB), "model"),
        (lambda: planner.resolve("llama3-8b", None, **API_JOB), "hardware"),
        (lambda: planner.resolve("llama3-8b", "h100-sxm", **API_JOB, runtime="flash"), "runtime"),
        (lambda: planner.make_layout("problem", tp=1), "problem"),
        (lambda: planner.load_hardware("h100-sxm", 8.0), "gpus"),
        (lambda: planner.load_model(None), "model"),
        (lambda: planner.Runtime(moe_load_imbalance=math.nan), "moe_load_imbalance"),
        (lambda: planner.Runtime(moe_capacity_factor=math.inf), "moe_capacity_factor"),
    ]
    for call, name in calls:
        with pytest.raises(MeshplanError, match=name):
            call()


SPEC_CASES = [("top_k", 0), ("top_k", 1.0), ("tp", 0), ("tp", 2.0), ("pp", "4"), ("cp", 0), ("mbs", True),
              ("max_tp", 0), ("max_mbs", 0), ("max_waves", 0), ("zero", 7), ("sp", "yes"), ("no_cp", 1),
              ("schedule", "bogus"), ("recompute", "sometimes"), ("tp_choices", (0,)), ("mbs_choices", ()),
              ("zero_choices", (5,)), ("recompute_modules", "layernorm")]


@pytest.mark.parametrize(("name", "value"), SPEC_CASES)
def test_search_spec_checks_its_fields(name: str, value: Any) -> None:
    with pytest.raises(InputError, match=name):
        SearchSpec(**{name: value})


def test_search_spec_takes_enum_values_as_strings() -> None:
    spec = SearchSpec(schedule="1f1b", recompute="full", tp_choices=[1, 2])
    assert spec.schedule is planner.Schedule.ONE_F_ONE_B and spec.recompute is planner.Recompute.FULL
    assert spec.tp_choices == (1, 2)


def test_random_api_calls() -> None:
    """A seeded sample of one bad argument each, to evaluate, plan and SearchSpec: meshplan's errors only."""
    rng = random.Random(SEED)
    pool: list[Any] = ["8", None, [8], True, False, 1.5, math.nan, math.inf, 2.0, 0, -3, HUGE, {}, b"8"]
    ints = ["gpus", "seq_len", "global_batch", "tp", "pp", "cp", "vpp", "mbs", "ep"]
    for _ in range(60):
        target, name, value = rng.choice(["evaluate", "plan", "spec"]), rng.choice(ints), rng.choice(pool)
        try:
            if target == "spec":
                if name in ("gpus", "seq_len", "global_batch") or value is None:
                    continue  # not SearchSpec fields; None leaves a pin free
                SearchSpec(**{name: value})
            elif target == "plan" and name in ("gpus", "seq_len", "global_batch"):
                planner.plan("llama3-8b", "h100-sxm", **{**API_JOB, name: value})
            else:
                planner.evaluate("llama3-8b", "h100-sxm", **{**API_JOB, name: value})
        except MeshplanError as exc:
            assert name in str(exc) and "\n" not in str(exc), (target, name, value, str(exc))
        else:
            raise AssertionError(f"{target}({name}={value!r}) was accepted")


# item 2: cost tables, cell by cell (cost_models/profile/tables.py, planner/search/chain.py)
def _table(tmp_path: Path, rows: list[dict[str, Any]], name: str = "costs.csv") -> str:
    from fuzz_inputs import _csv

    path = tmp_path / name
    path.write_text(_csv(rows))
    return str(path)


def _edited(rows: list[dict[str, Any]], row: int, **cells: Any) -> list[dict[str, Any]]:
    out = [dict(r) for r in rows]
    out[row].update(cells)
    return out


def _cost_table_cases() -> list[tuple[str, Any, str]]:
    """(name, edit of the synthetic table of benchmarks/fuzz_inputs.py, the message); row 1 is a decoder row of
    tp 1, mbs 1 (seq_len 128, hidden_size 256), row 2 its embedding row."""
    from fuzz_inputs import _cost_rows

    base = _cost_rows()
    return [
        ("inf time", _edited(base, 0, forward_ms="inf"),
         "row 1 (decoder) forward_ms must be a finite number in [0, 8.64e+07], got inf"),
        ("nan time", _edited(base, 1, backward_ms="nan"), "row 2 (embedding) backward_ms must be a finite number"),
        ("negative time", _edited(base, 0, forward_ms=-1), "row 1 (decoder) forward_ms must be a finite number in "
                                                           "[0, 8.64e+07], got -1"),
        ("no time", _edited(base, 0, forward_ms=0, backward_ms=0),
         "row 1 (decoder) forward_ms + backward_ms must be at least 1e-06 ms"),
        ("zero heads", [dict(r, num_attention_heads=0) for r in base],
         "row 1 (decoder) num_attention_heads must be an integer in [1, 16777216], got 0"),
        ("zero hidden", [dict(r, hidden_size=0) for r in base],
         "row 1 (decoder) hidden_size must be an integer in [1, 16777216], got 0"),
        ("mbs 1.5", _edited(base, 0, mbs=1.5), "row 1 (decoder) mbs must be an integer in [1, 100000000], got 1.5"),
        ("tp text", _edited(base, 0, tp="two"), "row 1 (decoder) tp must be an integer in [1, 10000000], got 'two'"),
        ("huge count", _edited(base, 0, count=10**20), "row 1 (decoder) count must be an integer in [1, 10000]"),
        ("no lm_head", [r for r in base if r["kind"] != "lm_head"],
         "no lm_head rows; a transformer's cost table needs rows of every kind (embedding, decoder, lm_head), got "
         "embedding, decoder"),
        ("decoder only", [r for r in base if r["kind"] == "decoder"], "no embedding rows"),
        ("unknown kind", _edited(base, 2, kind="conv"), "row 3 kind must be one of embedding, decoder, lm_head"),
        ("gap in the grid", base[:-1], "no lm_head row for tp 2, mbs 2; every kind needs a row for each measured tp "
                                       "[1, 2] and mbs [1, 2]"),
        ("twice", [*base, base[0]], "row 13 repeats row 1: kind decoder, tp 1, mbs 1"),
        ("counts differ", _edited(base, 3, count=5), "row 4 (decoder) count 5 differs from 4 in row 1"),
        ("embedding count", _edited(base, 1, count=2), "row 2 (embedding) count must be 1, got 2"),
        ("shapes differ", _edited(base, 1, hidden_size=512), "row 2 (embedding) hidden_size 512 differs from 256"),
        ("head size", [dict(r, num_attention_heads=3, num_kv_heads=3) for r in base],
         "hidden_size 256 must be a multiple of num_attention_heads 3"),
        ("tiny activations", _edited(base, 0, activation_bytes=0),
         "row 1 (decoder) activation_bytes must be at least the layer's 16-bit input, 2 x seq_len 128 x mbs 1 x "
         "hidden_size 256 = 65536, got 0"),  # a ValueError in the split search before
    ]


@pytest.mark.parametrize(("name", "rows", "message"), _cost_table_cases(), ids=[c[0] for c in _cost_table_cases()])
def test_bad_cost_tables_name_the_row_the_column_and_the_value(tmp_path: Path, name: str,
                                                               rows: list[dict[str, Any]], message: str) -> None:
    from cost_models.profile.tables import read_costs

    path = _table(tmp_path, rows)
    args = ["plan", "--costs", path, "--hardware", "h100-sxm", "--gpus", "4", "--seq-len", "128", "--global-batch", "8"]
    assert message in assert_clean_failure(args, message)
    with pytest.raises(InputError, match="^cost table ") as info:
        read_costs(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def _chain_cases() -> list[tuple[str, Any, str]]:
    from fuzz_inputs import _chain_rows

    base = _chain_rows()  # stem, early (6 layers), late (10), head per (tp, mbs); row 2 is an early row
    return [
        ("inf", _edited(base, 1, forward_ms="inf"), "row 2 (early) forward_ms must be a finite number"),
        ("mbs 1.5", _edited(base, 1, mbs=1.5), "row 2 (early) mbs must be an integer in [1, 100000000], got 1.5"),
        ("count 1e20", _edited(base, 1, count=10**20), "row 2 (early) count must be an integer in [1, 10000]"),
        ("too long", [dict(r, count=1500) if r["kind"] == "late" else r for r in base],
         "add up to 1508 layers; at most 1024 are planned"),
        ("counts differ", _edited(base, 1, count=7),
         "row 6 (early) count 6 differs from 7 in row 2; the early rows must give one count"),
        ("twice", [*base, base[1]], "row 17 repeats row 2: kind early, tp 1, mbs 8"),
        ("no kind", _edited(base, 1, kind=""), "row 2 kind must be the name of a layer kind"),
        ("unknown column", [dict(r, extra=1) for r in base], "unknown columns ['extra']"),
    ]


@pytest.mark.parametrize(("name", "rows", "message"), _chain_cases(), ids=[c[0] for c in _chain_cases()])
def test_bad_chain_tables_are_refused(tmp_path: Path, name: str, rows: list[dict[str, Any]], message: str) -> None:
    path = _table(tmp_path, rows, "chain.csv")
    args = ["plan", "--costs", path, "--hardware", "a100-40gb", "--gpus", "4", "--seq-len", "1", "--global-batch", "64"]
    assert message in assert_clean_failure(args, message)


# item 4: plan files, read by `meshplan explain` and `planner.load_plan` (planner/outputs/planread.py)
@pytest.fixture(scope="module")
def fuzz_inputs(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """benchmarks/fuzz_inputs.py's base inputs: tiny models and plans made once (pp 2 with two chunks per rank
    first, the plan made with a cost table last)."""
    from fuzz_inputs import Inputs

    return Inputs(tmp_path_factory.mktemp("fuzz"), SEED)


def _set(path: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
        for key in parents:
            data = data[key]
        data[last] = value
    return edit


def _costs_row(**cells: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        row = next(r for r in data["costs"]["rows"] if r["kind"] == "decoder")
        row.update(cells)
    return edit


PLAN_CASES = [  # (plan: 0 the pp-2 one, 5 the cost-table one; the edit; the message)
    (0, _set("parallelism.tp", 1.0), "parallelism.tp: 1.0 is not of type 'integer'"),
    (0, _set("alternatives.0.layout.pp", 2.0), "alternatives.0.layout.pp: 2.0 is not of type 'integer'"),
    (0, _set("parallelism.zero_stage", 1.0), "parallelism.zero_stage: 1.0 is not one of [0, 1, 2, 3]"),
    (0, _set("alternatives.1.layout.zero_stage", 1.0), "alternatives.1.layout.zero_stage: 1.0 is not one of"),
    (0, _set("schema_version", 1.0), "schema_version: 1 was expected"),
    (0, _set("recompute.full_layers_per_stage", [0]), "recompute: full_layers_per_stage [0] needs one count per pp "
                                                      "rank, pp 2"),
    (0, _set("alternatives.0.layout.full_layers_per_stage", [0]),
     "alternatives[0] (alternative 2): full_layers_per_stage [0] needs one count per pp rank, pp 2"),
    (0, _set("parallelism.layers_per_chunk", [0, 1, 1, 2]), "but parallelism.layers_per_chunk [0, 1, 1, 2] gives"),
    (0, _set("alternatives.0.layout.layers_per_chunk", [1, 1]), "alternatives[0] (alternative 2): stage_layers needs "
                                                                "4 non-negative counts (pp * vpp)"),
    (0, _set("alternatives.2.layout.layers_per_chunk", [1, 1, 1, 2]), "stage_layers sum to 5, model has 4 layers"),
    (0, _set("stages.0.first_layer", 1), "stages[0] says first_layer 1"),
    (0, _set("stages.1.has_lm_head", True), "stages[1] says first_layer"),
    (0, _set("stages.0.peak_memory_gib", -1.0), "stages.0.peak_memory_gib must be a number >= 0, got -1.0"),
    (0, _set("prediction.step_time_s", 0.0), "prediction.step_time_s must be a number > 0, got 0.0"),  # explain /0
    (0, _set("prediction.breakdown.compute", math.nan), "prediction.breakdown.compute must be a finite number"),
    (0, _set("alternatives.3.step_time_s", math.inf), "alternatives.3.step_time_s must be a finite number, got inf"),
    (0, _set("search.gap", -1.0), "search.gap must be a number >= 0"),
    (0, _set("prediction.bogus", 1), "prediction: unknown keys ['bogus']"),
    (0, _set("prediction.num_microbatches", 3), "prediction.num_microbatches 3 must be the layout's"),
    (0, _set("job.seq_len", HUGE), "job: seq_len must be an integer in [1, 16777216]"),
    (5, _set("costs.seq_len", 64), "costs.seq_len 64 must be the job's seq_len 128"),
    (5, _costs_row(forward_s=0.0, backward_s=0.0), "forward_s + backward_s must be at least 1e-09 s"),
    (5, _costs_row(activation_bytes=0.0), "activation_bytes must be at least the decoder layer's 16-bit input"),
    (5, lambda d: d["costs"]["rows"].append(dict(d["costs"]["rows"][0])), "repeats costs.rows.0"),
    (5, _costs_row(params=math.inf), "params must be a finite number, got inf"),
]


@pytest.mark.parametrize(("which", "edit", "message"), PLAN_CASES, ids=[c[2][:40] for c in PLAN_CASES])
def test_bad_plan_files_are_refused_by_explain_and_load_plan(tmp_path: Path, fuzz_inputs: Any, which: int,
                                                             edit: Any, message: str) -> None:
    data = json.loads(json.dumps(fuzz_inputs.plans[which]))
    edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert message in assert_clean_failure(["explain", str(path)], message)
    with pytest.raises(InputError) as info:
        planner.load_plan(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_plan_files_as_written_still_load(tmp_path: Path, fuzz_inputs: Any) -> None:
    """The checks above refuse nothing `meshplan plan` writes: every base plan loads, as JSON and as YAML."""
    for i, data in enumerate(fuzz_inputs.plans):
        for path in (tmp_path / f"p{i}.json", tmp_path / f"p{i}.yaml"):
            path.write_text(json.dumps(data) if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False))
            assert planner.load_plan(path).best.layout.pp == data["parallelism"]["pp"]


# found by benchmarks/fuzz.py
def test_api_paths_and_runtime_fields_are_checked(tmp_path: Path, fuzz_inputs: Any) -> None:
    from cost_models.profile.tables import read_costs

    job = {"gpus": 4, "seq_len": 512, "global_batch": 8}
    plan = planner.load_plan(fuzz_inputs.plan_path)
    calls = [
        (lambda: planner.load_plan(3), "path must be the path of a plan file"),  # TypeError before
        (lambda: planner.save_plan(plan, None), "path must be the path of the plan file to write"),
        (lambda: planner.save_plan("plan", tmp_path / "p.yaml"), "plan must be a Plan"),
        (lambda: read_costs(3.5), "costs must be the path of a cost table"),
        (lambda: planner.evaluate(fuzz_inputs.tiny, "h100-sxm", **job, runtime=planner.Runtime(grad_reduce_bytes=1.5)),
         "runtime.grad_reduce_bytes must be 2 (bf16) or 4 (fp32), got 1.5"),
        (lambda: planner.evaluate(fuzz_inputs.tiny, "h100-sxm", **job,
                                  runtime=planner.Runtime(overlap_grad_reduce="8")),  # type: ignore[arg-type]
         "runtime.overlap_grad_reduce must be True or False"),
        (lambda: planner.plan(fuzz_inputs.tiny, "h100-sxm", **job, runtime=planner.Runtime(measured=[8])),
         "runtime.measured must be a MeasuredCosts"),  # AttributeError before
        (lambda: planner.evaluate(fuzz_inputs.tiny, "h100-sxm", **job, runtime=planner.Runtime(attention="flash")),
         "runtime.attention must be an AttentionKernel"),
    ]
    for call, message in calls:
        with pytest.raises(InputError) as info:
            call()
        assert message in str(info.value), str(info.value)


def test_model_files_found_by_the_fuzzer(tmp_path: Path) -> None:
    deepseek = {"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
                "intermediate_size": 512, "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2,
                "moe_intermediate_size": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": "8",
                "v_head_dim": 16}
    cases = {
        "config.json": (deepseek, "head_dim must be an integer, got '8'"),  # TypeError in a sum before
        "dense.yaml": ({**TINY, "moe_groups": -1}, "moe_groups describe MoE layers, which a model without "
                                                   "moe_num_experts"),  # ignored before
    }
    for name, (data, message) in cases.items():
        args = ["evaluate", "--model", write(tmp_path, name, data), *JOB[2:]]
        assert message in assert_clean_failure(args, message)


# the seeded sample: benchmarks/fuzz.py's generators, a few hundred cases of every target

def test_seeded_sample_of_the_fuzz_benchmark(fuzz_inputs: Any) -> None:
    from fuzz import BAD_CLASSES, run_case

    results = [run_case(fuzz_inputs, runner, app, i) for i in range(300)]
    found = [r for r in results if r.outcome in BAD_CLASSES]
    assert not found, "\n".join(f"{r.outcome}: [{r.target}] {r.what} -> {r.detail}" for r in found)
    assert sum(r.outcome == "refused" for r in results) > 150
