"""The inputs benchmarks/fuzz.py feeds meshplan: one generated case per index, from Random(f"{seed}-{index}").

Every generator starts from a valid input (a tiny model, the H100 profile, a cost table, a plan made at set-up)
and changes one to three things, marking the case `bad` when a change makes it clearly invalid and `edge` when
it stays legal or arguable. Files go to one scratch folder per worker, overwritten case after case.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NAN, INF, HUGE = math.nan, math.inf, 10**20
ROOT = Path(__file__).resolve().parents[1]
# targets and their shares of the cases
TARGETS = {"cli-options": 24, "model-yaml": 11, "hf-config": 8, "hardware": 10, "cost-table": 6, "chain-table": 4,
           "plan-file": 19, "calibrate-runs": 4, "api": 14, "nesting-size": 6, "names-in-scripts": 4,
           "output-paths": 3}

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
        "num_kv_heads": 4, "vocab_size": 1000, "gated_mlp": True, "tied_embeddings": False}
TINY_MOE = {**TINY, "name": "tiny-moe", "moe_num_experts": 8, "moe_top_k": 2, "moe_ffn_hidden_size": 256,
            "moe_first_dense_layers": 1, "moe_shared_ffn_hidden_size": 256}
TINY_MLA = {**TINY_MOE, "name": "tiny-mla", "head_dim": 24, "mla_q_lora_rank": 64, "mla_kv_lora_rank": 32,
            "mla_qk_nope_head_dim": 16, "mla_qk_rope_head_dim": 8, "mla_v_head_dim": 16, "mtp_layers": 1}
TINY_VLM = {**TINY, "name": "tiny-vlm", "vision_num_layers": 2, "vision_hidden_size": 128,
            "vision_ffn_hidden_size": 256, "vision_num_attention_heads": 4, "vision_image_size": 224,
            "vision_patch_size": 14, "vision_projector_hidden": 256}
MODEL_INT_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size", "num_kv_heads",
                  "head_dim", "learned_positions", "mtp_layers", "moe_num_experts", "moe_top_k", "moe_ffn_hidden_size",
                  "moe_shared_ffn_hidden_size", "moe_first_dense_layers", "moe_every", "moe_groups",
                  "moe_group_top_k", "mla_q_lora_rank", "mla_kv_lora_rank", "mla_qk_nope_head_dim",
                  "mla_qk_rope_head_dim", "mla_v_head_dim", "vision_num_layers", "vision_hidden_size",
                  "vision_ffn_hidden_size", "vision_num_attention_heads", "vision_image_size", "vision_patch_size",
                  "vision_projector_hidden", "vision_images")
MODEL_BOOL_KEYS = ("gated_mlp", "tied_embeddings", "qkv_bias", "linear_bias", "dropout", "qk_norm", "moe_router_bias",
                   "vision_class_token")
MODEL_REQUIRED = ("name", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size",
                  "gated_mlp", "tied_embeddings")
LLAMA = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "tie_word_embeddings": False}
HF_BASES: dict[str, dict[str, Any]] = {
    "llama": LLAMA,
    "qwen2": {**LLAMA, "model_type": "qwen2", "attention_bias": True},
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_layer": 4, "n_head": 8, "n_inner": None, "n_positions": 1024,
             "vocab_size": 1000, "resid_pdrop": 0.1},
    "mixtral": {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {**LLAMA, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 128, "decoder_sparse_step": 1},
    "deepseek_v3": {**LLAMA, "model_type": "deepseek_v3", "n_routed_experts": 8, "num_experts_per_tok": 2,
                    "moe_intermediate_size": 64, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 2,
                    "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
                    "qk_rope_head_dim": 8, "v_head_dim": 16, "num_nextn_predict_layers": 1},
    "llama4_text": {**LLAMA, "model_type": "llama4_text", "num_local_experts": 4, "num_experts_per_tok": 1,
                    "intermediate_size_mlp": 512, "interleave_moe_layer_step": 2},
    "llava": {"model_type": "llava", "text_config": LLAMA,
              "vision_config": {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
                                "num_attention_heads": 4, "image_size": 224, "patch_size": 14}},
}
HF_LOOSE = ("tie_word_embeddings", "attention_bias", "resid_pdrop", "model_type", "n_inner", "q_lora_rank", "n_group",
            "topk_group")  # read with `or`/bool() defaults: any value is arguable
BROKEN_TEXT = ["", "[]", "42", "null", "name: [unclosed", "!!python/object/apply:os.system ['true']", "a: b: c",
               "\x00\x01\x02 binary", "- 1\n- 2\n", "{\"a\": ", "key: value\n" * 3, "\ufeff", "~"]
BAD_INT_VALUES: list[Any] = [-1, 1.5, 2.0, "8", "x", NAN, INF, HUGE, True, [], {}]
EDGE_INTS = [1, 2, 3, 4, 8, 16, 64]
BAD_REAL_VALUES: list[Any] = [NAN, INF, -INF, -1.0, 0, HUGE, "fast", True, None, [1.0]]


@dataclass(frozen=True)
class Case:
    target: str
    what: str
    bad: bool
    args: list[str] | None = None  # a command line, or
    call: Callable[[], Any] | None = None  # a Python API call


def _pick(rng: random.Random, values: Sequence[Any]) -> Any:
    return values[rng.randrange(len(values))]


def _text(value: Any) -> str:
    """A short, readable form of a generated value."""
    try:
        text = json.dumps(value, allow_nan=True) if not isinstance(value, str) else repr(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Inputs:
    """The cases of one worker: base inputs made once, files written to `folder`."""

    def __init__(self, folder: Path, seed: int) -> None:
        self.folder, self.seed = folder, seed
        self.tiny = self._write("tiny.yaml", yaml.safe_dump(TINY))
        self.tiny_moe = self._write("tiny-moe.yaml", yaml.safe_dump(TINY_MOE))
        self.h100 = yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text())
        self.cost_rows = _cost_rows()
        self.chain_rows = _chain_rows()
        self.plans = self._base_plans()
        self.plan_path = self._write("base-plan.json", json.dumps(self.plans[0]))

    def _write(self, name: str, text: str | bytes) -> str:
        path = self.folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogateescape")
        return str(path)

    def _base_plans(self) -> list[dict[str, Any]]:
        import planner
        from meshcore import Runtime
        from planner.api import model_and_costs
        from planner.outputs.planfile import plan_to_dict

        table = self._write("base-costs.csv", _csv(self.cost_rows))
        research = Runtime(framework="any")  # plans of every shape (ZB-V, per-stage recomputation) to break
        model, runtime, limits = model_and_costs(None, Path(table), 128, research)
        made = [planner.plan(self.tiny, "h100-sxm", gpus=4, seq_len=512, global_batch=16, spec=spec, runtime=research)
                for spec in (planner.SearchSpec(pp=2, vpp=2, schedule="zb-v"),
                             planner.SearchSpec(pp=2, recompute="full"), planner.SearchSpec(pp=2, vpp=2),
                             planner.SearchSpec(pp=1))]
        made.append(planner.plan(self.tiny_moe, "h100-sxm", gpus=4, seq_len=512, global_batch=16, runtime=research))
        made.append(planner.plan(model, "h100-sxm", gpus=4, seq_len=128, global_batch=8, runtime=runtime,
                                 spec=planner.SearchSpec(**limits)))
        return [plan_to_dict(p) for p in made]

    @staticmethod
    def target_of(seed: int, index: int) -> str:
        rng = random.Random(f"{seed}-{index}")
        return rng.choices(list(TARGETS), weights=list(TARGETS.values()))[0]

    def case(self, index: int) -> Case:
        rng = random.Random(f"{self.seed}-{index}")
        target = rng.choices(list(TARGETS), weights=list(TARGETS.values()))[0]
        make: Callable[[random.Random], Case] = getattr(self, target.replace("-", "_"))
        return make(rng)

    # ---- jobs around a file --------------------------------------------------------------------------------

    def _job(self, rng: random.Random) -> list[str]:
        return ["--gpus", str(_pick(rng, [1, 2, 4, 8])), "--seq-len", str(_pick(rng, [128, 512])),
                "--global-batch", str(_pick(rng, [8, 16]))]

    def _model_case(self, rng: random.Random, target: str, path: str, what: str, bad: bool) -> Case:
        roll = rng.random()
        if roll < 0.7:
            command = "evaluate" if roll < 0.45 else "plan"
            return Case(target, what, bad, args=[command, "--model", path, "--hardware", "h100-sxm", *self._job(rng)])
        import planner

        if roll < 0.85:
            return Case(target, what, bad, call=lambda: planner.load_model(path))
        return Case(target, what, bad, call=lambda: planner.evaluate(path, "h100-sxm", gpus=4, seq_len=512,
                                                                      global_batch=8))

    # ---- model YAML ----------------------------------------------------------------------------------------

    def model_yaml(self, rng: random.Random) -> Case:
        data = copy.deepcopy(_pick(rng, [TINY, TINY, TINY_MOE, TINY_MLA, TINY_VLM]))
        notes, bad = [data["name"]], False
        if rng.random() < 0.06:
            text = _pick(rng, BROKEN_TEXT)
            return self._model_case(rng, "model-yaml", self._write("m.yaml", text), f"file {text!r}", True)
        wrong: dict[str, bool] = {}
        for _ in range(_pick(rng, [1, 1, 1, 2, 3])):
            key, note, wrong[key] = _change_model(rng, data)
            notes.append(note)
        bad = any(wrong.values())
        path = self._write(_pick(rng, ["m.yaml", "m.yml"]), yaml.safe_dump(data, allow_unicode=True))
        return self._model_case(rng, "model-yaml", path, "; ".join(notes), bad)

    # ---- Hugging Face config.json --------------------------------------------------------------------------

    def hf_config(self, rng: random.Random) -> Case:
        kind = _pick(rng, sorted(HF_BASES))
        data = copy.deepcopy(HF_BASES[kind])
        if rng.random() < 0.06:
            text = _pick(rng, [*BROKEN_TEXT, "{\"model_type\": \"llama\",}", "[1, 2]", "NaN"])
            return self._model_case(rng, "hf-config", self._write("config.json", text), f"file {text!r}", True)
        body = data["text_config"] if kind == "llava" and rng.random() < 0.6 else (
            data["vision_config"] if kind == "llava" else data)
        key = _pick(rng, sorted(body))
        roll = rng.random()
        if roll < 0.5 and key != "model_type":
            value = _pick(rng, BAD_INT_VALUES + [None, 0])
            body[key] = value
            wrong = key not in HF_LOOSE and value is not None and not (type(value) is int and value == 0)
            note = f"{kind}: {key} = {_text(value)}"
        elif roll < 0.7:
            body[key] = value = _pick(rng, EDGE_INTS) if key != "model_type" else _pick(rng, ["bert", "", 3])
            wrong, note = key == "model_type", f"{kind}: {key} = {_text(value)}"
        elif roll < 0.85:
            del body[key]
            wrong, note = False, f"{kind}: no {key}"
        else:
            body[_pick(rng, ["rope_scaling", "torch_dtype", "extra"])] = _pick(rng, [1e6, "bfloat16", None])
            wrong, note = False, f"{kind}: an unread key"
        return self._model_case(rng, "hf-config", self._write("config.json", json.dumps(data)), note, wrong)

    # ---- hardware profiles and fragments -------------------------------------------------------------------

    def hardware(self, rng: random.Random) -> Case:
        if rng.random() < 0.35:
            hw, note, bad = self._fragment(rng)
        else:
            data = copy.deepcopy(self.h100)
            note, bad = _change_profile(rng, data)
            if rng.random() < 0.04:
                text = _pick(rng, BROKEN_TEXT)
                note, bad, hw = f"file {text!r}", True, self._write("hw.yaml", text)
            else:
                hw = self._write("hw.yaml", yaml.safe_dump(data))
        gpus = _pick(rng, [1, 2, 4, 8])
        if rng.random() < 0.6:
            return Case("hardware", note, bad, args=["evaluate", "--model", self.tiny, "--hardware", hw,
                                                     "--gpus", str(gpus), "--seq-len", "512", "--global-batch", "8"])
        import planner

        return Case("hardware", note, bad, call=lambda: planner.load_hardware(hw, gpus))

    def _fragment(self, rng: random.Random) -> tuple[str, str, bool]:
        roll = rng.random()
        if roll < 0.08:
            return _pick(rng, ["h100-sxm,", "h100-sxm,/no/such/fragment.yaml", "no-such-gpu", ",", "h100-sxm,,"]), \
                "a missing fragment or preset", True
        if roll < 0.18:
            frag: Any = _pick(rng, [{"calibration": _pick(rng, [None, 3, "x", [1], {"runs": "x"}, {"runs": [1, 2]},
                                                                 {"runs": 3, "before_pct": NAN}])}])
            note, bad = f"calibration section {_text(frag['calibration'])}", False
        elif roll < 0.3:
            frag = _pick(rng, [{"gpus": {"memory_gib": 40}}, {"gpu": {"memory": 40}}, {"gpu": 40}, [1], "x",
                               {"node": None}, {None: {"a": 1}}])
            note, bad = f"fragment {_text(frag)}", True
        else:
            data = copy.deepcopy(self.h100)
            note, bad = _change_profile(rng, data, removals=False)
            section = next((s for s in ("gpu", "node", "network") if _json(data[s]) != _json(self.h100[s])), "gpu")
            frag = {section: {k: v for k, v in data[section].items() if _differs(self.h100[section].get(k), v) or
                              k not in self.h100[section] or rng.random() < 0.2}}
        return f"h100-sxm,{self._write('frag.yaml', yaml.safe_dump(frag))}", note, bad

    # ---- cost tables ---------------------------------------------------------------------------------------

    def cost_table(self, rng: random.Random) -> Case:
        rows = copy.deepcopy(self.cost_rows)
        note, bad, text = _change_table(rng, rows, chain=False)
        path = self._write(_pick(rng, ["c.csv", "c.csv", "c.txt"]), text)
        seq = 128 if rng.random() < 0.9 else _pick(rng, [64, 129])
        bad |= seq != 128
        gpus = _pick(rng, [1, 2, 4])
        if rng.random() < 0.6:
            return Case("cost-table", note, bad, args=["plan", "--costs", path, "--hardware", "h100-sxm", "--gpus",
                                                       str(gpus), "--seq-len", str(seq), "--global-batch", "8"])
        from meshcore import Runtime
        from planner.api import model_and_costs

        return Case("cost-table", note, bad, call=lambda: model_and_costs(None, Path(path), seq, Runtime()))

    def chain_table(self, rng: random.Random) -> Case:
        rows = copy.deepcopy(self.chain_rows)
        note, bad, text = _change_table(rng, rows, chain=True)
        path = self._write("chain.csv", text)
        gpus = _pick(rng, [1, 2, 4, 8])
        if rng.random() < 0.6:
            return Case("chain-table", note, bad, args=["plan", "--costs", path, "--hardware", "a100-40gb", "--gpus",
                                                        str(gpus), "--seq-len", "1", "--global-batch", "64"])
        from hardware_profiles import load_hardware
        from planner.search.chain import plan_chain, read_chain

        return Case("chain-table", note, bad,
                    call=lambda: plan_chain(read_chain(path), load_hardware("a100-40gb", gpus), 64))

    # ---- plan files ----------------------------------------------------------------------------------------

    def plan_file(self, rng: random.Random) -> Case:
        data = copy.deepcopy(_pick(rng, self.plans))
        as_json = rng.random() < 0.75
        if rng.random() < 0.05:
            text = _pick(rng, BROKEN_TEXT)
            note, bad = f"file {text!r}", True
        else:
            note, bad = _change_plan(rng, data)
            text = json.dumps(data) if as_json else yaml.safe_dump(data, sort_keys=False)
            if rng.random() < 0.04:
                cut = rng.randrange(len(text))
                text, note, bad = text[:cut], f"cut at {cut} of {len(text)} characters", True
        path = self._write("plan.json" if as_json else "plan.yaml", text)
        roll = rng.random()
        if roll < 0.3:
            return Case("plan-file", note, bad, args=["explain", path])
        if roll < 0.45:
            to = _pick(rng, ["megatron", "torchtitan", "deepspeed", "nemo"])
            return Case("plan-file", note, bad, args=["emit", path, "--to", to, *(["--strict"] * (rng.random() < .3))])
        if roll < 0.55:
            return Case("plan-file", note, bad, args=["evaluate", "--plan", path,
                                                      *(["--hardware", "a100-80gb"] * (rng.random() < 0.3))])
        if roll < 0.65:
            out = str(self.folder / "trial")
            return Case("plan-file", note, bad, args=["trial", path, "--to", _pick(rng, ["megatron", "torchtitan",
                                                                                        "deepspeed"]), "--out", out])
        import planner

        reprice = rng.random() < 0.5
        return Case("plan-file", note, bad, call=lambda: planner.load_plan(path, reprice=reprice))

    # ---- calibration runs ----------------------------------------------------------------------------------

    def calibrate_runs(self, rng: random.Random) -> Case:
        runs = [{"name": "a", "model": "llama3-8b", "gpus": 8, "seq_len": 4096, "global_batch": 16, "tp": 1, "zero": 1,
                 "step_time_s": 1.1},
                {"name": "b", "model": "llama3-8b", "gpus": 8, "seq_len": 4096, "global_batch": 16, "tp": 2, "zero": 1,
                 "step_time_s": 1.3},
                {"name": "c", "model": "llama3-8b", "gpus": 16, "seq_len": 4096, "global_batch": 32, "tp": 2, "pp": 2,
                 "zero": 1, "step_time_s": 1.5}]
        run = _pick(rng, runs)
        key = _pick(rng, ["gpus", "seq_len", "global_batch", "tp", "pp", "mbs", "zero", "step_time_s",
                          "peak_memory_gib", "dtype", "recompute", "sp", "model", "name", "bogus", "schedule"])
        roll = rng.random()
        if roll < 0.6:
            pools: dict[str, list[Any]] = {
                "dtype": ["fp7", 3, None], "recompute": ["sometimes", 3], "sp": ["maybe", 2, 1.5],
                "model": ["no-such-model", 3, "", None], "name": [3, None, ""], "schedule": ["bogus", 3],
                "zero": [4, -1, 1.5, "x", True]}
            value = _pick(rng, pools.get(key, [0, -1, 1.5, NAN, INF, "x", HUGE, True, [], -0.0]))
            run[key] = value
            bad = not (key == "name" or value is None and key in ("dtype",) or key == "sp" and value == 2
                       or (value == 1.5 and key in ("step_time_s", "peak_memory_gib")))
        elif roll < 0.8:
            valid: dict[str, list[Any]] = {"dtype": ["fp8", "bf16"], "sp": [True, False],
                                           "recompute": ["full", "selective"]}
            run[key] = value = _pick(rng, valid.get(key, [1, 2, 4, 0.5]))
            bad = False
        else:
            value = run.pop(key, None)
            bad = key in ("gpus", "seq_len", "global_batch", "step_time_s", "model")
        note = f"run {run['name']}: {key} = {_text(value)}" if roll < 0.8 else f"run without {key}"
        if rng.random() < 0.35:
            keys = sorted({k for r in runs for k in r}, key=str)
            buf = io.StringIO()
            writer = csv.DictWriter(buf, fieldnames=keys)
            writer.writeheader()
            writer.writerows(runs)
            path = self._write("runs.csv", buf.getvalue())
        else:
            path = self._write("runs.yaml", yaml.safe_dump({"runs": runs} if rng.random() < 0.5 else runs))
        return Case("calibrate-runs", note, bad, args=["calibrate", path, "--hardware", "h100-sxm"])

    # ---- command-line options ------------------------------------------------------------------------------

    def cli_options(self, rng: random.Random) -> Case:
        from fuzz_calls import option_case

        return option_case(rng, self.tiny, self.tiny_moe, self.plan_path, str(self.folder / "trial-opts"))

    # ---- nesting and size limits (issue 37) ---------------------------------------------------------------

    def nesting_size(self, rng: random.Random) -> Case:
        from fuzz_limits import Limits, run_cli

        what, bad, args = Limits(self).case(rng)
        return Case("nesting-size", what, bad, call=lambda: run_cli(args))

    # ---- the Python API ------------------------------------------------------------------------------------

    def names_in_scripts(self, rng: random.Random) -> Case:
        """A hostile or safe name: in a model YAML given to `plan` (refused unless safe), or put past the loaders
        into a plan whose every emitted file and trial script is checked and run (benchmarks/fuzz_outputs.py)."""
        from fuzz_limits import run_cli
        from fuzz_outputs import emit_everything, hostile_name

        folder = self.folder / "names"
        name, bad = hostile_name(rng, folder / "PWNED")
        if rng.random() < 0.5:
            path = self._write("named.yaml", yaml.safe_dump({**TINY, "name": name}))
            return Case("names-in-scripts", f"model name {_text(name)}", bad,
                        call=lambda: run_cli(["plan", "--model", path, "--hardware", "h100-sxm", *self._job(rng)]))
        return Case("names-in-scripts", f"emitted with name {_text(name)}", False,
                    call=lambda: emit_everything(self._launch_plan(), name, folder))

    def _launch_plan(self) -> Any:
        """A small Llama-3-8B plan every launcher emits (made once per worker)."""
        if not hasattr(self, "_plan"):
            import planner

            self._plan = planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                                      spec=planner.SearchSpec(top_k=1))
        return self._plan

    def output_paths(self, rng: random.Random) -> Case:
        """`plan --out` at a symlink, FIFO, device, folder, '', '-', a missing folder or an over-long name."""
        from fuzz_outputs import output_case, special_path

        path, what, bad, start = special_path(rng, self.folder / "outputs")
        args = ["plan", "--model", self.tiny, "--hardware", "h100-sxm", *self._job(rng), "--out", path]
        return Case("output-paths", f"--out {what}", bad, call=lambda: output_case(args, path, start))

    def api(self, rng: random.Random) -> Case:
        from fuzz_calls import api_case

        return api_case(rng, self.tiny, self.plan_path, self.folder)


# ---- changes to a model mapping --------------------------------------------------------------------------------

def _change_model(rng: random.Random, data: dict[str, Any]) -> tuple[str, str, bool]:
    """(the key changed, what changed, whether that makes the model invalid)."""
    op = _pick(rng, ["int_bad", "int_bad", "int_edge", "int_zero", "bool_bad", "norm", "del", "unknown", "name"])
    if op in ("int_bad", "int_edge", "int_zero"):
        key = _pick(rng, [k for k in MODEL_INT_KEYS if k in data] if rng.random() < 0.8 else list(MODEL_INT_KEYS))
        value = {"int_bad": lambda: _pick(rng, BAD_INT_VALUES), "int_edge": lambda: _pick(rng, EDGE_INTS),
                 "int_zero": lambda: 0}[op]()
        data[key] = value
        return key, f"{key} = {_text(value)}", op == "int_bad"
    if op == "bool_bad":
        key = _pick(rng, MODEL_BOOL_KEYS)
        data[key] = value = _pick(rng, [1, 0, "yes", "true", 1.5, [], None])
        return key, f"{key} = {_text(value)}", True
    if op == "norm":
        data["norm"] = value = _pick(rng, ["batchnorm", 3, None, "layernorm", "rmsnorm"])
        return "norm", f"norm = {_text(value)}", value not in ("layernorm", "rmsnorm")
    if op == "del":
        key = _pick(rng, sorted(data))
        del data[key]
        return key, f"no {key}", key in MODEL_REQUIRED
    if op == "unknown":
        key = _pick(rng, ["hiden_size", "layers", "moe_experts", "rope_scale"])
        data[key] = 1
        return key, f"an unknown key {key}", True
    data["name"] = value = _pick(rng, [3, None, "", "x" * 300, ["a"], "naïve/../name"])
    return "name", f"name = {_text(value)}", False


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _differs(a: Any, b: Any) -> bool:
    """Unequal, or of another type (8 and 8.0 differ: a count written 8.0 is refused)."""
    return type(a) is not type(b) or bool(a != b)


# ---- changes to a hardware profile ---------------------------------------------------------------------------

HW_REAL = {"gpu": ("memory_gib", "hbm_gbs", "peak_bf16_tflops", "peak_fp8_tflops", "attention_efficiency",
                   "memory_efficiency", "overlap_efficiency", "attention_half_seq", "attention_backward_ratio",
                   "fp8_matmul_ratio"),
           "node": ("scale_up_gbs", "scale_up_latency_us", "scale_up_efficiency"),
           "network": ("nic_gbps_per_gpu", "latency_us", "efficiency")}
HW_OPTIONAL = ("peak_fp8_tflops", "attention_half_seq", "attention_backward_ratio", "fp8_matmul_ratio", "architecture",
               "description", "host_op_us")
HW_UPPER = {"attention_backward_ratio": 2.0, "memory_gib": 1e6}


def _change_profile(rng: random.Random, data: dict[str, Any], removals: bool = True) -> tuple[str, bool]:
    roll = rng.random()
    section = _pick(rng, ["gpu", "node", "network"])
    if roll < 0.45:
        key = _pick(rng, HW_REAL[section])
        value = _pick(rng, BAD_REAL_VALUES + ([1.5] if "efficiency" in key or key == "fp8_matmul_ratio" else []))
        data[section][key] = value
        return f"{section}.{key} = {_text(value)}", value is not None or key not in HW_OPTIONAL
    if roll < 0.6:
        key = _pick(rng, HW_REAL[section])
        upper = 1.0 if "efficiency" in key or key == "fp8_matmul_ratio" else HW_UPPER.get(key, 1e9)
        value = _pick(rng, [rng.uniform(1e-3, upper), upper, 1e-6, float(rng.randint(1, 100))])
        data[section][key] = value
        return f"{section}.{key} = {value:g}", False  # may exceed the upper bound: edge
    if roll < 0.7:
        key = _pick(rng, ["gpus_per_node", "scale_up_size"])
        value = _pick(rng, [0, -1, 1.5, 8.0, "8", True, NAN, HUGE, 1, 2, 4, 16, 72])
        data["node"][key] = value
        return f"node.{key} = {_text(value)}", not (isinstance(value, int) and not isinstance(value, bool)
                                                    and 1 <= value <= 10**7)
    if roll < 0.8:
        value = _pick(rng, [[], [[1]], [[NAN, 0.5]], [[1e12, 1.5]], [[1e12, 0]], "x", [[1e12, 0.5, 3]],
                            [["a", 0.5]], None, [[1e12, 0.5], [1e9, 0.6]], [[1e9, 0.6], [1e12, 0.4]],
                            [[1e12, 0.5]], [[-1, 0.5]]])
        data["gpu"]["matmul_efficiency"] = value
        return f"gpu.matmul_efficiency = {_text(value)}", value != [[1e12, 0.5]]
    if roll < 0.88 and removals:
        key = _pick(rng, sorted(data[section]))
        del data[section][key]
        return f"no {section}.{key}", key not in HW_OPTIONAL
    if roll < 0.94:
        data[section][_pick(rng, ["memory", "nvlink_gbs", "bogus"])] = 1.0
        return f"{section}: an unknown key", True
    value = _pick(rng, ["pascal", 3, None])
    data["gpu"]["architecture"] = value
    return f"gpu.architecture = {_text(value)}", True


# ---- cost tables -----------------------------------------------------------------------------------------------

COST_COLUMNS = ("kind", "count", "tp", "mbs", "seq_len", "forward_ms", "backward_ms", "activation_bytes", "params",
                "output_bytes", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size",
                "device")
CHAIN_COLUMNS = COST_COLUMNS[:10]
INT_COLUMNS = ("count", "tp", "mbs", "seq_len", "hidden_size", "ffn_hidden_size", "num_attention_heads",
               "num_kv_heads", "vocab_size")


def _cost_rows() -> list[dict[str, Any]]:
    rows = []
    for tp in (1, 2):
        for mbs in (1, 2):
            for kind, count, ms, act, params in (("decoder", 4, 1.2, 7.8e5, 8.9e5), ("embedding", 1, 0.05, 128, 2.0e6),
                                                 ("lm_head", 1, 0.9, 1.1e6, 2.0e6)):
                rows.append({"kind": kind, "count": count, "tp": tp, "mbs": mbs, "seq_len": 128,
                             "forward_ms": ms * mbs / tp, "backward_ms": 2 * ms * mbs / tp,
                             "activation_bytes": act * mbs / tp, "params": params / tp, "output_bytes": 65536 * mbs,
                             "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 8,
                             "vocab_size": 1000, "device": "synthetic"})
    return rows


def _chain_rows() -> list[dict[str, Any]]:
    rows = []
    for tp in (1, 2):
        for mbs in (8, 16):
            k = mbs / 8 / tp
            rows += [{"kind": kind, "count": count, "tp": tp, "mbs": mbs, "seq_len": 1, "forward_ms": f * k,
                      "backward_ms": 2 * f * k, "activation_bytes": a * k, "params": p / tp, "output_bytes": o * k}
                     for kind, count, f, a, p, o in (("stem", 1, 2, 4e8, 9408, 2e8), ("early", 6, 6, 6e8, 2.2e5, 2e8),
                                                     ("late", 10, 3, 1e8, 4.7e6, 5e7), ("head", 1, 0.5, 1e6, 2e6, 4e4))]
    return rows


def _csv(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if columns is None:
        columns = list(rows[0]) if rows else []
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _change_table(rng: random.Random, rows: list[dict[str, Any]], chain: bool) -> tuple[str, bool, str]:
    """(what changed, bad, the table's text)."""
    columns = list(rows[0])
    numeric = [c for c in columns if c not in ("kind", "device")]
    roll = rng.random()
    i = rng.randrange(len(rows))
    if roll < 0.4:
        col = _pick(rng, numeric)
        value = _pick(rng, ["nan", "inf", "-inf", "-1", "", "abc", "1e400", "True"]
                      + (["1.5", "0", "1e20", "-0", "2.5"] if col in INT_COLUMNS else []))
        rows[i][col] = value
        return f"row {i + 1} {col} = {value!r}", True, _csv(rows, columns)
    if roll < 0.5:
        col = _pick(rng, numeric)
        value = _pick(rng, ["0", "1e-3", "123.5", "7"] if col not in INT_COLUMNS else ["1.0", "2", "3", "16"])
        rows[i][col] = value
        return f"row {i + 1} {col} = {value!r}", False, _csv(rows, columns)
    if roll < 0.58:
        value = _pick(rng, ["", " ", "conv", "Decoder", "decoder ", "1"])
        rows[i]["kind"] = value
        return f"row {i + 1} kind = {value!r}", not chain or not value.strip(), _csv(rows, columns)
    if roll < 0.66:
        col = _pick(rng, columns)
        columns.remove(col)
        return f"no column {col}", True, _csv(rows, columns)
    if roll < 0.72:
        extra = _pick(rng, ["extra", "hidden_size", "device", "Forward_ms"])
        for row in rows:
            row[extra] = "1"
        if extra not in columns:
            columns.append(extra)
        bad = extra != "device" and not (extra == "hidden_size" and not chain)
        return f"a column {extra}", bad, _csv(rows, columns)
    if roll < 0.8:
        kind = _pick(rng, sorted({r["kind"] for r in rows}))
        kept = [r for r in rows if r["kind"] != kind]
        return f"no {kind} rows", not chain, _csv(kept, columns)
    if roll < 0.86:
        del rows[i]
        return f"row {i + 1} dropped", not chain, _csv(rows, columns)
    if roll < 0.91:
        rows.append(dict(rows[i]))
        return f"row {i + 1} twice", True, _csv(rows, columns)
    if roll < 0.96:
        value = _pick(rng, [int(rows[i]["count"]) + 1, 5000, 2])
        changed = value != rows[i]["count"]
        rows[i]["count"] = value
        return f"row {i + 1} count = {value}", changed, _csv(rows, columns)
    text = _pick(rng, ["", ",".join(columns) + "\n", "\x00\xff", "kind\n", "a,b\n1,2\n"])
    return f"file {text!r}", True, text


# ---- changes to a plan file ----------------------------------------------------------------------------------

ENUM_KEYS = {"dtype", "attention", "schedule", "granularity", "solver", "recompute", "kind", "architecture", "norm",
             "modules", "recompute_modules", "zero_stage"}
FREE = ("step_time_band",)  # a plan-file object whose contents no reader interprets
LISTS_THAT_COUNT = {"layers_per_chunk", "full_layers_per_stage", "stages", "band_s", "layer_ranges"}
POSITIVE_FIGURES = {"step_time_s", "simulated_step_time_s", "memory_capacity_gib"}
NON_NEGATIVE_FIGURES = {"tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu",
                        "peak_memory_gib", "compute_s", "gap", "solve_time_s", "band_s"}


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [path, *(p for k, v in inner for p in _containers(v, (*path, k)))] if isinstance(value, dict | list) else []


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _name(path: tuple[Any, ...]) -> str:
    """The innermost mapping key of a path (the list's name for a list item)."""
    return next((str(k) for k in reversed(path) if isinstance(k, str)), "")


def _leaf_bad(path: tuple[Any, ...], old: Any, new: Any) -> bool:
    """Whether replacing `old` by `new` at `path` is clearly invalid."""
    if isinstance(new, float) and not math.isfinite(new):
        return True
    if any(k in FREE for k in path) or new is None:
        return False
    key, section = _name(path), path[0]
    number = (int, float)
    if type(old) in number and type(new) in number:  # 2.0 for an integer, a negative figure
        if type(old) is int and type(new) is float:
            return True
        return new < 0 if type(new) is int or section == "costs" or key in NON_NEGATIVE_FIGURES else (
            new <= 0 and (section in ("hardware", "job") or key in POSITIVE_FIGURES))
    if type(old) in number or type(old) is bool:
        return type(new) is not type(old)
    if isinstance(old, str):
        return key in ENUM_KEYS and _differs(old, new)
    return False


def _change_plan(rng: random.Random, data: dict[str, Any]) -> tuple[str, bool]:
    roll = rng.random()
    if roll < 0.65:
        path = _pick(rng, _leaves(data))
        if not path:
            return "unchanged", False
        parent, key = _at(data, path[:-1]), path[-1]
        old = parent[key]
        choices: list[Any] = [NAN, INF, None, "x", True]
        if isinstance(old, bool):
            choices += [not old, 1]
        elif isinstance(old, int):
            choices += [float(old), old + 0.5, -1 - abs(old), 0, old + 1, HUGE]
        elif isinstance(old, float):
            choices += [-abs(old) - 1, 0.0, old * 2, int(old)]
        elif isinstance(old, str):
            choices += ["", "bogus", 3]
        new = _pick(rng, choices)
        parent[key] = new
        where = ".".join(map(str, path))
        return f"{where}: {_text(old)} -> {_text(new)}", _leaf_bad(path, old, new)
    path = _pick(rng, _containers(data))
    target = _at(data, path)
    name = _name(path) if not path or isinstance(path[-1], str) else _name(path) + "[]"
    counted = _name(path) in LISTS_THAT_COUNT and not any(k in FREE for k in path)
    if isinstance(target, dict):
        if roll < 0.8 and target:
            key = _pick(rng, sorted(target, key=str))
            del target[key]
            return f"{'.'.join(map(str, path))}: no {key}", False
        target["bogus"] = 1
        return f"{'.'.join(map(str, path)) or 'top level'}: a key bogus", not any(k in FREE for k in path)
    if not target:
        return f"{name}: empty list left", False
    if roll < 0.8:
        target.pop()
        return f"{'.'.join(map(str, path))}: last item dropped", counted
    if roll < 0.9:
        target.append(copy.deepcopy(target[-1]))
        return f"{'.'.join(map(str, path))}: last item twice", counted
    i, j = rng.randrange(len(target)), rng.randrange(len(target))
    target[i], target[j] = target[j], target[i]
    swapped = target[i] != target[j] and path in (("parallelism", "layers_per_chunk"),
                                                   ("recompute", "full_layers_per_stage"), ("stages",))
    return f"{'.'.join(map(str, path))}: items {i} and {j} swapped", swapped
