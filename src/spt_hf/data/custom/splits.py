"""The splits of a custom task: the source's own, else validation and test carved from train, stratified by label,
grouped by ``group_column`` and seeded (docs/own-data.md).

Carving works on units: the examples themselves, or whole groups when a group column is given, so that a group never
straddles two splits. Each stratum (class) gives the carved split its share of units by largest remainder, and keeps
at least one in train.
"""

from __future__ import annotations

from typing import Any

import datasets
import numpy as np

from ..spec import DataFormatError

SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
    "testing": "test",
    "eval": "test",
}


def canonical_splits(splits: dict[str, datasets.Dataset], where: str) -> dict[str, datasets.Dataset]:
    """The source's splits under the names ``train``/``validation``/``test``; a lone split of another name is train.
    Other splits (IMDb's ``unsupervised``) are left out."""
    named: dict[str, datasets.Dataset] = {}
    for name, ds in splits.items():
        canon = SPLIT_ALIASES.get(name.lower(), "train" if len(splits) == 1 else None)
        if canon is not None and canon in named:
            raise DataFormatError(f"{where}: splits {sorted(splits)} name the {canon} split twice; keep one of them")
        if canon is not None:
            named[canon] = ds
    if "train" not in named:
        raise DataFormatError(f"{where}: no train split (splits: {sorted(splits)}); name one file or folder train")
    return named


def _units(n: int, groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(unit of each example, first example of each unit): examples themselves, or the groups of ``groups``."""
    if groups is None:
        return np.arange(n), np.arange(n)
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first


def _allocate(strata_sizes: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Units each stratum gives: proportional shares by largest remainder, each stratum keeping one unit."""
    quota = total * strata_sizes / strata_sizes.sum()
    room = strata_sizes - 1
    take = np.minimum(np.floor(quota).astype(int), room)
    order = np.lexsort((rng.random(len(quota)), -(quota - np.floor(quota))))
    while take.sum() < total:
        grew = False
        for s in order:
            if take.sum() < total and take[s] < room[s]:
                take[s] += 1
                grew = True
        if not grew:
            break
    return take


def carve(
    n: int,
    strata: np.ndarray | None,
    groups: np.ndarray | None,
    size: float,
    seed: int,
    what: str,
    names: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split examples ``0..n-1`` into (kept, carved) index arrays, each sorted.

    Args:
        n: the number of examples.
        strata: the class index of each example (``None``: one stratum, e.g. regression).
        groups: the group of each example, kept within one side (``None``: no groups).
        size: the carved part, a fraction of the units (< 1) or a number of examples (>= 1).
        seed: the seed of the random choice.
        what: the carved split's name, for messages.
        names: class names by stratum index, for messages.
    """
    unit_of, first = _units(n, groups)
    num_units = len(first)
    wanted = round(size * num_units) if size < 1 else round(size * num_units / max(n, 1))
    if not 0 < wanted < num_units:
        raise ValueError(
            f"cannot carve a {what} split of size {size} from {n} training examples ({num_units} units); "
            f"set {what}_size between 0 and 1, or give the source a {what} split"
        )
    unit_stratum = strata[first] if strata is not None else np.zeros(num_units, dtype=int)
    classes, per_class = np.unique(unit_stratum, return_counts=True)
    if strata is not None and (per_class < 2).any():
        lone = classes[per_class < 2][0]
        label = names[lone] if names is not None else lone
        unit = "group" if groups is not None else "example"
        raise ValueError(
            f"class {label!r} has a single training {unit}: too few to stratify a {what} split; give the source a "
            f"{what} split, add examples, or set validation_from: test"
        )
    rng = np.random.default_rng(seed)
    take = _allocate(per_class, wanted, rng)
    carved_units = []
    for cls, k in zip(classes, take, strict=True):
        members = np.flatnonzero(unit_stratum == cls)
        carved_units.append(rng.permutation(members)[:k])
    is_carved = np.zeros(num_units, dtype=bool)
    is_carved[np.concatenate(carved_units)] = True
    carved_rows = is_carved[unit_of]
    return np.flatnonzero(~carved_rows), np.flatnonzero(carved_rows)


MIN_VALIDATION_EXAMPLES = 20  # fewer validation examples than this choose checkpoints (and stop training) on noise
VALIDATION_FIX = (
    "raise `validation_size` in the task file (a fraction of train, or a count), or set `validation_from: test` "
    "(LRA's convention: the test split chooses checkpoints)"
)


def validation_warnings(
    validation_size: int, train_labels: list | None = None, validation_labels: list | None = None
) -> list[str]:
    """What makes a validation split untrustworthy for choosing checkpoints and stopping early: fewer than
    `MIN_VALIDATION_EXAMPLES` examples, or classes of train (`train_labels`, one label per example; None for
    regression) that it lacks. One line each, naming the fix; an empty list when there is nothing to say."""
    warnings = []
    if validation_size < MIN_VALIDATION_EXAMPLES:
        warnings.append(
            f"the validation split holds {validation_size} examples (fewer than {MIN_VALIDATION_EXAMPLES}): the "
            f"checkpoint it selects and the early stopping it drives follow noise; {VALIDATION_FIX}."
        )
    if train_labels is not None and validation_labels is not None:
        missing = sorted(set(train_labels) - set(validation_labels), key=str)
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            classes = len(set(train_labels))
            warnings.append(
                f"the validation split misses {len(missing)} of the {classes} classes of train ({shown}): its "
                f"accuracy cannot see them; {VALIDATION_FIX}."
            )
    return warnings
