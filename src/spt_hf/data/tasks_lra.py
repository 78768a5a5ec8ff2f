"""The Long Range Arena tasks as :class:`TaskSpec` subclasses: ListOps, Text, Retrieval, Image, Pathfinder, PathX.

Each class sets the defaults of method.md §7 / data.md, lists in ``OPTIONS`` the fields a user may change, finds
its files (``locate``) and yields its raw splits (``build``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import hub, lra
from .spec import DataFormatError, Normalization, RawSplits, Source, TaskSpec
from .vocab import BYTE_VOCAB, EOS_ID, LISTOPS_VOCAB, Vocabulary

# Normalisations on raw 0-255 values: the official code's ToTensor then Normalize(mean, std), times 255.
CIFAR_GREY = Normalization((122.6,), (61.0,))
CIFAR_RGB = Normalization((125.3, 123.0, 113.9), (63.0, 62.1, 66.7))
PIXELS_TO_UNIT = Normalization((127.5,), (127.5,))  # Pathfinder: [0, 255] -> [-1, 1]
SPLITS = ("train", "validation", "test")


def _hub_override(
    source: Source, columns: dict[str, str], needed: tuple[str, ...], convert: Callable[[dict, str], dict]
) -> RawSplits:
    """Raw splits of a user-given Hub dataset (``hub_id`` option, ``hub_columns`` mapping) converted row by row."""
    if set(columns) != set(needed):
        raise ValueError(f"hub_columns={columns}: expected exactly the keys {list(needed)} (our field -> your column)")
    opened = hub.open_hub(source, SPLITS)
    for name, ds in opened.items():
        hub.require_columns(
            ds, list(columns.values()), f"{source.hub_id or source.root} {name} (hub_columns={columns})"
        )

    def split_gen(name: str) -> Callable[[], Iterator[dict]]:
        where = source.hub_id or source.root
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
class ListOpsTask(TaskSpec):
    """LRA ListOps: 10-way classification of nested MIN/MAX/MED/SM expressions (``basic_{train,val,test}.tsv``).

    Options: ``max_length`` (2048: 2000 tokens and the end token), ``append_eos``, and ``hub_id`` with
    ``hub_columns`` (``{"source": ..., "target": ...}``) to read a Hub copy instead of the TSVs.
    """

    name: str = "listops"
    vocab: Vocabulary | None = LISTOPS_VOCAB
    max_length: int = 2048
    num_labels: int = 10
    append_eos: bool = True
    hub_id: str | None = None
    hub_columns: tuple[tuple[str, str], ...] = (("source", "Source"), ("target", "Target"))
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length", "append_eos", "hub_id", "hub_columns")
    FILES: ClassVar[tuple[str, ...]] = ("basic_train.tsv", "basic_val.tsv", "basic_test.tsv")

    def locate(self, data_dir: str | Path | None) -> Source:
        if self.hub_id is not None:
            return hub.locate_hub(self.name, self.hub_id, None, data_dir)
        folder = lra.find_folder(
            _require_dir(self.name, data_dir), self.name, lra.lra_candidates("listops-1000"), self.FILES
        )
        return Source(root=folder, files=tuple(folder / f for f in self.FILES))

    def build(self, source: Source) -> RawSplits:
        keep = self.max_length - 1 if self.append_eos else self.max_length
        tail = [EOS_ID] if self.append_eos else []
        if source.files and source.files[0].suffix == ".tsv":
            return {
                s: (lambda p=p: lra.read_listops(p, self.max_length, self.append_eos))
                for s, p in zip(SPLITS, source.files, strict=True)
            }
        cols = dict(self.hub_columns)
        return _hub_override(
            source,
            cols,
            ("source", "target"),
            lambda ex, w: lra.listops_example(ex[cols["source"]], ex[cols["target"]], keep, tail, w),
        )


@dataclass(frozen=True)
class RetrievalTask(TaskSpec):
    """LRA Retrieval (AAN citation links): two byte-level documents, 4000 bytes each, linked or not.

    Options: ``max_length`` (bytes per document), ``append_eos``, ``hub_id`` and ``hub_columns``.
    """

    name: str = "retrieval"
    vocab: Vocabulary | None = BYTE_VOCAB
    max_length: int = 4000
    num_labels: int = 2
    paired: bool = True
    hub_id: str | None = None
    hub_columns: tuple[tuple[str, str], ...] = (("label", "label"), ("text1", "text1"), ("text2", "text2"))
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length", "append_eos", "hub_id", "hub_columns")
    FILES: ClassVar[tuple[str, ...]] = ("new_aan_pairs.train.tsv", "new_aan_pairs.eval.tsv", "new_aan_pairs.test.tsv")

    def locate(self, data_dir: str | Path | None) -> Source:
        if self.hub_id is not None:
            return hub.locate_hub(self.name, self.hub_id, None, data_dir)
        folder = lra.find_folder(
            _require_dir(self.name, data_dir), self.name, lra.lra_candidates("tsv_data"), self.FILES
        )
        return Source(root=folder, files=tuple(folder / f for f in self.FILES))

    def build(self, source: Source) -> RawSplits:
        keep = self.max_length - 1 if self.append_eos else self.max_length
        tail = [EOS_ID] if self.append_eos else []
        if source.files and source.files[0].suffix == ".tsv":
            return {
                s: (lambda p=p: lra.read_aan(p, self.max_length, self.append_eos))
                for s, p in zip(SPLITS, source.files, strict=True)
            }
        c = dict(self.hub_columns)
        return _hub_override(
            source,
            c,
            ("label", "text1", "text2"),
            lambda ex, w: lra.aan_example(ex[c["label"]], ex[c["text1"]], ex[c["text2"]], keep, tail, w),
        )


@dataclass(frozen=True)
class TextTask(TaskSpec):
    """LRA Text: IMDb sentiment on UTF-8 bytes. ``max_length`` 4096 as in the paper (1000 in the LRA code).

    Validation is carved from train (10%) by default; ``load_task(..., validation_from="test")`` reproduces
    LRA's test-as-validation. Reads ``hub_id`` online or a local copy (``data_dir``).
    """

    name: str = "text"
    vocab: Vocabulary | None = BYTE_VOCAB
    max_length: int = 4096
    num_labels: int = 2
    label_names: tuple[str, ...] | None = ("neg", "pos")
    hub_id: str = "stanfordnlp/imdb"
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_length", "append_eos", "hub_id")

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub.locate_hub(self.name, self.hub_id, None, data_dir)

    def build(self, source: Source) -> RawSplits:
        opened = hub.open_hub(source, ("train", "test"))
        return {s: hub.imdb_examples(ds, self.max_length, self.append_eos) for s, ds in opened.items()}


@dataclass(frozen=True)
class ImageTask(TaskSpec):
    """LRA Image: CIFAR-10 in grey (ITU-R 601 luma), raster order, L = 1024; 45k/5k/10k. SPT target: L1."""

    name: str = "image"
    input_kind: str = "continuous"
    max_length: int = 1024
    num_labels: int = 10
    label_names: tuple[str, ...] | None = hub.CIFAR_CLASSES
    normalization: Normalization | None = CIFAR_GREY
    num_quantized_levels: int | None = 256
    spt_target: str = "values"
    validation_size: float = 5000
    hub_id: str = "uoft-cs/cifar10"
    OPTIONS: ClassVar[tuple[str, ...]] = ("hub_id",)

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub.locate_hub(self.name, self.hub_id, None, data_dir)

    def build(self, source: Source) -> RawSplits:
        opened = hub.open_hub(source, ("train", "test"))
        return {s: hub.cifar_examples(ds, rgb=self.num_channels == 3) for s, ds in opened.items()}


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
    OPTIONS: ClassVar[tuple[str, ...]] = ("contour_length", "resolution")

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
