"""One pass over each split of a custom task (lengths, classes, input hashes, groups) and the leakage report.

The report (stored in the task card, printed before training by ``leakage_check: warn``) lists: exact duplicate
inputs across splits (inputs as read, after ``strip_patterns``; per split pair ``"train/test"``: the examples of the
second split whose input is also in the first), groups found in more than one split, an input column identical to
the label, and classes whose label text appears verbatim in most of their training inputs (a hint for
``strip_patterns``). Real archives have such duplicates: several UCR/UEA sets repeat training series in their test
split.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import datasets
import numpy as np

from .inputs import InputPlan, iter_rows
from .labels import LabelPlan

LEAKAGE_CHECKS = ("warn", "error", "off")
# a class's label text in more than this fraction of its training inputs is reported (label_in_input)
LABEL_IN_INPUT_FRACTION = 0.5


@dataclass
class SplitStats:
    """What one pass over a split found."""

    lengths: list[int] = field(default_factory=list)
    labels: Counter = field(default_factory=Counter)  # class name (or "" for regression) -> examples
    unseen: Counter = field(default_factory=Counter)  # label text not among the classes -> examples
    hashes: list[bytes] = field(default_factory=list)
    groups: set = field(default_factory=set)
    label_hits: Counter = field(default_factory=Counter)  # class -> inputs holding the class's name
    input_is_label: dict[str, bool] = field(default_factory=dict)
    sums: np.ndarray | None = None  # per channel: sum, sum of squares, steps (train, continuous)


def _digest(value: Any) -> bytes:
    if isinstance(value, bytes):
        return hashlib.blake2b(value, digest_size=16).digest()
    data = value.tobytes() if isinstance(value, np.ndarray) else str(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


def scan_split(
    ds: datasets.Dataset,
    rows: np.ndarray | None,
    plan: InputPlan,
    labels: LabelPlan,
    group_column: str | None,
    where: str,
) -> SplitStats:
    """Lengths, class counts, input hashes and groups of a split; raises on a bad row (naming it)."""
    stats = SplitStats(input_is_label={c: True for c in plan.columns})
    if plan.kind == "continuous":
        stats.sums = np.zeros((3, plan.num_channels))
    columns = list(dict.fromkeys([*plan.columns, labels.column, *([group_column] if group_column else [])]))
    for index, row in iter_rows(ds, rows, columns):
        at = f"{where} row {index}"
        label = labels.value(row[labels.column], at)
        name = labels.text(row[labels.column]) if labels.names is not None else ""
        if label is None:  # a class train lacks: an error, or left out (unseen_labels: drop)
            stats.unseen[name] += 1
            continue
        stats.labels[name] += 1
        for column in plan.columns:
            if stats.input_is_label[column] and str(row[column]).strip() != str(row[labels.column]).strip():
                stats.input_is_label[column] = False
        if plan.kind == "tokens":
            text = plan.text(row, at)
            stats.lengths.append(len(plan.tokens(row, at)))
            stats.hashes.append(_digest(text))
            if labels.names is not None and isinstance(text, str) and _telling(name) and name in text:
                stats.label_hits[name] += 1
        else:
            series = plan.series(row, at)
            stats.lengths.append(len(series))
            stats.hashes.append(_digest(series))
            stats.sums += [series.sum(0), (series**2).sum(0), np.full(plan.num_channels, len(series))]
        if group_column:
            stats.groups.add(row[group_column])
    return stats


def _telling(name: str) -> bool:
    """A label text long and specific enough that finding it in an input means something (not ``"1"``)."""
    try:
        float(name)
        return False
    except ValueError:
        return len(name) >= 2


def leakage_report(stats: dict[str, SplitStats], validation_is_test: bool) -> dict[str, Any]:
    """The report of ``stats`` (split -> :class:`SplitStats`) as a JSON-able dict, ``findings`` one line each."""
    duplicates = {}
    for first, second in combinations([s for s in ("train", "validation", "test") if s in stats], 2):
        if validation_is_test and (first, second) == ("validation", "test"):
            continue
        seen = set(stats[first].hashes)
        duplicates[f"{first}/{second}"] = sum(h in seen for h in stats[second].hashes)
    split_groups = [s.groups for s in stats.values() if s.groups]
    if validation_is_test and "validation" in stats:
        split_groups = [s.groups for name, s in stats.items() if name != "validation" and s.groups]
    counts = Counter(g for groups in split_groups for g in groups)
    overlap = sum(1 for n in counts.values() if n > 1)
    train = stats["train"]
    identical = [c for c, same in train.input_is_label.items() if same]
    in_input = sorted(c for c, n in train.label_hits.items() if n > LABEL_IN_INPUT_FRACTION * train.labels[c])
    findings = [
        f"{n} {pair.split('/')[1]} example(s) repeat a {pair.split('/')[0]} input exactly ({pair})"
        for pair, n in duplicates.items()
        if n
    ]
    if overlap:
        findings.append(f"{overlap} group(s) appear in more than one split")
    findings += [f"input column {c!r} is identical to the label" for c in identical]
    if in_input:
        findings.append(f"the label text appears in most inputs of classes {in_input}; consider strip_patterns")
    return {
        "duplicates": duplicates,
        "group_overlap": overlap,
        "input_is_label": identical,
        "label_in_input": in_input,
        "findings": findings,
    }
