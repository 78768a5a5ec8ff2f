"""Binary inputs in a custom task: class folders of small generated MIDI files, read as bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from spt_hf.cli import main as cli_main
from spt_hf.data import get_task_spec, load_task
from spt_hf.data.custom.sources import read_source
from spt_hf.data.spec import DataFormatError
from spt_hf.data.vocab import NUM_SPECIAL_TOKENS


def midi(notes: list[int]) -> bytes:
    """A format-0 MIDI file playing ``notes`` (a real ``MThd`` header, with NUL bytes, and one ``MTrk``)."""
    events = b"".join(bytes([0, 0x90, n, 64, 8, 0x80, n, 0]) for n in notes) + b"\x00\xff\x2f\x00"
    return b"MThd" + struct.pack(">IHHH", 6, 0, 1, 96) + b"MTrk" + struct.pack(">I", len(events)) + events


def write_music(root: Path, n_train: int = 12, n_test: int = 4) -> dict[str, list[bytes]]:
    """``root/{train,test}/{low,high}/<i>.mid``; the first test file of each class repeats a train file."""
    written: dict[str, list[bytes]] = {}
    for split, n in (("train", n_train), ("test", n_test)):
        for label, base in (("low", 40), ("high", 80)):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                k = i if split == "train" or i == 0 else 100 + i
                data = midi([base + (k + j) % 7 for j in range(1 + k % 4)])
                (root / split / label / f"{i}.mid").write_bytes(data)
                written.setdefault(split, []).append(data)
    return written


def test_class_folders_of_binary_files_are_read_as_bytes(tmp_path: Path) -> None:
    write_music(tmp_path / "m")
    raw = read_source({"data_dir": str(tmp_path / "m")}, tmp_path / "cache")
    assert raw.kind == "class_folders" and raw.splits["train"].column_names == ["binary", "label", "file"]
    assert str(raw.splits["train"].features["binary"].dtype) == "binary"
    first = raw.splits["train"][0]
    assert first["binary"] == (tmp_path / "m" / first["file"]).read_bytes() and first["binary"].startswith(b"MThd")
    (tmp_path / "m" / "train" / "low" / "empty.mid").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"empty.mid: the file is empty"):
        read_source({"data_dir": str(tmp_path / "m")}, tmp_path / "cache2")


def test_binary_inputs_take_the_bytes_tokenizer_and_leakage_hashes_bytes(tmp_path: Path, capsys) -> None:
    written = write_music(tmp_path / "m")
    options = {"data_dir": str(tmp_path / "m")}
    spec = get_task_spec("custom", **options)
    assert spec.input_kind == "tokens" and spec.tokenization == "bytes" and len(spec.vocab) == 260
    card = spec.task_card
    assert card["splits"]["test"] == 8 and card["splits"]["train"] + card["splits"]["validation"] == 24
    assert card["lengths"]["train"]["max"] == spec.max_length == max(len(d) for d in written["train"])
    assert card["leakage"]["duplicates"]["train/test"] == 2
    splits = load_task("custom", **options)
    test_first = (tmp_path / "m" / "test" / "high" / "0.mid").read_bytes()
    assert splits["test"][0]["input_ids"] == [b + NUM_SPECIAL_TOKENS for b in test_first]
    (tmp_path / "task.yaml").write_text(json.dumps({"task": "custom", "task_options": options}))
    assert cli_main(["inspect", "--task_config", str(tmp_path / "task.yaml"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["input_kind"] == "tokens" and shown["vocab_size"] == 260 and shown["splits"]["test"] == 8
    assert shown["label_names"] == ["high", "low"] and shown["leakage"]["duplicates"]["train/test"] == 2


def test_binary_inputs_refuse_other_tokenizers(tmp_path: Path) -> None:
    write_music(tmp_path / "m")
    with pytest.raises(ValueError, match=r"holds binary data; use one input column and tokenizer: bytes"):
        get_task_spec("custom", data_dir=str(tmp_path / "m"), tokenizer="chars")
