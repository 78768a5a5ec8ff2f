"""Retrieval (AAN): headerless 5-column TSV read with quoting off, byte-level documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from spt_hf.data import BYTE_VOCAB, DataFormatError, RetrievalCollator, get_task_spec, load_task

ROWS = [
    ("1.0", "P01-1001", "P02-2002", 'He said "hello\tthere', 'a "quoted" title'),
    ("0.0", "P03-3003", "P04-4004", '"unbalanced quote', "plain text é"),
    ("1", "P05-5005", "P06-6006", "x" * 50, "y"),
]


def _write(folder: Path, rows: list[tuple[str, ...]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "eval", "test"):
        with open(folder / f"new_aan_pairs.{split}.tsv", "w", encoding="utf-8") as f:
            for row in rows:
                f.write("\t".join(field.replace("\t", " ") for field in row) + "\n")


def test_reads_aan_with_quoting_off(tmp_path: Path) -> None:
    _write(tmp_path / "lra_release" / "tsv_data", ROWS)
    ds = load_task("retrieval", data_dir=tmp_path, max_length=20)
    assert {k: len(v) for k, v in ds.items()} == {"train": 3, "validation": 3, "test": 3}
    assert ds["train"]["label"] == [1, 0, 1]
    assert BYTE_VOCAB.decode_text(ds["train"][0]["input_ids"]) == 'He said "hello there'
    assert BYTE_VOCAB.decode_text(ds["train"][1]["input_ids"]) == '"unbalanced quote'
    assert BYTE_VOCAB.decode_text(ds["train"][1]["input_ids_2"]) == "plain text é"
    assert len(ds["train"][2]["input_ids"]) == 20


def test_bad_label_and_bad_row(tmp_path: Path) -> None:
    _write(tmp_path, [*ROWS, ("2.0", "a", "b", "c", "d")])
    with pytest.raises(DataFormatError, match=r"new_aan_pairs\.train\.tsv:4: label '2\.0' is not 0 or 1"):
        load_task("retrieval", data_dir=tmp_path)
    _write(tmp_path, [*ROWS, ("1.0", "a", "b", "c")])
    with pytest.raises(DataFormatError, match=r"train\.tsv:4: expected 5 tab-separated fields, got 4"):
        load_task("retrieval", data_dir=tmp_path)


def test_retrieval_collator_pads_each_document(tmp_path: Path) -> None:
    _write(tmp_path, ROWS)
    spec = get_task_spec("retrieval")
    ds = load_task("retrieval", data_dir=tmp_path)
    batch = RetrievalCollator(spec, pad_to_multiple_of=8)([ds["train"][i] for i in range(3)])
    assert set(batch) == {"input_ids", "attention_mask", "input_ids_2", "attention_mask_2", "labels"}
    assert batch["input_ids"].shape == (3, 56) and batch["input_ids_2"].shape == (3, 16)
    assert batch["attention_mask_2"][2].sum() == 1 and batch["labels"].tolist() == [1, 0, 1]
    assert spec.paired and spec.max_length == 4000 and spec.vocab_size == 260
