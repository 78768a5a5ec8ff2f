"""``task: custom``: a :class:`~spt_hf.data.spec.TaskSpec` whose every field is inferred from the user's data.

``task_options`` name the source and, optionally, the columns and preprocessing (docs/own-data.md); the rest is
inferred from the train split by :func:`~.infer.infer`, an :class:`~.infer.Inference`. The inference is cached (a
JSON file under the task cache, keyed by the options and the size and mtime of every source file) and memoised in the
process, so building the spec again (``compare``, ``estimate`` and training all do) costs a directory listing. The
result is a plain spec: token inputs get a fitted :class:`~spt_hf.data.vocab.Vocabulary` and a ``tokenization``;
continuous inputs get their channels and a normalisation fitted on train (or per series). ``task_card`` is the
JSON-able task card.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..cache import default_cache_dir
from ..spec import RawSplits, Source, TaskSpec
from ..vocab import BYTE_VOCAB, Vocabulary
from .infer import Inference, infer, read_from, views, where_of
from .inputs import TOKENIZATION, TOKENIZERS, iter_rows
from .raw import RawSource
from .sources import SOURCE_KEYS, read_source
from .splits import canonical_splits

logger = logging.getLogger(__name__)
INFERENCE_VERSION = 1
OPTION_KEYS = (
    "input_column",
    "input_columns",
    "label_column",
    "group_column",
    "id_column",
    "label_names",
    "problem_type",
    "tokenizer",
    "alphabet",
    "min_frequency",
    "layout",
    "normalization",
    "missing",
    "strip_patterns",
    "max_length",
    "max_length_cap",
    "truncation",
    "validation_size",
    "test_size",
    "split_seed",
    "validation_from",
    "leakage_check",
    "unseen_labels",
    "name",
)
# options whose value the spec takes from the inference (which read them), not from the options as given
INFERRED_OPTIONS = ("normalization", "max_length", "label_names", "problem_type")
_MEMO: dict[str, Inference] = {}
_WARNED: set[str] = set()


def did_you_mean(unknown: list[str], allowed: tuple[str, ...]) -> str:
    """The end of an unknown-options message: the close matches of each unknown name (difflib), then the allowed."""
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, allowed, 3, cutoff=0.8)
        if close:
            hints.append(" or ".join(close) + (f" (for {name})" if len(unknown) > 1 else ""))
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    return f"{hint}; allowed: {list(allowed)} (docs/own-data.md)"


def read_task_source(options: dict[str, Any], cache_dir: Path) -> RawSource:
    """The raw splits of the source that ``options`` name (``spt_hf.data.custom.sources``); the one place the
    custom task reads its source (tests replace it)."""
    return read_source(options, cache_dir)


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value: Any) -> Any:
    """JSON-able plain values of an option (lists for tuples)."""
    if isinstance(value, list | tuple):
        return [_thawed(v) for v in value]
    if isinstance(value, dict):
        return {k: _thawed(v) for k, v in value.items()}
    return value


def source_files(options: dict[str, Any]) -> list[Path]:
    """The local files the options' source names (globs expanded, folders walked), for the cache keys."""
    paths: list[str] = []
    files = options.get("data_files")
    for value in files.values() if isinstance(files, dict) else [files]:
        for item in [value] if isinstance(value, str) else list(value or ()):
            paths += sorted(glob.glob(str(item), recursive=True)) or [str(item)]
    if options.get("data_dir"):
        root = Path(options["data_dir"])
        paths += [str(p) for p in sorted(root.rglob("*")) if p.is_file()] if root.is_dir() else [str(root)]
    return [Path(p) for p in paths if Path(p).is_file()]


def inference_key(options: dict[str, Any]) -> str:
    """A hash of the options and of the path, size and mtime of every source file."""
    stats = [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in source_files(options)]
    payload = {"version": INFERENCE_VERSION, "options": options, "files": stats}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cached_inference(options: dict[str, Any]) -> Inference:
    """The inference of ``options`` from the memo, the cache file, or :func:`infer` (then saved atomically)."""
    key = inference_key(options)
    if key in _MEMO:
        return _MEMO[key]
    path = default_cache_dir() / "custom-inference" / f"{key}.json"
    if path.is_file():
        saved = json.loads(path.read_text())
    else:
        found = infer(read_task_source(options, default_cache_dir() / "sources"), options)
        saved = json.loads(json.dumps(found.to_json(), default=_jsonable))  # what a later process reads back
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(saved, indent=1))  # in its order: splits train, validation, test as read
        os.replace(tmp, path)
    _MEMO[key] = Inference.from_json(saved, key)
    return _MEMO[key]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, set | tuple):
        return list(value)
    return str(value)


def source_name(options: dict[str, Any]) -> str:
    """The name reports and cards give a custom task without a ``name`` option: the Hub id's last part, the
    ``data_dir`` folder's name, or the first data file's stem less a split suffix (``GunPoint_TRAIN``: GunPoint)."""
    if options.get("hub_id"):
        return str(options["hub_id"]).rsplit("/", 1)[-1]
    if options.get("data_dir"):
        return Path(options["data_dir"]).name or "custom"
    files = options.get("data_files")
    while isinstance(files, (dict, list, tuple)) and files:
        files = next(iter(files.values())) if isinstance(files, dict) else files[0]
    if not isinstance(files, str):
        return "custom"
    stem = Path(files).name.split(".", 1)[0]
    return re.sub(r"[_\-.]?(train|TRAIN|Train)$", "", stem) or stem


@dataclass(frozen=True)
class CustomTask(TaskSpec):
    """A user's own data (``task: custom``): the source is one of ``data_files``, ``data_dir`` or ``hub_id``;
    every option is described in docs/own-data.md. Fields other than the options are inferred from train."""

    name: str = "custom"
    data_files: Any = None
    data_dir: Any = None
    hub_id: str | None = None
    hub_config: str | None = None
    hub_revision: str | None = None
    format: str | None = None
    input_column: str | None = None
    input_columns: Any = None
    label_column: str | None = None
    group_column: str | None = None
    id_column: str | None = None
    label_names: Any = None
    tokenizer: str | None = None
    alphabet: str | None = None
    min_frequency: int | None = None
    layout: str | None = None
    missing: str | None = None
    strip_patterns: Any = None
    max_length_cap: int | None = None
    truncation: str | None = None
    test_size: float | None = None
    split_seed: int | None = None
    validation_from: str | None = None
    leakage_check: str | None = None
    unseen_labels: str | None = None
    inference: Inference | None = field(default=None, compare=False, hash=False, repr=False)

    OPTIONS: ClassVar[tuple[str, ...]] = SOURCE_KEYS + OPTION_KEYS

    @classmethod
    def from_options(cls, **options: Any) -> TaskSpec:
        """Infer the task from the source the options name (cached); unknown options raise naming the allowed."""
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if unknown:
            raise TypeError(f"task 'custom' got unknown options {unknown}{did_you_mean(unknown, cls.OPTIONS)}")
        defaults = {"split_seed": 0, "validation_from": "train"}  # load_task passes them always
        plain = {k: _thawed(v) for k, v in options.items() if v is not None and defaults.get(k, ...) != v}
        if not any(plain.get(k) for k in ("data_files", "data_dir", "hub_id")):
            raise ValueError(
                "task 'custom' needs a source in task_options: data_files, data_dir or hub_id (docs/own-data.md)"
            )
        found = cached_inference({k: v for k, v in plain.items() if k != "name"})  # a name changes no inference
        _report_leakage(found, plain.get("leakage_check") or "warn")
        fields = {k: _frozen(v) for k, v in plain.items() if k not in INFERRED_OPTIONS}
        fields.setdefault("name", source_name(plain))
        labels, regression = found.labels, found.labels.problem_type == "regression"
        return cls(
            **fields,
            **_input_fields(found),
            input_kind=found.inputs.kind,
            max_length=found.max_length,
            problem_type=labels.problem_type,
            num_labels=1 if regression else len(labels.names),
            label_names=None if regression else labels.names,
            metric="r2" if regression else "accuracy",
            inference=found,
        )

    @property
    def task_card(self) -> dict[str, Any]:
        """The task card (JSON-able): source, columns, problem type and evidence, classes, lengths, leakage."""
        return self.inference.card

    @property
    def pretrained_tokenizer(self) -> str | None:
        """The existing Hugging Face tokenizer the inputs go through (``tokenizer: <folder or name>``), else None."""
        return self.tokenizer if self.input_kind == "tokens" and self.tokenizer not in (None, *TOKENIZERS) else None

    def options(self) -> dict[str, Any]:
        return {**super().options(), "inference": self.inference.key if self.inference else None}

    def train_examples(self, validation_from: str = "train") -> int | None:
        return self.inference.train_examples

    def locate(self, data_dir: str | Path | None) -> Source:
        files = tuple(source_files(self.inference.options))
        root = Path(self.data_dir) if self.data_dir else (files[0].parent if files else None)
        return Source(root=root, files=files, hub_id=self.hub_id, extra={"key": self.inference.key})

    def build(self, source: Source) -> RawSplits:
        options, labels, plan = self.inference.options, self.inference.labels, self.inference.inputs
        raw = read_task_source(options, default_cache_dir() / "sources")
        parts, origin = views(canonical_splits(raw.splits, where_of(raw)), labels, options, options.get("group_column"))
        columns = list(dict.fromkeys([*plan.columns, labels.column]))
        truncation = options.get("truncation") or "right"

        def examples(split: str):
            ds, rows = parts[split]
            for index, row in iter_rows(ds, rows, columns):
                where = f"{where_of(raw)} {read_from(split, origin)} row {index}"
                label = labels.value(row[labels.column], where)
                if label is not None:  # a class train lacks, with unseen_labels: drop
                    yield {**plan.encode(row, where, self.max_length, truncation), "label": label}

        return {split: (lambda s=split: examples(s)) for split in parts}


def _input_fields(found: Inference) -> dict[str, Any]:
    """The spec's fields of the inputs: a vocabulary and tokenization, or the channels and their normalisation."""
    inputs = found.inputs
    if inputs.kind != "tokens":
        norm = found.normalization
        return {"vocab": None, "num_channels": inputs.num_channels, "normalization": norm, "spt_target": "values"}
    if inputs.tokenizer not in TOKENIZERS:  # an existing Hugging Face tokenizer: its vocabulary, ids shifted by 4
        return {"vocab": Vocabulary(inputs.symbols, "custom-pretrained"), "tokenization": None}
    vocab = BYTE_VOCAB if inputs.tokenizer == "bytes" else Vocabulary(inputs.symbols, f"custom-{inputs.tokenizer}")
    return {"vocab": vocab, "tokenization": TOKENIZATION[inputs.tokenizer]}


def _report_leakage(found: Inference, check: str) -> None:
    """``warn``: one log line per finding, once per process; ``error``: a one-line error naming the first."""
    findings = found.card["leakage"].get("findings") or []
    where = found.card["source"]["description"]
    if check == "error" and findings:
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise ValueError(f"{where}: leakage: {findings[0]}{more}; fix the splits or set leakage_check: warn")
    if check == "warn" and found.key not in _WARNED:
        _WARNED.add(found.key)
        for line in findings:
            logger.warning("spt_hf: %s: leakage: %s", where, line)
