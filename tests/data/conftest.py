"""Fixtures for the data tests: an isolated cache, and a port of LRA's own ListOps generator as a reference.

The reference generator below follows LRA's ``listops.py`` (nested tuples, ``to_string``, ``to_value`` and its
``csv.writer`` output with header and CRLF line ends); it is deliberately written independently of
``spt_hf.data.generators.listops`` so that the loader is tested on files it did not produce.
"""

from __future__ import annotations

import csv
import os
import random
import statistics
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets
import pytest

datasets.disable_progress_bars()

OPS = ["[MIN", "[MAX", "[MED", "[SM"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: longer than a few seconds; deselect with -m 'not slow'")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes its Arrow cache into a fresh folder, never into ~/.cache."""
    cache = tmp_path_factory.mktemp("spt_cache")
    monkeypatch.setenv("SPT_HF_CACHE", str(cache))
    return cache


def evaluate_listops(expression: str) -> int:
    """Independent ListOps evaluator: a stack over the whitespace tokens, parentheses ignored."""
    stack: list[tuple[str, list[int]]] = []
    result: int | None = None
    for token in expression.split():
        if token in ("(", ")"):
            continue
        if token.startswith("["):
            stack.append((token, []))
        elif token == "]":
            op, args = stack.pop()
            if op == "[SM":
                value = sum(args) % 10
            elif op == "[MED":
                value = int(statistics.median(args))
            else:
                value = min(args) if op == "[MIN" else max(args)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        else:
            value = int(token)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
    assert not stack and result is not None, f"unbalanced expression {expression!r}"
    return result


def _lra_tree(rng: random.Random, depth: int, max_depth: int, max_args: int) -> tuple[object, int]:
    r = rng.random() if depth < max_depth else 1
    if r > 0.25:
        return rng.choice(range(10)), 1
    length, values = 2, []
    for _ in range(rng.randint(2, max_args)):
        sub, sub_length = _lra_tree(rng, depth + 1, max_depth, max_args)
        values.append(sub)
        length += sub_length
    t: object = (rng.choice(OPS), values[0])
    for v in values[1:]:
        t = (t, v)
    return (t, "]"), length


def _lra_to_string(t: object) -> str:
    if isinstance(t, (str, int)):
        return str(t)
    return "( " + _lra_to_string(t[0]) + " " + _lra_to_string(t[1]) + " )"


def write_lra_reference_listops(
    out: Path,
    sizes: tuple[int, int, int],
    seed: int = 0,
    min_length: int = 20,
    max_length: int = 200,
    max_depth: int = 6,
    max_args: int = 5,
) -> dict[str, list]:
    """Write ``basic_{train,val,test}.tsv`` the way LRA's generator does; returns the rows per split."""
    rng = random.Random(seed)
    data: dict[str, None] = {}
    while len(data) < sum(sizes):
        tree, length = _lra_tree(rng, 1, max_depth, max_args)
        if min_length < length < max_length:
            data[_lra_to_string(tree)] = None
    rows = [[s, evaluate_listops(s)] for s in data]
    out.mkdir(parents=True, exist_ok=True)
    splits = {
        "train": rows[: sizes[0]],
        "val": rows[sizes[0] : sizes[0] + sizes[1]],
        "test": rows[sizes[0] + sizes[1] :],
    }
    for name, part in splits.items():
        with open(out / f"basic_{name}.tsv", "w", newline="") as f:  # csv's default line end is CRLF, as in LRA
            writer = csv.writer(f, delimiter="\t")
            writer.writerow(["Source", "Target"])
            writer.writerows(part)
    return splits


@pytest.fixture
def listops_evaluator():
    """The independent ListOps evaluator."""
    return evaluate_listops


@pytest.fixture
def lra_listops_writer():
    """The port of LRA's ListOps generator and writer."""
    return write_lra_reference_listops
