"""Vision-language models: the LLaVA preset's parameters and FLOPs against transformers' own LLaVA, the encoder
priced on the first pipeline stage, and the split that makes room for it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.compute import flops as F
from cost_models.step import evaluate_layout
from hardware_profiles import load_hardware
from meshcore import JobSpec, Layout, Schedule
from meshcore.errors import InputError, LayoutError
from planner import plan as run_plan
from planner.api import make_layout, resolve
from planner.inputs.loaders import load_model, model_from_hf_config, model_from_mapping, model_mapping
from planner.outputs.emitters import Target, UnsupportedPlanError, emit
from planner.outputs.planfile import save_plan
from planner.outputs.planread import load_plan
from planner.search.space import SearchSpec

torch = pytest.importorskip("torch", reason="torch is not installed (the [profile] extra)")


def _llava_config(tiny: bool):  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (the [profile] extra)")
    if tiny:
        vision = transformers.CLIPVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                               num_attention_heads=4, image_size=28, patch_size=14)
        text = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, vocab_size=500)
        return transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=499)
    vision = transformers.CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                           num_attention_heads=16, image_size=336, patch_size=14)
    text = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                    num_attention_heads=32, num_key_value_heads=32, vocab_size=32064)
    return transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=32000)


def test_llava_parameters_equal_transformers() -> None:
    """LLaVA-1.5-7B's configuration built by transformers on the meta device: the HF config loader and the
    preset both count exactly its 7,063,427,072 parameters (vision tower, projector, language model)."""
    from transformers import LlavaForConditionalGeneration

    config = _llava_config(tiny=False)
    with torch.device("meta"):
        model = LlavaForConditionalGeneration(config)
    theirs = sum(p.numel() for p in model.parameters())
    assert F.total_params(model_from_hf_config(config.to_dict(), "llava")) == theirs
    assert F.total_params(load_model("llava-1.5-7b")) == theirs == 7_063_427_072
    tower = sum(p.numel() for p in model.model.vision_tower.parameters())
    projector = sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    ours = load_model("llava-1.5-7b")
    assert F.vision_params(ours) == tower + projector and F.projector_params(ours) == projector


def test_llava_flops_equal_flop_counter() -> None:
    """Forward + backward of transformers' LLaVA counted by FlopCounterMode equals 3 x our forward count, less
    what autograd skips there: the patch convolution has no input gradient (pixels need none), and LLaVA reads
    the penultimate encoder layer, so the last one runs forward only."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlavaForConditionalGeneration

    config = _llava_config(tiny=True)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config)
    model.config._attn_implementation = "eager"
    batch, seq = 2, 32
    ids = torch.randint(0, 499, (batch, seq))
    ids[:, 1:5] = 499  # one image: its 4 patch tokens
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, pixel_values=torch.randn(batch, 3, 28, 28), labels=ids).loss.backward()
    ours = model_from_hf_config(config.to_dict(), "llava")
    assert ours.vision is not None
    vision = ours.vision
    last_layer = F.decoder_matmul_flops(vision.as_model(), vision.tokens)
    conv = 2 * vision.patches * 3 * vision.patch_size**2 * vision.hidden_size
    expected = batch * (F.model_flops_per_sequence(ours, seq) - 2 * last_layer - conv)
    assert counter.get_total_flops() == pytest.approx(expected, rel=1e-12)


def _llava_problem(gpus: int = 8):  # type: ignore[no-untyped-def]
    return resolve("llava-1.5-7b", "h100-sxm", gpus=gpus, seq_len=4096, global_batch=64)


def test_encoder_is_priced_on_the_first_stage() -> None:
    problem = _llava_problem()
    layout = make_layout(problem, tp=2, pp=2, mbs=1, stage_layers=(16, 16))
    pred = evaluate_layout(problem.model, problem.cluster, problem.job, layout)
    first, last = pred.stages
    text_only = replace(problem.model, vision=None)
    base = evaluate_layout(text_only, problem.cluster, problem.job, layout)
    assert first.compute_s > base.stages[0].compute_s and last.compute_s == pytest.approx(base.stages[1].compute_s)
    assert first.weights_gib > base.stages[0].weights_gib and first.other_gib > base.stages[0].other_gib
    # the encoder's FLOPs count as model FLOPs
    assert pred.model_tflops_per_gpu * pred.step_time_s > base.model_tflops_per_gpu * base.step_time_s


def test_split_makes_room_for_the_encoder() -> None:
    """With a heavy encoder (8 images per sample) the exact 1F1B split gives the first stage fewer layers."""
    model = load_model("llava-1.5-7b")
    assert model.vision is not None
    heavy = replace(model, vision=replace(model.vision, images=8))
    cluster = load_hardware("h100-sxm", 8)
    result = run_plan(heavy, cluster, gpus=8, seq_len=4096, global_batch=64,
                      spec=SearchSpec(tp=1, pp=4, vpp=1, schedule=Schedule.ONE_F_ONE_B, top_k=1))
    layers = result.best.layout.chunk_layers(heavy.num_layers)
    assert layers[0] < max(layers[1:])


def test_vision_rules_and_files(tmp_path: Path) -> None:
    problem = _llava_problem(gpus=32)
    with pytest.raises(LayoutError, match="vision encoder heads 16 not divisible by tp 32"):
        Layout(tp=32).validate(problem.model, JobSpec(seq_len=4096, global_batch=64), 32)
    model = load_model("llava-1.5-7b")
    assert model_from_mapping(model_mapping(model), "test") == model
    partial = {k: v for k, v in model_mapping(model).items() if k != "vision_patch_size"}
    with pytest.raises(InputError, match=r"needs all of .*missing \['vision_patch_size'\]"):
        model_from_mapping(partial, "test")
    result = run_plan("llava-1.5-7b", "h100-sxm", gpus=8, seq_len=4096, global_batch=64, spec=SearchSpec(top_k=1))
    save_plan(result, tmp_path / "plan.yaml")
    assert load_plan(tmp_path / "plan.yaml").model == model
    with pytest.raises(UnsupportedPlanError, match="vision-language models"):
        emit(result, Target.MEGATRON)
