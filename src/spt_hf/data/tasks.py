"""Every task of the paper and the offline stand-ins, by name: one :class:`TaskSpec` subclass per benchmark.

Each class sets the paper's defaults (docs/method.md §7, docs/data.md), lists in ``OPTIONS`` the fields a user may
change, finds its files (``locate``) and yields its raw splits (``build``) with the readers of
:mod:`spt_hf.data.readers`. ``TASKS`` maps a task name to its class (a plain dict of classes, not a registry of import
paths); :func:`get_task_spec` builds one with user options.

- Long Range Arena: :class:`ListOpsTask`, :class:`TextTask`, :class:`RetrievalTask`, :class:`ImageTask`,
  :class:`PathfinderTask`, :class:`PathXTask`, :class:`PathX256Task`; and :class:`SCifarTask`.
- The paper's other tasks: :class:`SpeechCommandsTask`, :class:`BidmcTask`.
- Real data that installs offline: :class:`DigitsTask`, :class:`FashionMnistTask`, :class:`SpokenDigitsTask`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from .custom.task import CustomTask
from .readers import hub_datasets, lra, offline, timeseries
from .spec import LOAD_OPTIONS, DataFormatError, Normalization, RawSplits, Source, TaskSpec
from .vocab import BYTE_VOCAB, DIGITS_NUM_LEVELS, DIGITS_VOCAB, EOS_ID, LISTOPS_VOCAB, Vocabulary

# Normalisations on raw 0-255 values: the official code's ToTensor then Normalize(mean, std), times 255.
CIFAR_GREY = Normalization((122.6,), (61.0,))
CIFAR_RGB = Normalization((125.3, 123.0, 113.9), (63.0, 62.1, 66.7))
PIXELS_TO_UNIT = Normalization((127.5,), (127.5,))  # Pathfinder: [0, 255] -> [-1, 1]
SPLITS = ("train", "validation", "test")


def _hub_override(source: Source, columns: dict[str, str], convert: Callable[[dict, str], dict]) -> RawSplits:
    """Raw splits of a user-given Hub dataset (``hub_id`` option, ``hub_columns`` mapping) converted row by row."""
    opened = hub_datasets.open_hub(source, SPLITS)
    where = source.hub_id or source.root
    for name, ds in opened.items():
        hub_datasets.require_columns(ds, list(columns.values()), f"{where} {name} (hub_columns={columns})")

    def split_gen(name: str) -> Callable[[], Iterator[dict]]:
        return lambda: (convert(ex, f"{where} {name} item {i}") for i, ex in enumerate(opened[name]))

    return {name: split_gen(name) for name in SPLITS}


def _require_dir(task: str, data_dir: str | Path | None) -> Path:
    if data_dir is None:
        raise FileNotFoundError(
            f"{task}: no official Hub host exists; pass data_dir (the lra_release folder, the "
            "task folder, or a folder written by `spt-hf generate-data`) or hub_id"
        )
    return Path(data_dir)


@dataclass(frozen=True)
class LraTsvTask(TaskSpec):
    """A task read from three TSV files of the LRA release (ListOps, Retrieval), or from a Hub copy.

    Subclasses name their ``FILES`` (train, validation, test), the release ``FOLDER`` holding them, the TSV reader
    and the function converting one Hub row (``hub_columns`` maps our field names to the Hub dataset's columns).
    """

    append_eos: bool = False
    hub_id: str | None = None
    hub_columns: tuple[tuple[str, str], ...] = ()
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length", "append_eos", "hub_id", "hub_columns")
    FILES: ClassVar[tuple[str, ...]] = ()
    FOLDER: ClassVar[str] = ""

    def locate(self, data_dir: str | Path | None) -> Source:
        if self.hub_id is not None:
            return hub_datasets.locate_hub(self.name, self.hub_id, None, data_dir)
        root = _require_dir(self.name, data_dir)
        folder = lra.find_folder(root, self.name, lra.lra_candidates(self.FOLDER), self.FILES)
        return Source(root=folder, files=tuple(folder / f for f in self.FILES))

    def build(self, source: Source) -> RawSplits:
        if source.files and source.files[0].suffix == ".tsv":
            return {
                s: (lambda p=p: self.read_tsv(p, self.max_length, self.append_eos))
                for s, p in zip(SPLITS, source.files, strict=True)
            }
        keep = self.max_length - 1 if self.append_eos else self.max_length
        tail = [EOS_ID] if self.append_eos else []
        columns = dict(self.hub_columns)
        needed = [name for name, _ in type(self).__dataclass_fields__["hub_columns"].default]
        if set(columns) != set(needed):
            raise ValueError(f"hub_columns={columns}: expected exactly the keys {needed} (our field -> your column)")
        return _hub_override(source, columns, lambda row, where: self.hub_example(row, columns, keep, tail, where))

    @staticmethod
    def read_tsv(path: Path, max_length: int, append_eos: bool) -> Iterator[dict]:
        raise NotImplementedError

    @staticmethod
    def hub_example(row: dict, columns: dict[str, str], keep: int, tail: list[int], where: str) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class ListOpsTask(LraTsvTask):
    """LRA ListOps: 10-way classification of nested MIN/MAX/MED/SM expressions (``basic_{train,val,test}.tsv``).

    Options: ``max_length`` (2048: 2000 tokens and the end token), ``append_eos``, and ``hub_id`` with
    ``hub_columns`` (``{"source": ..., "target": ...}``) to read a Hub copy instead of the TSVs.
    """

    name: str = "listops"
    HUB_TASK_TYPE: ClassVar[str] = "text-classification"
    GENERATOR: ClassVar[str | None] = "listops"
    vocab: Vocabulary | None = LISTOPS_VOCAB
    tokenization: str | None = "listops"
    max_length: int = 2048
    num_labels: int = 10
    append_eos: bool = True
    hub_columns: tuple[tuple[str, str], ...] = (("source", "Source"), ("target", "Target"))
    FILES: ClassVar[tuple[str, ...]] = ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv")
    FOLDER: ClassVar[str] = "listops-1000"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (96_000, 0)  # the LRA release's own train split
    read_tsv = staticmethod(lra.read_listops)

    @staticmethod
    def hub_example(row, columns, keep, tail, where):
        return lra.listops_example(row[columns["source"]], row[columns["target"]], keep, tail, where)


@dataclass(frozen=True)
class RetrievalTask(LraTsvTask):
    """LRA Retrieval (AAN citation links): two byte-level documents, 4000 bytes each, linked or not.

    Options: ``max_length`` (bytes per document), ``append_eos``, ``hub_id`` and ``hub_columns``.
    """

    name: str = "retrieval"
    HUB_TASK_TYPE: ClassVar[str] = "text-classification"
    vocab: Vocabulary | None = BYTE_VOCAB
    tokenization: str | None = "bytes"
    max_length: int = 4000
    num_labels: int = 2
    paired: bool = True
    hub_columns: tuple[tuple[str, str], ...] = (("label", "label"), ("text1", "text1"), ("text2", "text2"))
    FILES: ClassVar[tuple[str, ...]] = ("new_aan_pairs.train.tsv", "new_aan_pairs.eval.tsv", "new_aan_pairs.test.tsv")
    FOLDER: ClassVar[str] = "tsv_data"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (147_086, 0)  # the LRA release's own train split
    read_tsv = staticmethod(lra.read_aan)

    @staticmethod
    def hub_example(row, columns, keep, tail, where):
        text = (row[columns["label"]], row[columns["text1"]], row[columns["text2"]])
        return lra.aan_example(*text, keep, tail, where)


@dataclass(frozen=True)
class TextTask(TaskSpec):
    """LRA Text: IMDb sentiment on UTF-8 bytes. ``max_length`` 4096 as in the paper (1000 in the LRA code).

    Validation is carved from train (10%) by default; ``load_task(..., validation_from="test")`` reproduces
    LRA's test-as-validation. Reads ``hub_id`` online or a local copy (``data_dir``).
    """

    name: str = "text"
    vocab: Vocabulary | None = BYTE_VOCAB
    tokenization: str | None = "bytes"
    max_length: int = 4096
    num_labels: int = 2
    label_names: tuple[str, ...] | None = ("neg", "pos")
    hub_id: str = "stanfordnlp/imdb"
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length", "append_eos", "hub_id")
    HUB_TASK_TYPE: ClassVar[str] = "text-classification"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (22_500, 2_500)  # IMDb's 25,000 train reviews less 10%

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub_datasets.locate_hub(self.name, self.hub_id, None, data_dir)

    def build(self, source: Source) -> RawSplits:
        opened = hub_datasets.open_hub(source, ("train", "test"))
        return {s: hub_datasets.imdb_examples(ds, self.max_length, self.append_eos) for s, ds in opened.items()}


@dataclass(frozen=True)
class ImageTask(TaskSpec):
    """LRA Image: CIFAR-10 in grey (ITU-R 601 luma), raster order, L = 1024; 45k/5k/10k. SPT target: L1."""

    name: str = "image"
    input_kind: str = "continuous"
    max_length: int = 1024
    num_labels: int = 10
    label_names: tuple[str, ...] | None = hub_datasets.CIFAR_CLASSES
    normalization: Normalization | None = CIFAR_GREY
    num_quantized_levels: int | None = 256
    spt_target: str = "values"
    storage_dtype: str = "uint8"
    validation_size: float = 5000
    hub_id: str = "uoft-cs/cifar10"
    OPTIONS: ClassVar[tuple[str, ...]] = ("hub_id",)
    HUB_TASK_TYPE: ClassVar[str] = "image-classification"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (45_000, 5_000)  # CIFAR-10's 50,000 train images less 5,000

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub_datasets.locate_hub(self.name, self.hub_id, None, data_dir)

    def build(self, source: Source) -> RawSplits:
        opened = hub_datasets.open_hub(source, ("train", "test"))
        return {s: hub_datasets.cifar_examples(ds, rgb=self.num_channels == 3) for s, ds in opened.items()}


@dataclass(frozen=True)
class SCifarTask(ImageTask):
    """sCIFAR: CIFAR-10 in RGB, L = 1024 steps of 3 channels; 45k/5k/10k."""

    name: str = "scifar"
    num_channels: int = 3
    normalization: Normalization | None = CIFAR_RGB


MANIFEST = 'expected {"train": ["0.npy", ...], "validation": [...], "test": [...]}'


def _read_manifest(path: Path) -> dict[str, list[str]]:
    """The ``splits.json`` written by ``spt-hf generate-data``: metadata file names per split."""
    try:
        names = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(f"{path}: not JSON ({err}); {MANIFEST}") from None
    if not isinstance(names, dict) or not all(
        isinstance(v, list) and all(isinstance(n, str) for n in v) for v in names.values()
    ):
        raise DataFormatError(f"{path}: not a mapping of split names to lists of file names; {MANIFEST}")
    return names


@dataclass(frozen=True)
class PathfinderTask(TaskSpec):
    """Pathfinder (32 px, L = 1024): are the two marked dots connected? 80/10/10 of the release images.

    SPT on Pathfinder predicts the 256 raw intensities (cross-entropy) from normalised inputs. Option
    ``contour_length`` picks the level folder (14, LRA's hardest, by default; 6 is ``curv_baseline``).
    """

    name: str = "pathfinder"
    input_kind: str = "continuous"
    resolution: int = 32
    contour_length: int = 14
    max_length: int = 1024
    num_labels: int = 2
    normalization: Normalization | None = PIXELS_TO_UNIT
    num_quantized_levels: int | None = 256
    spt_target: str = "levels"
    storage_dtype: str = "uint8"
    OPTIONS: ClassVar[tuple[str, ...]] = ("contour_length", "resolution")
    HUB_TASK_TYPE: ClassVar[str] = "image-classification"
    GENERATOR: ClassVar[str | None] = "pathfinder"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (160_000, 0)  # 80% of the 200,000 images (PathX's too)

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_length", self.resolution**2)
        super().__post_init__()

    @property
    def level_folder(self) -> str:
        """LRA's folder name of the difficulty level."""
        return "curv_baseline" if self.contour_length == 6 else f"curv_contour_length_{self.contour_length}"

    def locate(self, data_dir: str | Path | None) -> Source:
        res, level = self.resolution, self.level_folder
        cands = ["", level, *lra.lra_candidates(f"pathfinder{res}/{level}")[1:]]
        folder = lra.find_folder(_require_dir(self.name, data_dir), self.name, cands, ["metadata", "imgs"])
        meta = lra.pathfinder_metadata_files(folder)
        dirs = tuple(p for p in (folder / "imgs").iterdir() if p.is_dir())  # their mtimes change with their files
        manifest = (folder / "splits.json",) if (folder / "splits.json").is_file() else ()
        return Source(root=folder, files=(*meta, *sorted(dirs), *manifest), extra={"metadata": meta})

    def build(self, source: Source) -> RawSplits:
        folder, meta = source.root, source.extra["metadata"]
        manifest = folder / "splits.json"
        if not manifest.is_file():
            return {"pool": lambda: lra.read_pathfinder(folder, meta, self.resolution)}
        names = _read_manifest(manifest)
        by_name = {p.name: p for p in meta}
        missing = [n for s in SPLITS for n in names.get(s, ["<missing split>"]) if n not in by_name]
        if missing:
            raise DataFormatError(f"{manifest}: lists {missing} that are not in {folder / 'metadata'}; {MANIFEST}")
        return {
            s: (lambda files=[by_name[n] for n in names[s]]: lra.read_pathfinder(folder, files, self.resolution))
            for s in SPLITS
        }


@dataclass(frozen=True)
class PathXTask(PathfinderTask):
    """PathX: Pathfinder at 128 px (L = 16384); max pooling as in the official Transformer config."""

    name: str = "pathx"
    resolution: int = 128
    pooling: str = "max"


@dataclass(frozen=True)
class PathX256Task(PathfinderTask):
    """PathX-256: Pathfinder at 256 px (L = 65536)."""

    name: str = "pathx256"
    resolution: int = 256
    pooling: str = "max"


# ------------------------------------------------------------------------------------------------------------------
# The paper's other tasks and the offline stand-ins
# ------------------------------------------------------------------------------------------------------------------

RAW_AUDIO = Normalization((0.0,), (1.0,))  # waveforms in [-1, 1] stay as they are (as in the official code)
FASHION_MNIST = Normalization((55.84,), (84.61,))  # the padded 32x32 train images
DIGITS_TO_UNIT = Normalization((8.0,), (8.0,))  # intensities 0..16 -> [-1, 1], no data statistics


@dataclass(frozen=True)
class SpeechCommandsTask(TaskSpec):
    """Speech Commands v0.02: 35 words, raw 16 kHz waveforms padded to L = 16000; the Hub's own splits."""

    name: str = "speech_commands"
    input_kind: str = "continuous"
    max_length: int = 16000
    num_labels: int = 35
    label_names: tuple[str, ...] | None = hub_datasets.SPEECH_COMMANDS_WORDS
    normalization: Normalization | None = RAW_AUDIO
    spt_target: str = "values"
    pooling: str = "max"
    hub_id: str = "google/speech_commands"
    OPTIONS: ClassVar[tuple[str, ...]] = ("hub_id",)
    HUB_TASK_TYPE: ClassVar[str] = "audio-classification"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (84_848, 0)  # v0.02: the Hub's train split

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub_datasets.locate_hub(self.name, self.hub_id, "v0.02", data_dir)

    def build(self, source: Source) -> RawSplits:
        return {s: hub_datasets.speech_commands_examples(ds) for s, ds in hub_datasets.open_hub(source, SPLITS).items()}


BIDMC_SHAPES = {
    "BIDMC32HR": (2, 4000),
    "BIDMC32RR": (2, 4000),
    "BIDMC32SpO2": (2, 4000),
    "Covid3Month": (1, 84),
    "CardanoSentiment": (2, 24),
}


@dataclass(frozen=True)
class BidmcTask(TaskSpec):
    """BIDMC32 HR/RR/SpO2 regression from ``<name>_{TRAIN,TEST}.ts``; any ``.ts`` regression set (aeon's too).

    Options: ``dataset_name`` (BIDMC32HR), ``num_channels`` and ``max_length`` (known for the BIDMC and aeon
    sets). The normalisation is fitted on the train split (:func:`~spt_hf.data.spec.fit_normalization`).
    """

    name: str = "bidmc"
    input_kind: str = "continuous"
    dataset_name: str = "BIDMC32HR"
    num_channels: int = 2
    max_length: int = 4000
    num_labels: int = 1
    problem_type: str = "regression"
    metric: str = "r2"
    spt_target: str = "values"
    OPTIONS: ClassVar[tuple[str, ...]] = ("dataset_name", "num_channels", "max_length")
    HUB_TASK_TYPE: ClassVar[str] = "tabular-regression"
    TRAIN_EXAMPLES: ClassVar[tuple[int, int] | None] = (5_009, 556)  # BIDMC32's 5,565 train series less 10%

    @classmethod
    def from_options(cls, **options: Any) -> TaskSpec:
        name = options.get("dataset_name", cls.dataset_name)
        if name not in BIDMC_SHAPES and not {"num_channels", "max_length"} <= set(options):
            raise TypeError(
                f"bidmc: dataset {name!r} is not one of {list(BIDMC_SHAPES)}; pass num_channels and max_length"
            )
        channels, length = BIDMC_SHAPES.get(name, (None, None))
        return super().from_options(**{"num_channels": channels, "max_length": length, **options})

    def locate(self, data_dir: str | Path | None) -> Source:
        return timeseries.locate_ts(self.dataset_name, data_dir)

    def build(self, source: Source) -> RawSplits:
        train, test = source.files
        return {
            "train": timeseries.ts_examples(train, self.num_channels, self.max_length),
            "test": timeseries.ts_examples(test, self.num_channels, self.max_length),
        }


@dataclass(frozen=True)
class DigitsTask(TaskSpec):
    """scikit-learn's 1,797 real 8x8 digit scans as 64 steps (the CPU demo, docs/method.md §9); 500/400/897 split.

    Option ``input_kind``: ``"tokens"`` (intensity 0-16 as tokens, default) or ``"continuous"`` (one value).
    """

    name: str = "digits"
    vocab: Vocabulary | None = DIGITS_VOCAB
    tokenization: str | None = "whitespace"  # the intensities 0-16 written as numbers between spaces
    max_length: int = 64
    num_labels: int = 10
    split_sizes: tuple[float, float, float] = (500, 400, 897)
    OPTIONS: ClassVar[tuple[str, ...]] = ("input_kind",)
    HUB_TASK_TYPE: ClassVar[str] = "image-classification"

    @classmethod
    def from_options(cls, **options: Any) -> TaskSpec:
        options = cls.check_options(options)
        if options.get("input_kind") == "continuous":
            # raw intensities 0..16 scaled to [-1, 1]; "levels" targets are the 17 raw intensities
            return cls(
                input_kind="continuous",
                vocab=None,
                tokenization=None,
                spt_target="values",
                normalization=DIGITS_TO_UNIT,
                num_quantized_levels=DIGITS_NUM_LEVELS,
                storage_dtype="uint8",
            )
        return cls(**options)

    def locate(self, data_dir: str | Path | None) -> Source:
        return offline.locate_digits()

    def build(self, source: Source) -> RawSplits:
        return {"pool": offline.digits_examples(as_tokens=self.input_kind == "tokens")}


@dataclass(frozen=True)
class FashionMnistTask(TaskSpec):
    """Fashion-MNIST (Debian ``dataset-fashion-mnist``) as a sequential image: padded to 32x32, L = 1024.

    Options ``train_size`` / ``test_size`` keep the first items of each file (small CPU runs).
    """

    name: str = "fashion_mnist"
    input_kind: str = "continuous"
    max_length: int = 1024
    num_labels: int = 10
    label_names: tuple[str, ...] | None = offline.FASHION_MNIST_CLASSES
    normalization: Normalization | None = FASHION_MNIST
    num_quantized_levels: int | None = 256
    spt_target: str = "values"
    storage_dtype: str = "uint8"
    validation_size: float = 1 / 12  # 5,000 of 60,000
    train_size: int | None = None
    test_size: int | None = None
    OPTIONS: ClassVar[tuple[str, ...]] = ("train_size", "test_size")
    HUB_TASK_TYPE: ClassVar[str] = "image-classification"

    def locate(self, data_dir: str | Path | None) -> Source:
        return offline.locate_fashion_mnist(data_dir)

    def build(self, source: Source) -> RawSplits:
        return {
            "train": offline.fashion_mnist_examples(source.root, "train", self.train_size),
            "test": offline.fashion_mnist_examples(source.root, "test", self.test_size),
        }


@dataclass(frozen=True)
class SpokenDigitsTask(TaskSpec):
    """Real spoken digits 0-9 of the asterisk sound packages, Speech-Commands-shaped (16 kHz, L = 16000)."""

    name: str = "spoken_digits"
    input_kind: str = "continuous"
    max_length: int = 16000
    num_labels: int = 10
    label_names: tuple[str, ...] | None = offline.DIGIT_NAMES
    normalization: Normalization | None = RAW_AUDIO
    spt_target: str = "values"
    pooling: str = "max"
    OPTIONS: ClassVar[tuple[str, ...]] = ()
    HUB_TASK_TYPE: ClassVar[str] = "audio-classification"

    def locate(self, data_dir: str | Path | None) -> Source:
        return offline.locate_spoken_digits(data_dir)

    def build(self, source: Source) -> RawSplits:
        return {s: offline.spoken_digit_examples(c) for s, c in offline.spoken_digit_splits(source, seed=0).items()}


TASKS: dict[str, type[TaskSpec]] = {
    cls.name: cls
    for cls in (
        ListOpsTask,
        TextTask,
        RetrievalTask,
        ImageTask,
        SCifarTask,
        PathfinderTask,
        PathXTask,
        PathX256Task,
        SpeechCommandsTask,
        BidmcTask,
        DigitsTask,
        FashionMnistTask,
        SpokenDigitsTask,
        CustomTask,
    )
}


# The tasks whose files spt_hf's generators write (`spt-hf generate-data`, a recipe's `generate_data:` block).
GENERATED_TASKS: tuple[str, ...] = tuple(name for name, cls in TASKS.items() if cls.GENERATOR is not None)


def hub_task_type(name: str) -> str:
    """The Hub task type of a model finetuned on task ``name`` ("other" for a task spt_hf does not know)."""
    return TASKS[name].HUB_TASK_TYPE if name in TASKS else "other"


def get_task_spec(name: str, /, **options: Any) -> TaskSpec:
    """The spec of task ``name`` with user ``options`` (see each task's ``OPTIONS``).

    ``load_task``'s own options (``LOAD_OPTIONS``: ``seed``, ``cache_dir``, ...) are accepted and ignored, so the
    same option dict can be passed to both; those a task lists in its ``OPTIONS`` (the custom task's ``data_dir``,
    ``split_seed`` and ``validation_from``, which decide its source and train split) reach it.
    """
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}")
    cls = TASKS[name]
    return cls.from_options(**{k: v for k, v in options.items() if k not in LOAD_OPTIONS or k in cls.OPTIONS})
