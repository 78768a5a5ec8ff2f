"""`spt-hf inspect --json` on real UCR/UEA archives shipped in aeon's wheel, checked against a direct count."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from spt_hf.cli import main as cli_main
from spt_hf.data.readers.timeseries import aeon_data_dir

pytest.importorskip("spt_hf.data.custom.sources", reason="the custom task's source readers are not installed")
ARCHIVES = aeon_data_dir()
pytestmark = pytest.mark.skipif(ARCHIVES is None, reason="aeon (its bundled UCR/UEA .ts files) is not installed")


def direct_count(path: Path) -> tuple[list[str], list[str], list[int]]:
    """(series text, label, length) of every example of a .ts file, read without spt_hf."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().lower() == "@data") + 1
    rows = [line.rsplit(":", 1) for line in lines[start:] if line.strip()]
    return [r[0] for r in rows], [r[1].strip() for r in rows], [len(r[0].split(":")[0].split(",")) for r in rows]


def inspect_json(tmp_path: Path, capsys, name: str) -> dict:
    folder = ARCHIVES / name
    files = {"train": str(folder / f"{name}_TRAIN.ts"), "test": str(folder / f"{name}_TEST.ts")}
    task_file = tmp_path / f"{name}.yaml"
    task_file.write_text(yaml.safe_dump({"task": "custom", "task_options": {"data_files": files}}))
    assert cli_main(["inspect", "--task_config", str(task_file), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("name", "channels"), [("GunPoint", 1), ("JapaneseVowels", 12), ("PickupGestureWiimoteZ", 1)])
def test_inspect_reports_the_archives_counts_classes_lengths_and_duplicates(name, channels, tmp_path, capsys):
    card = inspect_json(tmp_path, capsys, name)
    train_series, train_labels, train_lengths = direct_count(ARCHIVES / name / f"{name}_TRAIN.ts")
    test_series, test_labels, test_lengths = direct_count(ARCHIVES / name / f"{name}_TEST.ts")
    assert card["input_kind"] == "continuous" and card["num_channels"] == channels
    assert card["problem_type"] == "single_label_classification"
    assert card["label_names"] == sorted(set(train_labels), key=int) and card["num_labels"] == len(set(train_labels))
    carved = card["splits"]["validation"]
    assert card["splits"] == {"train": len(train_labels) - carved, "validation": carved, "test": len(test_labels)}
    assert sum(card["label_counts"]["test"].values()) == len(test_labels)
    for split in ("train", "validation"):
        assert (
            min(train_lengths) <= card["lengths"][split]["min"] <= card["lengths"][split]["max"] <= max(train_lengths)
        )
    expected = {"min": min(test_lengths), "median": float(np.median(test_lengths)), "max": max(test_lengths)}
    assert card["lengths"]["test"] == expected
    assert card["max_length"] == max(card["lengths"]["train"]["max"], 1)
    seen = set(train_series)
    duplicates = card["leakage"]["duplicates"]
    assert duplicates["train/test"] + duplicates["validation/test"] == sum(s in seen for s in test_series)


def test_a_regression_archive_reports_its_evidence_and_duplicates(tmp_path, capsys):
    card = inspect_json(tmp_path, capsys, "Covid3Month")
    train_series, _, _ = direct_count(ARCHIVES / "Covid3Month" / "Covid3Month_TRAIN.ts")
    test_series, _, _ = direct_count(ARCHIVES / "Covid3Month" / "Covid3Month_TEST.ts")
    assert card["problem_type"] == "regression" and card["num_labels"] == 1 and card["label_names"] is None
    assert card["problem_type_evidence"] == "@targetLabel true in Covid3Month_TRAIN.ts"
    duplicates = card["leakage"]["duplicates"]
    expected = sum(s in set(train_series) for s in test_series)
    assert expected > 0 and duplicates["train/test"] + duplicates["validation/test"] == expected
