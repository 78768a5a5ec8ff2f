"""Packed sequences in the SPT phase (`packed_sequences: true`): padding-free rows give the same per-sequence losses
as padding, models that cannot keep packed sequences apart and finetuning refuse them in one line, and a tiny
`spt-hf spt` run trains on them."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

from spt_hf.cli import main as cli_main
from spt_hf.data import IGNORE_INDEX, PAD_ID, CausalSPTCollator, MaskedSPTCollator, get_task_spec
from spt_hf.data.collators import packing_plan
from spt_hf.modeling.architectures import base_model_class
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import refuse_unpackable_model

LISTOPS_SPEC = get_task_spec("listops")
DIGITS_SPEC = get_task_spec("digits", input_kind="continuous")
TRANSFORMER = {"model_type": "spt_rotary_transformer", "num_attention_heads": 2, "intermediate_size": 32}
TINY_TRAINING = {
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 16,
    "learning_rate": 3e-3,
    "max_steps": 4,
    "eval_strategy": "steps",
    "eval_steps": 2,
    "save_strategy": "steps",
    "save_steps": 2,
    "logging_steps": 2,
    "seed": 0,
}
LISTOPS = {
    "task": "listops",
    "generate_data": {
        "num_train": 32,
        "num_val": 16,
        "num_test": 16,
        "min_length": 8,
        "max_length": 40,
        "max_depth": 3,
    },
}
LENGTHS = [11, 3, 17, 6, 9, 17, 1, 12]  # uneven, two of the longest, one of a single position


def write_recipe(path: Path, **values) -> Path:
    path.write_text(json.dumps(values))  # JSON is YAML
    return path


def token_examples(lengths=LENGTHS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(4, 19, n).tolist(), "label": i % 10} for i, n in enumerate(lengths)]


def value_examples(lengths=LENGTHS, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"input_values": rng.integers(0, 16, (n, 1)).astype(np.float32), "label": 0} for n in lengths]


def segments(position_ids: torch.Tensor) -> torch.Tensor:
    """(R, L) index of the sequence each position belongs to within its row (0, 1, ...; the padding is the last)."""
    return (position_ids == 0).long().cumsum(1) - 1


def test_packing_plan_places_every_sequence_once_within_the_capacity():
    rows = packing_plan(LENGTHS, 17)
    assert sorted(i for row in rows for i in row) == list(range(len(LENGTHS)))
    assert all(sum(LENGTHS[i] for i in row) <= 17 for row in rows)
    assert len(rows) == 5 < len(LENGTHS)  # 76 positions in 5 rows of 17 instead of 8
    assert rows[0] == [2] and rows[1] == [5]  # longest first, ties in batch order
    with pytest.raises(ValueError, match="does not fit"):
        packing_plan([5, 9], 8)


def test_a_packed_batch_holds_the_padded_one():
    examples = token_examples()
    padded = CausalSPTCollator(LISTOPS_SPEC)(examples)
    packed = CausalSPTCollator(LISTOPS_SPEC, packed=True)(examples)
    assert set(packed) == {"input_ids", "labels", "position_ids"}  # no attention_mask
    rows = packing_plan(LENGTHS, max(LENGTHS))
    assert packed["input_ids"].shape == (len(rows), max(LENGTHS))
    for row, members in enumerate(rows):
        start = 0
        for index in members:
            n = LENGTHS[index]
            assert packed["input_ids"][row, start : start + n].tolist() == examples[index]["input_ids"]
            assert packed["position_ids"][row, start : start + n].tolist() == list(range(n))
            assert packed["labels"][row, start] == IGNORE_INDEX  # never predicted from the sequence before
            assert torch.equal(packed["labels"][row, start + 1 : start + n], padded["labels"][index, 1:n])
            start += n
        padding = packed["position_ids"][row, start:]
        assert padding.tolist() == list(range(len(padding)))  # the row's padding is a sequence of its own
        assert (packed["input_ids"][row, start:] == PAD_ID).all() and (packed["labels"][row, start:] == -100).all()
    # The Trainer counts the same loss targets (labels[..., 1:] of a causal LM) in both.
    assert (padded["labels"][:, 1:] != -100).sum() == (packed["labels"][:, 1:] != -100).sum()


def test_masked_packing_keeps_each_examples_mask():
    """The masks are drawn on the padded batch (a pure function of seed, epoch and example), then packed."""
    examples = [{**ex, "spt_epoch": 0, "spt_index": i} for i, ex in enumerate(token_examples())]
    padded = MaskedSPTCollator(LISTOPS_SPEC, mask_rate=0.4, seed=3)(examples)
    packed = MaskedSPTCollator(LISTOPS_SPEC, mask_rate=0.4, seed=3, packed=True)(examples)
    for row, members in enumerate(packing_plan(LENGTHS, max(LENGTHS))):
        start = 0
        for index in members:
            n = LENGTHS[index]
            for key in ("input_ids", "labels"):
                assert torch.equal(packed[key][row, start : start + n], padded[key][index, :n])
            start += n
    assert (packed["labels"] != -100).sum() == (padded["labels"] != -100).sum() > 0


def build(objective: str, config_overrides: dict, input_kind: str = "tokens"):
    inputs = {"vocab_size": LISTOPS_SPEC.vocab_size} if input_kind == "tokens" else {"num_channels": 1}
    sizes = {"hidden_size": 16, "num_hidden_layers": 2}
    if config_overrides["model_type"] == "spt_backbone":  # the sizes are the backbone's
        config_overrides = {**config_overrides, "backbone_config": {**sizes, **config_overrides["backbone_config"]}}
        sizes = {}
    values = {**sizes, **inputs, **config_overrides}
    values["bidirectional"] = objective == "masked"
    config = AutoConfig.for_model(**values)
    torch.manual_seed(0)
    auto = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    return auto.from_config(config).double().eval()


def per_sequence_losses(model, batch: dict, causal: bool, rows=None) -> dict[int, float]:
    """{example index: sum of its token losses} from a padded batch (rows None) or a packed one (rows: its plan)."""
    batch = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    with torch.no_grad():
        logits = model(**batch).logits  # (B or R, L, V)
    labels = batch["labels"]
    if causal:
        logits, labels = logits[:, :-1], labels[:, 1:]  # position t predicts t + 1
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # (B or R, L')
    if rows is None:
        return {i: losses[i].sum().item() for i in range(losses.shape[0])}
    owner = segments(batch["position_ids"])[:, 1:] if causal else segments(batch["position_ids"])
    out = {}
    for row, members in enumerate(rows):
        for k, index in enumerate(members):
            out[index] = losses[row][owner[row] == k].sum().item()
    return out


LLAMA = {"model_type": "llama", "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32}
PACKING_MODELS = [
    pytest.param("causal", {**TRANSFORMER, "position_embedding_type": "rotary"}, id="causal-rotary"),
    pytest.param("causal", {**TRANSFORMER, "position_embedding_type": "absolute"}, id="causal-absolute"),
    pytest.param("masked", {**TRANSFORMER, "position_embedding_type": "rotary"}, id="masked-rotary"),
    pytest.param("masked", {**TRANSFORMER, "position_embedding_type": "absolute"}, id="masked-absolute"),
    pytest.param("causal", {"model_type": "spt_backbone", "backbone_config": LLAMA}, id="causal-backbone-llama"),
]


@pytest.mark.parametrize("objective, model_config", PACKING_MODELS)
def test_packed_and_padded_give_the_same_per_sequence_losses(objective, model_config):
    model = build(objective, model_config)
    examples = [{**ex, "spt_epoch": 0, "spt_index": i} for i, ex in enumerate(token_examples())]
    causal = objective == "causal"
    collator = CausalSPTCollator if causal else MaskedSPTCollator
    padded = collator(LISTOPS_SPEC)(examples)
    packed = collator(LISTOPS_SPEC, packed=True)(examples)
    rows = packing_plan(LENGTHS, max(LENGTHS))
    alone, together = per_sequence_losses(model, padded, causal), per_sequence_losses(model, packed, causal, rows)
    assert set(together) == set(range(len(LENGTHS)))
    for index in range(len(LENGTHS)):
        assert together[index] == pytest.approx(alone[index], abs=1e-5, rel=1e-5), index
    assert sum(alone.values()) > 0
    # The head's own loss (the mean over the same targets) too.
    as_double = [{k: v.double() if v.is_floating_point() else v for k, v in b.items()} for b in (padded, packed)]
    with torch.no_grad():
        losses = [model(**b).loss.item() for b in as_double]
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)


def test_packing_changes_the_losses_of_a_model_that_would_mix_the_sequences():
    """The check has teeth: without restarting positions (one sequence per row) the packed losses differ."""
    model = build("causal", TRANSFORMER)
    examples = token_examples()
    packed = CausalSPTCollator(LISTOPS_SPEC, packed=True)(examples)
    mixed = {**packed, "position_ids": torch.arange(packed["input_ids"].shape[1]).expand_as(packed["input_ids"])}
    with torch.no_grad():
        assert abs(model(**mixed).loss.item() - model(**packed).loss.item()) > 1e-4


def test_masked_spt_of_continuous_inputs_packs_exactly():
    """Continuous inputs: the loss is taken at the mask positions only, which packing carries over."""
    model = build("masked", TRANSFORMER, input_kind="continuous")
    examples = [{**ex, "spt_epoch": 0, "spt_index": i} for i, ex in enumerate(value_examples())]
    padded = MaskedSPTCollator(DIGITS_SPEC)(examples)
    packed = MaskedSPTCollator(DIGITS_SPEC, packed=True)(examples)
    assert set(packed) == {"input_values", "mask_positions", "labels", "position_ids"}
    assert packed["mask_positions"].sum() == padded["mask_positions"].sum() > 0
    as_double = [{k: v.double() if v.is_floating_point() else v for k, v in b.items()} for b in (padded, packed)]
    with torch.no_grad():
        losses = [model(**b).loss.item() for b in as_double]
    assert losses[1] == pytest.approx(losses[0], abs=1e-6)


def test_causal_spt_of_continuous_inputs_refuses_packing():
    with pytest.raises(ValueError, match=r"causal SPT of continuous inputs .* set packed_sequences: false"):
        CausalSPTCollator(DIGITS_SPEC, packed=True)


def spt_values(tmp_path, **values) -> dict:
    return {**LISTOPS, **TRANSFORMER, **TINY_TRAINING, "output_dir": str(tmp_path / "run"), **values}


@pytest.mark.parametrize(
    "values, message",
    [
        ({"model_type": "spt_s4", "state_size": 8}, r"S4Model cannot keep packed sequences apart"),
        ({"model_type": "spt_dlr", "state_size": 8}, r"DLRModel cannot keep packed sequences apart"),
        (  # masked: Linformer has no causal form, which its config refuses first
            {"model_type": "spt_linformer", "projected_length": 8, "objective": "masked"},
            r"LinformerModel cannot keep packed sequences",
        ),
        ({"attention_window": 8}, r"block-local attention \(attention_window: 8\)"),
        ({"norm_type": "batchnorm"}, r"norm_type: batchnorm"),
        (
            {"model_type": "spt_backbone", "backbone_config": {"model_type": "mamba", "state_size": 8}},
            r"spt_backbone \(mamba, causal\) cannot keep packed sequences apart",
        ),
        (
            {"model_type": "spt_backbone", "backbone_config": {"model_type": "llama"}, "objective": "masked"},
            r"spt_backbone \(llama, bidirectional\)",
        ),
    ],
    ids=["s4", "dlr", "linformer", "block-local", "batchnorm", "mamba", "bidirectional-llama"],
)
def test_models_that_would_mix_packed_sequences_are_refused_with_the_recipe(values, message, tmp_path):
    """One line naming the architecture and the fix, when the recipe is loaded (before any data or model)."""
    objective = values.pop("objective", "causal")
    model = values if "model_type" in values else {**TRANSFORMER, **values}
    sizes = ("hidden_size", "num_hidden_layers") if model["model_type"] == "spt_backbone" else ()  # the backbone's
    training = {key: value for key, value in TINY_TRAINING.items() if key not in sizes}
    recipe = {**LISTOPS, **training, **model, "objective": objective, "packed_sequences": True}
    if objective == "causal":
        recipe["bidirectional"] = False
    path = write_recipe(tmp_path / "x-spt.yaml", **recipe, output_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=message) as refused:
        load_recipe(path, phase="spt")
    assert "set packed_sequences: false" in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_a_built_model_that_would_mix_packed_sequences_is_refused():
    """The pipeline checks the built model too: spt_backbone's backbone from its resolved config, the attention."""
    mamba = build("causal", {"model_type": "spt_backbone", "backbone_config": {"model_type": "mamba", "state_size": 8}})
    with pytest.raises(ValueError, match=r"spt_backbone \(mamba, causal\) cannot keep packed sequences apart"):
        refuse_unpackable_model(mamba)
    refuse_unpackable_model(build("causal", {"model_type": "spt_backbone", "backbone_config": LLAMA}))
    refuse_unpackable_model(build("masked", TRANSFORMER))
    s4 = build("masked", {"model_type": "spt_s4", "state_size": 8})
    with pytest.raises(ValueError, match=r"S4Model cannot keep packed sequences apart.*packed_sequences: false"):
        refuse_unpackable_model(s4)


def packing_config(model_type: str, **values):
    """A tiny config of `model_type` (causal unless `bidirectional` is given), as a recipe or a built model has it."""
    values = {"vocab_size": LISTOPS_SPEC.vocab_size, "bidirectional": False, **values}
    return base_model_class(model_type).config_class(**values)


@pytest.mark.parametrize(
    "model_type, values, reason",
    [
        ("spt_rotary_transformer", {}, None),
        ("spt_rotary_transformer", {"bidirectional": True}, None),
        ("spt_rotary_transformer", {"attn_implementation": "sdpa"}, None),
        ("spt_rotary_transformer", {"attn_implementation": "eager"}, None),
        (
            "spt_rotary_transformer",
            {"attn_implementation": "flash_attention_2"},
            "RotaryTransformerModel with attn_implementation 'flash_attention_2' is not given the packed-sequence mask",
        ),
        (
            "spt_rotary_transformer",
            {"attention_window": 8},
            "RotaryTransformerModel with block-local attention (attention_window: 8) cannot keep packed sequences",
        ),
        (
            "spt_rotary_transformer",
            {"norm_type": "batchnorm"},
            "RotaryTransformerModel with norm_type: batchnorm takes its statistics over every position, a packed "
            "row's padding too",
        ),
        ("spt_s4", {}, "S4Model cannot keep packed sequences apart (its mixers would run one sequence into the next)"),
        ("spt_performer", {}, "PerformerModel cannot keep packed sequences apart"),
        ("spt_spade", {"attention_window": 8}, "SpadeModel cannot keep packed sequences apart"),
        ("spt_backbone", {"backbone_config": LLAMA}, None),
        ("spt_backbone", {"backbone_config": {"model_type": "gpt_neox"}}, None),
        ("spt_backbone", {"backbone_config": LLAMA, "bidirectional": True}, "spt_backbone (llama, bidirectional)"),
        ("spt_backbone", {"backbone_config": {"model_type": "mamba"}}, "spt_backbone (mamba, causal) cannot keep"),
        (
            "spt_backbone",
            {"backbone_config": LLAMA, "norm_type": "batchnorm", "attn_implementation": "flash_attention_2"},
            "spt_backbone (llama, causal) with norm_type: batchnorm",
        ),
        ("spt_backbone", {"backbone_config": LLAMA, "attn_implementation": "flash_attention_2"}, None),
    ],
)
def test_the_model_class_says_why_its_config_cannot_pack(model_type, values, reason):
    """Each base model class answers from a config alone (the recipe's, or a built model's): the first reason that
    applies (mixers, attention window, norm, attention implementation), or None."""
    refusal = base_model_class(model_type).packing_refusal(packing_config(model_type, **values))
    assert refusal == reason if reason is None else refusal.startswith(reason)


def test_spt_hf_run_packs_the_spt_phase_only(tmp_path, monkeypatch):
    """`spt-hf run --packed_sequences true` gives the switch to the SPT recipe; finetuning pads (and would refuse)."""
    import spt_hf.report.comparison as report
    import spt_hf.training.pipeline as pipeline

    seen = {}

    def fake_run(spt_recipe, finetune_recipe, with_scratch=False):
        seen.update(spt=spt_recipe.spt.packed_sequences, finetune=finetune_recipe.spt.packed_sequences)
        return {"run_dir": str(tmp_path / "run")}

    monkeypatch.setattr(pipeline, "run", fake_run)
    monkeypatch.setattr(report, "report", lambda folders: "")
    values = spt_values(tmp_path)
    spt = write_recipe(tmp_path / "x-spt.yaml", **values, objective="masked")
    write_recipe(tmp_path / "x-finetune.yaml", **values)
    assert cli_main(["run", "--config", str(spt), "--packed_sequences", "true"]) == 0
    assert seen == {"spt": True, "finetune": False}


def test_finetuning_refuses_packed_sequences(tmp_path):
    path = write_recipe(tmp_path / "x-finetune.yaml", **spt_values(tmp_path, packed_sequences=True))
    with pytest.raises(ValueError, match=r"pools each row into one prediction .* packed_sequences: false"):
        load_recipe(path, phase="finetune")
    with pytest.raises(ValueError, match="pooled together"):
        load_recipe(path, phase="scratch")


@pytest.mark.parametrize("objective", ["masked", "causal"])
def test_spt_run_on_packed_listops_equals_the_padded_run(objective, tmp_path):
    """`spt-hf spt` with packed_sequences: true trains on packed rows (the counted batch has position_ids and no
    attention_mask); the same run padded reaches the same losses, and the recipe fingerprint is the same."""
    extra = {"objective": objective, **({"bidirectional": False} if objective == "causal" else {})}
    results = {}
    for packed in (False, True):
        folder = tmp_path / ("packed" if packed else "padded")
        path = write_recipe(tmp_path / f"{folder.name}-spt.yaml", **spt_values(tmp_path, **extra))
        args = ["spt", "--config", str(path), "--output_dir", str(folder)]
        assert cli_main(args + (["--packed_sequences", "true"] if packed else [])) == 0
        results[packed] = json.loads((folder / "spt" / "results.json").read_text())
    counted = results[True]["compute"]["counted_batch"]
    assert "position_ids" in counted and "attention_mask" not in counted
    assert counted["input_ids"][0] < TINY_TRAINING["per_device_train_batch_size"]  # fewer rows than examples
    assert "attention_mask" in results[False]["compute"]["counted_batch"]
    for split in ("validation", "test"):
        padded, packed = results[False]["metrics"][split], results[True]["metrics"][split]
        loss = "eval_loss" if split == "validation" else "test_loss"
        assert packed[loss] == pytest.approx(padded[loss], rel=1e-5)
    train_losses = [[e["loss"] for e in r["learning_curve"] if "loss" in e] for r in (results[False], results[True])]
    assert train_losses[0] and train_losses[1] == pytest.approx(train_losses[0], rel=1e-5)
    assert results[True]["recipe_fingerprint"]["sha256"] == results[False]["recipe_fingerprint"]["sha256"]
