"""Measure a graph interatomic potential with a real MLIP package: the rows of an MLIP cost table
(planner/workloads/mlip/inputs.py holds the format; `meshplan profile mlip` writes it).

The model is MACE (mace-torch, the [mlip] extra; Batatia et al. 2022, "MACE: Higher Order Equivariant Message Passing
Neural Networks"), built from its own classes (mace.modules.MACE with RealAgnosticResidualInteractionBlock, as
MACE's tests build it) at a size given by MaceSize, with random weights: the cost of a step does not depend on
what the weights have learnt. The structures are periodic bulk crystals from ASE (ase.build.bulk, the cubic cell
repeated n x n x n: 4·n³ atoms for fcc), turned into MACE's graph by MACE's own neighbour list
(mace.data.AtomicData.from_config, periodic images included) once, outside the timing.

What is timed, per box (warm-ups, then `repeats` runs; the least is kept: on a shared machine it is the run least
disturbed):
- train: the model's forward with forces (MACE computes forces as -dE/dx with create_graph, as its trainer does),
  a loss of energy and forces, and its backward through the parameters (one training step less the optimizer);
- md: the forward with forces only (what a LAMMPS pair style or an ASE calculator calls each MD step).
Memory: on a GPU, the step's peak allocation above what was allocated before it (max_memory_allocated); on a
CPU, where PyTorch keeps no allocator statistics, the bytes of the tensors autograd saves during the step (counted
once per storage with saved-tensor hooks, parameters excluded) plus the graph's input tensors: a lower bound of
the peak, which also holds short-lived temporaries.
torch, e3nn, ase and mace are imported only here, when a profile runs.
"""

from __future__ import annotations

import importlib
import os
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from importlib.metadata import version
from typing import Any

from meshcore.errors import InputError

WARMUPS = 2


class MaceFloat(str, Enum):
    """The floating-point type MACE's weights and graph run in (its trainer's --default_dtype)."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"

    @property
    def element_bytes(self) -> int:
        return 4 if self is MaceFloat.FLOAT32 else 8


@dataclass(frozen=True)
class MaceSize:
    """A MACE model's size: `channels` of hidden features with rotation orders 0..`hidden_l` (hidden irreps
    `channels`x0e + `channels`x1o for 1), `layers` interactions, a `cutoff_a` Å radial cutoff, edge spherical
    harmonics up to `max_ell`, `correlation` body order of the product basis, `dtype` float32 or float64."""

    channels: int = 32
    hidden_l: int = 1
    layers: int = 2
    cutoff_a: float = 5.0
    max_ell: int = 2
    correlation: int = 3
    dtype: MaceFloat = MaceFloat.FLOAT32

    @property
    def hidden_irreps(self) -> str:
        parity = ("e", "o")
        return " + ".join(f"{self.channels}x{ell}{parity[ell % 2]}" for ell in range(self.hidden_l + 1))

    @property
    def feature_numbers(self) -> int:
        """Numbers per atom in the hidden features: channels x sum over l of (2l + 1)."""
        return self.channels * (self.hidden_l + 1) ** 2

    @property
    def element_bytes(self) -> int:
        return self.dtype.element_bytes


@dataclass(frozen=True)
class MlipRow:
    atoms: int
    edges: int
    step_s: float
    memory_bytes: float


@dataclass(frozen=True)
class MlipProfile:
    """What a cost table needs: the rows, and the model's and the boxes' facts."""

    rows: tuple[MlipRow, ...]
    params: int
    halo_bytes: int  # one atom's hidden features, what a domain sends per ghost per layer
    density: float  # atoms per Å^3 of the boxes
    built_with: str  # package versions


def _import_mace() -> tuple[Any, Any, Any, Any, Any]:
    """(torch, o3, ase.build, mace.modules, mace.data). e3nn 0.4.4 (the release mace-torch requires) loads a constants
    file holding `slice` objects with torch.load, which torch >= 2.6 refuses by default: it is imported with `slice`
    allowed. mace sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD for the whole process when imported; that is undone once
    the imports are done, so nothing else in the process loads files without weights_only."""
    before = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    try:
        import torch

        with torch.serialization.safe_globals([slice]):
            from e3nn import o3
        import ase.build
        from mace import data, modules
    except ImportError as exc:
        raise InputError(f"profile mlip needs mace-torch ({exc.name} is missing): pip install -e '.[mlip]'") from None
    finally:
        if before is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = before
    return torch, o3, ase.build, modules, data


def build_mace(size: MaceSize, numbers: list[int], neighbours: float) -> Any:
    """A MACE model of `size` for the atomic numbers `numbers`, random weights; `neighbours` the average neighbour
    count it normalises messages by (a measured fact of the boxes, not a fitted value)."""
    torch, o3, _, modules, _ = _import_mace()
    import numpy as np

    block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
    torch.manual_seed(0)
    with warnings.catch_warnings():  # e3nn's code generation warns about TorchScript annotations once per block
        warnings.filterwarnings("ignore", message="The TorchScript type system", category=UserWarning)
        return modules.MACE(r_max=size.cutoff_a, num_bessel=8, num_polynomial_cutoff=5, max_ell=size.max_ell,
                            interaction_cls=block, interaction_cls_first=block, num_interactions=size.layers,
                            num_elements=len(numbers), hidden_irreps=o3.Irreps(size.hidden_irreps),
                            MLP_irreps=o3.Irreps("16x0e"), gate=torch.nn.functional.silu,
                            atomic_energies=np.zeros(len(numbers)), avg_num_neighbors=neighbours,
                            atomic_numbers=sorted(numbers), correlation=size.correlation)


@dataclass(frozen=True)
class Box:
    """One periodic box as MACE's input dict, its density (atoms per Å^3) and its atomic numbers."""

    graph: dict[str, Any]
    density: float
    numbers: tuple[int, ...]


def bulk_graph(element: str, cells: int, cutoff_a: float) -> Box:
    """`element`'s bulk crystal, its cubic cell repeated `cells` times each way. Elements ASE has no cubic
    reference structure for are refused."""
    _, _, build, _, data = _import_mace()
    tools: Any = importlib.import_module("mace.tools")  # typed by mace as its own Dataset, fed a list as its tests do

    try:
        atoms = build.bulk(element, cubic=True).repeat((cells, cells, cells))
    except (KeyError, ValueError, RuntimeError) as exc:
        raise InputError(f"--element {element!r}: ASE builds no cubic bulk crystal of it ({exc})") from None
    numbers = tuple(sorted({int(z) for z in atoms.numbers}))
    graph = data.AtomicData.from_config(data.config_from_atoms(atoms), z_table=tools.AtomicNumberTable(list(numbers)),
                                        cutoff=cutoff_a)
    batch = next(iter(tools.torch_geometric.dataloader.DataLoader([graph], batch_size=1)))
    return Box(batch.to_dict(), len(atoms) / float(atoms.get_volume()), numbers)


def _step(model: Any, graph: dict[str, Any], train: bool) -> Callable[[], None]:
    def run() -> None:
        out = model(graph, training=train, compute_force=True)
        if train:
            loss = out["energy"].square().sum() + out["forces"].square().sum()
            loss.backward()
            model.zero_grad(set_to_none=True)

    return run


def _moved(graph: dict[str, Any], torch: Any, device: Any, dtype: Any) -> dict[str, Any]:
    """The graph's tensors on `device`, floating-point ones in the model's `dtype`."""
    return {key: (v.to(device, dtype) if v.is_floating_point() else v.to(device))
            for key, v in graph.items() if isinstance(v, torch.Tensor)}


def _timed(fn: Callable[[], None], torch: Any, device: Any) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    begin = time.perf_counter_ns()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter_ns() - begin) / 1e9


def _memory(fn: Callable[[], None], torch: Any, device: Any, graph: dict[str, Any], params: set[int]) -> float:
    """Peak bytes of one step (module docstring: allocator peak on a GPU, saved tensors + inputs on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - base)
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = max(seen.get(ptr, 0), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    inputs = sum(v.untyped_storage().nbytes() for v in graph.values() if isinstance(v, torch.Tensor))
    return float(sum(seen.values()) + inputs)


def profile_mace(size: MaceSize, element: str, cells: list[int], train: bool, device_name: str, repeats: int,
                 threads: int = 0, progress: Callable[[int, int], None] | None = None) -> MlipProfile:
    """One row per box of `cells` (increasing) on `device_name` (cpu or cuda); `threads` > 0: PyTorch's CPU threads
    while it runs."""
    torch, _, _, _, _ = _import_mace()

    if device_name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: PyTorch sees no CUDA device here; use --device cpu")
    device = torch.device(device_name)
    dtype = getattr(torch, size.dtype.value)
    boxes = [bulk_graph(element, n, size.cutoff_a) for n in sorted(set(cells))]
    largest = boxes[-1].graph
    neighbours = largest["edge_index"].shape[1] / largest["positions"].shape[0]
    previous = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads or previous[1])
    try:
        model = build_mace(size, list(boxes[-1].numbers), neighbours).to(device)
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        graphs = [_moved(box.graph, torch, device, dtype) for box in boxes]
        steps = [_step(model, graph, train) for graph in graphs]
        for step in steps:  # every box first: a process's first calls pay one-time costs that would fall on box 1
            for _ in range(WARMUPS):
                step()
        rows = []
        for k, (step, graph) in enumerate(zip(steps, graphs, strict=True)):
            seconds = min(_timed(step, torch, device) for _ in range(repeats))
            memory = _memory(step, torch, device, graph, params)
            rows.append(MlipRow(int(graph["positions"].shape[0]), int(graph["edge_index"].shape[1]), seconds, memory))
            if progress is not None:
                progress(k + 1, len(boxes))
    finally:  # the process's own settings back
        torch.set_default_dtype(previous[0])
        torch.set_num_threads(previous[1])
    return MlipProfile(tuple(rows), int(sum(p.numel() for p in model.parameters())),
                       size.feature_numbers * size.element_bytes, boxes[0].density,
                       ", ".join(f"{p} {version(p)}" for p in ("mace-torch", "e3nn", "torch")))


def machine(device_name: str, threads: int) -> str:
    """The device as a table records it: the GPU's name, or the CPU's model and the threads PyTorch runs on
    (`threads`, or its default where 0)."""
    torch = _import_mace()[0]
    threads = threads or int(torch.get_num_threads())
    if device_name == "cuda":
        return str(torch.cuda.get_device_name(0))
    cpu = platform.processor() or platform.machine() or "cpu"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"CPU {''.join(c for c in cpu if c.isalnum() or c in ' .-_()@')} ({threads} threads)"
