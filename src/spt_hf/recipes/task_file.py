"""A task file: the YAML a user writes to describe a task, ``task:`` and ``task_options:`` only.

``spt-hf inspect``, ``spt-hf recipes`` and ``spt-hf compare`` read it with :func:`read_task_file`.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from .yaml_text import DuplicateKeyError, load_yaml

TASK_FILE_KEYS = ("task", "task_options")


def read_task_file(path: str | Path) -> tuple[str, dict[str, Any]]:
    """``(task, task_options)`` of the task file at ``path``; one-line ValueError on anything else in it.

    Relative paths inside ``task_options`` (``data_files``, ``data_dir``) are resolved against the file's folder,
    so a task file works from any working directory.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"task file {path}: not found; write a YAML file with `task:` and `task_options:`")
    try:
        values = load_yaml(path.read_text())
    except (yaml.YAMLError, DuplicateKeyError) as error:
        raise ValueError(f"task file {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(values, dict) or "task" not in values:
        raise ValueError(f"task file {path}: expected a mapping with `task:` (e.g. `task: custom`) and `task_options:`")
    unknown = sorted(set(values) - set(TASK_FILE_KEYS))
    if unknown:
        close = [f"`{m}`" for key in unknown for m in difflib.get_close_matches(str(key), TASK_FILE_KEYS, 1, 0.7)]
        hint = f"did you mean {' or '.join(dict.fromkeys(close))}?" if close else "training settings go into recipes"
        raise ValueError(
            f"task file {path}: unknown keys {unknown}; a task file holds only {list(TASK_FILE_KEYS)}; {hint}"
        )
    options = values.get("task_options") or {}
    if not isinstance(options, dict):
        raise ValueError(f"task file {path}: `task_options` must be a mapping of option: value")
    return str(values["task"]), _resolve_paths(options, path.parent)


def _resolve_paths(options: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data_dir`` and ``data_files`` relative to the task file's folder (globs, lists and split mappings too)."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return value if Path(value).is_absolute() else str(folder / value)
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    return {k: resolve(v) if k in ("data_dir", "data_files") else v for k, v in options.items()}
