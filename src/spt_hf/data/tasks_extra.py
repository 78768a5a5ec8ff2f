"""The other tasks of the paper (Speech Commands, BIDMC) and the offline real-data stand-ins (data.md §4).

Digits, Fashion-MNIST and the spoken digits install offline (scikit-learn, Debian packages); any ``.ts``
regression set, such as those bundled with ``aeon``, loads through the BIDMC task.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from . import hub, offline, timeseries
from .spec import Normalization, RawSplits, Source, TaskSpec
from .tasks_lra import SPLITS
from .vocab import DIGITS_NUM_LEVELS, DIGITS_VOCAB, Vocabulary

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
    label_names: tuple[str, ...] | None = hub.SPEECH_COMMANDS_WORDS
    normalization: Normalization | None = RAW_AUDIO
    spt_target: str = "values"
    pooling: str = "max"
    hub_id: str = "google/speech_commands"
    OPTIONS: ClassVar[tuple[str, ...]] = ("hub_id",)

    def locate(self, data_dir: str | Path | None) -> Source:
        return hub.locate_hub(self.name, self.hub_id, "v0.02", data_dir)

    def build(self, source: Source) -> RawSplits:
        return {s: hub.speech_commands_examples(ds) for s, ds in hub.open_hub(source, SPLITS).items()}


BIDMC_SHAPES = {"BIDMC32HR": (2, 4000), "BIDMC32RR": (2, 4000), "BIDMC32SpO2": (2, 4000),
                "Covid3Month": (1, 84), "CardanoSentiment": (2, 24)}  # fmt: skip


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
    """scikit-learn's 1,797 real 8x8 digit scans as 64 steps (the CPU demo, method.md §9); 500/400/897 split.

    Option ``input_kind``: ``"tokens"`` (intensity 0-16 as tokens, default) or ``"continuous"`` (one value).
    """

    name: str = "digits"
    vocab: Vocabulary | None = DIGITS_VOCAB
    max_length: int = 64
    num_labels: int = 10
    split_sizes: tuple[float, float, float] = (500, 400, 897)
    OPTIONS: ClassVar[tuple[str, ...]] = ("input_kind",)

    @classmethod
    def from_options(cls, **options: Any) -> TaskSpec:
        options = cls.check_options(options)
        if options.get("input_kind") == "continuous":
            # raw intensities 0..16 scaled to [-1, 1]; "levels" targets are the 17 raw intensities
            return cls(
                input_kind="continuous",
                vocab=None,
                spt_target="values",
                normalization=DIGITS_TO_UNIT,
                num_quantized_levels=DIGITS_NUM_LEVELS,
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
    validation_size: float = 1 / 12  # 5,000 of 60,000
    train_size: int | None = None
    test_size: int | None = None
    OPTIONS: ClassVar[tuple[str, ...]] = ("train_size", "test_size")

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

    def locate(self, data_dir: str | Path | None) -> Source:
        return offline.locate_spoken_digits(data_dir)

    def build(self, source: Source) -> RawSplits:
        return {s: offline.spoken_digit_examples(c) for s, c in offline.spoken_digit_splits(source, seed=0).items()}
