"""What lets the launchers' own trainers run meshplan's emitted configs on this CPU-only test machine.

Everything here is a machine shim, not a layout: the emitted file decides the parallel degrees, the FSDP
mode, the pipeline schedule and split and the action list, and nothing here reads or changes them. Each shim
says why it exists. The workers run in processes started with torch.multiprocessing (spawn), one per rank,
over gloo on 127.0.0.1; `run_ranks` joins them with a deadline, so a hung collective fails the test instead
of the CI job.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

# The tiny Llama-style model: the model YAML meshplan plans for and, below, the torchtitan flavor with the
# same dimensions. Small enough that a step of every layout takes well under a second on one CPU core.
TINY_MODEL: dict[str, Any] = {
    "name": "tiny-llama", "num_layers": 4, "hidden_size": 64, "ffn_hidden_size": 256, "num_attention_heads": 4,
    "num_kv_heads": 2, "vocab_size": 256, "gated_mlp": True, "tied_embeddings": False}
TINY_FLAVOR = "meshplan-tiny"  # the flavor name meshplan writes for it, registered on both sides
DEADLINE_S = 240.0  # a whole multi-process run; a healthy one takes seconds


def free_port() -> int:
    """A free TCP port on 127.0.0.1: another test run on the machine may hold any fixed one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_tiny_model(path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(TINY_MODEL, sort_keys=False))
    return path


def tiny_flavor() -> Any:
    """meshplan's side of the flavor shim. torchtitan builds only the flavors in its own code and its job file
    cannot state dimensions, so meshplan writes a flavor only for a model it matches by architecture
    (planner/outputs/emitters/titan_flavors.py); none of the real ones fits a CPU. The test adds this one, with the
    model YAML's dimensions, to the flavors meshplan matches against (monkeypatched for the test only)."""
    from planner.inputs.loaders import model_from_mapping
    from planner.outputs.emitters.titan_flavors import Flavor

    spec = model_from_mapping({**TINY_MODEL, "name": f"torchtitan llama3 {TINY_FLAVOR}"}, "tiny flavor")
    return Flavor("llama3", TINY_FLAVOR, None, spec)


# ----------------------------------------------------------------------------------------------- torchtitan


class _CpuDevice:
    """torchtitan 0.2.2 picks its device module at import (`_get_available_device_type() or "cuda"`) and calls
    torch.cuda's API on it (set_device, memory stats, device properties). On a machine without a GPU that is
    torch.cuda and fails; this is the CPU's answer to the calls it makes: no device memory to report."""

    class _Properties:
        total_memory = 1 << 30  # only divides the (empty) memory statistics for the log line

    def set_device(self, device: Any) -> None:
        pass

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return 1

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    def get_device_properties(self, device: Any = None) -> _Properties:
        return self._Properties()

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return {}

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def synchronize(self, device: Any = None) -> None:
        pass


def use_cpu() -> None:
    """Device type "cpu" everywhere torchtitan imported its module-level device_type/device_module, so that
    its process group is gloo (torch's default backend for "cpu") and its tensors live on the CPU."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan") and isinstance(getattr(module, "device_type", None), str):
            setattr(module, "device_type", "cpu")  # noqa: B010
            setattr(module, "device_module", _CpuDevice())  # noqa: B010


def sum_reductions_for_gloo() -> None:
    """torchtitan 0.2.2 sets every FSDP module's gradient divide factor to 1 (it normalises by the global token
    count itself), and FSDP2 then reduce-scatters with NCCL's ReduceOp.PREMUL_SUM(1/factor), which gloo does not
    have ("Cannot use ReduceOp.PREMUL_SUM with Gloo"). Asking FSDP for sum-only collectives gives a plain SUM
    followed by a division by the same factor (1): the same arithmetic through an op gloo has."""
    from torch.distributed.fsdp import FSDPModule

    set_factor = FSDPModule.set_gradient_divide_factor

    def set_factor_with_sum(self: Any, factor: float) -> None:
        set_factor(self, factor)
        self.set_force_sum_reduction_for_comms(True)

    FSDPModule.set_gradient_divide_factor = set_factor_with_sum  # type: ignore[method-assign]


def _synthetic_loader_class() -> type:
    from torchtitan.components.dataloader import BaseDataLoader

    class SyntheticTokens(BaseDataLoader):
        """torchtitan's loaders read a Hugging Face dataset with a tokenizer, neither of which is on this machine
        (no network). This one yields the same global batches whatever the layout: sample i of the run is a
        deterministic arithmetic sequence mod vocab (learnable, so the loss moves), and data-parallel rank r of
        D takes rows r*L..(r+1)*L-1 of each global batch of D*L samples, as a sharded dataset would."""

        def __init__(self, dp_rank: int, dp_world_size: int, local_batch: int, seq_len: int, vocab: int) -> None:
            self.dp_rank, self.dp_world_size = dp_rank, dp_world_size
            self.local_batch, self.seq_len, self.vocab = local_batch, seq_len, vocab
            self.batches = 0

        def sample(self, index: int) -> Any:
            import torch

            gen = torch.Generator().manual_seed(1000 + index)
            start, stride = torch.randint(0, self.vocab, (2,), generator=gen).tolist()
            return (start + (stride | 1) * torch.arange(self.seq_len + 1)) % self.vocab

        def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
            import torch

            while True:
                first = (self.batches * self.dp_world_size + self.dp_rank) * self.local_batch
                rows = torch.stack([self.sample(first + j) for j in range(self.local_batch)])
                self.batches += 1
                yield {"input": rows[:, :-1]}, rows[:, 1:]

        def state_dict(self) -> dict[str, Any]:
            return {"batches": self.batches}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.batches = int(state_dict["batches"])

    return SyntheticTokens


def register_tiny_llama() -> None:
    """torchtitan's own llama3 train spec (its model, parallelize, pipelining, optimizer, LR schedule and loss
    functions) re-registered under the same name "llama3" with two machine shims: the tiny flavor added to its
    model arguments (llama3 has no flavor small enough for a CPU; dimensions as in the model YAML), and the
    synthetic loader in place of the Hugging Face dataset and tokenizer."""
    import torchtitan.protocols.train_spec as train_spec
    from torchtitan.models.llama3 import TransformerModelArgs, get_train_spec

    loader = _synthetic_loader_class()
    tiny = TransformerModelArgs(dim=TINY_MODEL["hidden_size"], n_layers=TINY_MODEL["num_layers"],
                                n_heads=TINY_MODEL["num_attention_heads"], n_kv_heads=TINY_MODEL["num_kv_heads"],
                                vocab_size=TINY_MODEL["vocab_size"], multiple_of=TINY_MODEL["ffn_hidden_size"])

    def build_loader(dp_world_size: int, dp_rank: int, tokenizer: Any, job_config: Any) -> Any:
        return loader(dp_rank, dp_world_size, job_config.training.local_batch_size, job_config.training.seq_len,
                      TINY_MODEL["vocab_size"])

    spec = get_train_spec()
    spec = replace(spec, model_args={**spec.model_args, TINY_FLAVOR: tiny}, build_dataloader_fn=build_loader,
                   build_tokenizer_fn=None, build_validator_fn=None)
    train_spec._extra_train_specs.pop("llama3", None)
    train_spec.register_train_spec("llama3", spec)


def titan_rank(rank: int, world: int, port: int, workdir: str, argv: list[str], seed: bool) -> None:
    """One rank of torchtitan's Trainer, as `torchrun -m torchtitan.train` would run it (train.main), with the
    shims above; it writes the (step, loss, grad norm) that the trainer logs to rank<r>.json in `workdir`.
    With `seed`, it writes torchtitan's seed checkpoint instead (what main() does for create_seed_checkpoint):
    every run then starts from the same weights, which torchtitan's per-rank initialisation would not give."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    os.chdir(workdir)  # the TOML names the one-wave action list relative to the working directory
    import torch
    import torch.distributed as dist
    import torchtitan.train as titan_train
    from torchtitan.config import ConfigManager
    from torchtitan.tools.logging import init_logger

    torch.set_num_threads(1)  # 2-4 ranks share 2 cores
    register_tiny_llama()
    sum_reductions_for_gloo()
    use_cpu()  # after every torchtitan module that copies device_type at import is imported
    init_logger()
    from torchtitan.tools.logging import logger as titan_logger

    # torchtitan's own log lines, as its stdout handler formats them, also into rank<r>.log: the log a real run
    # writes, which tests read back with planner.inputs.runlogs (the spawned ranks' stdout is not captured)
    to_file = logging.FileHandler(Path(workdir, f"rank{rank}.log"))
    to_file.setFormatter(titan_logger.handlers[0].formatter)
    titan_logger.addHandler(to_file)
    config = ConfigManager().parse_args(argv)
    trainer = titan_train.Trainer(config)
    logged: list[dict[str, float]] = []
    log = trainer.metrics_processor.log

    def record(step: int, loss: float, max_loss: float, grad_norm: float, **kwargs: Any) -> None:
        logged.append({"step": step, "loss": float(loss), "grad_norm": float(grad_norm)})
        log(step, loss, max_loss, grad_norm, **kwargs)

    trainer.metrics_processor.log = record  # type: ignore[method-assign]
    try:
        if seed:
            trainer.checkpointer.save(curr_step=0, last_step=True)
        else:
            trainer.train()
    finally:
        trainer.close()
    Path(workdir, f"rank{rank}.json").write_text(json.dumps(logged))
    if dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., None], world: int, args: tuple[Any, ...], deadline_s: float = DEADLINE_S) -> None:
    """fn(rank, world, *args) in `world` spawned processes; a rank's exception is raised here, and a run past the
    deadline is killed and fails (a hung gloo collective would otherwise hang CI)."""
    import torch.multiprocessing as mp

    context = mp.start_processes(fn, args=(world, *args), nprocs=world, join=False, start_method="spawn")
    end = time.monotonic() + deadline_s
    while not context.join(timeout=max(1.0, end - time.monotonic())):
        if time.monotonic() > end:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            raise TimeoutError(f"{world} ranks of {fn.__name__} still running after {deadline_s:.0f} s")


def titan_steps(workdir: Path, world: int) -> list[dict[str, float]]:
    """Per step: the loss (torchtitan logs it on the ranks that hold the last pipeline stage; elsewhere -1) and
    the gradient norm (the same on every rank: clip_grad_norm_ reduces it over the whole mesh)."""
    per_rank = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(world)]
    steps = []
    for records in zip(*per_rank, strict=True):
        losses = [r["loss"] for r in records if r["loss"] > 0]
        steps.append({"step": records[0]["step"], "loss": max(losses), "grad_norm": records[0]["grad_norm"],
                      "grad_norms": [r["grad_norm"] for r in records]})
    return steps


def tiny_batch(first: int, rows: int, seq_len: int) -> tuple[Any, Any]:
    """Inputs and labels of samples first..first+rows-1 of the synthetic stream, as the loaders above cut them."""
    import torch

    loader = _synthetic_loader_class()(0, 1, rows, seq_len, TINY_MODEL["vocab_size"])
    tokens = torch.stack([loader.sample(first + j) for j in range(rows)])
    return tokens[:, :-1], tokens[:, 1:]


# ----------------------------------------------------------------------------------------------- DeepSpeed
# DeepSpeed has no model of its own: its user brings one. This is the tiny model with the YAML's dimensions as
# a list of layers (embedding, decoder blocks, final norm + output), the form its PipelineModule partitions.


def _ds_classes() -> tuple[type, type]:
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        """A pre-norm decoder block: causal multi-head attention and a SwiGLU MLP, each with a residual."""

        def __init__(self, dim: int, heads: int, ffn: int) -> None:
            super().__init__()
            self.heads = heads
            self.attn_norm, self.mlp_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
            self.gate_up, self.down = nn.Linear(dim, 2 * ffn, bias=False), nn.Linear(ffn, dim, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=True)
            x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Head(nn.Module):
        def __init__(self, dim: int, vocab: int) -> None:
            super().__init__()
            self.norm, self.output = nn.RMSNorm(dim), nn.Linear(dim, vocab, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.output(self.norm(x))

    return Block, Head


def ds_layer_specs() -> list[tuple[type, tuple[int, ...]]]:
    from torch import nn

    block, head = _ds_classes()
    dim, vocab = TINY_MODEL["hidden_size"], TINY_MODEL["vocab_size"]
    block_args = (dim, TINY_MODEL["num_attention_heads"], TINY_MODEL["ffn_hidden_size"])
    blocks = [(block, block_args)] * TINY_MODEL["num_layers"]
    return [(nn.Embedding, (vocab, dim)), *blocks, (head, (dim, vocab))]


DS_BASE_SEED = 1234  # PipelineModule's default base_seed: layer i is built right after seeding base_seed + i


def ds_sequential() -> Any:
    """The tiny model in one piece, each layer built after seeding as PipelineModule(seed_layers=True) does, so
    that every run (pipelined or not, in any process) starts from the same weights."""
    import torch

    layers = []
    for i, (cls, args) in enumerate(ds_layer_specs()):
        torch.manual_seed(DS_BASE_SEED + i)
        layers.append(cls(*args))
    return torch.nn.Sequential(*layers)


def ds_loss(logits: Any, labels: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(0, 1))


DS_LR = 1e-2  # the client optimizer's (the emitted JSON has no optimizer section: the user brings one)


def ds_rank(rank: int, world: int, port: int, workdir: str, cfg: dict[str, Any], seq_len: int, steps: int) -> None:
    """One rank of DeepSpeed's engine with the emitted `cfg`: deepspeed.initialize, then `steps` optimizer steps
    of cfg's global batch; with cfg["pipeline"], DeepSpeed's PipelineModule over the layer list, with the stage
    count and partition method the JSON gives, and its engine's train_batch. Writes (loss, grad norm) per step
    and the pipeline's partition to ds<rank>.json."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DS_ACCELERATOR="cpu")
    import torch

    torch.set_num_threads(1)
    import deepspeed.comm.torch  # noqa: F401  (deepspeed.comm re-exports torch under that name: use sys.modules)

    # DeepSpeed's CPU accelerator compiles a shared-memory all-reduce kernel (C++, about 30 s the first time, and
    # a compiler on the machine) when its backend starts: a speed path for CPU inference. Without it DeepSpeed
    # runs the same collectives through gloo.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed
    import deepspeed.comm as dist
    from deepspeed.pipe import LayerSpec, PipelineModule

    dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    pipeline = cfg.get("pipeline")
    parts: list[int] = []
    if pipeline is None:
        model = ds_sequential()
    else:
        specs = [LayerSpec(cls, *args) for cls, args in ds_layer_specs()]
        model = PipelineModule(layers=specs, num_stages=pipeline["stages"], partition_method=pipeline["partition"],
                               loss_fn=ds_loss, seed_layers=True, base_seed=DS_BASE_SEED)
        parts = list(model.parts)
    optimizer = torch.optim.AdamW(model.parameters(), lr=DS_LR)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    mbs, gas = cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
    dp = cfg["train_batch_size"] // (mbs * gas)
    dp_rank = engine.mpu.get_data_parallel_rank() if engine.mpu is not None else dist.get_rank()

    def micro_batches(step: int) -> Iterator[tuple[Any, Any]]:
        """Micro-batch m of data-parallel rank r takes rows (m*dp + r)*mbs.. of the step's global batch."""
        for m in range(gas):
            yield tiny_batch(step * cfg["train_batch_size"] + (m * dp + dp_rank) * mbs, mbs, seq_len)

    logged = []
    for step in range(steps):
        if pipeline is not None:
            loss = engine.train_batch(micro_batches(step))
        else:
            total = torch.zeros(())
            for inputs, labels in micro_batches(step):
                micro_loss = ds_loss(engine(inputs), labels)
                engine.backward(micro_loss)
                engine.step()
                total += micro_loss.detach().float() / gas
            dist.all_reduce(total)
            loss = total / dp
        logged.append({"loss": float(loss), "grad_norm": float(engine.get_global_grad_norm())})
    Path(workdir, f"ds{rank}.json").write_text(json.dumps({"steps": logged, "parts": parts}))
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: once in a full CI run, a rank of the ZeRO-3 engine on gloo aborted
    # there ("terminate called without an active exception": a C++ thread still joinable when its owner was
    # destroyed) after it had trained and written its steps. What the test checks is written above.
    os._exit(0)


def ds_reference(cfg: dict[str, Any], seq_len: int, steps: int) -> list[dict[str, float]]:
    """The same training in one process without DeepSpeed: the whole global batch at once (its mean loss is the
    mean of the micro-batch means, all of equal size), clipping at the JSON's gradient_clipping, in fp32."""
    import torch

    model = ds_sequential()
    optimizer = torch.optim.AdamW(model.parameters(), lr=DS_LR)
    logged = []
    for step in range(steps):
        inputs, labels = tiny_batch(step * cfg["train_batch_size"], cfg["train_batch_size"], seq_len)
        optimizer.zero_grad()
        loss = ds_loss(model(inputs), labels)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["gradient_clipping"])
        optimizer.step()
        logged.append({"loss": float(loss.detach()), "grad_norm": float(norm)})
    return logged


# ----------------------------------------------------------------------------------------------- megatron-core


def megatron_rank(rank: int, world: int, port: int, workdir: str, layouts: dict[str, dict[str, int]]) -> None:
    """megatron-core's parallel_state.initialize_model_parallel with each layout's emitted degrees, on gloo;
    writes each layout's group sizes and members (by rank) to mc<rank>.json, then tears the groups down."""
    import warnings

    warnings.filterwarnings("ignore")
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    dist.init_process_group("gloo", rank=rank, world_size=world)
    seen: dict[str, dict[str, Any]] = {}
    for name, degrees in layouts.items():
        vpp = degrees["vpp"] if degrees["vpp"] > 1 else None
        ps.initialize_model_parallel(tensor_model_parallel_size=degrees["tp"],
                                     pipeline_model_parallel_size=degrees["pp"],
                                     virtual_pipeline_model_parallel_size=vpp, context_parallel_size=degrees["cp"])
        seen[name] = {
            "sizes": {"tp": ps.get_tensor_model_parallel_world_size(),
                      "pp": ps.get_pipeline_model_parallel_world_size(), "dp": ps.get_data_parallel_world_size(),
                      "cp": ps.get_context_parallel_world_size(),
                      "vpp": ps.get_virtual_pipeline_model_parallel_world_size() or 1},
            "groups": {"tp": dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()),
                       "pp": dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group()),
                       "dp": dist.get_process_group_ranks(ps.get_data_parallel_group()),
                       "cp": dist.get_process_group_ranks(ps.get_context_parallel_group())}}
        ps.destroy_model_parallel()
    Path(workdir, f"mc{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


def deepspeed_config(cfg: dict[str, Any], monkeypatch: Any, dp: int = 1) -> Any:
    """DeepSpeed's own DeepSpeedConfig parse of an emitted JSON in this process: a one-rank gloo group on a free
    port (another test run may hold any fixed one) and a model-parallel unit that reports `dp` data-parallel
    ranks, so its batch arithmetic checks the config as a `dp`-rank job would."""
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": port}.items():
        monkeypatch.setenv(key, value)
    if not dist.is_initialized():
        dist.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return dp

        def get_model_parallel_world_size(self) -> int:
            return 1

        def get_data_parallel_rank(self) -> int:
            return 0

        def get_model_parallel_rank(self) -> int:
            return 0

    return DeepSpeedConfig(cfg, mpu=Mpu())
