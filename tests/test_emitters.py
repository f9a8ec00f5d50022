"""Launcher configs: golden files for three plans, and checks by the real consumer packages where they run
offline (megatron-core 0.16.1, torchtitan 0.2.2, deepspeed 0.19.8: the [validate] extra)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import warnings
from functools import cache
from pathlib import Path

import pytest
from launcher_support import deepspeed_config

from meshcore import Activation, ModelSpec, Runtime, Schedule, ZeroStage
from meshcore.errors import UnsupportedModelError
from planner import plan
from planner.outputs.emitters import CAPABILITIES, NEVER_SUBSTITUTED, Emitted, Target, UnsupportedPlanError, emit
from planner.outputs.emitters.megatron import arguments
from planner.outputs.emitters.titan_flavors import FLAVORS, Flavor, flavor_of
from planner.outputs.plan import Plan
from planner.outputs.planread import load_plan
from planner.search.space import SearchSpec

GOLDEN = Path(__file__).parent / "golden"
FLAGS = Path(__file__).resolve().parents[1] / "planner" / "outputs" / "emitters" / "megatron_flags.txt"


# the dense cases keep to Megatron's schedules, so that the Megatron-LM checks below see the plans themselves
MEGATRON_RUNS = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED_1F1B)


@cache
def cases() -> dict[str, Plan]:
    return {
        "llama3-8b_8xh100": plan("llama3-8b", "h100-sxm", gpus=8, seq_len=8192, global_batch=64,
                                 spec=SearchSpec(schedule_choices=MEGATRON_RUNS)),
        "llama3-70b_pp_vpp_cp": plan("llama3-70b", "h100-sxm", gpus=256, seq_len=32768, global_batch=64,
                                     spec=SearchSpec(tp=8, pp=4, cp=2, vpp=5, zero=1, top_k=1)),
        "llama3-405b_16384xh100": plan("llama3-405b", "h100-sxm", gpus=16384, seq_len=8192, global_batch=2048,
                                       spec=SearchSpec(schedule_choices=MEGATRON_RUNS)),
        "deepseek-v3_2048xh800": plan("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360,
                                      spec=SearchSpec(tp=1, pp=16, cp=1, ep=64, zero=1, mbs=1, top_k=1,
                                                      schedule=Schedule.ONE_F_ONE_B, partial_recompute=False)),
        "qwen3-30b-a3b_32xh100": plan("qwen3-30b-a3b", "h100-sxm", gpus=32, seq_len=4096, global_batch=256,
                                      spec=SearchSpec(tp=2, pp=2, ep=4, etp=2, zero=1, top_k=1,
                                                      schedule=Schedule.ONE_F_ONE_B, partial_recompute=False)),
    }


@cache
def emitted(case: str, target: Target) -> Emitted | UnsupportedPlanError:
    """emit() of a case, computed once per run (a fallback for MoE cases searches again, which takes seconds)."""
    try:
        return emit(cases()[case], target)
    except UnsupportedPlanError as exc:
        return exc


def emit_case(case: str, target: Target) -> Emitted:
    out = emitted(case, target)
    if isinstance(out, UnsupportedPlanError):
        raise out
    return out


CASES = ["llama3-8b_8xh100", "llama3-70b_pp_vpp_cp", "llama3-405b_16384xh100", "deepseek-v3_2048xh800",
         "qwen3-30b-a3b_32xh100"]


SUFFIX = {Target.MEGATRON: "sh", Target.TORCHTITAN: "toml", Target.TORCHTITAN_CLI: "args", Target.DEEPSPEED: "json",
          Target.NEMO: "txt"}


# action lists are checked by torch's own validator and runtime instead (below, tests/test_torch_pipelining.py)
PLANS = GOLDEN / "plans"


def golden_plan(case: str, target: Target) -> Plan:
    """The saved plan a golden file is emitted from (tests/golden/plans): the case's plan, or for a launcher that
    cannot run its layout the substitute the emitter chose when the file was saved. Its layout and figures are the
    file's, so no cost-model change moves a golden file; which layout the search picks is tested on `cases()`."""
    own = PLANS / f"{case}.{target.value}.yaml"
    return load_plan(own if own.exists() else PLANS / f"{case}.yaml")


def save_golden_plans(case: str, target: Target) -> None:
    """MESHPLAN_UPDATE_GOLDEN=plans: save the case's plan as searched now, and the substitute of `target` if its
    emitter substitutes one (e.g. after a change of the plan-file format)."""
    from planner.outputs.emitters import substitute
    from planner.outputs.planfile import dumps

    PLANS.mkdir(exist_ok=True)
    (PLANS / f"{case}.yaml").write_text(dumps(cases()[case], "plan.yaml"))
    own = PLANS / f"{case}.{target.value}.yaml"
    out = emitted(case, target)
    if isinstance(out, Emitted) and out.note is not None:
        own.write_text(dumps(substitute(cases()[case], target), "plan.yaml"))
    else:
        own.unlink(missing_ok=True)


# action lists are checked by torch's own validator and runtime instead (below, tests/test_torch_pipelining.py)
@pytest.mark.parametrize("target", [t for t in Target if t is not Target.TORCH_ACTIONS])
@pytest.mark.parametrize("case", CASES)
def test_golden(case: str, target: Target) -> None:
    """The configuration as the launcher reads it, of a saved plan (`golden_plan`) the launcher runs as it is
    (strict: no substitute searched), with the predicted figures in its comments masked (checked against the plan
    below). Regenerate with MESHPLAN_UPDATE_GOLDEN=1 after a deliberate change of an emitter, and review the diff."""
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN") == "plans":
        save_golden_plans(case, target)
    try:
        text = without_predictions(emit(golden_plan(case, target), target, strict=True).text)
    except UnsupportedPlanError as exc:  # the refusal is behaviour too
        text = without_predictions(f"UNSUPPORTED: {exc}\n")
    path = GOLDEN / f"{case}.{target.value}.{SUFFIX[target]}"
    if os.environ.get("MESHPLAN_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.name}: run with MESHPLAN_UPDATE_GOLDEN=1"
    assert text == path.read_text()


PREDICTED = re.compile(r"(predicted |MFU |the plan's |\()[-+]?\d+(\.\d+)?( s/step| %| s\)| % against)")


def without_predictions(text: str) -> str:
    """`text` with every predicted figure (step time, MFU, the substitute's difference) replaced by '#'."""
    return PREDICTED.sub(lambda m: f"{m.group(1)}#{m.group(3)}", text)


@pytest.mark.parametrize("case", CASES)
def test_headers_state_the_plans_own_prediction(case: str) -> None:
    """What the golden files mask: the header of an emitted file states the predicted step time and MFU of the
    layout it configures, as the plan (or the substitute's search) priced it."""
    p = cases()[case]
    out = emit_case(case, Target.MEGATRON)
    assert out.note is None
    pred = p.best.prediction
    assert f"predicted {pred.step_time_s:.3f} s/step, MFU {100 * pred.mfu:.1f} %" in out.text.splitlines()[1]
    for target in (Target.TORCHTITAN, Target.NEMO):
        try:
            sub = emit_case(case, target)
        except UnsupportedPlanError:
            continue
        if sub.note is not None:
            assert f"against the plan's {pred.step_time_s:.3f} s" in sub.note


def test_70b_case_exercises_pp_vpp_cp() -> None:
    lay = cases()["llama3-70b_pp_vpp_cp"].best.layout
    assert (lay.pp, lay.vpp, lay.cp) == (4, 5, 2)


def test_megatron_flags_are_known() -> None:
    known = {line.split()[0] for line in FLAGS.read_text().splitlines() if line.startswith("--")}
    for p in cases().values():
        used = {flag for flag, _ in arguments(p)}
        assert used <= known, used - known


def test_unsupported_is_named_and_strict_refuses() -> None:
    p = cases()["llama3-70b_pp_vpp_cp"]
    with pytest.raises(UnsupportedPlanError, match="DeepSpeed's config has no context parallelism .* nearest plan"):
        emit(p, Target.DEEPSPEED, strict=True)
    relaxed = emit(p, Target.DEEPSPEED)
    assert relaxed.note is not None and "the fastest layout it can run" in relaxed.note
    assert json.loads(relaxed.text)["train_batch_size"] == 64


def test_a_substitute_is_priced_as_its_launcher_runs_it() -> None:
    """The layout torchtitan runs in place of a Megatron-LM plan is searched and priced with torchtitan's execution
    profile (FSDP per block, fp32 shards), not the plan's runtime's: re-pricing it as the written plan file's
    runtime gives the figure its note states."""
    from cost_models.step import evaluate_layout
    from meshcore.framework import Framework
    from planner.inputs.runtimes import load_runtime
    from planner.outputs.emitters import substitute

    titan = load_runtime(Framework.TORCHTITAN).execution
    assert titan != load_runtime(Framework.MEGATRON).execution
    sub = substitute(cases()["qwen3-30b-a3b_32xh100"], Target.TORCHTITAN)
    assert sub.job.runtime.execution == titan
    again = evaluate_layout(sub.model, sub.cluster, sub.job, sub.best.layout)
    assert again.step_time_s == pytest.approx(sub.best.prediction.step_time_s, rel=1e-9)


def zero_written(target: Target, text: str) -> int:
    """The ZeRO stage a launcher file configures, read back from the file: DeepSpeed's zero_optimization.stage;
    NeMo's distributed optimizer (ZeRO-1) or plain DDP; torchtitan's FSDP2 resharding after forward (ZeRO-3),
    FSDP2 without it (ZeRO-2) or DDP (no fsdp_reshard_after_forward, ZeRO-0)."""
    if target is Target.DEEPSPEED:
        return int(json.loads(text)["zero_optimization"]["stage"])
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    if target is Target.NEMO:
        flags = {line.split("=", 1)[1] for line in lines if line.startswith("cfg.ddp.use_distributed_optimizer=")}
        assert len(flags) == 1, flags
        return {"true": 1, "false": 0}[flags.pop()]
    # `fsdp_reshard_after_forward = "never"` in the TOML's [parallelism], `--parallelism.fsdp_... "never"` on the CLI
    found = [m.group(1) for line in lines
             if (m := re.fullmatch(r'(?:--parallelism\.)?fsdp_reshard_after_forward(?: = | )"(\w+)"', line))]
    assert len(found) <= 1, found
    # "default" reshards after forward unless the model is pipelined (torchtitan's fsdp_reshard_after_forward): the
    # plans here that write it have pp 1
    return {None: 0, "never": 2, "always": 3, "default": 3}[found[0] if found else None]


def test_substitute_respects_capabilities() -> None:
    """Where a launcher cannot run the plan's layout, the file written is the substitute the note names, with a ZeRO
    stage the launcher has; otherwise the file configures the plan's own ZeRO stage."""
    from planner.inputs.runtimes import load_runtime
    from planner.outputs.emitters import FRAMEWORK

    substituted = 0
    for target in CAPABILITIES:
        if target in NEVER_SUBSTITUTED:  # an action list is the plan's own or nothing
            continue
        stages = load_runtime(FRAMEWORK[target]).capabilities.zero_stages
        for case in CASES:
            try:
                out = emit_case(case, target)
            except UnsupportedPlanError as exc:
                assert "no layout" in str(exc) and "can run fits this job" in str(exc)
                continue
            if target is Target.MEGATRON:  # every stage: the plan's own layout
                assert out.note is None
                continue
            written = zero_written(target, out.text)
            if out.note is None:
                assert written == int(cases()[case].best.layout.zero), (case, target)
                continue
            substituted += 1
            assert "predicted" in out.note and "%" in out.note
            if target is not Target.DEEPSPEED:  # a JSON file has no comment to carry it
                assert f"NOTE: {out.note}"[:80] in out.text, (case, target)
            noted = re.findall(r"written instead: .*?ZeRO-(\d)", out.note)
            assert noted and written == int(noted[0]) and written in stages, (case, target, out.note)
    assert substituted >= 3  # the cases exercise substitution (DeepSpeed and NeMo refuse some of them)


def _megatron_kwargs(p: Plan) -> tuple[dict, dict]:
    """Our Megatron arguments mapped onto TransformerConfig fields (model + parallel) and batch values."""
    args = {flag: value for flag, value in arguments(p)}
    lay, m = p.best.layout, p.model
    cfg = dict(num_layers=args["--num-layers"], hidden_size=args["--hidden-size"],
               ffn_hidden_size=args["--ffn-hidden-size"], num_attention_heads=args["--num-attention-heads"],
               num_query_groups=args.get("--num-query-groups"), kv_channels=args.get("--kv-channels"),
               tensor_model_parallel_size=args["--tensor-model-parallel-size"],
               pipeline_model_parallel_size=args["--pipeline-model-parallel-size"],
               context_parallel_size=args["--context-parallel-size"],
               sequence_parallel="--sequence-parallel" in args, gated_linear_unit="--swiglu" in args,
               bf16=True, pipeline_dtype=__import__("torch").bfloat16)
    if "--num-layers-per-virtual-pipeline-stage" in args:
        per_stage = args["--num-layers-per-virtual-pipeline-stage"]
        cfg["virtual_pipeline_model_parallel_size"] = m.num_layers // (lay.pp * per_stage)
    if "--decoder-first-pipeline-num-layers" in args:
        cfg["num_layers_in_first_pipeline_stage"] = args["--decoder-first-pipeline-num-layers"]
        cfg["num_layers_in_last_pipeline_stage"] = args["--decoder-last-pipeline-num-layers"]
    if "--pipeline-model-parallel-layout" in args:
        cfg["pipeline_model_parallel_layout"] = args["--pipeline-model-parallel-layout"]
    if "--recompute-granularity" in args:
        cfg["recompute_granularity"] = args["--recompute-granularity"]
        if "--recompute-modules" in args:
            cfg["recompute_modules"] = list(args["--recompute-modules"])
        if args["--recompute-granularity"] == "full":
            cfg["recompute_method"] = args["--recompute-method"]
            cfg["recompute_num_layers"] = args["--recompute-num-layers"]
    moe_fields = {"--num-experts": "num_moe_experts", "--moe-router-topk": "moe_router_topk",
                  "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
                  "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
                  "--expert-model-parallel-size": "expert_model_parallel_size",
                  "--expert-tensor-parallel-size": "expert_tensor_parallel_size", "--mtp-num-layers": "mtp_num_layers",
                  "--q-lora-rank": "q_lora_rank", "--kv-lora-rank": "kv_lora_rank", "--qk-head-dim": "qk_head_dim",
                  "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim", "--v-head-dim": "v_head_dim",
                  "--moe-token-dispatcher-type": "moe_token_dispatcher_type",
                  "--moe-router-score-function": "moe_router_score_function",
                  "--moe-router-num-groups": "moe_router_num_groups",
                  "--moe-router-group-topk": "moe_router_group_topk",
                  "--moe-flex-dispatcher-backend": "moe_flex_dispatcher_backend"}
    cfg.update({field: args[flag] for flag, field in moe_fields.items() if flag in args})
    switches = {"--moe-grouped-gemm": "moe_grouped_gemm", "--moe-router-pre-softmax": "moe_router_pre_softmax",
                "--moe-router-enable-expert-bias": "moe_router_enable_expert_bias", "--qk-layernorm": "qk_layernorm",
                "--multi-latent-attention": "multi_latent_attention"}
    cfg.update({field: True for flag, field in switches.items() if flag in args})
    cfg["add_bias_linear"] = "--disable-bias-linear" not in args
    cfg["add_qkv_bias"] = "--add-qkv-bias" in args
    if "--window-size" in args:
        cfg["window_size"] = tuple(int(x) for x in args["--window-size"].split(","))
        cfg["window_attn_skip_freq"] = args.get("--window-attn-skip-freq")
    if "--norm-epsilon" in args:
        cfg["layernorm_epsilon"] = args["--norm-epsilon"]
    if "--moe-layer-freq" in args:  # the list expression Megatron evaluates
        cfg["moe_layer_freq"] = eval(args["--moe-layer-freq"], {"__builtins__": {}})  # noqa: S307
        assert cfg["moe_layer_freq"] == [int(k) for k in m.moe_layers()]
    batch = dict(gbs=args["--global-batch-size"], mbs=args["--micro-batch-size"], dp=lay.dp * 1)
    return cfg, batch


@pytest.mark.parametrize("case", CASES)
def test_megatron_core_accepts(case: str) -> None:
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from megatron.core.num_microbatches_calculator import (
        destroy_num_microbatches_calculator,
        init_num_microbatches_calculator,
    )
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    p = cases()[case]
    cfg, batch = _megatron_kwargs(p)
    layout = cfg.get("pipeline_model_parallel_layout")
    if layout is not None:
        parsed = PipelineParallelLayerLayout(layout, p.best.layout.pp)
        parsed.validate_layer_layout(p.model.num_layers, p.model.mtp_layers or None)
        chunks = [sum(1 for x in stage if x.name == "decoder") for vpp in zip(*parsed.layout, strict=True)
                  for stage in vpp]
        assert tuple(chunks) == p.best.layout.chunk_layers(p.model.num_layers)
    config_class = TransformerConfig
    if cfg.pop("multi_latent_attention", False):
        from megatron.core.transformer.transformer_config import MLATransformerConfig as config_class
    config_class(**{k: v for k, v in cfg.items() if v is not None})
    init_num_microbatches_calculator(0, None, batch["gbs"], batch["mbs"], batch["dp"], False)
    destroy_num_microbatches_calculator()


@pytest.mark.parametrize("case", CASES)
def test_torchtitan_accepts(tmp_path: Path, case: str) -> None:
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims

    p = cases()[case]
    path = tmp_path / "job.toml"
    out = emit_case(case, Target.TORCHTITAN)
    path.write_text(out.text)
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    par = job.parallelism
    dims = ParallelDims(par.data_parallel_replicate_degree, par.data_parallel_shard_degree,
                        par.context_parallel_degree, par.tensor_parallel_degree, par.pipeline_parallel_degree,
                        par.expert_parallel_degree, par.expert_tensor_parallel_degree, p.cluster.num_gpus)
    if p.model.moe is not None and out.note is None:
        assert (par.expert_parallel_degree, par.expert_tensor_parallel_degree) == (p.best.layout.ep, p.best.layout.etp)
    assert dims.world_size == p.cluster.num_gpus
    assert job.training.global_batch_size == p.job.global_batch and job.training.seq_len == p.job.seq_len
    if par.pipeline_parallel_degree > 1:
        parts = par.module_fqns_per_model_part
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
        assert sum(len([n for n in part if n.startswith("layers.")]) for part in parts) == p.model.num_layers


@pytest.mark.parametrize("case", CASES)
def test_torchtitan_cli_names_exist_in_job_config(case: str) -> None:
    """The 0.3.x override keys are checked against 0.2.2's dataclasses (0.3.x itself needs a newer torch)."""
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    from torchtitan.config.job_config import JobConfig

    text = emit_case(case, Target.TORCHTITAN_CLI).text
    sections = {f.name: f.type for f in dataclasses.fields(JobConfig)}
    for line in text.splitlines():
        if not line.startswith("--") or line.startswith(("--module", "--config")):
            continue
        section, key = shlex.split(line)[0][2:].split(".")
        cls = JobConfig.__dataclass_fields__[section].default_factory  # type: ignore[misc]
        assert section in sections and key in {f.name for f in dataclasses.fields(cls)}, line


@pytest.mark.parametrize("case", CASES)
def test_deepspeed_accepts(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    try:
        out = emit_case(case, Target.DEEPSPEED)
    except UnsupportedPlanError as exc:
        pytest.skip(f"DeepSpeed cannot run this job at all: {exc}")
    cfg = json.loads(out.text)
    lay = cases()[case].best.layout if out.note is None else None
    dp = cfg["train_batch_size"] // (cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"])

    ds = deepspeed_config(cfg, monkeypatch, dp)
    assert ds.train_batch_size == cfg["train_batch_size"] == cases()[case].job.global_batch
    assert ds.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    if lay is not None:
        assert dp == lay.dp


@pytest.mark.parametrize("case", CASES)
def test_nemo_names_are_megatron_core_fields(case: str) -> None:
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    model_fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    for line in emit_case(case, Target.NEMO).text.splitlines():
        key = line.split("=")[0]
        if key.startswith(("cfg.model.", "trainer.strategy.", "model.config.")) and not key.endswith("seq_length"):
            assert key.rsplit(".", 1)[1] in model_fields, key
        if key.startswith("cfg.ddp."):
            assert key.rsplit(".", 1)[1] in ddp_fields, key


def test_wave_plans_for_torchtitan_and_the_action_list(tmp_path: Path) -> None:
    """A one-wave plan goes to torchtitan as ZBVZeroBubble's V placement plus the action list torch's runtime
    reads (torchtitan's config parser takes both); the action list is the plan's own op order, whose stage
    placement torch's validator infers as the wave's. Two waves are refused by name and substituted; Megatron-LM
    has no wave; an action list is never substituted."""
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from torch.distributed.pipelining import schedules
    from torchtitan.config import ConfigManager

    from planner.outputs.emitters.torchtitan import ACTIONS_FILE

    one = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework="any"),
               spec=SearchSpec(pp=4, vpp=2, zero=2, schedule=Schedule.WAVE, top_k=1))
    lay = one.best.layout
    assert lay.schedule is Schedule.WAVE and lay.vpp == 2
    toml = emit(one, Target.TORCHTITAN, strict=True)
    (tmp_path / "job.toml").write_text(toml.text)
    par = ConfigManager().parse_args(["--job.config_file", str(tmp_path / "job.toml")]).parallelism
    assert (par.pipeline_parallel_schedule, par.pipeline_parallel_schedule_csv) == ("ZBVZeroBubble", ACTIONS_FILE)
    rows = emit(one, Target.TORCH_ACTIONS).text.splitlines()
    actions = {rank: [schedules._Action.from_str(cell) for cell in row.split(",")] for rank, row in enumerate(rows)}
    m = one.best.prediction.num_microbatches
    mapping = schedules._validate_schedule(actions, lay.pp, lay.pp * lay.vpp, m)
    assert all(mapping[c] == lay.chunk_rank(c) for c in range(lay.pp * lay.vpp))
    lowered = schedules._add_send_recv(actions, stage_to_rank=lambda s: mapping[s], num_stages=lay.pp * lay.vpp)
    schedules._simulate_comms_compute(lowered, lambda s: mapping[s], lay.pp * lay.vpp)

    two = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework="any"),
               spec=SearchSpec(pp=4, vpp=4, zero=2, schedule=Schedule.WAVE, top_k=1))
    with pytest.raises(UnsupportedPlanError, match="cannot place a wave of vpp 4"):
        emit(two, Target.TORCHTITAN, strict=True)
    relaxed = emit(two, Target.TORCHTITAN)
    assert relaxed.note is not None and "the fastest layout it can run" in relaxed.note
    with pytest.raises(UnsupportedPlanError, match="Megatron-LM has no wave schedule"):
        emit(one, Target.MEGATRON, strict=True)
    flat = plan("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=16, spec=SearchSpec(pp=1, top_k=1))
    with pytest.raises(UnsupportedPlanError, match="no pipeline"):
        emit(flat, Target.TORCH_ACTIONS)


def test_planning_for_torchtitan_keeps_to_one_wave() -> None:
    """`--launcher torchtitan` may plan the wave, but only the one wave torchtitan can place (vpp 2)."""
    from planner.outputs.emitters import for_launcher

    spec = for_launcher(SearchSpec(pp=4, zero=2, schedule=Schedule.WAVE, top_k=5), Target.TORCHTITAN)
    result = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, spec=spec,
                  runtime=Runtime(framework="torchtitan"))
    ranked = (result.best, *result.alternatives)
    assert {r.layout.schedule for r in ranked} == {Schedule.WAVE} and {r.layout.vpp for r in ranked} == {2}
    free = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, runtime=Runtime(framework="any"),
                spec=SearchSpec(pp=4, zero=2, schedule=Schedule.WAVE, top_k=5))
    assert 4 in {r.layout.vpp for r in (free.best, *free.alternatives)}


def _with_modules(modules: str, dtype: str = "bf16") -> Plan:
    """The DeepSeek-V3 golden case's plan with selective recomputation of `modules` (a pin)."""
    from meshcore import Recompute, RecomputeModule

    return plan("deepseek-v3", "h800", gpus=2048, seq_len=4096, global_batch=15360, dtype=dtype,
                spec=SearchSpec(tp=1, pp=16, cp=1, ep=64, zero=1, mbs=1, top_k=1, schedule=Schedule.ONE_F_ONE_B,
                                partial_recompute=False, recompute=Recompute.SELECTIVE,
                                recompute_modules=RecomputeModule.parse(modules)))


def test_recompute_modules_are_emitted_where_launchers_take_them() -> None:
    """Megatron gets the modules as separate words (and a current-scaling FP8 recipe, which megatron-core needs for
    layernorm and moe_act under FP8); NeMo/Megatron-Bridge the recompute_modules list; torchtitan and DeepSpeed
    refuse by name."""
    p = _with_modules("layernorm,mla_up_proj")
    args = dict(arguments(p))
    assert args["--recompute-granularity"] == "selective"
    assert args["--recompute-modules"] == ("layernorm", "mla_up_proj")
    assert "  --recompute-modules layernorm mla_up_proj\n" in emit(p, Target.MEGATRON, strict=True).text
    assert "--fp8-recipe" not in args
    assert 'cfg.model.recompute_modules=["layernorm","mla_up_proj"]' in emit(p, Target.NEMO, strict=True).text
    def variant(**changes: object) -> Plan:  # past the launchers' earlier refusals (ZeRO-1; EP, pipeline split)
        return dataclasses.replace(p, best=dataclasses.replace(p.best, layout=dataclasses.replace(p.best.layout,
                                                                                                  **changes)))

    for target, q in ((Target.TORCHTITAN, variant(zero=ZeroStage.GRADIENTS)),
                      (Target.DEEPSPEED, variant(ep=1, pp=1, stage_layers=None))):
        with pytest.raises(UnsupportedPlanError, match="layernorm, mla_up_proj"):
            emit(q, target, strict=True)
    fp8 = dict(arguments(_with_modules("layernorm,mla_up_proj,moe_act", "fp8")))
    assert fp8["--fp8-recipe"] == "blockwise" and fp8["--recompute-modules"] == ("moe_act", "layernorm", "mla_up_proj")


def test_megatron_core_accepts_recompute_modules() -> None:
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from megatron.core.transformer.transformer_config import MLATransformerConfig

    cfg, _ = _megatron_kwargs(_with_modules("layernorm,mla_up_proj,moe_act"))
    cfg.pop("multi_latent_attention", None)
    config = MLATransformerConfig(**{k: v for k, v in cfg.items() if v is not None})
    assert set(config.recompute_modules) == {"layernorm", "mla_up_proj", "moe_act"}


PRESET_FLAVORS = {"llama3-8b": "llama3 8B", "llama3-70b": "llama3 70B", "llama3-405b": "llama3 405B",
                  "qwen3-30b-a3b": "qwen3 30B-A3B", "qwen3-235b-a22b": "qwen3 235B-A22B",
                  "deepseek-v3": "deepseek_v3 671B"}


@pytest.mark.parametrize("flavor", FLAVORS, ids=lambda f: f.label)
def test_flavors_are_what_torchtitan_builds(flavor: Flavor) -> None:
    """Each flavor's dimensions, as meshplan writes them down, against torchtitan 0.2.2's own model arguments,
    and the model torchtitan builds from them (on the meta device) against meshplan's parameter count."""
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    import torch
    from torchtitan.protocols.train_spec import get_train_spec

    from cost_models.compute.flops import total_params

    train_spec = get_train_spec(flavor.module)
    args = dataclasses.replace(train_spec.model_args[flavor.flavor])
    spec = flavor.spec
    assert (args.dim, args.n_layers, args.n_heads, args.vocab_size) == (
        spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.vocab_size)
    if spec.mla is None:
        assert args.n_kv_heads == spec.num_kv_heads
    if spec.moe is not None:
        assert (args.moe_args.num_experts, args.moe_args.top_k) == (spec.moe.num_experts, spec.moe.top_k)
    args.moe_impl = "standard"  # deepseek_v3 reads it from the job config (update_from_config) before building
    with torch.device("meta"):
        built = train_spec.model_cls(args)
    assert sum(p.numel() for p in built.parameters()) == total_params(spec)


@pytest.mark.parametrize("preset", PRESET_FLAVORS)
def test_presets_map_to_their_flavors_by_architecture(preset: str) -> None:
    """A preset maps to its flavor, under its own name or any other; the same name with other dimensions does not."""
    from planner import load_model

    model = load_model(preset)
    assert flavor_of(model).label == PRESET_FLAVORS[preset]
    assert flavor_of(dataclasses.replace(model, name="my-model")).label == PRESET_FLAVORS[preset]
    deeper = dataclasses.replace(model, num_layers=model.num_layers + 2)
    with pytest.raises(UnsupportedModelError, match=rf"'{preset}'.*num_layers {model.num_layers + 2} != "
                                                    rf"{model.num_layers}"):
        flavor_of(deeper)


def _with_model(p: Plan, model: ModelSpec) -> Plan:
    return dataclasses.replace(p, model=model)


@pytest.mark.parametrize("target", [Target.TORCHTITAN, Target.TORCHTITAN_CLI])
def test_torchtitan_refuses_models_it_has_no_flavor_for(target: Target) -> None:
    """Mistral-7B is Llama-3-8B with a 32000-token vocabulary: no torchtitan flavor builds it, and its TOML cannot say
    so. Before, it was written as `flavor = "mistral-7b"` of llama3. Now the refusal is one line naming the model,
    the nearest flavor and what differs, and what torchtitan builds; strict or not (no layout would help)."""
    from planner import load_model

    p = _with_model(cases()["llama3-8b_8xh100"], load_model("mistral-7b"))
    for strict in (True, False):
        with pytest.raises(UnsupportedModelError) as err:
            emit(p, target, strict=strict)
        message = str(err.value)
        assert "'mistral-7b'" in message and "llama3 8B" in message and "vocab_size 32000 != 128256" in message
        assert "llama3 8B, 70B, 405B; qwen3 30B-A3B, 235B-A22B; deepseek_v3 671B" in message and "\n" not in message


def test_torchtitan_cli_refuses_a_flavor_without_a_0_3_config() -> None:
    """torchtitan 0.3.0 registers no qwen3_235b_a22b config (0.2.2 has the flavor, so the TOML target writes it)."""
    from planner import load_model

    model = load_model("qwen3-235b-a22b")
    assert flavor_of(model).config is None
    with pytest.raises(UnsupportedModelError, match="torchtitan 0.3.0 has no config for qwen3 235B-A22B"):
        emit(_with_model(cases()["qwen3-30b-a3b_32xh100"], model), Target.TORCHTITAN_CLI)


def test_torchtitan_says_what_deepseek_v3_trains_without() -> None:
    """DeepSeek-V3's multi-token-prediction layer has no module in torchtitan's 671B flavor: the job is written, and
    says so."""
    for target in (Target.TORCHTITAN, Target.TORCHTITAN_CLI):
        text = emit_case("deepseek-v3_2048xh800", target).text
        assert "# note: deepseek-v3 has 1 multi-token-prediction layer, which torchtitan's deepseek_v3 671B flavor " \
               "does not build" in text
    assert "multi-token" not in emit_case("llama3-70b_pp_vpp_cp", Target.TORCHTITAN).text


def test_cli_emit_refuses_an_unknown_model_for_torchtitan(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app
    from planner import save_plan

    path = tmp_path / "mistral.yaml"
    save_plan(plan("mistral-7b", "h100-sxm", gpus=8, seq_len=4096, global_batch=16,
                   spec=SearchSpec(tp=1, pp=1, zero=2, top_k=1)), path)
    res = CliRunner().invoke(app, ["emit", str(path), "--to", "torchtitan"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.output.startswith("error: torchtitan has no model definition for 'mistral-7b'")
    assert CliRunner().invoke(app, ["emit", str(path), "--to", "megatron"]).exit_code == 0


def test_planning_for_torchtitan_leaves_out_ddp_beside_other_dimensions() -> None:
    """torchtitan 0.2.2 runs DDP only as the sole parallelism: its capability keeps ZeRO-0 with dp > 1 to layouts
    without tp, pp or cp, while a search without it does rank such layouts for this job."""
    import planner
    from meshcore import ZeroStage
    from planner.outputs.emitters import for_launcher
    from planner.search.space import SearchSpec

    def ddp_beside(p: planner.Plan) -> list[bool]:
        return [r.layout.zero is ZeroStage.NONE and r.layout.dp > 1 and r.layout.tp * r.layout.pp * r.layout.cp > 1
                for r in (p.best, *p.alternatives)]

    job = dict(gpus=64, seq_len=4096, global_batch=128)
    free = planner.plan("llama3-70b", "h100-sxm", spec=SearchSpec(top_k=40, zero_choices=(0, 2, 3)), **job)
    titan = planner.plan("llama3-70b", "h100-sxm", spec=for_launcher(SearchSpec(top_k=40), Target.TORCHTITAN),
                         runtime=planner.Runtime(framework="torchtitan"), **job)
    assert any(ddp_beside(free)) and not any(ddp_beside(titan))


def test_the_mlp_activation_reaches_the_launchers() -> None:
    """Megatron-LM gets --swiglu or --squared-relu (GELU is its default) and refuses GeGLU, which its command line
    cannot state; torchtitan's flavors are SwiGLU, so a squared-ReLU model matches none and says what differs."""
    from planner.inputs.loaders import model_from_mapping

    dims = dict(num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8, vocab_size=32000,
                tied_embeddings=False)
    one = SearchSpec(pp=1)  # a layout Megatron-LM runs
    for activation, gated, flag in (("squared_relu", False, "--squared-relu"), ("gelu", False, None),
                                    ("swiglu", True, "--swiglu")):
        model = model_from_mapping({**dims, "name": f"m-{activation}", "gated_mlp": gated, "activation": activation},
                                   "test")
        used = {f for f, _ in arguments(plan(model, "h100-sxm", gpus=8, seq_len=2048, global_batch=16, spec=one))}
        assert {"--squared-relu", "--swiglu"} & used == ({flag} if flag else set()), activation
    geglu = model_from_mapping({**dims, "name": "m-geglu", "gated_mlp": True, "activation": "geglu"}, "test")
    with pytest.raises(UnsupportedModelError, match="GeGLU"):
        arguments(plan(geglu, "h100-sxm", gpus=8, seq_len=2048, global_batch=16, spec=one))
    llama = cases()["llama3-8b_8xh100"].model
    relu2 = dataclasses.replace(llama, gated_mlp=False, activation=Activation.SQUARED_RELU)
    with pytest.raises(UnsupportedModelError, match="activation"):
        flavor_of(relu2)
