"""Generators of ListOps and Pathfinder / PathX data in the LRA release layout, which ``load_task`` reads.

:func:`generate_data` is the one entry point (``spt-hf generate-data`` and the CPU recipes' ``generate_data:`` block
both call it): ``listops`` writes ``basic_{train,val,test}.tsv``; ``pathfinder``, ``pathx`` and ``pathx256`` write
``pathfinder<R>/<level>/{imgs,metadata}`` with a ``splits.json``. The same seed gives the same files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..tasks import GENERATED_TASKS, TASKS
from ..vocab import tokenize_listops
from .listops import generate_listops, write_listops_splits
from .pathfinder import PathfinderParams, generate_pathfinder_image, write_pathfinder_splits

LISTOPS_OPTIONS = ("min_length", "max_length", "max_depth", "max_args", "value_p")
PATHFINDER_OPTIONS = ("resolution", "contour_length", "images_per_batch", "workers")
PATHFINDER_FLOATS = (
    "paddle_length",
    "paddle_thickness",
    "paddle_margin",
    "marker_radius",
    "seed_distance",
    "continuity",
    "distractor_paddles",
)


def generate_data(
    task: str,
    out: str | Path,
    num_train: int,
    num_val: int,
    num_test: int,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    **options,
) -> Path:
    """Write ``num_train`` / ``num_val`` / ``num_test`` examples of ``task`` under ``out``; return the task folder.

    Options: ListOps ``min_length``, ``max_length``, ``max_depth``, ``max_args``, ``value_p`` (the tree bounds);
    Pathfinder ``resolution``, ``contour_length``, ``images_per_batch``, ``workers`` and any field of
    :class:`PathfinderParams` (``paddle_length``, ``seed_distance``, ...). Unknown options and sizes below 1 raise a
    ValueError naming them.
    """
    check_generate_options(task, num_train, num_val, num_test, **options)
    if TASKS[task].GENERATOR == "listops":
        paths = write_listops_splits(out, num_train, num_val, num_test, seed=seed, progress=progress, **options)
        return paths["train"].parent
    floats = {name: float(options.pop(name)) for name in PATHFINDER_FLOATS if options.get(name) is not None}
    resolution = int(options.pop("resolution", TASKS[task].resolution))
    params = PathfinderParams.for_resolution(
        resolution, contour_length=int(options.pop("contour_length", 14)), **floats
    )
    return write_pathfinder_splits(out, num_train, num_val, num_test, params, seed=seed, progress=progress, **options)


def check_generate_options(task: str, num_train: int, num_val: int, num_test: int, **options) -> None:
    """Raise a ValueError naming the problem with a `generate_data` call before anything is written."""
    if task not in GENERATED_TASKS:
        raise ValueError(f"Cannot generate {task!r}: the generators write {list(GENERATED_TASKS)}.")
    if min(num_train, num_val, num_test) < 1:
        raise ValueError(
            f"num_train, num_val and num_test must each be at least 1, got {num_train}, {num_val}, {num_test}."
        )
    allowed = LISTOPS_OPTIONS if TASKS[task].GENERATOR == "listops" else PATHFINDER_OPTIONS + PATHFINDER_FLOATS
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"Unknown {task} generator option(s) {unknown}; allowed: {list(allowed)}.")


def generated_lengths(task: str, count: int, seed: int = 0, **options) -> list[int]:
    """Input steps of ``count`` examples that :func:`generate_data` writes with ``seed`` and ``options`` (its
    generator options): ListOps symbols as its reader tokenises them (no end token), Pathfinder pixels. An estimate's
    view of the data's lengths without writing any (512 short ListOps trees take 0.1 s)."""
    check_generate_options(task, 1, 1, 1, **options)
    if TASKS[task].GENERATOR != "listops":
        return [int(options.get("resolution", TASKS[task].resolution)) ** 2] * count
    bounds = {name: options[name] for name in LISTOPS_OPTIONS if name in options}
    return [len(tokenize_listops(expression)) for expression, _ in generate_listops(count, seed=seed, **bounds)]


__all__ = [
    "check_generate_options",
    "GENERATED_TASKS",
    "PathfinderParams",
    "generate_data",
    "generate_listops",
    "generated_lengths",
    "generate_pathfinder_image",
    "write_listops_splits",
    "write_pathfinder_splits",
]
