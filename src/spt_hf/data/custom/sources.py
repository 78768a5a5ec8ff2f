"""Reading a custom task's source: exactly one of ``data_files``, ``data_dir`` or ``hub_id`` (``task_options``).

``data_files`` is a path, a glob, a list of them, or ``{split: path | glob | list}``, read by :func:`.files.read_files`
in the format of :mod:`.formats` that ``format`` names or their suffix selects. ``data_dir`` layouts are in
:mod:`.folders`; ``hub_id`` is read by :func:`read_hub`.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import datasets

from .files import read_files
from .folders import read_data_dir
from .formats import class_label_hint, format_named
from .raw import RawSource

SOURCE_KEYS = ("data_files", "data_dir", "hub_id", "hub_config", "hub_revision", "format")


def read_source(options: dict, cache_dir: Path | None = None) -> RawSource:
    """The splits of the source that ``options`` (a custom task's ``task_options``) names, as read.

    Only :data:`SOURCE_KEYS` are looked at. Errors are one line naming the file, the problem and the fix.
    """
    given = [k for k in ("data_files", "data_dir", "hub_id") if options.get(k) not in (None, "", [], {})]
    if len(given) != 1:
        what = f"{' and '.join(given)} are both given" if given else "no source is given"
        raise ValueError(
            f"custom task: {what}; set exactly one of task_options.data_files (files), data_dir (a folder) "
            "or hub_id (a Hub dataset id)"
        )
    fmt = format_named(options.get("format"))
    if given[0] == "hub_id":
        return read_hub(options["hub_id"], options.get("hub_config"), options.get("hub_revision"))
    if given[0] == "data_dir":
        return read_data_dir(Path(options["data_dir"]).expanduser(), fmt, cache_dir)
    return read_files(resolve_files(options["data_files"]), fmt, cache_dir)


def _expand(pattern: str | Path) -> list[Path]:
    text = str(Path(pattern).expanduser())
    if any(c in text for c in "*?["):
        found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not found:
            raise FileNotFoundError(f"custom task: data_files pattern {text!r} matches no file; check the path")
        return found
    path = Path(text)
    if path.is_dir():
        raise ValueError(f"custom task: data_files {text!r} is a folder; use data_dir for a folder, or a glob")
    if not path.is_file():
        raise FileNotFoundError(f"custom task: data file {text!r} does not exist; check the path")
    return [path]


def resolve_files(data_files) -> dict[str | None, list[Path]]:
    """``{split: [files]}``; the key is ``None`` when no mapping named the splits."""
    if isinstance(data_files, dict):
        return {str(s): _expand_all(v, str(s)) for s, v in data_files.items()}
    return {None: _expand_all(data_files)}


def _expand_all(value, split: str | None = None) -> list[Path]:
    items = value if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"custom task: data_files{f' for split {split!r}' if split else ''} is empty; give files")
    return [p for item in items for p in _expand(item)]


def read_hub(hub_id: str, config: str | None, revision: str | None) -> RawSource:
    """A Hub dataset through ``datasets.load_dataset``, in ``datasets``' own cache (``HF_DATASETS_CACHE``), where a
    ``load_dataset(hub_id)`` run once online put it, so that it is found offline."""
    try:
        loaded = datasets.load_dataset(hub_id, name=config, revision=revision)
    except Exception as err:  # datasets raises many kinds here (ConnectionError, DatasetNotFoundError, ...)
        if datasets.config.HF_HUB_OFFLINE:
            raise ValueError(
                f"custom task: hub_id {hub_id!r} is not in the local cache and this machine is offline "
                "(HF_HUB_OFFLINE=1); download it once online (datasets.load_dataset) or use data_files"
            ) from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(
            f"custom task: hub_id {hub_id!r} could not be loaded ({type(err).__name__}: {first}); "
            "check the id, hub_config and hub_revision"
        ) from None
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({"train": loaded})
    splits = dict(loaded)
    revision = _resolved_revision(splits) or revision
    description = f"{hub_id}" + (f" ({config})" if config else "") + (f" @ {revision}" if revision else "")
    return RawSource(
        splits,
        "hub",
        (),
        description,
        class_label_hint(splits),
        hub_id=hub_id,
        hub_config=config,
        hub_revision=revision,
    )


def _resolved_revision(splits: dict[str, datasets.Dataset]) -> str | None:
    """The Hub commit a dataset was read at: a 40-hex folder in its cache files' path, when there is one."""
    for ds in splits.values():
        for cache_file in ds.cache_files:
            found = re.findall(r"(?:^|/)([0-9a-f]{40})(?:/|$)", cache_file["filename"])
            if found:
                return found[-1]
    return None
