"""Plan files: round trip, determinism, validation errors, atomic writes; the plan command line."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from meshcore import Runtime
from planner import InputError, load_plan, plan, save_plan
from planner.outputs.planfile import plan_to_dict

runner = CliRunner()
# the research space: its best layout pipelines (ZB-V) and its alternatives split unevenly, which the edits need
ARGS = dict(gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework="any"))


@pytest.fixture(scope="module")
def small_plan():  # type: ignore[no-untyped-def]
    return plan("llama3-8b", "h100-sxm", **ARGS)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path: Path, small_plan, suffix: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"plan{suffix}"
    save_plan(small_plan, path)
    loaded = load_plan(path)
    assert loaded.best.layout == small_plan.best.layout
    assert loaded.best.prediction.step_time_s == pytest.approx(small_plan.best.prediction.step_time_s, rel=1e-12)
    assert loaded.certificate is not None and loaded.certificate.candidates == small_plan.certificate.candidates
    # the alternatives come back as they were ranked: their own splits, their own figures
    assert [r.layout for r in loaded.alternatives] == [r.layout for r in small_plan.alternatives]
    assert [r.step_time_s for r in loaded.alternatives] == [r.step_time_s for r in small_plan.alternatives]
    assert loaded.best.prediction == small_plan.best.prediction
    if suffix == ".json":
        json.loads(path.read_text())


def test_same_inputs_same_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    save_plan(plan("llama3-8b", "h100-sxm", **ARGS), a)
    save_plan(plan("llama3-8b", "h100-sxm", **ARGS), b)
    assert a.read_bytes() == b.read_bytes()
    assert yaml.safe_load(a.read_text())["search"]["solve_time_s"] is None


def _broken(tmp_path: Path, small_plan, edit) -> Path:  # type: ignore[no-untyped-def]
    data = plan_to_dict(small_plan)
    edit(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(extra=1), "Additional properties are not allowed ('extra' was unexpected)"),
    (lambda d: d["parallelism"].pop("tp"), "parallelism: 'tp' is a required property"),
    (lambda d: d["parallelism"].update(tp="8"), "parallelism.tp: '8' is not of type 'integer'"),
    (lambda d: d["parallelism"].update(dp=d["parallelism"]["dp"] * 2), "world size 16 != tp"),
    (lambda d: d["batching"].update(num_microbatches=3), "batching does not match"),
    (lambda d: d["parallelism"].update(layers_per_chunk=[1] * len(d["parallelism"]["layers_per_chunk"])),
     "stage_layers sum to"),
    (lambda d: d.update(schema_version=2), "schema_version: 1 was expected"),
    # integers, not floats that happen to be whole (JSON Schema's "integer" alone takes 2.0)
    (lambda d: d["parallelism"].update(tp=float(d["parallelism"]["tp"])), "parallelism.tp: 1.0 is not of type "
                                                                          "'integer'"),
    (lambda d: d["alternatives"][0]["layout"].update(dp=float(d["alternatives"][0]["layout"]["dp"])),
     "alternatives.0.layout.dp: "),
    (lambda d: d["batching"].update(micro_batch_size=2.0), "batching.micro_batch_size: 2.0 is not of type"),
    # one full-recompute count per pp rank, saying what the granularity recomputes
    (lambda d: d["recompute"].update(full_layers_per_stage=d["recompute"]["full_layers_per_stage"][:-1]),
     "needs one count per pp rank"),
    (lambda d: d["recompute"].update(granularity="full"), "does not match recompute full over layers per rank"),
    # the split, the stages listed and each alternative's own split agree
    (lambda d: d["parallelism"].update(layers_per_chunk=_moved(d["parallelism"]["layers_per_chunk"])),
     "but parallelism.layers_per_chunk"),
    (lambda d: d["alternatives"][0]["layout"].update(layers_per_chunk=[1, 31]),
     "alternatives[0] (alternative 2): stage_layers needs"),
    (lambda d: d["alternatives"][1]["layout"].update(tp=4), "alternatives[1] (alternative 3): world size 16 != tp 4"),
])
def test_invalid_plans_are_named(tmp_path: Path, small_plan, edit, message: str) -> None:  # type: ignore[no-untyped-def]
    path = _broken(tmp_path, small_plan, edit)
    with pytest.raises(InputError) as err:
        load_plan(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def _moved(chunks: list[int]) -> list[int]:
    """The same number of layers, one moved from the first chunk to the last."""
    return [chunks[0] - 1, *chunks[1:-1], chunks[-1] + 1]


def test_fixture_shapes(small_plan) -> None:  # type: ignore[no-untyped-def]
    """What the edits above assume of the plan: a best layout of two or more model chunks (one layer can move)
    that does not recompute fully, and a first alternative of other than two chunks."""
    lay = small_plan.best.layout
    assert lay.pp * lay.vpp >= 2 and lay.recompute.value != "full"
    assert small_plan.alternatives[0].layout.pp * small_plan.alternatives[0].layout.vpp != 2


def test_alternative_that_breaks_a_rule_is_named(tmp_path: Path) -> None:
    """An alternative edited to pp 16 with two chunks per rank on a 28-layer model (32 chunks): this raised
    ZeroDivisionError when the alternative was priced; now the alternative and the rule are named."""
    data = plan_to_dict(plan("qwen2.5-7b", "h100-sxm", **ARGS))
    alt = data["alternatives"][0]["layout"]
    alt.update(tp=1, pp=16, dp=1, cp=1, vpp=2, mbs=1, sp=False, schedule="zb-v")
    alt.pop("layers_per_chunk")  # as an older file, which stored no split: the even split, 28 layers in 32 chunks
    path = tmp_path / "alt.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError, match=r"alternatives\[0\] \(alternative 2\): layers 28 < pp 16 \* vpp 2 = 32 "
                                         r"model chunks"):
        load_plan(path)


def test_load_keeps_what_the_file_says(tmp_path: Path, small_plan, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """A plan priced by another cost model (here: its stored step time edited) loads as the file says, with a
    warning naming both step times; re-priced on request, with the same warning."""
    data = plan_to_dict(small_plan)
    now = small_plan.best.prediction.step_time_s
    data["prediction"]["step_time_s"] = 2 * now
    data["prediction"]["breakdown"]["compute"] += now
    data["alternatives"][0]["tokens_per_s"] = 1.0
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        kept = load_plan(path)
    assert kept.best.prediction.step_time_s == 2 * now and kept.best.prediction.breakdown.compute_s == pytest.approx(
        small_plan.best.prediction.breakdown.compute_s + now, rel=1e-12)
    assert kept.alternatives[0].prediction.tokens_per_s == 1.0
    assert kept.best.simulated_step_time_s == small_plan.best.simulated_step_time_s
    [record] = caplog.records
    assert f"best layout: step time stored {2 * now:.6g} s, re-priced {now:.6g} s (-50.00 %)" in record.getMessage()
    assert "showing the stored figures" in record.getMessage() and "alternative" not in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        fresh = load_plan(path, reprice=True)
    assert fresh.best.prediction == small_plan.best.prediction
    assert fresh.alternatives[0].prediction.tokens_per_s == small_plan.alternatives[0].prediction.tokens_per_s
    [record] = caplog.records
    assert f"stored {2 * now:.6g} s, re-priced {now:.6g} s" in record.getMessage()
    assert "showing the re-priced figures" in record.getMessage()
    caplog.clear()
    save_plan(small_plan, path)
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        load_plan(path)
    assert caplog.records == []  # a file this model wrote re-prices to itself: nothing to say


def test_older_file_without_alternative_splits(tmp_path: Path, small_plan, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """Files written before alternatives stored their split load with the even split, and where that prices
    differently from what the file stored (the searched split), the warning names the alternative."""
    data = plan_to_dict(small_plan)
    for alt in data["alternatives"]:
        del alt["layout"]["layers_per_chunk"]
    path = tmp_path / "older.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        loaded = load_plan(path)
    uneven = [i for i, r in enumerate(small_plan.alternatives)
              if r.layout.stage_layers != dataclasses.replace(r.layout, stage_layers=None).chunk_layers(32)]
    assert uneven  # the search split some alternative unevenly (pipeline ends carry the embedding and head)
    for r, old in zip(loaded.alternatives, small_plan.alternatives, strict=True):
        assert r.layout == dataclasses.replace(old.layout, stage_layers=None)
        assert r.step_time_s == old.step_time_s  # the stored figure, not the even split's
    [record] = caplog.records
    for i in uneven:
        assert f"alternative {i + 2}: step time stored {small_plan.alternatives[i].prediction.step_time_s:.6g} s" \
            in record.getMessage()


def test_write_is_atomic(tmp_path: Path, small_plan, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plan.yaml"
    path.write_text("previous plan\n")

    def fail(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(InputError, match="cannot write"):
        save_plan(small_plan, path)
    assert path.read_text() == "previous plan\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.yaml"]


def test_missing_folder(tmp_path: Path, small_plan) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="cannot write"):
        save_plan(small_plan, tmp_path / "nope" / "plan.yaml")


PLAN = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "16", "--seq-len", "4096",
        "--global-batch", "64"]


def test_cli_plan_table_and_file(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, [*PLAN, "--top-k", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "optimal within the modelled space" in res.output and "plan written to" in res.output
    assert sum(1 for line in res.output.splitlines() if line.strip()[:2] in ("1 ", "2 ", "3 ")) >= 3
    again = runner.invoke(app, ["evaluate", "--plan", str(out), "--json"])
    assert again.exit_code == 0
    saved = yaml.safe_load(out.read_text())
    assert json.loads(again.output)["step_time_s"] == pytest.approx(saved["prediction"]["step_time_s"])


def test_cli_plan_json_and_pins() -> None:
    res = runner.invoke(app, [*PLAN, "--json", "--tp", "4", "--no-cp", "--zero", "1"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["parallelism"]["tp"] == 4 and data["parallelism"]["cp"] == 1 and data["parallelism"]["zero_stage"] == 1


def test_cli_evaluate_plan_on_other_hardware(tmp_path: Path) -> None:
    out = tmp_path / "p.yaml"
    assert runner.invoke(app, [*PLAN, "--out", str(out)]).exit_code == 0
    h100 = json.loads(runner.invoke(app, ["evaluate", "--plan", str(out), "--json"]).output)
    a100 = json.loads(runner.invoke(app, ["evaluate", "--plan", str(out), "--hardware", "a100-80gb", "--json"]).output)
    assert a100["hardware"] == "a100-80gb" and a100["step_time_s"] > h100["step_time_s"]


def test_cli_evaluate_plan_applies_overrides_to_its_own_profile(tmp_path: Path) -> None:
    """--memory-gib / --inter-node-gbps without --hardware change the plan's embedded profile."""
    out = tmp_path / "p.yaml"
    assert runner.invoke(app, [*PLAN, "--out", str(out)]).exit_code == 0
    base = json.loads(runner.invoke(app, ["evaluate", "--plan", str(out), "--json"]).output)
    res = runner.invoke(app, ["evaluate", "--plan", str(out), "--memory-gib", "8", "--inter-node-gbps", "25",
                              "--json"])
    small = json.loads(res.output)
    assert small["memory_capacity_gib"] == 8 and base["memory_capacity_gib"] != 8
    assert small["step_time_s"] >= base["step_time_s"]


def test_cli_fits_nowhere_exit_3() -> None:
    res = runner.invoke(app, ["plan", "--model", "llama3-405b", "--hardware", "rtx4090", "--gpus", "8", "--seq-len",
                              "8192", "--global-batch", "64"])
    assert res.exit_code == 3 and "no layout fits" in res.output and "Traceback" not in res.output


def test_cli_bad_plan_file(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("schema_version: 1\n")
    res = runner.invoke(app, ["evaluate", "--plan", str(path)])
    assert res.exit_code == 2 and "is a required property" in res.output
