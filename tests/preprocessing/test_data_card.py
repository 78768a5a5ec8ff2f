"""The model card's Data section: the source (files with hashes, or Hub id + revision), the task card, and what the
checkpoint carries for raw inputs."""

from __future__ import annotations

import json

from huggingface_hub import ModelCard

from spt_hf.hub import write_model_card
from spt_hf.hub.data_card import preprocessing_kind, read_task_card
from spt_hf.hub.push import PUSH_PATTERNS

CARD = {
    "task": "custom",
    "source": {
        "kind": "data_files",
        "description": "reviews.csv",
        "files": [{"path": "/data/reviews.csv", "sha256": "ab" * 32}],
    },
    "columns": {"input": ["text"], "label": "sentiment"},
    "problem_type": "single_label_classification",
    "problem_type_evidence": "string labels",
    "label_names": ["neg", "pos"],
    "input_kind": "tokens",
    "tokenizer": "bytes",
    "vocab_size": 260,
    "max_length": 512,
    "max_length_rule": "longest train example",
    "truncation": "right",
    "splits": {"train": 80, "validation": 10, "test": 10},
    "truncated": {"train": 0, "validation": 1, "test": 0},
    "lengths": {"train": {"min": 3, "median": 40.0, "max": 512}},
    "leakage": {"duplicates": {"train/test": 2}, "group_overlap": 0, "label_in_input": ["pos"]},
}


def checkpoint(tmp_path, card: dict | None, tokenizer: bool):
    folder = tmp_path / "finetune"
    folder.mkdir()
    architecture = {"model_type": "spt_s4", "architectures": ["S4ForSequenceClassification"], "num_labels": 2}
    (folder / "config.json").write_text(json.dumps(architecture))
    if card is not None:
        (folder / "task_card.json").write_text(json.dumps(card))
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def test_card_names_the_source_files_and_hashes_and_summarises_the_task_card(tmp_path):
    folder = checkpoint(tmp_path, CARD, tokenizer=True)
    assert read_task_card(folder) == CARD and preprocessing_kind(folder) == "tokenizer"
    text = ModelCard.load(write_model_card(folder, "me/reviews")).text
    data = text[text.index("## Data") :]
    for expected in (
        "| source | reviews.csv |",
        f"| `reviews.csv` | `{'ab' * 32}` |",
        "| problem type | single_label_classification (string labels) |",
        "| classes | `neg`, `pos` |",
        "| inputs | tokens (bytes tokenizer, vocabulary of 260) |",
        "| max_length | 512 (longest train example), truncation right |",
        "| examples per split | train 80, validation 10, test 10 |",
        "| lengths (min/median/max) | train 3/40.0/512 |",
        "duplicates train/test 2; group overlap 0; label text in the inputs of ['pos']",
        'pipeline("text-classification", model="me/reviews", trust_remote_code=True, truncation=True)',
    ):
        assert expected in data, expected
    assert {"task_card.json", "tokenizer.json", "preprocessor_config.json"} <= set(PUSH_PATTERNS)


def test_card_names_a_hub_source_with_its_revision(tmp_path):
    card = {"source": {"kind": "hub", "description": "hub me/set", "hub_id": "me/set", "hub_revision": "c0ffee"}}
    folder = checkpoint(tmp_path, card, tokenizer=False)
    text = ModelCard.load(write_model_card(folder)).text
    assert "| hub_id | `me/set` |" in text and "| hub_revision | `c0ffee` |" in text
    assert "pipeline(" not in text  # no tokenizer, no feature extractor: no raw-input snippet
    (tmp_path / "bare").mkdir()
    bare = checkpoint(tmp_path / "bare", None, tokenizer=False)
    assert "The data source is not recorded with this checkpoint." in ModelCard.load(write_model_card(bare)).text
