"""load_task: the Arrow cache, options, split conventions and task specs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from spt_hf.data import TASKS, get_task_spec, load_task, special_token_ids
from spt_hf.data.loading import default_cache_dir


def test_second_load_comes_from_cache(tmp_path: Path, lra_listops_writer, isolated_cache: Path) -> None:
    lra_listops_writer(tmp_path / "d", (20, 3, 3))
    first = load_task("listops", data_dir=tmp_path / "d")
    entries = list(isolated_cache.iterdir())
    assert len(entries) == 1 and (entries[0] / "dataset_dict.json").is_file()
    assert not [p for p in isolated_cache.iterdir() if p.name.endswith(".tmp")]
    start = time.perf_counter()
    second = load_task("listops", data_dir=tmp_path / "d")
    assert time.perf_counter() - start < 2.0
    assert second["train"]["input_ids"] == first["train"]["input_ids"]
    assert list(isolated_cache.iterdir()) == entries


def test_cache_key_follows_sources_and_options(tmp_path: Path, lra_listops_writer, isolated_cache: Path) -> None:
    lra_listops_writer(tmp_path, (10, 2, 2))
    load_task("listops", data_dir=tmp_path)
    load_task("listops", data_dir=tmp_path, max_length=64)
    assert len(list(isolated_cache.iterdir())) == 2
    path = tmp_path / "basic_test.tsv"
    path.write_text(path.read_text() + "( [MAX 1 2 ] )\t2\r\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert len(load_task("listops", data_dir=tmp_path)["test"]) == 3
    assert len(list(isolated_cache.iterdir())) == 3


def test_cache_dir_option_and_env(tmp_path: Path, lra_listops_writer, isolated_cache: Path) -> None:
    lra_listops_writer(tmp_path / "d", (5, 2, 2))
    load_task("listops", data_dir=tmp_path / "d", cache_dir=tmp_path / "mine")
    assert len(list((tmp_path / "mine").iterdir())) == 1 and default_cache_dir() == isolated_cache


def test_unknown_options_and_tasks_raise(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"unknown options \['max_lenght'\]; allowed"):
        load_task("listops", data_dir=tmp_path, max_lenght=10)
    with pytest.raises(KeyError, match="known tasks"):
        get_task_spec("lisops")
    with pytest.raises(ValueError, match="validation_from"):
        load_task("digits", validation_from="val")


def test_train_subsampling_is_seeded_and_touches_only_train() -> None:
    full = load_task("digits")
    a = load_task("digits", num_train_examples=50, seed=3)
    b = load_task("digits", num_train_examples=50, seed=3)
    c = load_task("digits", num_train_examples=50, seed=4)
    assert a["train"]["input_ids"] == b["train"]["input_ids"] != c["train"]["input_ids"]
    assert set(map(tuple, a["train"]["input_ids"])) <= set(map(tuple, full["train"]["input_ids"]))
    assert a["test"]["label"] == full["test"]["label"] and len(a["validation"]) == 400
    assert len(load_task("digits", train_fraction=0.1)["train"]) == 50


def test_split_seed_changes_the_pool_split() -> None:
    a, b = load_task("digits"), load_task("digits", split_seed=1)
    assert a["test"]["input_ids"] != b["test"]["input_ids"] and len(b["test"]) == 897


def test_every_spec_is_consistent() -> None:
    expected = {
        "listops",
        "text",
        "retrieval",
        "image",
        "pathfinder",
        "pathx",
        "pathx256",
        "scifar",
        "speech_commands",
        "bidmc",
        "digits",
        "fashion_mnist",
        "spoken_digits",
    }
    assert expected <= set(TASKS)
    for name in set(TASKS) - {"custom"}:  # the custom task needs a source (tests/data/test_custom_task.py)
        spec = get_task_spec(name)
        kwargs = spec.model_config_kwargs()
        assert spec.name == name and kwargs["num_labels"] == spec.num_labels
        if spec.input_kind == "tokens":
            assert kwargs["pad_token_id"] == 0 and kwargs["mask_token_id"] == 1 and spec.spt_target == "tokens"
        else:
            assert spec.num_channels >= 1 and spec.spt_target in ("values", "levels")
        features = spec.features()
        assert "label" in features and ("input_ids" in features) == (spec.input_kind == "tokens")
    assert get_task_spec("text").max_length == 4096 and get_task_spec("text", max_length=1000).max_length == 1000
    assert get_task_spec("listops", seed=3, cache_dir="x").max_length == 2048  # load options are ignored
    assert special_token_ids() == {"pad_token_id": 0, "mask_token_id": 1, "eos_token_id": 2, "unk_token_id": 3}
