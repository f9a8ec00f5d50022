"""Plans that train: configs meshplan emits, run by the launchers' own trainers on CPU processes over gloo.

- torchtitan 0.2.2: its Trainer (what `torchrun -m torchtitan.train` runs) from the emitted TOML, unchanged but
  for the run's length, learning rate, logging and the shared starting weights, for fifteen layouts of a tiny
  Llama-style model; after each of STEPS steps the loss and the gradient norm match the unpipelined one-process
  run from the same seed checkpoint (tolerances below).
- DeepSpeed 0.19.8 (DS_ACCELERATOR=cpu): deepspeed.initialize with the emitted JSON for ZeRO 1, 2 and 3, and its
  pipeline engine with the emitted stage count and partition, against the same training in plain torch.
- megatron-core 0.16.1: parallel_state.initialize_model_parallel with the degrees the emitted Megatron-LM
  arguments give, on four processes: group sizes and members are the plan's placement.

The machine shims (CPU device, gloo-only collectives, synthetic tokens, the tiny flavor) are in
tests/launcher_support.py, each with the reason it is machine-only. Marked slow (three minutes on 2 cores);
pyproject's addopts do not deselect it, so `python -m pytest` runs it.
"""

from __future__ import annotations

import json
import shlex
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import launcher_support as support
import pytest

from meshcore import ModelSpec, Recompute, Runtime, Schedule
from planner import plan
from planner.outputs.emitters import Target, emit
from planner.outputs.plan import Plan
from planner.search.space import SearchSpec

pytestmark = pytest.mark.slow
pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[validate]')")

HARDWARE, SEQ_LEN, GLOBAL_BATCH = "h100-sxm", 64, 8  # the plans' job: 8 sequences of 64 tokens a step
STEPS = 5
# Run parameters, not layout: torchtitan's defaults (lr 8e-4 after 200 warm-up steps) would leave the loss
# where it starts for 5 steps; at 1e-2 after one warm-up step it falls by about 0.15 (2.5 %, 25 LOSS_RTOL).
TITAN_LR, TITAN_WARMUP = 1e-2, 1
# Tolerances, relative, against the one-process run. The layouts compute in different precisions, by
# torchtitan's own rules: the one-process run and DDP under bf16 autocast, FSDP layouts with bf16 parameters
# (FSDP's mixed precision), TP/PP layouts without FSDP in fp32. bf16 keeps 8 significant bits (a relative
# spacing of 2^-8 = 0.4 %), so two runs round each product differently by up to that much; the loss averages
# such errors over 512 tokens and the gradient norm over 280,000 gradients. Measured on this machine: loss
# within 2e-4, gradient norm within 1.7e-3 (relative) of the one-process run, for every layout here. The
# tolerances leave a margin of 5 to 6, and stay far below what the test is for: a layout that trains
# another model or another way moves the gradient norm by a factor (torchtitan 0.2.2's pipelined gradient is
# 512 times the mean, its DDP gradient half of it), or the loss by more than its step-to-step change.
LOSS_RTOL, GRAD_RTOL = 1e-3, 1e-2



def pins(tp: int, pp: int, zero: int | None = None, *, cp: int = 1, vpp: int | None = None, mbs: int | None = None,
         schedule: Schedule | None = None) -> SearchSpec:
    """A layout pinned for the test (no recomputation: torchtitan's and DeepSpeed's differ from each other)."""
    return SearchSpec(tp=tp, pp=pp, cp=cp, vpp=vpp, zero=zero, mbs=mbs, schedule=schedule, recompute=Recompute.NONE,
                      top_k=1)


# name: (GPUs, pins); dp follows from the GPUs. PP layouts pin one sample per micro-batch, so that the
# schedules run several micro-batches (8 with dp 1, 4 with dp 2).
TITAN_LAYOUTS: dict[str, tuple[int, SearchSpec]] = {
    "FSDP": (2, pins(tp=1, pp=1, zero=3)),
    "DDP": (2, pins(tp=1, pp=1, zero=0)),
    "TP2+FSDP": (4, pins(tp=2, pp=1, zero=3)),
    "TP2+PP2": (4, pins(tp=2, pp=2, zero=0, mbs=1, schedule=Schedule.ONE_F_ONE_B)),
    # torchtitan's data parallelism next to pipelining is FSDP2 (its DDP is one-dimensional, see the test of
    # PP2+DDP below): ZeRO-2, which keeps the weights whole from forward to backward, is that layout's DP.
    "PP2+DP": (4, pins(tp=1, pp=2, zero=2, mbs=1, schedule=Schedule.ONE_F_ONE_B)),
    "PP2+FSDP": (4, pins(tp=1, pp=2, zero=3, mbs=1, schedule=Schedule.GPIPE)),
    "interleaved": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.INTERLEAVED_1F1B)),
    "ZB-V": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.ZB_V)),
    "wave": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.WAVE)),
    "ZB-H1": (2, pins(tp=1, pp=2, zero=0, mbs=1, schedule=Schedule.ZB_H1)),
    "ZB-H2": (2, pins(tp=1, pp=2, zero=0, mbs=1, schedule=Schedule.ZB_H2)),
    "ZB-2p": (2, pins(tp=1, pp=2, zero=0, mbs=1, schedule=Schedule.ZB_2P)),
    "DualPipeV": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.DUALPIPE_V)),
    "V-Half": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.V_HALF)),
    "V-Min": (2, pins(tp=1, pp=2, vpp=2, zero=0, mbs=1, schedule=Schedule.V_MIN)),
}
ONE_PROCESS = (1, pins(tp=1, pp=1, zero=0))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    from planner.inputs.loaders import load_model

    return load_model(str(support.write_tiny_model(tmp_path_factory.mktemp("model") / "tiny-llama.yaml")))


def plan_for(model: ModelSpec, gpus: int, spec: SearchSpec) -> Plan:
    """The pinned layout as a plan of the research space (runtime any): each test is about one layout, which it
    emits strictly for its launcher (tests/test_runtimes.py plans in each runtime's own space)."""
    p = plan(model, HARDWARE, gpus=gpus, seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH, spec=spec,
             runtime=Runtime(framework="any"))
    lay = p.best.layout
    pinned = {k: getattr(spec, k) for k in ("tp", "pp", "vpp", "zero", "schedule") if getattr(spec, k) is not None}
    assert {k: getattr(lay, k) for k in pinned} == pinned, "the plan is not the layout this test is about"
    return p


# ----------------------------------------------------------------------------------------------- torchtitan


@dataclass
class Titan:
    """Emits a layout's TOML, runs torchtitan's Trainer on it and reads back what it logged."""

    root: Path
    model: ModelSpec
    seed: Path  # torchtitan's seed checkpoint: every run starts from these weights

    def job(self, name: str, gpus: int, spec: SearchSpec) -> Path:
        p = plan_for(self.model, gpus, spec)
        workdir = self.root / name
        workdir.mkdir(exist_ok=True)
        (workdir / "job.toml").write_text(emit(p, Target.TORCHTITAN, strict=True).text)
        from planner.outputs.emitters.torchtitan import ACTIONS_FILE, BY_ACTIONS

        if p.best.layout.schedule in BY_ACTIONS:
            (workdir / ACTIONS_FILE).write_text(emit(p, Target.TORCH_ACTIONS).text)
        return workdir

    def train(self, workdir: Path, gpus: int, extra: list[str], seed: bool = False) -> list[dict[str, Any]]:
        argv = ["--job.config_file", str(workdir / "job.toml"), "--job.dump_folder", str(workdir / "out"),
                "--training.steps", str(STEPS), "--metrics.log_freq", "1",
                "--lr_scheduler.warmup_steps", str(TITAN_WARMUP), "--optimizer.lr", str(TITAN_LR),
                "--debug.seed", "0", *extra]  # the seed checkpoint's weights are the same in every test run
        support.run_ranks(support.titan_rank, gpus, (support.free_port(), str(workdir), argv, seed))
        return [] if seed else support.titan_steps(workdir, gpus)

    def run(self, name: str, gpus: int, spec: SearchSpec) -> list[dict[str, Any]]:
        start = ["--checkpoint.enable", "--checkpoint.initial_load_path", str(self.seed), "--checkpoint.load_only"]
        return self.train(self.job(name, gpus, spec), gpus, start)


def titan_max_norm(workdir: Path) -> float:
    """training.max_norm as torchtitan's own config parser reads the emitted file."""
    from torchtitan.config import ConfigManager

    return float(ConfigManager().parse_args(["--job.config_file", str(workdir / "job.toml")]).training.max_norm)


@pytest.fixture(scope="module")
def titan(tmp_path_factory: pytest.TempPathFactory, tiny: ModelSpec) -> Iterator[tuple[Titan, list[dict[str, Any]]]]:
    """The runner, and the one-process run every layout is compared with. torchtitan initialises the weights
    per rank (with distinct seeds across pipeline ranks), so runs of different layouts start from different
    weights; torchtitan's own answer is a seed checkpoint written by one process and loaded by every run."""
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    from planner.outputs.emitters import titan_flavors

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(titan_flavors, "FLAVORS", (*titan_flavors.FLAVORS, support.tiny_flavor()))
        root = tmp_path_factory.mktemp("torchtitan")
        runner = Titan(root, tiny, root / "seed" / "out" / "seed" / "step-0")
        seed_dir = runner.job("seed", *ONE_PROCESS)
        runner.train(seed_dir, 1, ["--checkpoint.enable", "--checkpoint.create_seed_checkpoint",
                                   "--checkpoint.folder", "seed"], seed=True)
        assert runner.seed.is_dir()
        reference = runner.run("one-process", *ONE_PROCESS)
        assert titan_max_norm(root / "one-process") == 1.0  # torchtitan's default: nothing to compensate
        yield runner, reference


@pytest.mark.parametrize("name", list(TITAN_LAYOUTS))
def test_torchtitan_trains_each_layout_as_one_process_does(titan: tuple[Titan, list[dict[str, Any]]],
                                                           name: str) -> None:
    """Same loss and same clipping at every step. torchtitan 0.2.2 clips and steps with a multiple of the mean-loss
    gradient under pipelining (the token sum) and DDP (the mean over dp): the emitted max_norm is torchtitan's
    1.0 times that multiple (planner/outputs/emitters/torchtitan.py), so what decides clipping, the gradient norm over
    max_norm, is the one-process run's; the logged norm itself is that multiple of the one-process norm."""
    runner, reference = titan
    gpus, spec = TITAN_LAYOUTS[name]
    steps = runner.run(name, gpus, spec)
    max_norm = titan_max_norm(runner.root / name)
    assert len(steps) == len(reference) == STEPS
    for got, want in zip(steps, reference, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=LOSS_RTOL), (name, got, want)
        assert got["grad_norm"] / max_norm == pytest.approx(want["grad_norm"], rel=GRAD_RTOL), (name, max_norm, got)
        assert len(set(got["grad_norms"])) == 1, "torchtitan reduces the gradient norm over every rank"
    expected_scale = {"DDP": 1 / 2}.get(name, float(GLOBAL_BATCH * SEQ_LEN) if spec.pp and spec.pp > 1 else 1.0)
    assert max_norm == pytest.approx(expected_scale)


def test_torchtitan_logs_read_back_as_runs(titan: tuple[Titan, list[dict[str, Any]]]) -> None:
    """The log torchtitan's trainer really wrote for the one-process run (its own logger and format) reads back
    through planner.inputs.runlogs: every step, the tokens of a step, a positive steady step time, the peak memory."""
    from planner.inputs.runlogs import Launcher, detect_launcher, parse_torchtitan_log

    runner, reference = titan
    text = (runner.root / "one-process" / "rank0.log").read_text()
    assert detect_launcher(text) is Launcher.TORCHTITAN
    log = parse_torchtitan_log(text, "rank0.log")
    assert list(log.steps) == [r["step"] for r in reference] == list(range(1, STEPS + 1))
    assert log.tokens_per_step == GLOBAL_BATCH * SEQ_LEN
    assert 0 < log.steady_step_time_s(1) < 60 and all(tps > 0 for tps in log.tokens_per_s_per_gpu)
    assert log.peak_memory_gib is not None


def test_torchtitan_stops_ddp_next_to_pipelining(titan: tuple[Titan, list[dict[str, Any]]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtitan 0.2.2 runs DDP (ZeRO-0, data_parallel_replicate_degree) only as the sole parallelism: the trainer
    stops at start-up on a file that asks for dp 2 beside pp 2 (written here with the emitter's refusal switched
    off), which is why the emitter refuses that layout and planning for torchtitan leaves it out."""
    from torch.multiprocessing import ProcessRaisedException

    from planner.inputs.runtimes import load_runtime
    from planner.outputs.emitters import UnsupportedPlanError
    from planner.outputs.emitters import torchtitan as titan_emitter

    runner, _ = titan
    gpus, spec = (4, pins(tp=1, pp=2, zero=0, mbs=1, schedule=Schedule.ONE_F_ONE_B))
    with pytest.raises(UnsupportedPlanError, match="DDP .* only as the sole parallelism"):
        emit(plan_for(runner.model, gpus, spec), Target.TORCHTITAN, strict=True)
    assert not load_runtime("torchtitan").capabilities.ddp_beside_others
    monkeypatch.setattr(titan_emitter, "_refuse_ddp_beside_others", lambda plan: None)
    runner.job("PP2+DDP", gpus, spec)
    with pytest.raises(ProcessRaisedException, match="DDP has not supported > 1D parallelism"):
        runner.run("PP2+DDP", gpus, spec)


# ----------------------------------------------------------------------------------------------- DeepSpeed

DS_STEPS = 3
# DeepSpeed's bf16 mode keeps bf16 weights and activations (fp32 master weights); the reference runs in fp32.
# A forward pass in bf16 moves the loss by about 1e-4 and the gradient norm by a few 1e-3 (relative; measured
# here: loss within 1.2e-4, gradient norm within 3.3e-3 for ZeRO 1-3 and the pipeline): 1e-3 and 2e-2 leave a
# margin of 6 to 8, and a gradient summed over dp instead of averaged (a factor 2), or accumulated over the
# wrong number of micro-batches, is far outside them.
DS_LOSS_RTOL, DS_GRAD_RTOL = 1e-3, 2e-2


def run_deepspeed(tmp_path: Path, cfg: dict[str, Any], world: int) -> list[dict[str, Any]]:
    support.run_ranks(support.ds_rank, world, (support.free_port(), str(tmp_path), cfg, SEQ_LEN, DS_STEPS))
    return [json.loads((tmp_path / f"ds{r}.json").read_text()) for r in range(world)]


def assert_trains_like_reference(cfg: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    reference = support.ds_reference(cfg, SEQ_LEN, DS_STEPS)
    for run in runs:
        for got, want in zip(run["steps"], reference, strict=True):
            assert got["loss"] == pytest.approx(want["loss"], rel=DS_LOSS_RTOL), (got, want)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=DS_GRAD_RTOL), (got, want)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_deepspeed_zero_trains_as_one_process_does(tmp_path: Path, tiny: ModelSpec, stage: int) -> None:
    """deepspeed.initialize with the emitted JSON (dp 2, two micro-batches accumulated per step) on two
    processes: the engine takes the JSON's ZeRO stage and batch arithmetic and trains as plain torch does."""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -e '.[validate]')")
    p = plan_for(tiny, 2, pins(tp=1, pp=1, zero=stage, mbs=2))
    cfg = json.loads(emit(p, Target.DEEPSPEED, strict=True).text)
    assert (cfg["zero_optimization"]["stage"], cfg["gradient_accumulation_steps"]) == (stage, 2)
    assert_trains_like_reference(cfg, run_deepspeed(tmp_path, cfg, 2))


def test_deepspeed_pipeline_engine_trains_the_emitted_partition(tmp_path: Path, tiny: ModelSpec) -> None:
    """DeepSpeed's PipelineModule with the JSON's stage count and partition method (its pipeline section) puts
    the embedding and the plan's first chunk of layers on stage 0, the rest and the output on stage 1, and its
    engine's train_batch trains as plain torch does."""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -e '.[validate]')")
    p = plan_for(tiny, 2, pins(tp=1, pp=2, zero=1, mbs=1, schedule=Schedule.ONE_F_ONE_B))
    cfg = json.loads(emit(p, Target.DEEPSPEED, strict=True).text)
    assert cfg["pipeline"]["stages"] == 2
    runs = run_deepspeed(tmp_path, cfg, 2)
    first, second = p.best.layout.chunk_layers(tiny.num_layers)
    assert all(run["parts"] == [0, 1 + first, 1 + first + second + 1] for run in runs), runs
    assert_trains_like_reference(cfg, runs)


# ----------------------------------------------------------------------------------------------- megatron-core

MEGATRON_LAYOUTS: dict[str, SearchSpec] = {
    "TP2+PP2": pins(tp=2, pp=2, schedule=Schedule.ONE_F_ONE_B),
    "PP2+DP2 interleaved": pins(tp=1, pp=2, vpp=2, schedule=Schedule.INTERLEAVED_1F1B),
    "TP2+CP2": pins(tp=2, pp=1, cp=2),
    "PP4": pins(tp=1, pp=4, schedule=Schedule.ONE_F_ONE_B),
}


def megatron_degrees(text: str, num_layers: int) -> dict[str, int]:
    """The parallel degrees the emitted Megatron-LM launch states: its argument array and torchrun's world."""
    body = text.split("MEGATRON_ARGS=(", 1)[1].split(")", 1)[0]
    words = shlex.split(body, comments=True)
    args = {w: words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else "" for i, w in
            enumerate(words) if w.startswith("--")}
    launch = shlex.split(text[text.index("\ntorchrun "):].replace("\\\n", " ").splitlines()[1])
    world = int(launch[launch.index("--nnodes") + 1]) * int(launch[launch.index("--nproc-per-node") + 1])
    tp, pp = int(args["--tensor-model-parallel-size"]), int(args["--pipeline-model-parallel-size"])
    cp = int(args.get("--context-parallel-size", 1))
    per_virtual = args.get("--num-layers-per-virtual-pipeline-stage")
    vpp = num_layers // (pp * int(per_virtual)) if per_virtual else 1
    return {"world": world, "tp": tp, "pp": pp, "cp": cp, "vpp": vpp, "dp": world // (tp * pp * cp)}


def placement_groups(rank: int, d: dict[str, int]) -> dict[str, list[int]]:
    """The ranks that share each group with `rank`, placed as meshplan prices them (meshcore/mesh.py Mesh:
    TP innermost, then CP, DP, PP outermost; Megatron-LM's default order tp-cp-ep-dp-pp)."""
    sizes = {"tp": d["tp"], "cp": d["cp"], "dp": d["dp"], "pp": d["pp"]}
    strides, stride = {}, 1
    for axis, size in sizes.items():
        strides[axis] = stride
        stride *= size
    coord = {axis: rank // strides[axis] % size for axis, size in sizes.items()}
    return {axis: sorted(rank + (i - coord[axis]) * strides[axis] for i in range(size))
            for axis, size in sizes.items()}


def test_megatron_core_builds_the_emitted_groups(tmp_path: Path, tiny: ModelSpec) -> None:
    """Megatron-LM's own argument parser (megatron/training/arguments.py) is not on PyPI and is not installed
    here, so the emitted arguments are read back by this test and their degrees given to megatron-core's
    parallel_state on four gloo processes; megatron-core builds only the groups on a CPU (its models and
    schedules need CUDA)."""
    pytest.importorskip("megatron.core", reason="megatron-core not installed (pip install -e '.[validate]')")
    layouts = {}
    for name, spec in MEGATRON_LAYOUTS.items():
        p = plan_for(tiny, 4, spec)
        layouts[name] = megatron_degrees(emit(p, Target.MEGATRON, strict=True).text, tiny.num_layers)
        lay = p.best.layout
        assert layouts[name] == {"world": 4, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "vpp": lay.vpp, "dp": lay.dp}
    support.run_ranks(support.megatron_rank, 4, (support.free_port(), str(tmp_path), layouts))
    for rank in range(4):
        seen = json.loads((tmp_path / f"mc{rank}.json").read_text())
        for name, d in layouts.items():
            assert seen[name]["sizes"] == {k: d[k] for k in ("tp", "pp", "dp", "cp", "vpp")}, (name, rank)
            assert seen[name]["groups"] == placement_groups(rank, d), (name, rank)


def test_megatron_lm_parses_the_emitted_arguments(tiny: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Megatron-LM itself is installed (a git checkout on the path: it is not on PyPI), its parser reads
    the emitted arguments and keeps the plan's degrees."""
    arguments = pytest.importorskip(
        "megatron.training.arguments",
        reason="Megatron-LM's argument parser (megatron/training/arguments.py) is not on PyPI and is not installed "
               "here; megatron-core, which is, has no parser")
    p = plan_for(tiny, 4, MEGATRON_LAYOUTS["TP2+PP2"])
    text = emit(p, Target.MEGATRON, strict=True).text
    body = text.split("MEGATRON_ARGS=(", 1)[1].split(")", 1)[0]
    monkeypatch.setattr("sys.argv", ["pretrain_gpt.py", *shlex.split(body, comments=True)])
    args = arguments.parse_args(ignore_unknown_args=False)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size) == (p.best.layout.tp, p.best.layout.pp)
