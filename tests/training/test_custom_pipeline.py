"""`task: custom` through the pipeline: SPT then finetuning on a tiny source, labels named in the saved config."""

import json

import numpy as np
import pytest
from custom_helpers import text_splits, use_source

from spt_hf.cli import main as cli_main
from spt_hf.data import get_task_spec
from spt_hf.training import load_recipe
from spt_hf.training.pipeline import run

TINY = {
    "model_type": "spt_rotary_transformer",
    "num_attention_heads": 2,
    "intermediate_size": 32,
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


def test_spt_then_finetune_on_a_custom_task(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits(48, 16))
    common = {
        "task": "custom",
        "task_options": {**options, "split_seed": 1},
        **TINY,
        "output_dir": str(tmp_path / "run"),
    }
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    summary = run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    assert summary["phases"]["finetune"]["init"]["kind"] == "spt"
    result = json.loads((tmp_path / "run" / "finetune" / "results.json").read_text())
    assert result["data"]["split_sizes"] == {"train": 43, "validation": 5, "test": 16}
    assert result["metrics"]["test"]
    saved = next((tmp_path / "run" / "finetune").rglob("config.json"))
    config = json.loads(saved.read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["vocab_size"] == 18


def test_a_multichannel_series_task_pretrains_on_values_and_finetunes(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    labels = ["up", "down"] * 20
    series = [
        (rng.normal(size=(3, 12 + i % 5)) + (1.0 if label == "up" else -1.0)).tolist() for i, label in enumerate(labels)
    ]
    options = use_source(monkeypatch, tmp_path, {"train": {"series": series, "label": labels}})
    common = {"task": "custom", "task_options": options, **TINY, "output_dir": str(tmp_path / "run")}
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    summary = run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    assert summary["phases"]["spt"]["metrics"]["metric_for_best_model"] == "loss"
    config = json.loads(next((tmp_path / "run" / "finetune").rglob("config.json")).read_text())
    assert config["num_channels"] == 3 and config["id2label"] == {"0": "down", "1": "up"}


def test_spt_hf_spt_then_finetune_on_a_csv_file(tmp_path):
    pytest.importorskip("spt_hf.data.custom.sources", reason="the custom task's source readers are not installed")
    rows = [
        "text,label",
        *(f"{'abab' if i % 2 else 'cdcd'}{i},{'pos' if i % 2 else 'neg'}" for i in range(60)),
    ]
    (tmp_path / "reviews.csv").write_text("\n".join(rows) + "\n")
    options = {"data_files": str(tmp_path / "reviews.csv"), "leakage_check": "off"}
    common = {"task": "custom", "task_options": options, **TINY, "output_dir": str(tmp_path / "run")}
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    assert cli_main(["spt", "--config", str(tmp_path / "spt.yaml")]) == 0
    spt_dir = str(tmp_path / "run" / "spt")
    assert cli_main(["finetune", "--config", str(tmp_path / "finetune.yaml"), "--model_name_or_path", spt_dir]) == 0
    result = json.loads((tmp_path / "run" / "finetune" / "results.json").read_text())
    assert result["data"]["split_sizes"] == {"train": 49, "validation": 5, "test": 6}
    assert result["metrics"]["test"]
    from transformers import AutoTokenizer, pipeline

    saved = tmp_path / "run" / "finetune"
    assert json.loads((saved / "task_card.json").read_text())["label_names"] == ["neg", "pos"]
    spec = get_task_spec("custom", **options)
    assert AutoTokenizer.from_pretrained(saved)("abab7x")["input_ids"][:6] == spec.vocab.encode(
        "abab7x", unknown_ok=True
    )
    predicted = pipeline("text-classification", model=str(saved))(["abab7", "cdcd8"])
    assert {p["label"] for p in predicted} <= {"neg", "pos"}


def test_a_data_dir_option_reaches_the_custom_task_through_a_recipe(tmp_path):
    pytest.importorskip("spt_hf.data.custom.sources", reason="the custom task's source readers are not installed")
    from spt_hf.training.task_data import load_task_data

    folder = tmp_path / "data"
    folder.mkdir()
    for split, n in (("train", 40), ("test", 10)):
        rows = ["text,label", *(f"{'ab' if i % 2 else 'cd'}{split}{i},{i % 2}" for i in range(n))]
        (folder / f"{split}.csv").write_text("\n".join(rows) + "\n")
    recipe = {"task": "custom", "task_options": {"data_dir": str(folder)}, **TINY, "output_dir": str(tmp_path / "o")}
    (tmp_path / "r.yaml").write_text(json.dumps(recipe))
    task = load_task_data(load_recipe(tmp_path / "r.yaml"))
    assert task.split_sizes() == {"train": 36, "validation": 4, "test": 10} and task.spec.label_names == ("0", "1")


def test_inputs_repeated_across_the_sources_splits_are_not_an_spt_leak(monkeypatch, tmp_path):
    """UCR/UEA archives repeat training series in test: SPT saw them as training inputs, which finetuning trains on
    too, so the finetuning phase goes on (the leakage report counts them); an input only SPT saw still stops it."""
    splits = text_splits(48, 16)
    splits["test"]["text"][:3] = splits["train"]["text"][:3]
    splits["test"]["label"][:3] = splits["train"]["label"][:3]
    options = use_source(monkeypatch, tmp_path, splits)
    common = {"task": "custom", "task_options": options, **TINY, "output_dir": str(tmp_path / "run")}
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    summary = run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    assert summary["phases"]["finetune"]["init"]["kind"] == "spt"
    assert get_task_spec("custom", **options).task_card["leakage"]["duplicates"]["train/test"] == 3


def test_spt_then_finetune_on_class_folders_of_binary_files(tmp_path):
    pytest.importorskip("spt_hf.data.custom.sources", reason="the custom task's source readers are not installed")
    for label, base in (("low", 40), ("high", 80)):
        (tmp_path / "music" / label).mkdir(parents=True)
        for i in range(20):
            events = bytes(b for j in range(1 + i % 4) for b in (0, 0x90, base + (i + j) % 7, 64))
            (tmp_path / "music" / label / f"{i}.mid").write_bytes(b"MThd\x00\x00\x00\x06\x00\x00\x00\x01MTrk" + events)
    options = {"data_dir": str(tmp_path / "music")}
    common = {"task": "custom", "task_options": options, **TINY, "output_dir": str(tmp_path / "run")}
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    summary = run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    assert summary["phases"]["finetune"]["init"]["kind"] == "spt"
    config = json.loads(next((tmp_path / "run" / "finetune").rglob("config.json")).read_text())
    assert config["vocab_size"] == 260 and config["id2label"] == {"0": "high", "1": "low"}
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    data = (tmp_path / "music" / "low" / "3.mid").read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run" / "finetune")
    assert tokenizer("MThd")["input_ids"][:4] == [b + 4 for b in data[:4]]  # ids = bytes + 4 (docs/own-data.md)
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "finetune", trust_remote_code=True)
    label = model.config.id2label[int(model(input_ids=torch.tensor([[b + 4 for b in data]])).logits.argmax(-1))]
    assert label in ("high", "low")


def test_an_existing_tokenizer_reaches_the_checkpoint_and_the_pipeline(monkeypatch, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline

    splits = text_splits(48, 16)
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(
        splits["train"]["text"], trainers.WordPieceTrainer(vocab_size=50, special_tokens=["[UNK]"])
    )
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(tmp_path / "wp")
    options = {**use_source(monkeypatch, tmp_path, splits), "tokenizer": str(tmp_path / "wp")}
    common = {"task": "custom", "task_options": options, **TINY, "output_dir": str(tmp_path / "run")}
    (tmp_path / "spt.yaml").write_text(json.dumps({**common, "objective": "masked"}))
    (tmp_path / "finetune.yaml").write_text(json.dumps(common))
    run(load_recipe(tmp_path / "spt.yaml"), load_recipe(tmp_path / "finetune.yaml"))
    saved = tmp_path / "run" / "finetune"
    original = AutoTokenizer.from_pretrained(tmp_path / "wp")
    text = splits["test"]["text"][0]
    shifted = [i + 4 for i in original(text, add_special_tokens=False)["input_ids"]]
    assert AutoTokenizer.from_pretrained(saved)(text)["input_ids"] == shifted
    assert json.loads((saved / "config.json").read_text())["vocab_size"] == len(original) + 4
    assert pipeline("text-classification", model=str(saved))([text])[0]["label"] in ("neg", "pos")
