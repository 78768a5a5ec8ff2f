"""Everything a custom task infers from its source, from the train split only, as one JSON-able dict.

:func:`infer` reads the source, picks the columns, the labels and problem type (:mod:`.labels`), the splits
(:mod:`.splits`), the inputs (:mod:`.inputs`), scans every split once (:mod:`.leakage`) and writes the task card.
:func:`views` rebuilds the splits from a saved inference (the cache build reads the source again).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..spec import DataFormatError
from .inputs import InputPlan, choose_input_columns, detect_plan
from .labels import LABEL_COLUMNS, LabelPlan, infer_labels
from .leakage import LEAKAGE_CHECKS, leakage_report, scan_split
from .raw import RawSource
from .splits import canonical_splits, carve

MAX_LENGTH_CAP = 16384  # default cap of `max_length: auto` (the longest train example)
TRUNCATIONS = ("right", "left")
UNSEEN_LABELS = ("error", "drop")
CARVED_SIZE = 0.1  # default validation_size and test_size: the part of train carved for a split the source lacks

View = tuple[datasets.Dataset, "np.ndarray | None"]


def where_of(raw: RawSource) -> str:
    """How messages name the source."""
    return raw.description or raw.hub_id or raw.kind


def _column(columns: list[str], options: dict, key: str, defaults: tuple[str, ...], where: str) -> str | None:
    given = options.get(key)
    if given is not None:
        if given not in columns:
            raise DataFormatError(f"{where}: no column {given!r}; columns: {columns}; set {key}")
        return given
    found = [c for c in defaults if c in columns]
    if not found and defaults:
        raise DataFormatError(f"{where}: cannot tell the label column; columns: {columns}; set label_column")
    return found[0] if found else None


def views(
    splits: dict[str, datasets.Dataset], labels: LabelPlan, options: dict, group: str | None
) -> tuple[dict[str, View], dict[str, str]]:
    """The train/validation/test views (dataset, rows) and where each came from: the source's own splits, or parts
    carved from train (test first, then validation), stratified by class, grouped by ``group``, seeded."""
    train = splits["train"]
    rows = np.arange(len(train))
    strata = None
    if labels.names is not None:
        strata = np.asarray([labels.value(v, "train") for v in train[labels.column]])
    groups = np.asarray(train[group]) if group else None
    seed = int(options.get("split_seed") or 0)
    out: dict[str, View] = {name: (ds, None) for name, ds in splits.items()}
    origin = {name: "source" for name in splits}
    wanted = [s for s in ("test", "validation") if s not in splits]
    if "validation" in wanted and options.get("validation_from") == "test":
        wanted.remove("validation")
    for split in wanted:
        size = float(options.get(f"{split}_size", CARVED_SIZE))
        keep, cut = carve(
            len(rows),
            strata[rows] if strata is not None else None,
            groups[rows] if groups is not None else None,
            size,
            seed,
            split,
            labels.names,
        )
        out[split], rows = (train, rows[cut]), rows[keep]
        how = "stratified" if strata is not None else "random"
        origin[split] = f"carved from train ({split}_size {size}, {how}{', grouped' if group else ''}, seed {seed})"
    if "validation" not in out:
        out["validation"], origin["validation"] = out["test"], "the test split (validation_from: test)"
    if wanted:
        out["train"] = (train, rows)
    order = ("train", "validation", "test")
    return {s: out[s] for s in order}, {s: origin[s] for s in order}


def read_from(split: str, origin: dict[str, str]) -> str:
    """The source split whose rows a split's row numbers count (a carved split's are train's)."""
    if origin[split] == "source":
        return split
    return "test" if origin[split].startswith("the test split") else "train"


def _check(options: dict) -> None:
    for key, allowed in (
        ("truncation", TRUNCATIONS),
        ("leakage_check", LEAKAGE_CHECKS),
        ("unseen_labels", UNSEEN_LABELS),
        ("validation_from", ("train", "test")),
    ):
        if options.get(key) is not None and options[key] not in allowed:
            raise ValueError(f"{key}={options[key]!r}; allowed: {list(allowed)}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_card(raw: RawSource) -> dict[str, Any]:
    card: dict[str, Any] = {"kind": raw.kind, "description": where_of(raw)}
    if raw.hub_id:
        card.update(hub_id=raw.hub_id, hub_config=raw.hub_config, hub_revision=raw.hub_revision)
    files = [p for p in raw.files if Path(p).is_file()]
    card["files"] = [{"path": str(p), "sha256": _sha256(Path(p))} for p in files[:1000]]
    if len(files) > 1000:
        card["files_not_listed"] = len(files) - 1000
    return card


def infer(raw: RawSource, options: dict[str, Any]) -> dict[str, Any]:
    """The inference of a custom task from ``raw`` (read from ``options``' source) as a JSON-able dict."""
    _check(options)
    where = where_of(raw)
    splits = canonical_splits(raw.splits, where)
    columns = splits["train"].column_names
    label_column = _column(columns, options, "label_column", LABEL_COLUMNS, where)
    group = _column(columns, options, "group_column", (), where)
    id_column = _column(columns, options, "id_column", (), where)
    labels = infer_labels(splits["train"], label_column, raw.label_hint, options, f"{where} train")
    parts, origin = views(splits, labels, options, group)
    taken = {label_column, group, id_column}
    inputs = choose_input_columns(splits["train"].features, options, taken, f"{where} train")
    train_ds, train_rows = parts["train"]
    train_view = train_ds.select(train_rows) if train_rows is not None else train_ds
    plan = detect_plan(train_view, inputs, options, f"{where} train")
    stats = {
        s: scan_split(ds, rows, plan, labels, group, f"{where} {read_from(s, origin)}")
        for s, (ds, rows) in parts.items()
    }
    unseen = {s: dict(st.unseen) for s, st in stats.items() if st.unseen}
    if unseen and (options.get("unseen_labels") or "error") == "error":
        split, counts = next(iter(unseen.items()))
        raise DataFormatError(
            f"{where}: the {split} split has labels train lacks {sorted(counts)[:5]}; fix the splits, list every "
            "class in label_names, or set unseen_labels: drop"
        )
    empty = next((s for s, st in stats.items() if not st.lengths), None)
    if empty is not None:
        raise DataFormatError(f"{where}: the {empty} split has zero rows; give it examples or let it be carved")
    fitted = _fitted(plan, stats, options)
    return {
        "options": options,
        "labels": dataclasses.asdict(labels),
        "inputs": dataclasses.asdict(plan),
        **fitted,
        "card": _card(raw, options, labels, plan, stats, origin, unseen, fitted),
    }


def _fitted(plan: InputPlan, stats: dict, options: dict) -> dict[str, Any]:
    """The spec's fields fitted on train: max_length, normalisation."""
    longest = max(stats["train"].lengths)
    cap = int(options.get("max_length_cap") or MAX_LENGTH_CAP)
    given = options.get("max_length")
    max_length = min(longest, cap) if given in (None, "auto") else int(given)
    normalization = None
    if plan.kind == "continuous":
        total, total_sq, count = stats["train"].sums
        mean = total / count
        std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
        std = np.where(std > 1e-8, std, 1.0)
        if plan.normalization == "per_series":
            mean, std = np.zeros_like(mean), np.ones_like(std)
        normalization = [[float(m) for m in mean], [float(s) for s in std]]
    return {
        "max_length": max_length,
        "max_length_rule": f"auto: longest train {longest}, cap {cap}" if given in (None, "auto") else "set",
        "normalization": normalization,
        "train_examples": len(stats["train"].lengths),
    }


def _card(
    raw: RawSource,
    options: dict,
    labels: LabelPlan,
    plan: InputPlan,
    stats: dict,
    origin: dict,
    unseen: dict,
    fitted: dict,
) -> dict:
    """The task card: the source, columns, problem type and evidence, classes, inputs, lengths and leakage."""
    max_length = fitted["max_length"]
    card: dict[str, Any] = {
        "task": "custom",
        "source": _source_card(raw),
        "columns": {"input": list(plan.columns), "label": labels.column},
        "problem_type": labels.problem_type,
        "problem_type_evidence": labels.evidence,
        "num_labels": len(labels.names) if labels.names else 1,
        "label_names": list(labels.names) if labels.names else None,
        "input_kind": plan.kind,
        "max_length": max_length,
        "max_length_rule": fitted["max_length_rule"],
        "truncation": options.get("truncation") or "right",
        "splits": {s: len(st.lengths) for s, st in stats.items()},
        "split_origin": origin,
        "lengths": {s: _summary(st.lengths) for s, st in stats.items()},
        "truncated": {s: sum(n > max_length for n in st.lengths) for s, st in stats.items()},
    }
    for key in ("group_column", "id_column"):
        if options.get(key):
            card["columns"][key.removesuffix("_column")] = options[key]
    if labels.names is not None:
        card["label_counts"] = {s: {n: st.labels.get(n, 0) for n in labels.names} for s, st in stats.items()}
    if unseen:
        card["unseen_labels_dropped"] = {s: sum(c.values()) for s, c in unseen.items()}
    if plan.kind == "tokens":
        card.update(tokenizer=plan.tokenizer, vocab_size=4 + len(plan.symbols))
    else:
        norm = fitted["normalization"]
        card.update(num_channels=plan.num_channels, layout=plan.layout, missing=plan.missing)
        card["normalization"] = {"mode": plan.normalization, "mean": norm[0], "std": norm[1]}
    check = options.get("leakage_check") or "warn"
    validation_is_test = origin["validation"].startswith("the test split")
    card["leakage"] = leakage_report(stats, validation_is_test) if check != "off" else {"check": "off"}
    return card


def _summary(lengths: list[int]) -> dict[str, float]:
    values = np.asarray(lengths)
    return {"min": int(values.min()), "median": float(np.median(values)), "max": int(values.max())}
