"""`task: custom` on small generated sources: what is inferred from train, the splits, the cache and the card."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest
from custom_helpers import text_splits, use_source

from spt_hf.data import get_task_spec, load_task
from spt_hf.data.custom import task as custom_task
from spt_hf.data.custom.infer import Inference
from spt_hf.data.custom.inputs import InputPlan
from spt_hf.data.custom.labels import LabelPlan
from spt_hf.data.custom.raw import LabelHint
from spt_hf.data.spec import DataFormatError


def test_text_task_is_inferred_from_train_and_loads(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits())
    spec = get_task_spec("custom", **options)
    assert spec.input_kind == "tokens" and spec.tokenization == "chars"
    assert spec.label_names == ("neg", "pos") and spec.num_labels == 2
    # the vocabulary holds the train characters only: the test digits "1000".."1009" add nothing unseen but "1"/"0"
    assert set(spec.vocab.symbols) == set("abcd0123456789")
    card = spec.task_card
    assert card["splits"] == {"train": 36, "validation": 4, "test": 10}
    assert card["label_counts"]["validation"] == {"neg": 2, "pos": 2}  # stratified
    assert card["lengths"]["train"]["max"] == spec.max_length == 14
    assert card["truncated"]["test"] == sum(len(t) > 14 for t in text_splits()["test"]["text"])
    assert spec.model_config_kwargs()["id2label"] == {0: "neg", 1: "pos"}
    splits = load_task("custom", **options)
    assert {k: len(v) for k, v in splits.items()} == card["splits"]
    first = text_splits()["train"]["text"][0]
    assert splits["train"][0]["input_ids"] == spec.vocab.encode(first)


def test_the_inference_is_cached_on_disk_and_in_the_process(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits())
    calls = []
    reader = custom_task.read_task_source
    monkeypatch.setattr(custom_task, "read_task_source", lambda *a: calls.append(1) or reader(*a))
    first = get_task_spec("custom", **options)
    custom_task._MEMO.clear()
    second = get_task_spec("custom", **options)
    assert calls == [1] and first == second and second.task_card == first.task_card


def test_class_labels_follow_the_source_hint_and_natural_order(monkeypatch, tmp_path):
    values = {"train": {"series": [[0.0, 1.0, 2.0]] * 6, "label": [0.0, 1.0, 2.0] * 2}}
    values["test"] = values["train"]
    hint = LabelHint("single_label_classification", ("2", "0", "1"), "@classLabel true 2 0 1", "label")
    spec = get_task_spec("custom", **use_source(monkeypatch, tmp_path, values, hint=hint), validation_size=3)
    assert spec.problem_type == "single_label_classification" and spec.label_names == ("0", "1", "2")
    assert spec.task_card["problem_type_evidence"] == "@classLabel true 2 0 1"  # in natural order all the same
    values = {"train": {"series": [[0.0, 1.0]] * 6, "label": ["10", "2", "1"] * 2}}
    values["test"] = values["train"]
    spec = get_task_spec("custom", **use_source(monkeypatch, tmp_path, values), validation_size=3)
    assert spec.label_names == ("1", "2", "10")
    options = {**use_source(monkeypatch, tmp_path, values), "validation_size": 3, "label_names": ["10", "1", "2"]}
    spec = get_task_spec("custom", **options)
    assert spec.label_names == ("10", "1", "2")


def test_float_targets_are_a_regression_and_class_label_features_win(monkeypatch, tmp_path):
    values = {"train": {"series": [[0.0, 1.0]] * 10, "target": [0.5 * i for i in range(10)]}}
    spec = get_task_spec("custom", **use_source(monkeypatch, tmp_path, values))
    assert spec.is_regression and spec.metric == "r2" and "float values" in spec.task_card["problem_type_evidence"]
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["b", "a"])})
    values = {"train": {"text": ["xy", "yx"] * 4, "label": [0, 1] * 4}}
    spec = get_task_spec("custom", **use_source(monkeypatch, tmp_path, values, {"train": features}))
    assert spec.label_names == ("b", "a") and "ClassLabel" in spec.task_card["problem_type_evidence"]


@pytest.mark.parametrize(
    ("splits", "options", "message"),
    [
        ({"train": {"text": ["a", "b"] * 4, "label": ["1", "x"] * 4}}, {}, "mixes numbers ('1') and text ('x')"),
        ({"train": {"body": ["a", "b"], "what": [0, 1], "other": [1, 2]}}, {}, "columns: ['body', 'what', 'other']"),
        ({"train": {"text": ["a", "b"] * 4, "label": [0, 1] * 4}}, {"input_column": "txt"}, "no column 'txt'"),
        (
            {"train": {"text": ["ab", "ba", "ab"], "label": [0, 1, 1]}, "test": {"text": ["ab"], "label": [0]}},
            {"validation_size": 1},
            "class '0' has a single training example",
        ),
        ({"train": {"text": ["ab", ""] * 4, "label": [0, 1] * 4}}, {}, "empty input in column 'text'"),
        ({"train": {"text": ["ab"] * 8, "label": [0, 1] * 4}, "test": {"text": ["ab"], "label": [7]}}, {}, "['7']"),
        ({"train": {"series": [[1.0, None]] * 8, "label": [0, 1] * 4}}, {}, "missing value (NaN or '?') at step 1"),
    ],
)
def test_bad_sources_fail_with_one_line(monkeypatch, tmp_path, splits, options, message, isolated_cache):
    with pytest.raises(ValueError, match=".*") as error:
        get_task_spec("custom", **use_source(monkeypatch, tmp_path, splits), **options)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not list(isolated_cache.rglob("custom-inference/*"))  # nothing half-written


def test_a_custom_task_needs_a_source():
    with pytest.raises(
        ValueError, match="task 'custom' needs a source in task_options: data_files, data_dir or hub_id"
    ):
        get_task_spec("custom")


def test_unseen_labels_can_be_dropped(monkeypatch, tmp_path):
    splits = {"train": {"text": ["ab", "ba"] * 4, "label": [0, 1] * 4}, "test": {"text": ["ab", "b"], "label": [7, 0]}}
    options = {**use_source(monkeypatch, tmp_path, splits), "unseen_labels": "drop"}
    card = get_task_spec("custom", **options).task_card
    assert card["unseen_labels_dropped"] == {"test": 1} and card["splits"]["test"] == 1
    assert len(load_task("custom", **options)["test"]) == 1


def test_series_layout_channels_normalisation_and_missing_values(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    series = [rng.normal(3.0, 2.0, size=(2, 5 + i % 4)).tolist() for i in range(12)]  # (C, L), unequal lengths
    series[0][1][2] = None
    splits = {"train": {"series": series, "label": ["a", "b"] * 6}}
    options = {**use_source(monkeypatch, tmp_path, splits), "missing": "ffill", "validation_size": 2, "test_size": 2}
    spec = get_task_spec("custom", **options)
    assert spec.input_kind == "continuous" and spec.num_channels == 2 and spec.task_card["layout"] == "channels_first"
    loaded = load_task("custom", **options)
    assert len(loaded["train"][0]["input_values"]) == 2 * (5 + 0)  # stored flat, L·C values
    values = np.concatenate([np.asarray(v).reshape(-1, 2) for v in loaded["train"]["input_values"]])
    np.testing.assert_allclose(spec.normalization.mean, values.mean(0), rtol=1e-5)
    assert values[2, 1] == values[1, 1]  # the missing step took the step before it
    per_series = get_task_spec("custom", **options, normalization="per_series")
    assert per_series.normalization.mean == (0.0, 0.0)
    first = load_task("custom", **options, normalization="per_series")["test"][0]["input_values"]
    assert np.allclose(np.asarray(first).reshape(-1, 2).mean(0), 0, atol=1e-5)


def test_ragged_channels_are_refused(monkeypatch, tmp_path):
    splits = {"train": {"series": [[[1.0, 2.0]] * 5, [[1.0, 2.0, 3.0]] * 4] * 4, "label": [0, 1] * 4}}
    with pytest.raises(DataFormatError, match="ragged channel counts"):
        get_task_spec("custom", **use_source(monkeypatch, tmp_path, splits))


def test_groups_stay_in_one_split_and_lengths_follow_the_options(monkeypatch, tmp_path):
    n = 60
    splits = {"train": {"text": ["ab" * (1 + i % 7) for i in range(n)], "label": [i % 2 for i in range(n)]}}
    splits["train"]["patient"] = [i // 4 for i in range(n)]
    options = {**use_source(monkeypatch, tmp_path, splits), "group_column": "patient", "leakage_check": "off"}
    loaded_spec = get_task_spec("custom", **options, max_length=5, truncation="left")
    assert loaded_spec.max_length == 5 and loaded_spec.task_card["truncated"]["train"] > 0
    assert get_task_spec("custom", **options, max_length_cap=6).max_length == 6
    key = custom_task.inference_key({k: v for k, v in options.items()})
    assert key == custom_task.inference_key(dict(options))
    parts, _ = custom_task.views(
        {"train": datasets.Dataset.from_dict(splits["train"])},
        loaded_spec.inference.labels,
        options,
        "patient",
    )
    groups = [set(np.asarray(splits["train"]["patient"])[rows]) for _, rows in parts.values()]
    assert not (groups[0] & groups[1]) and not (groups[0] & groups[2]) and not (groups[1] & groups[2])
    assert load_task("custom", **options, max_length=5, truncation="left")["train"][0]["input_ids"][-1] == 4 + 1


@pytest.mark.parametrize(
    ("options", "tokenization", "symbols", "first_ids"),
    [
        ({"tokenizer": "bytes"}, "bytes", None, [4 + ord("A"), 4 + ord("C")]),
        ({"tokenizer": "alphabet", "alphabet": "ACG"}, "chars", ("A", "C", "G"), [4, 5, 6, 3]),
        ({"min_frequency": 5}, "chars", ("A", "C", "G"), [4, 5, 6, 3]),
        ({"strip_patterns": ["^>.*\n"]}, "chars", ("A", "C", "G", "T"), [4, 5, 6, 7]),
    ],
)
def test_tokenizers_and_vocabularies_are_fitted_on_train(
    monkeypatch, tmp_path, options, tokenization, symbols, first_ids
):
    texts = [">header\nACGT", "ACGA", "CCGG", "GACA", "AACG", "GGCA"] * 2  # T: once in train (first text)
    texts[6] = "AAAA"
    splits = {"train": {"text": texts, "label": [0, 1] * 6}, "test": {"text": ["ACGT", "TT"], "label": [0, 1]}}
    spec = get_task_spec("custom", **use_source(monkeypatch, tmp_path, splits), validation_size=2, **options)
    assert spec.tokenization == tokenization
    if symbols is not None:
        assert spec.vocab.symbols == symbols
    ids = load_task("custom", **use_source(monkeypatch, tmp_path, splits), validation_size=2, **options)["test"][0]
    assert ids["input_ids"][:2] == first_ids[:2] and (symbols is None or ids["input_ids"] == first_ids)


def test_integer_ids_keep_their_numeric_order(monkeypatch, tmp_path):
    splits = {
        "train": {"ids": [[3, 10, 2], [2, 2, 10]] * 4, "label": [0, 1] * 4},
        "test": {"ids": [[10, 7]], "label": [1]},
    }
    options = {**use_source(monkeypatch, tmp_path, splits), "tokenizer": "ids", "validation_size": 2}
    spec = get_task_spec("custom", **options)
    assert spec.vocab.symbols == ("2", "3", "10") and spec.tokenization == "whitespace"
    assert load_task("custom", **options)["test"][0]["input_ids"] == [6, 3]


def test_other_splits_are_left_out_and_unlabelled_class_label_rows_refused(monkeypatch, tmp_path):
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["n", "p"])})
    labelled = {"text": ["ab", "ba", "abb", "baa"] * 3, "label": [0, 1] * 6}
    splits = {"train": labelled, "test": labelled, "unsupervised": {"text": ["zz"], "label": [-1]}}
    options = use_source(monkeypatch, tmp_path, splits, dict.fromkeys(splits, features))
    assert set(get_task_spec("custom", **options).task_card["splits"]) == {"train", "validation", "test"}
    splits = {"train": labelled, "test": {"text": ["ab", "zz"], "label": [0, -1]}}
    with pytest.raises(DataFormatError, match="test row 1: no label in column 'label'; fill it in or drop the row"):
        get_task_spec("custom", **use_source(monkeypatch, tmp_path, splits, dict.fromkeys(splits, features)))


def test_validation_from_test_is_recorded_and_keeps_train_whole(monkeypatch, tmp_path):
    options = {**use_source(monkeypatch, tmp_path, text_splits()), "validation_from": "test"}
    card = get_task_spec("custom", **options).task_card
    assert card["splits"] == {"train": 40, "validation": 10, "test": 10}
    assert card["split_origin"]["validation"] == "the test split (validation_from: test)"
    assert "validation/test" not in card["leakage"]["duplicates"]  # the same examples, not a leak
    assert {k: len(v) for k, v in load_task("custom", **options).items()} == card["splits"]


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"hub_id": "stanfordnlp/imdb"}, "imdb"),
        ({"data_dir": "/data/ArrowHead"}, "ArrowHead"),
        ({"data_files": {"train": "/d/GunPoint_TRAIN.ts", "test": "/d/GunPoint_TEST.ts"}}, "GunPoint"),
        ({"data_files": ["reviews-train.csv"]}, "reviews"),
        ({"data_files": "notes.jsonl"}, "notes"),
    ],
)
def test_a_custom_task_is_named_after_its_source(options, expected):
    from spt_hf.data.custom.task import source_name

    assert source_name(options) == expected


def test_the_name_option_names_the_task_without_inferring_again(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits())
    assert get_task_spec("custom", **options).name == "source"
    named = get_task_spec("custom", **{**options, "name": "reviews"})
    assert named.name == "reviews" and named.inference.key == get_task_spec("custom", **options).inference.key


@pytest.mark.parametrize("kind", ["tokens", "continuous"])
def test_the_inference_is_typed_and_its_cache_file_reads_back_equal(monkeypatch, tmp_path, isolated_cache, kind):
    splits = text_splits()
    if kind == "continuous":
        splits = {"train": {"series": [[float(i), i + 0.5, 2.0 * i] for i in range(20)], "label": ["a", "b"] * 10}}
    options = use_source(monkeypatch, tmp_path, splits)
    spec = get_task_spec("custom", **options)
    found = spec.inference
    assert isinstance(found, Inference) and isinstance(found.labels, LabelPlan) and isinstance(found.inputs, InputPlan)
    assert (found.inputs.kind, found.max_length, found.labels.names) == (kind, spec.max_length, spec.label_names)
    assert found.normalization == spec.normalization and (found.normalization is None) == (kind == "tokens")
    assert found.train_examples == spec.train_examples() == found.card["splits"]["train"]
    saved = json.loads((isolated_cache / "custom-inference" / f"{found.key}.json").read_text())
    assert saved == json.loads(json.dumps(found.to_json())) and Inference.from_json(saved, found.key) == found
    custom_task._MEMO.clear()
    monkeypatch.setattr(custom_task, "read_task_source", lambda *a: pytest.fail("inferred again, not read back"))
    assert get_task_spec("custom", **options).inference == found


def test_a_built_spec_loads_without_being_built_again(monkeypatch, tmp_path):
    options = use_source(monkeypatch, tmp_path, text_splits())
    spec = get_task_spec("custom", **options)
    monkeypatch.setattr(custom_task, "cached_inference", lambda options: pytest.fail("the spec was built again"))
    loaded = load_task(spec)
    assert {k: len(v) for k, v in loaded.items()} == spec.task_card["splits"]
    with pytest.raises(TypeError, match=r"a built spec and options \['max_length'\]; give them to get_task_spec"):
        load_task(spec, max_length=3)
