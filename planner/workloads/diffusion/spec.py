"""Diffusion transformers (DiT, SD3's MMDiT, Flux): the model, the image job and the parallel layout of xDiT
(Fang et al. 2024, "xDiT: an inference engine for diffusion transformers with massive parallelism"), validated
on construction."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore.checks import MAX_GPUS, MAX_LAYERS, MAX_WIDTH, identifier, integer, real
from meshcore.errors import LayoutError, SpecError
from meshcore.inference import Objective

MAX_PARAMS = 1e13  # text encoders + VAE, or a whole model: 10 trillion parameters (the largest have ~1e12)
TEXT_ENCODER_NAMES = ("t5-xxl", "clip-l", "clip-g")  # architectures in planner/workloads/diffusion/parts.py


@dataclass(frozen=True)
class DiffusionModel:
    """A DiT backbone. `double_layers` are MMDiT blocks (SD3, Flux's double-stream blocks: image and text tokens
    keep separate weights and meet in one joint attention), `single_layers` one weight stream over the joint
    sequence (DiT's blocks, Flux's single-stream blocks). Each block has attention (4·h² weights), an MLP
    (2·h·f) and an adaLN modulation of `*_modulation`·h² weights per stream (6 in DiT's adaLN-Zero and MMDiT,
    3 in Flux's single-stream blocks). The latent is `latent_channels` deep, `vae_downsample` times smaller
    than the image per side, cut into `patch_size`² patches; `text_tokens` join the sequence (0: class-
    conditioned). `cfg`: sampled with classifier-free guidance (two passes per step; Flux-dev is guidance-
    distilled: one). `encoder_params`: text encoders and VAE, held on every GPU. `text_encoders` run once per
    prompt (planner/workloads/diffusion/parts.py); `clip_tokens` of the `text_tokens` come from CLIP (SD3: 77), the rest
    from T5 (xfuser's --max_sequence_length)."""

    name: str
    hidden_size: int
    num_heads: int
    ffn_hidden_size: int
    double_layers: int
    single_layers: int
    patch_size: int
    latent_channels: int
    vae_downsample: int = 8
    text_tokens: int = 0
    cfg: bool = True
    default_steps: int = 28
    double_modulation: int = 6
    single_modulation: int = 6
    encoder_params: float = 0.0
    published_params: float | None = None
    text_encoders: tuple[str, ...] = ()
    clip_tokens: int = 0

    def __post_init__(self) -> None:
        identifier(self.name, "diffusion model name", SpecError)
        for enc in self.text_encoders:
            if enc not in TEXT_ENCODER_NAMES:
                raise SpecError(f"diffusion model {self.name!r}: unknown text encoder {enc!r}; known: "
                                f"{', '.join(TEXT_ENCODER_NAMES)}")
        if self.clip_tokens > self.text_tokens:
            raise SpecError(f"diffusion model {self.name!r}: clip_tokens {self.clip_tokens} exceed text_tokens "
                            f"{self.text_tokens}")
        for key in ("hidden_size", "num_heads", "ffn_hidden_size", "patch_size", "latent_channels",
                    "vae_downsample", "default_steps"):
            integer(getattr(self, key), f"diffusion model {self.name!r}: {key}", 1, MAX_WIDTH, SpecError)
        for key in ("double_layers", "single_layers", "text_tokens", "double_modulation", "single_modulation",
                    "clip_tokens"):
            integer(getattr(self, key), f"diffusion model {self.name!r}: {key}", 0, MAX_LAYERS * 100, SpecError)
        real(self.encoder_params, f"diffusion model {self.name!r}: encoder_params", 0.0, MAX_PARAMS, low_open=False,
             error=SpecError)
        if self.published_params is not None:
            real(self.published_params, f"diffusion model {self.name!r}: published_params", 1.0, MAX_PARAMS,
                 low_open=False, error=SpecError)
        if self.double_layers + self.single_layers < 1:
            raise SpecError(f"diffusion model {self.name!r}: needs at least one of double_layers, single_layers")
        if self.hidden_size % self.num_heads:
            raise SpecError(f"diffusion model {self.name!r}: hidden_size {self.hidden_size} not divisible by "
                            f"num_heads {self.num_heads}")

    @property
    def num_layers(self) -> int:
        return self.double_layers + self.single_layers

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class DiffusionJob:
    """Images of `resolution` x `resolution` pixels, `steps` denoising steps, `batch` images per request."""

    resolution: int
    steps: int
    batch: int = 1
    objective: Objective = Objective.LATENCY
    warmup_steps: int = 1  # PipeFusion's synchronous first steps (fill the stale-activation buffers)
    t5_tokens: int | None = None  # the prompt's T5 length (xfuser --max_sequence_length); None: the model's
    parallel_vae: bool = False  # decode patch-parallel over the replica (xfuser --use_parallel_vae)
    # the ring passes K/V by yunchang's send/recv beside each step's attention, as xDiT did before its USP path of
    # 2024-11 (xfuser/core/long_ctx_attention/ring/ring_flash_attn.py); False: PyTorch's all-gather ring (usp.py)
    send_recv_ring: bool = False

    def __post_init__(self) -> None:
        integer(self.resolution, "--resolution", 8, 65536, SpecError)
        integer(self.steps, "--steps", 1, 10000, SpecError)
        integer(self.batch, "--batch", 1, 4096, SpecError)
        integer(self.warmup_steps, "warmup steps", 0, 10000, SpecError)
        if self.t5_tokens is not None:
            integer(self.t5_tokens, "--max-sequence-length", 1, 65536, SpecError)


@dataclass(frozen=True)
class DiffusionLayout:
    """xDiT's hybrid parallelism on one replica of cfg x pipefusion x ring x ulysses GPUs (Ulysses innermost),
    `patches` PipeFusion patches per image, and `dp` replicas each making whole images."""

    ulysses: int = 1
    ring: int = 1
    pipefusion: int = 1
    cfg: int = 1
    patches: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for key in ("ulysses", "ring", "pipefusion", "patches", "dp"):
            integer(getattr(self, key), key, 1, MAX_GPUS, LayoutError)
        integer(self.cfg, "cfg", 1, 2, LayoutError)
        if self.pipefusion > 1 and self.patches < self.pipefusion:
            raise LayoutError(f"PipeFusion needs at least as many patches as stages, got {self.patches} patches for "
                              f"pipefusion {self.pipefusion}")
        if self.pipefusion == 1 and self.patches != 1:
            raise LayoutError("patches > 1 needs pipefusion > 1")

    @property
    def sp(self) -> int:
        return self.ulysses * self.ring

    @property
    def replica_gpus(self) -> int:
        return self.cfg * self.pipefusion * self.sp

    @property
    def gpus(self) -> int:
        return self.replica_gpus * self.dp

    def describe(self) -> str:
        parts = [f"ulysses{self.ulysses}", f"ring{self.ring}", f"pipefusion{self.pipefusion}"]
        parts += [f"patches{self.patches}"] if self.pipefusion > 1 else []
        return " ".join([*parts, f"cfg{self.cfg}", f"dp{self.dp}"])


def image_tokens(model: DiffusionModel, resolution: int) -> int:
    """Patch tokens of one image: (resolution / vae_downsample / patch_size)², e.g. Flux at 1024 px: 64² = 4096."""
    side = resolution // (model.vae_downsample * model.patch_size)
    if side < 1 or resolution % (model.vae_downsample * model.patch_size):
        raise SpecError(f"--resolution {resolution} must be a multiple of vae_downsample x patch_size = "
                        f"{model.vae_downsample * model.patch_size} for {model.name!r}")
    return side * side


def t5_tokens(model: DiffusionModel, job: DiffusionJob) -> int:
    """The prompt's T5 tokens: the job's, else the model's text tokens less its CLIP tokens."""
    return model.text_tokens - model.clip_tokens if job.t5_tokens is None else job.t5_tokens


def text_tokens(model: DiffusionModel, job: DiffusionJob) -> int:
    """Text tokens in the joint sequence: CLIP's and T5's (0 for a class-conditioned model)."""
    if model.text_tokens == 0:
        return 0
    return model.clip_tokens + t5_tokens(model, job)
