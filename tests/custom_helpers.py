"""Small generated sources for the custom-task tests: splits given as dicts, read through a patched reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pytest

from spt_hf.data.custom import task as custom_task
from spt_hf.data.custom.raw import LabelHint, RawSource


def use_source(
    monkeypatch: pytest.MonkeyPatch,
    folder: Path,
    splits: dict[str, dict[str, list]],
    features: dict[str, datasets.Features] | None = None,
    hint: LabelHint | None = None,
) -> dict[str, Any]:
    """Options naming a file whose content is ``splits`` (so the cache key follows the data), read as ``splits``."""
    path = folder / "source.json"
    path.write_text(json.dumps(splits, default=str))

    def read(options: dict, cache_dir: Path) -> RawSource:
        made = {
            name: datasets.Dataset.from_dict(columns, features=(features or {}).get(name))
            for name, columns in splits.items()
        }
        return RawSource(made, kind="json", files=(path,), description=path.name, label_hint=hint)

    monkeypatch.setattr(custom_task, "read_task_source", read)
    return {"data_files": str(path)}


def text_splits(n_train: int = 40, n_test: int = 10) -> dict[str, dict[str, list]]:
    """Two classes of short texts told apart by their letters."""

    def part(n: int, offset: int) -> dict[str, list]:
        texts = [("abab" if i % 2 else "cdcd") * (1 + (i + offset) % 3) + str(i + offset) for i in range(n)]
        return {"text": texts, "label": ["pos" if i % 2 else "neg" for i in range(n)]}

    return {"train": part(n_train, 0), "test": part(n_test, 1000)}
