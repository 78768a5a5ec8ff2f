"""Everything a custom task infers from its source, from the train split only: one :class:`Inference`.

:func:`infer` takes the source as read, picks the columns, the labels and problem type (:mod:`.labels`), the splits
(:mod:`.splits`), the inputs (:mod:`.inputs`), scans every split once (:mod:`.leakage`) and writes the task card.
:func:`views` rebuilds the splits from a saved inference (the cache build reads the source again).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..spec import DataFormatError, Normalization
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


@dataclass(frozen=True)
class Inference:
    """What a custom task inferred from its source: all its spec and its cache build read. Saved as JSON
    (:meth:`to_json`) under the task cache and read back (:meth:`from_json`).

    Args:
        options: the task options it was inferred from (plain JSON values; ``name`` left out).
        labels: the label column, the problem type and evidence, and the classes.
        inputs: how a row's input columns become tokens or an ``(L, C)`` series.
        max_length: the longest sequence kept, and ``max_length_rule``: how it was set.
        normalization: the per-channel mean/std of continuous inputs (fitted on train, or 0/1 per series);
            ``None`` for tokens.
        train_examples: training examples once validation and test are carved.
        card: the task card (JSON-able).
        key: the inference cache key (options and source files); empty until cached.
    """

    options: dict[str, Any]
    labels: LabelPlan
    inputs: InputPlan
    max_length: int
    max_length_rule: str
    normalization: Normalization | None
    train_examples: int
    card: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    key: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON-able form the cache file holds (the key is the file's name)."""
        norm = self.normalization
        return {
            "options": self.options,
            "labels": dataclasses.asdict(self.labels),
            "inputs": dataclasses.asdict(self.inputs),
            "max_length": self.max_length,
            "max_length_rule": self.max_length_rule,
            "normalization": [list(norm.mean), list(norm.std)] if norm is not None else None,
            "train_examples": self.train_examples,
            "card": self.card,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], key: str = "") -> Inference:
        """The inference of a cache file's :meth:`to_json` content."""
        norm = data["normalization"]
        return cls(
            options=data["options"],
            labels=LabelPlan(**_tuples(data["labels"])),
            inputs=InputPlan(**_tuples(data["inputs"])),
            max_length=data["max_length"],
            max_length_rule=data["max_length_rule"],
            normalization=Normalization(tuple(norm[0]), tuple(norm[1])) if norm is not None else None,
            train_examples=data["train_examples"],
            card=data["card"],
            key=key,
        )


def _tuples(values: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back to the tuples of a plan's fields."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


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


def infer(raw: RawSource, options: dict[str, Any]) -> Inference:
    """The inference of a custom task from ``raw`` (read from ``options``' source); its ``key`` is left empty."""
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
    fitted = _fitted(options, labels, plan, stats)
    return dataclasses.replace(fitted, card=_card(raw, fitted, stats, origin, unseen))


def _fitted(options: dict, labels: LabelPlan, plan: InputPlan, stats: dict) -> Inference:
    """The inference without its card: the plans, and max_length and the normalisation fitted on train."""
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
        normalization = Normalization(tuple(float(m) for m in mean), tuple(float(s) for s in std))
    return Inference(
        options=options,
        labels=labels,
        inputs=plan,
        max_length=max_length,
        max_length_rule=f"auto: longest train {longest}, cap {cap}" if given in (None, "auto") else "set",
        normalization=normalization,
        train_examples=len(stats["train"].lengths),
    )


def _card(raw: RawSource, found: Inference, stats: dict, origin: dict, unseen: dict) -> dict:
    """The task card: the source, columns, problem type and evidence, classes, inputs, lengths and leakage."""
    options, labels, plan, max_length = found.options, found.labels, found.inputs, found.max_length
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
        "max_length_rule": found.max_length_rule,
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
        norm = found.normalization
        card.update(num_channels=plan.num_channels, layout=plan.layout, missing=plan.missing)
        card["normalization"] = {"mode": plan.normalization, "mean": list(norm.mean), "std": list(norm.std)}
    check = options.get("leakage_check") or "warn"
    validation_is_test = origin["validation"].startswith("the test split")
    card["leakage"] = leakage_report(stats, validation_is_test) if check != "off" else {"check": "off"}
    return card


def _summary(lengths: list[int]) -> dict[str, float]:
    values = np.asarray(lengths)
    return {"min": int(values.min()), "median": float(np.median(values)), "max": int(values.max())}
