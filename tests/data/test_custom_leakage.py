"""The leakage report of custom tasks, its three modes, and `spt-hf inspect` on a task file."""

from __future__ import annotations

import json
import logging

import pytest
import yaml
from custom_helpers import use_source

from spt_hf.cli import main as cli_main
from spt_hf.data import get_task_spec

TEXTS = [f"{'abc'[i % 3]} item {i}" for i in range(30)]


def leaky_splits() -> dict:
    """Train, and a test split that repeats 3 training texts; the class name is in every input of class 'alpha'."""
    labels = ["alpha" if i % 2 else "beta" for i in range(30)]
    texts = [f"alpha: {t}" if label == "alpha" else t for t, label in zip(TEXTS, labels, strict=True)]
    test = {"text": [*texts[:3], "zz new", "yy new"], "label": [*labels[:3], "alpha", "beta"]}
    return {"train": {"text": texts, "label": labels, "copy": labels, "who": [i % 10 for i in range(30)]}, "test": test}


def test_the_report_counts_duplicates_groups_copies_and_label_text(monkeypatch, tmp_path, caplog):
    splits = leaky_splits()
    splits["test"]["who"] = [0, 1, 2, 20, 21]
    splits["test"]["copy"] = splits["test"]["label"]
    options = {**use_source(monkeypatch, tmp_path, splits), "group_column": "who", "validation_size": 2}
    with caplog.at_level(logging.WARNING):
        leakage = get_task_spec("custom", **options).task_card["leakage"]
    assert leakage["duplicates"]["train/test"] == 3 and leakage["label_in_input"] == ["alpha"]
    assert leakage["group_overlap"] == 3  # groups 0, 1 and 2 are in train (or validation) and in test
    assert "3 test example(s) repeat a train input exactly (train/test)" in caplog.text
    copied = {**options, "input_column": "copy", "leakage_check": "warn"}
    assert get_task_spec("custom", **copied).task_card["leakage"]["input_is_label"] == ["copy"]


def test_leakage_check_error_is_one_line_and_off_skips_the_report(monkeypatch, tmp_path):
    options = {**use_source(monkeypatch, tmp_path, leaky_splits()), "input_column": "text"}
    with pytest.raises(ValueError, match=r"leakage: 3 test example\(s\) repeat .* \(and 1 more\); fix the splits"):
        get_task_spec("custom", **options, leakage_check="error")
    assert get_task_spec("custom", **options, leakage_check="off").task_card["leakage"] == {"check": "off"}


def test_inspect_prints_the_card_and_json_with_the_issue_keys(monkeypatch, tmp_path, capsys):
    options = use_source(monkeypatch, tmp_path, leaky_splits())
    task_file = tmp_path / "task.yaml"
    task_file.write_text(yaml.safe_dump({"task": "custom", "task_options": {**options, "input_column": "text"}}))
    assert cli_main(["inspect", "--task_config", str(task_file), "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    keys = {"problem_type", "num_labels", "label_names", "input_kind", "vocab_size", "max_length", "splits", "lengths"}
    assert keys <= set(card) and card["splits"] == {"train": 27, "validation": 3, "test": 5}
    assert card["leakage"]["duplicates"]["train/test"] == 3 and set(card["lengths"]["test"]) == {"min", "median", "max"}
    assert cli_main(["inspect", "--task_config", str(task_file)]) == 0
    text = capsys.readouterr().out
    assert "problem type: single_label_classification (text values in column 'label')" in text
    assert "classes (2): alpha, beta" in text and "train/test 3" in text


def test_inspect_lists_splits_in_their_natural_order_fresh_and_cached(monkeypatch, tmp_path, capsys, isolated_cache):
    """train, validation, test: when the card is inferred, read back from the cache by a later process, or read from
    a cache an earlier version wrote in alphabetical order."""
    from spt_hf.data.custom import task as custom_task

    options = use_source(monkeypatch, tmp_path, leaky_splits())
    task_file = tmp_path / "task.yaml"
    task_file.write_text(yaml.safe_dump({"task": "custom", "task_options": {**options, "input_column": "text"}}))
    texts = []
    for _ in range(3):
        monkeypatch.setattr(custom_task, "_MEMO", {})  # a new process: the card from the cache
        assert cli_main(["inspect", "--task_config", str(task_file)]) == 0
        texts.append(capsys.readouterr().out)
        cached = list(isolated_cache.rglob("custom-inference/*.json"))
        assert len(cached) == 1
        cached[0].write_text(json.dumps(json.loads(cached[0].read_text()), indent=1, sort_keys=True))  # as before
    assert texts[0] == texts[1] == texts[2]
    lines = texts[0].splitlines()
    assert lines[1].startswith("splits: train 27 (") and lines[1].index("validation 3") < lines[1].index("test 5")
    assert [line.split(":")[0] for line in lines if line.startswith("  ") and "length min" in line] == [
        "  train",
        "  validation",
        "  test",
    ]


def test_inspect_errors_are_one_line(monkeypatch, tmp_path, capsys):
    options = use_source(monkeypatch, tmp_path, leaky_splits())
    task_file = tmp_path / "task.yaml"
    task_file.write_text(yaml.safe_dump({"task": "custom", "task_options": {**options, "label_column": "kind"}}))
    assert cli_main(["inspect", "--task_config", str(task_file)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert "no column 'kind'; columns: ['text', 'label', 'copy', 'who']; set label_column" in err[0]
    assert len(err) == 2 and err[1].startswith("(--debug")
