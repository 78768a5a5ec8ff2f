"""A custom task's labels: which column, classification or regression (with the evidence), and the class order.

Inferred from the train split only. A ``ClassLabel`` feature or the source's own hint (``.ts`` ``@classLabel``) wins
over the values' type, because real archives store classes as ``0.0/1.0/2.0``. Otherwise text and integers are
classes, integer-valued floats with few distinct values are classes, and other floats are a regression target.
Classes are in natural order (numbers numerically, ``"2" < "10"``; a ``.ts`` header's classes too) unless
``label_names`` gives the order; a ``ClassLabel`` feature keeps its own order (its values are indices into it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import datasets

from ..spec import PROBLEM_TYPES, DataFormatError
from .raw import LabelHint

LABEL_COLUMNS = ("label", "labels", "target", "targets", "y", "class", "category")
# integer-valued float labels with at most this many distinct values are classes (more: a regression target)
MAX_FLOAT_CLASSES = 100


def label_text(value: Any) -> str:
    """The class name of one raw label value: ``2.0`` and ``2`` are ``"2"``, text is stripped."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def natural_order(names: list[str]) -> list[str]:
    """Numbers numerically; otherwise runs of digits compare as numbers (``"c2" < "c10"``)."""
    if all(_number(n) is not None for n in names):
        return sorted(names, key=lambda n: (_number(n), n))
    return sorted(names, key=lambda n: [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", n)])


@dataclass(frozen=True)
class LabelPlan:
    """How raw label values become the task's labels.

    Args:
        column: the label column.
        problem_type: ``single_label_classification`` or ``regression``.
        names: class names, id ``i`` is ``names[i]`` (``None`` for regression).
        evidence: one phrase saying why this problem type.
        feature_names: the names of a ``ClassLabel`` feature, whose values are indices into them.
    """

    column: str
    problem_type: str
    names: tuple[str, ...] | None
    evidence: str
    feature_names: tuple[str, ...] | None = None

    def text(self, value: Any) -> str:
        """The class name of a raw value."""
        return self.feature_names[value] if self.feature_names is not None else label_text(value)

    def value(self, raw: Any, where: str) -> int | float | None:
        """The label of one example: a class id, or a float; ``None`` for a class train lacks."""
        unlabelled = self.feature_names is not None and isinstance(raw, int) and raw < 0  # ClassLabel's -1
        if raw is None or unlabelled or (isinstance(raw, float) and math.isnan(raw)):
            raise DataFormatError(f"{where}: no label in column {self.column!r}; fill it in or drop the row")
        if self.problem_type == "regression":
            number = raw if isinstance(raw, int | float) else _number(str(raw))
            if number is None:
                raise DataFormatError(f"{where}: label {raw!r} is not a number; set problem_type or fix the row")
            return float(number)
        return self._ids.get(self.text(raw))

    @cached_property
    def _ids(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names or ())}


def _check_mixed(values: list[Any], column: str, where: str) -> None:
    texts = [v for v in values if isinstance(v, str)]
    numeric = [v for v in texts if _number(v) is not None]
    if texts and numeric and len(numeric) < len(texts):
        word = next(v for v in texts if _number(v) is None)
        raise DataFormatError(
            f"{where}: label column {column!r} mixes numbers ({numeric[0]!r}) and text ({word!r}); make the labels "
            "one type or set label_names"
        )


def infer_labels(
    train: datasets.Dataset, column: str, hint: LabelHint | None, options: dict[str, Any], where: str
) -> LabelPlan:
    """The label plan of ``column`` from the train split (the options ``problem_type`` and ``label_names`` win)."""
    feature = train.features[column]
    values = train[column]
    feature_names = tuple(feature.names) if isinstance(feature, datasets.ClassLabel) else None
    missing = next((i for i, v in enumerate(values) if v is None or (feature_names is not None and v < 0)), None)
    if missing is not None:
        raise DataFormatError(f"{where} row {missing + 1}: no label in column {column!r}; fill it in or drop the row")
    hint = hint if hint is not None and hint.column == column else None
    problem, evidence = _problem_type(values, feature_names, hint, options, column, where)
    if problem not in PROBLEM_TYPES:
        raise ValueError(f"problem_type={problem!r}; allowed: {list(PROBLEM_TYPES)}")
    if problem == "regression":
        return LabelPlan(column, problem, None, evidence)
    if feature_names is None:
        _check_mixed(values, column, where)
    plan = LabelPlan(column, problem, None, evidence, feature_names)
    seen = sorted({plan.text(v) for v in values})
    if options.get("label_names") is not None:
        names = [label_text(n) for n in options["label_names"]]
        extra = sorted(set(seen) - set(names))
        if extra or len(set(names)) != len(names):
            raise ValueError(f"label_names {names} must list each class once; train also has {extra}")
    elif feature_names is not None:
        names = list(feature_names)
    elif hint is not None and hint.class_names:  # the declared classes, a class train lacks too, in natural order
        names = natural_order(sorted({label_text(n) for n in hint.class_names} | set(seen)))
    else:
        names = natural_order(seen)
    if len(names) < 2:
        raise ValueError(f"{where}: label column {column!r} has a single class {names}; a classifier needs two")
    return LabelPlan(column, problem, tuple(names), evidence, feature_names)


def _refuse_numbers_as_text(values: list[str], column: str, where: str) -> None:
    """Text labels that all parse as numbers which integer-valued floats' rule would not take for classes (a
    fraction, or more than :data:`MAX_FLOAT_CLASSES` values) are most likely a regression target stored as text:
    a one-line error asking which, rather than hundreds of classes."""
    distinct = set(values)
    numbers = [_number(v) for v in distinct]
    if any(n is None for n in numbers):
        return
    if all(n.is_integer() for n in numbers) and len(distinct) <= MAX_FLOAT_CLASSES:
        return
    example = next((v for v in values if not _number(v).is_integer()), values[0])  # the first fraction, in order
    raise DataFormatError(
        f"{where}: label column {column!r} holds text, but the labels all parse as numbers ({len(distinct)} "
        f"distinct, e.g. {example!r}): a regression target? set problem_type: regression (or problem_type: "
        "single_label_classification for classes)"
    )


def _problem_type(
    values: list[Any], feature_names: Any, hint: LabelHint | None, options: dict[str, Any], column: str, where: str
) -> tuple[str, str]:
    if options.get("problem_type") is not None:
        return str(options["problem_type"]), "problem_type set in task_options"
    if feature_names is not None:
        return "single_label_classification", f"ClassLabel feature of column {column!r} ({len(feature_names)} names)"
    if hint is not None and hint.problem_type is not None:
        return hint.problem_type, hint.evidence
    kinds = {type(v) for v in values}
    if kinds <= {str}:
        _refuse_numbers_as_text(values, column, where)
    if kinds <= {str, bool}:
        return "single_label_classification", f"text values in column {column!r}"
    if kinds <= {int, bool}:
        return "single_label_classification", f"integer values in column {column!r} ({len(set(values))} distinct)"
    distinct = set(values)
    if all(float(v).is_integer() for v in distinct) and len(distinct) <= MAX_FLOAT_CLASSES:
        return "single_label_classification", f"integer-valued floats in column {column!r} ({len(distinct)} distinct)"
    example = next((v for v in values if not float(v).is_integer()), None)
    detail = f"e.g. {example}" if example is not None else f"{len(distinct)} distinct values"
    return "regression", f"float values in column {column!r} ({detail})"
