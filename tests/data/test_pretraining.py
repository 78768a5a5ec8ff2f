"""The train-only pretraining set and the leakage fingerprint."""

from __future__ import annotations

from pathlib import Path

import datasets
import numpy as np
import pytest

from spt_hf.data import (
    DataFingerprint,
    DataLeakageError,
    check_no_overlap,
    fingerprint_examples,
    fingerprint_info,
    get_task_spec,
    load_task,
    pretraining_dataset,
)


def test_pretraining_set_is_train_inputs_only() -> None:
    splits = load_task("digits")
    pre = pretraining_dataset(splits, get_task_spec("digits"))
    assert pre.column_names == ["input_ids"] and len(pre) == 500
    info = fingerprint_info(pre)
    assert info.num_examples == 500 and info.hashes.dtype == np.uint64 and info.hashes.size == 500
    assert info.to_dict()["digest"] == fingerprint_examples(splits["train"]) == info.digest
    for name in ("validation", "test"):
        assert check_no_overlap(info, splits[name], name=name) == 0


def test_fingerprint_is_order_independent_and_content_sensitive() -> None:
    train = load_task("digits")["train"]
    assert fingerprint_examples(train) == fingerprint_examples(train.select(range(499, -1, -1)))
    assert fingerprint_examples(train) != fingerprint_examples(train.select(range(499)))
    continuous = load_task("digits", input_kind="continuous")["train"]
    assert fingerprint_examples(continuous) != fingerprint_examples(train)


def test_overlap_is_refused_unless_allowed(tmp_path: Path) -> None:
    splits = load_task("digits")
    info = fingerprint_info(pretraining_dataset(splits, get_task_spec("digits")))
    leaky = datasets.concatenate_datasets([splits["test"].select(range(10)), splits["train"].select(range(3))])
    with pytest.raises(DataLeakageError, match="3 of 13 input sequences of the test split"):
        check_no_overlap(info, leaky, name="test")
    with pytest.warns(UserWarning, match="were used for pretraining"):
        assert check_no_overlap(info, leaky, allow_overlap=True) == 3
    np.save(tmp_path / "pretrain_hashes.npy", info.hashes)
    restored = DataFingerprint.from_hashes(np.load(tmp_path / "pretrain_hashes.npy"))
    with pytest.warns(UserWarning):
        assert check_no_overlap(restored, leaky, allow_overlap=True) == 3


def test_pairs_pretrain_on_each_document() -> None:
    pairs = datasets.Dataset.from_dict({"input_ids": [[4, 5], [6]], "input_ids_2": [[7], [4, 5]], "label": [0, 1]})
    spec = get_task_spec("retrieval")
    pre = pretraining_dataset(datasets.DatasetDict({"train": pairs}), spec)
    assert pre["input_ids"] == [[4, 5], [6], [7], [4, 5]]
    info = fingerprint_info(pre)
    assert info.num_examples == 4 and info.hashes.size == 3
    evaluation = datasets.Dataset.from_dict({"input_ids": [[9]], "input_ids_2": [[6]], "label": [0]})
    with pytest.raises(DataLeakageError, match="1 of 2"):
        check_no_overlap(info, evaluation)
