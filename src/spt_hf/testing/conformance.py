"""`MixerConformance`: the checks spt_hf runs on its own architectures, as a pytest class a plugin author subclasses.

    class TestLRU(MixerConformance):
        config_class = LRUConfig
        mixer_class = LRUMixer      # None: already registered (spt_hf's own, or an installed plugin's entry point)
        tiny_config = {"state_size": 8}

Every test's failure message starts with the property it checks ("causal mode sees the future: ..."). The checks
where the input matters run for both input kinds (`INPUT_KINDS`: token ids, and continuous values of `CHANNELS`
channels with a padding mask). The pipeline test (5 SPT + 5 finetuning steps on digits) is marked `slow`; the rest
take seconds on a CPU.
"""

import importlib
import math
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig

from ..modeling.plugin_code import MODELING_DIR
from ..registry import auto_class, find_architecture, registered
from .remote import load_in_a_bare_process


def require_pytest():
    """pytest (the `test` extra): the kit is a pytest class; one line naming the extra when it is missing."""
    try:
        return importlib.import_module("pytest")
    except ImportError:
        raise ImportError('spt_hf.testing is a pytest kit: pip install pytest (or "spt_hf[test]").') from None


pytest = require_pytest()

VOCAB, LENGTH, BATCH, CHANNELS = 16, 10, 3, 3
INPUT_KINDS = ("tokens", "continuous")
by_input_kind = pytest.mark.parametrize("input_kind", INPUT_KINDS)


class MixerConformance:
    """Subclass with `config_class`, `mixer_class` (or None) and `tiny_config` (fields of a tiny model; hidden size,
    layers, vocabulary and labels are set here). `preset_name`: the name presets know the architecture by
    (default: its registry name); `atol`: the tolerance of the equality checks."""

    config_class: type = None
    mixer_class: type | tuple | None = None
    tiny_config: dict = {}
    preset_name: str | None = None
    atol: float = 1e-5

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def architecture(cls):
        """The registry entry of the architecture under test (registered for the class when `mixer_class` is set)."""
        if cls.mixer_class is None:
            yield find_architecture(cls.config_class.model_type)
            return
        with registered(cls.config_class, cls.mixer_class) as entry:
            yield entry

    # ------------------------------------------------------------------ helpers
    def config(self, input_kind: str = "tokens", **overrides):
        """A tiny config of `input_kind` (token ids: `vocab_size`; continuous values: `num_channels`)."""
        if input_kind == "tokens":
            kind = {"vocab_size": VOCAB}
        else:
            kind = {"vocab_size": None, "num_channels": CHANNELS, "tie_word_embeddings": False}
        values = {**kind, "hidden_size": 16, "num_hidden_layers": 2, "num_labels": 3}
        return AutoConfig.for_model(self.config_class.model_type, **{**values, **self.tiny_config, **overrides})

    def build(self, entry, auto_name: str, seed: int = 0, input_kind: str = "tokens", **overrides):
        if overrides.get("bidirectional") is False and not self.config_class.has_causal_form:
            pytest.skip(f"{self.config_class.__name__} has no causal form")
        torch.manual_seed(seed)
        return auto_class(auto_name).from_config(self.config(input_kind, **overrides)).eval()

    @staticmethod
    def inputs(seed: int = 0, length: int = LENGTH, pad_last: int = 0, input_kind: str = "tokens") -> dict:
        """A batch of `input_kind` (`input_ids` or `input_values`, zero at padding) with its `attention_mask`; the
        last example's final `pad_last` positions are padding."""
        generator = torch.Generator().manual_seed(seed)
        mask = torch.ones(BATCH, length, dtype=torch.long)
        if pad_last:
            mask[-1, length - pad_last :] = 0
        if input_kind == "tokens":
            ids = torch.randint(4, VOCAB, (BATCH, length), generator=generator)
            return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}
        values = torch.randn(BATCH, length, CHANNELS, generator=generator)
        return {"input_values": values * mask.unsqueeze(-1), "attention_mask": mask}

    @staticmethod
    def main_input(inputs: dict) -> str:
        return "input_ids" if "input_ids" in inputs else "input_values"

    # ------------------------------------------------------------------ the checks
    @by_input_kind
    def test_heads_build_through_auto_classes(self, architecture, input_kind):
        for auto_name in architecture.classes:
            causal = auto_name == "AutoModelForCausalLM"
            extra = {"bidirectional": False} if causal else {}
            model = self.build(architecture, auto_name, input_kind=input_kind, **extra)
            assert type(model) is architecture.classes[auto_name], (
                f"heads build through the Auto classes: {auto_name} built {type(model).__name__}"
            )
            inputs = self.inputs(pad_last=2, input_kind=input_kind)
            if auto_name == "AutoModelForRetrieval":
                name = self.main_input(inputs)
                inputs = {name: inputs[name], f"{name}_2": inputs[name].flip(1)}
            with torch.no_grad():
                out = model(**inputs)[0]
            assert torch.isfinite(out).all(), (
                f"heads build through the Auto classes: {auto_name} gives non-finite outputs for {input_kind} inputs"
            )

    def future_change(self, architecture, bidirectional: bool, input_kind: str = "tokens") -> tuple[int, float]:
        """(cut, how much the outputs before position `cut` move when every input from `cut` on changes)."""
        model = self.build(architecture, "AutoModel", bidirectional=bidirectional, input_kind=input_kind)
        inputs, cut = self.inputs(input_kind=input_kind), LENGTH // 2
        name = self.main_input(inputs)
        changed = {**inputs, name: inputs[name].clone()}
        if input_kind == "tokens":
            changed[name][:, cut:] = (changed[name][:, cut:] + 1 - 4) % (VOCAB - 4) + 4
        else:
            changed[name][:, cut:] += 1.0
        with torch.no_grad():
            before, after = (model(**x).last_hidden_state[:, :cut] for x in (inputs, changed))
        return cut, (before - after).abs().max().item()

    @by_input_kind
    def test_causal_mode_never_sees_the_future(self, architecture, input_kind):
        cut, diff = self.future_change(architecture, bidirectional=False, input_kind=input_kind)
        assert diff <= self.atol, (
            f"causal mode sees the future: {input_kind} inputs at positions >= {cut} changed earlier outputs by {diff}"
        )

    def test_bidirectional_mode_sees_the_future(self, architecture):
        cut, diff = self.future_change(architecture, bidirectional=True)
        assert diff > self.atol, (
            f"bidirectional mode sees the future: positions >= {cut} left the outputs before it unchanged"
        )

    @by_input_kind
    @pytest.mark.parametrize("pooling", ["mean", "last", "max"])
    def test_padding_does_not_change_pooled_outputs(self, architecture, pooling, input_kind):
        model = self.build(architecture, "AutoModelForSequenceClassification", pooling=pooling, input_kind=input_kind)
        inputs = self.inputs(pad_last=3, input_kind=input_kind)
        padded = {key: torch.cat([value, torch.zeros_like(value)[:, :4]], 1) for key, value in inputs.items()}
        padded[self.main_input(inputs)][:, LENGTH:] = 5  # any value: padding must not be read
        with torch.no_grad():
            diff = (model(**inputs).logits - model(**padded).logits).abs().max().item()
        assert diff <= 1e-4, (
            f"padding does not change pooled outputs: 4 more padded positions ({input_kind}) changed them by {diff}"
        )

    def test_step_equals_forward(self, architecture):
        model = self.build(architecture, "AutoModel", bidirectional=False)
        if not any(hasattr(block.mixer, "step") for layer in model.layers for block in layer.blocks):
            pytest.skip("the mixer has no recurrent step (init_state/step)")
        inputs = self.inputs()
        with torch.no_grad():
            parallel = model(**inputs).last_hidden_state
            recurrent = model(**inputs, use_cache=True).last_hidden_state
        diff = (parallel - recurrent).abs().max().item()
        assert diff <= 1e-4, f"step equals forward: the recurrent steps differ from the parallel pass by {diff}"

    def test_beam_search_reorders_states(self, architecture):
        model = self.build(architecture, "AutoModelForCausalLM", bidirectional=False)
        prompt = self.inputs(length=4)["input_ids"]
        settings = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
        settings.update(num_beams=2, num_return_sequences=2, return_dict_in_generate=True, output_scores=True)
        with torch.no_grad():
            try:
                cached = model.generate(prompt, **settings)
            except Exception as error:
                raise AssertionError(f"beam search reorders states: generate(num_beams=2) fails: {error}") from error
            parallel = model.generate(prompt, **settings, use_cache=False)  # the whole sequence at every step
        same = torch.equal(cached.sequences, parallel.sequences)
        diff = (cached.sequences_scores - parallel.sequences_scores).abs().max().item()
        assert same and diff <= 1e-3, (
            "beam search reorders states: generate(num_beams=2) with the cache differs from it without "
            f"(use_cache=False): {'the same' if same else 'other'} sequences, scores apart by {diff}"
        )

    @by_input_kind
    def test_save_load_identical_outputs(self, architecture, tmp_path, input_kind):
        model = self.build(architecture, "AutoModelForSequenceClassification", input_kind=input_kind)
        model.save_pretrained(tmp_path)
        loaded = auto_class("AutoModelForSequenceClassification").from_pretrained(tmp_path).eval()
        inputs = self.inputs(pad_last=2, input_kind=input_kind)
        with torch.no_grad():
            same = torch.equal(model(**inputs).logits, loaded(**inputs).logits)
        assert same, f"save -> load gives identical outputs: the reloaded model's outputs differ ({input_kind} inputs)"

    def test_remote_code_loads_without_spt_hf(self, architecture, tmp_path):
        model = self.build(architecture, "AutoModelForSequenceClassification")
        model.save_pretrained(tmp_path / "ckpt")
        shadowed = shadowed_modeling_files(tmp_path / "ckpt")
        assert not shadowed, (
            f"remote-code load without spt_hf: the checkpoint's {', '.join(shadowed)} differ from spt_hf's files of "
            "those names (a plugin module saved under an spt_hf modeling file's name replaces it)"
        )
        inputs = self.inputs(pad_last=2)
        with torch.no_grad():
            expected = model(**inputs).logits
        plugin = self.config_class.__module__.split(".")[0]
        blocked = [] if plugin == "spt_hf" else [plugin]
        logits, _ = load_in_a_bare_process(tmp_path / "ckpt", inputs, tmp_path / "work", blocked=blocked)
        diff = (logits - expected).abs().max().item()
        assert diff <= self.atol, f"remote-code load without spt_hf: outputs differ by {diff}"

    def test_bf16_autocast_gradients_finite(self, architecture):
        model = self.build(architecture, "AutoModelForMaskedLM").train()
        inputs = self.inputs(pad_last=2)
        labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
        masked = inputs["input_ids"].masked_fill(torch.rand(inputs["input_ids"].shape) < 0.5, 1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=masked, attention_mask=inputs["attention_mask"], labels=labels).loss
        loss.backward()
        bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
        assert math.isfinite(loss.item()) and not bad, f"bf16 autocast gradients are finite: not for {bad[:3]}"

    def recipes(self, architecture, tmp_path):
        from ..recipes.presets import recipes_for_task
        from ..training import load_recipe

        name = self.preset_name or architecture.name
        values = recipes_for_task("digits", {"input_kind": "tokens"}, [name], "tiny", max_steps=5)
        spt, finetune = (values[f"digits-{name}-{phase}.yaml"] for phase in ("spt", "finetune"))
        folder = str(tmp_path / "run")
        return load_recipe(None, {**spt, "output_dir": folder}), load_recipe(None, {**finetune, "output_dir": folder})

    def counted_flops(self, architecture, identity_mixers: bool = False) -> int:
        """FLOPs of one training step (forward and backward) of the tiny model under spt_hf's counter (the one the
        estimate and the recorded compute use), optionally with every mixer replaced by the identity."""
        from ..cost.flops import flop_counter

        model = self.build(architecture, "AutoModel").train()
        if identity_mixers:
            for block in [
                module for module in model.modules() if isinstance(getattr(module, "mixer", None), nn.Module)
            ]:
                block.mixer = IdentityMixer()
        with flop_counter() as counter:
            model(**self.inputs(pad_last=2)).last_hidden_state.float().square().mean().backward()
        return counter.get_total_flops()

    def test_estimate_counts_flops(self, architecture, tmp_path):
        from ..training.estimate import estimate_phase

        with_mixers, without = self.counted_flops(architecture), self.counted_flops(architecture, identity_mixers=True)
        assert with_mixers > without, (
            f"estimate counts the mixer's FLOPs: a training step counts {with_mixers} with the mixers and {without} "
            "with identities in their place; give the mixer's custom operators a FLOP formula (spt_hf.cost.flops)"
        )
        estimate = estimate_phase(self.recipes(architecture, tmp_path)[0], "spt", max_measure_length=64)
        assert estimate.flops_per_example > 0, "estimate counts FLOPs: it counted none for the SPT step"

    @pytest.mark.slow
    def test_spt_and_finetune_through_the_pipeline(self, architecture, tmp_path):
        from ..training.pipeline import run

        summary = run(*self.recipes(architecture, tmp_path))
        phases = summary["phases"]
        assert phases["finetune"]["init"]["kind"] == "spt", "5-step SPT and finetune: finetuning did not start from SPT"
        for phase in ("spt", "finetune"):
            loss = phases[phase]["metrics"]["test"].get("test_loss", float("nan"))
            assert math.isfinite(loss), f"5-step SPT and finetune: the {phase} test loss is {loss}"


def shadowed_modeling_files(folder: Path) -> list[str]:
    """The Python files of a checkpoint `folder` that bear the name of an spt_hf modeling file but not its text."""
    return [
        file.name
        for file in sorted(folder.glob("*.py"))
        if (MODELING_DIR / file.name).is_file() and file.read_bytes() != (MODELING_DIR / file.name).read_bytes()
    ]


class IdentityMixer(nn.Module):
    """A mixer that does nothing (its output is its input): the baseline the FLOP check counts the mixers against."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return hidden_states
