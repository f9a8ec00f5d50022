"""Machine-learned interatomic potentials on graphs (MACE, NequIP, Allegro): the profiled cost table of one model on
one GPU, the training job, and the split of the GPUs into data-parallel replicas and spatial domains, validated on
construction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import MAX_GPUS, description, identifier, integer, real
from meshcore.errors import SpecError

MAX_ATOMS = 10**10


class MlipStrategy(str, Enum):
    """Data parallel over structures, spatial domains within a structure, or both."""

    DATA_PARALLEL = "data_parallel"
    DOMAIN = "domain"
    HYBRID = "hybrid"


class MlipMode(str, Enum):
    """What a cost table's step_s measures and what a plan prices: a training step (forward, forces, backward
    through the parameters) or one MD step (energy and forces only: LAMMPS's pair style calls the model once)."""

    TRAIN = "train"
    MD = "md"


class MdScheme(str, Enum):
    """How an MD pair style spends work on its ghost atoms (planner/workloads/mlip/md.py):
    GHOSTS: the model runs on owned and ghost atoms alike, every ghost a node (pair_style mace, whose ghost shell is
      layers x cutoff deep so the owned atoms' last layer is exact; no feature exchange);
    MESSAGE_PASSING: the model runs on the owned atoms only, ghosts are edge ends, and the node features of the
      ghosts are sent forward between layers and their gradients back (pair_style symmetrix/mace in its default
      multi-rank mode `mpi_message_passing`, ML-IAP's MACE, SevenNet's e3gnn/parallel); a strictly local model
      (Allegro) is this with one layer: no feature exchange at all."""

    GHOSTS = "ghosts"
    MESSAGE_PASSING = "message_passing"


@dataclass(frozen=True)
class CostRow:
    """One profiled point: a structure of `atoms` atoms (plus ghosts, counted as atoms) takes `step_s` for forward,
    forces and backward on one GPU and `memory_bytes` of GPU memory."""

    atoms: int
    step_s: float
    memory_bytes: float

    def __post_init__(self) -> None:
        integer(self.atoms, "cost table: atoms", 1, MAX_ATOMS, SpecError)
        real(self.step_s, "cost table: step_s", 0.0, 1e6, error=SpecError)
        real(self.memory_bytes, "cost table: memory_bytes", 0.0, 1e15, low_open=False, error=SpecError)


@dataclass(frozen=True)
class MlipCostTable:
    """A model's cost per atom count on one GPU and what the decomposition needs: `layers` message-passing layers
    of `cutoff_a` Å each (a domain's ghost shell is one cutoff deep and is refreshed every layer), `halo_bytes` of
    node features per ghost atom per layer, `params` trainable parameters, `density` atoms per Å^3 of the
    systems it is run on. `source` says where the numbers came from (profile or formula)."""

    name: str
    rows: tuple[CostRow, ...]
    layers: int
    cutoff_a: float
    halo_bytes: float
    params: int
    density: float
    device: str = "unknown"
    source: str = "unknown"
    mode: MlipMode = MlipMode.TRAIN
    ghost_depth_a: float = 0.0  # MD ghost shell depth in Å; 0: layers x cutoff (see md.py)
    md_scheme: MdScheme = MdScheme.GHOSTS  # where an MD step spends work on ghosts (see md.py)
    swap_s: float = 0.0  # MD: fixed seconds of each LAMMPS swap a multi-rank step adds (see md.py)

    def __post_init__(self) -> None:
        identifier(self.name, "cost table name", SpecError)
        identifier(self.device, "cost table device", SpecError)
        description(self.source, "cost table source", SpecError)
        if len(self.rows) < 2:
            raise SpecError(f"cost table {self.name!r}: needs at least two rows (atom counts), got {len(self.rows)}")
        atoms = [r.atoms for r in self.rows]
        if any(b <= a for a, b in zip(atoms, atoms[1:], strict=False)):
            raise SpecError(f"cost table {self.name!r}: atoms must be strictly increasing, got {atoms}")
        for key in ("step_s", "memory_bytes"):
            values = [getattr(r, key) for r in self.rows]
            if any(b < a for a, b in zip(values, values[1:], strict=False)):
                raise SpecError(f"cost table {self.name!r}: {key} must not decrease as atoms grow, got {values}")
        integer(self.layers, f"cost table {self.name!r}: layers", 1, 64, SpecError)
        # physical ranges: a cutoff of 0.1-100 Å (MLIPs use 4-12), 1e-6 to 10 atoms per Å^3 (a gas at 1 atm holds
        # 2.5e-5, water 0.1); a denormal density made the periodic box infinite
        real(self.cutoff_a, f"cost table {self.name!r}: cutoff_a", 0.1, 100.0, low_open=False, error=SpecError)
        real(self.halo_bytes, f"cost table {self.name!r}: halo_bytes", 0.0, 1e9, low_open=False, error=SpecError)
        integer(self.params, f"cost table {self.name!r}: params", 0, 10**12, SpecError)
        real(self.density, f"cost table {self.name!r}: density", 1e-6, 10.0, low_open=False, error=SpecError)
        real(self.ghost_depth_a, f"cost table {self.name!r}: ghost_depth_a", 0.0, 1000.0, low_open=False,
             error=SpecError)
        real(self.swap_s, f"cost table {self.name!r}: swap_s", 0.0, 1.0, low_open=False, error=SpecError)
        if not isinstance(self.md_scheme, MdScheme):
            raise SpecError(f"cost table {self.name!r}: md_scheme must be one of "
                            f"{', '.join(m.value for m in MdScheme)}, got {self.md_scheme!r}")


@dataclass(frozen=True)
class MlipJob:
    """One training step over `structures` structures of `atoms` atoms each (a periodic cubic box) on `gpus`, or
    (mode MD) one MD step of one structure of `atoms` atoms, LAMMPS's domains one per GPU."""

    atoms: int
    structures: int
    gpus: int
    mode: MlipMode = MlipMode.TRAIN

    def __post_init__(self) -> None:
        integer(self.atoms, "--atoms", 1, MAX_ATOMS, SpecError)
        integer(self.structures, "--structures", 1, 10**9, SpecError)
        integer(self.gpus, "--gpus", 1, MAX_GPUS, SpecError)
        if self.mode is MlipMode.MD and self.structures != 1:
            raise SpecError(f"--mode md runs one structure (one LAMMPS box over all GPUs); got --structures "
                            f"{self.structures}: use 1, or --mode train")


@dataclass(frozen=True)
class MlipSplit:
    """`replicas` data-parallel groups of `domains` GPUs; each structure is cut into a px x py x pz grid of
    domains (product = domains), one per GPU of its group."""

    replicas: int
    grid: tuple[int, int, int]

    @property
    def domains(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def strategy(self) -> MlipStrategy:
        if self.domains == 1:
            return MlipStrategy.DATA_PARALLEL
        return MlipStrategy.DOMAIN if self.replicas == 1 else MlipStrategy.HYBRID

    def __post_init__(self) -> None:
        if self.replicas < 1 or min(self.grid) < 1:
            raise SpecError(f"replicas and grid must be positive, got {self.replicas} x {self.grid}")
