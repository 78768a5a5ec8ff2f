"""Every task of the paper and the offline stand-ins, by name.

``TASKS`` maps a task name to its :class:`TaskSpec` subclass (a plain dict of classes, not a registry of import
paths); the classes live in ``tasks_lra.py`` (Long Range Arena) and ``tasks_extra.py`` (the others).
"""

from __future__ import annotations

from typing import Any

from .spec import LOAD_OPTIONS, TaskSpec
from .tasks_extra import BidmcTask, DigitsTask, FashionMnistTask, SpeechCommandsTask, SpokenDigitsTask
from .tasks_lra import (
    ImageTask,
    ListOpsTask,
    PathfinderTask,
    PathX256Task,
    PathXTask,
    RetrievalTask,
    SCifarTask,
    TextTask,
)

TASKS: dict[str, type[TaskSpec]] = {
    cls.name: cls
    for cls in (ListOpsTask, TextTask, RetrievalTask, ImageTask, SCifarTask, PathfinderTask, PathXTask,
                PathX256Task, SpeechCommandsTask, BidmcTask, DigitsTask, FashionMnistTask, SpokenDigitsTask)
}  # fmt: skip


def get_task_spec(name: str, **options: Any) -> TaskSpec:
    """The spec of task ``name`` with user ``options`` (see each task's ``OPTIONS``).

    ``load_task``'s own options (``LOAD_OPTIONS``: ``seed``, ``cache_dir``, ...) are accepted and ignored, so the
    same option dict can be passed to both.
    """
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    return TASKS[name].from_options(**{k: v for k, v in options.items() if k not in LOAD_OPTIONS})
