"""`SeriesFeatureExtractor`: the preprocessing of continuous inputs that a checkpoint carries (docs/pipelines.md).

It turns raw series into the batches an spt_hf model of continuous inputs reads, as the task's collator does: each
series ``(L,)`` (one channel) or ``(L, C)``, truncated to ``max_length`` steps, normalised per channel with the
task's train statistics ``(x - mean) / std``, right-padded with zeros to the longest series of the batch, with an
``attention_mask`` (1 on real steps). Saved next to the model with an ``auto_map`` entry, so
``AutoFeatureExtractor.from_pretrained(folder, trust_remote_code=True)`` loads it without spt_hf installed (this
module imports only numpy and transformers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from transformers.feature_extraction_sequence_utils import SequenceFeatureExtractor
from transformers.feature_extraction_utils import BatchFeature


class SeriesFeatureExtractor(SequenceFeatureExtractor):
    """Truncation, normalisation and padding of continuous series for spt_hf models.

    Args:
        num_channels: values per step (C).
        mean: one mean per channel, in the units of the raw series.
        std: one positive standard deviation per channel.
        max_length: the most steps a series keeps (the task's ``max_length``); ``None`` keeps all.
        truncation_side: ``"right"`` keeps the first ``max_length`` steps, ``"left"`` the last.
        per_series: standardise each (truncated) series by its own per-channel mean and std first (a custom task's
            ``normalization: per_series``), then apply ``mean``/``std``.
        fixed_length: zero-pad every series to ``max_length`` with the zeros counted as real steps, as tasks of
            fixed-length clips store them (Speech Commands: 16000 samples).
        sampling_rate: samples per second of audio-like series (``None`` where it has no meaning).
    """

    model_input_names = ["input_values", "attention_mask"]
    _auto_class = "AutoFeatureExtractor"

    def __init__(
        self,
        num_channels: int = 1,
        mean: list[float] | None = None,
        std: list[float] | None = None,
        max_length: int | None = None,
        truncation_side: str = "right",
        per_series: bool = False,
        fixed_length: bool = False,
        sampling_rate: int | None = None,
        **kwargs: Any,
    ) -> None:
        mean = [0.0] * num_channels if mean is None else [float(m) for m in mean]
        std = [1.0] * num_channels if std is None else [float(s) for s in std]
        if len(mean) != num_channels or len(std) != num_channels or not all(s > 0 for s in std):
            raise ValueError(f"mean {mean} and std {std} need {num_channels} values each, std positive")
        if truncation_side not in ("right", "left"):
            raise ValueError(f"truncation_side={truncation_side!r}; allowed: 'right', 'left'")
        kwargs.pop("feature_size", None)
        kwargs.pop("padding_value", None)
        super().__init__(feature_size=num_channels, sampling_rate=sampling_rate, padding_value=0.0, **kwargs)
        self.num_channels = num_channels
        self.mean = mean
        self.std = std
        self.max_length = max_length
        self.truncation_side = truncation_side
        self.per_series = per_series
        self.fixed_length = fixed_length and max_length is not None

    def series(self, raw: Any, index: int = 0) -> np.ndarray:
        """One raw series as float32 ``(L, C)``, truncated; raises naming the series on a bad shape or NaN."""
        values = np.asarray(raw, dtype=np.float64)  # float32 once truncated and (per series) standardised
        if values.ndim == 1 and self.num_channels == 1:
            values = values[:, None]  # (L, 1)
        if values.ndim != 2 or values.shape[1] != self.num_channels or values.shape[0] == 0:
            raise ValueError(
                f"series {index}: shape {values.shape}; expected (L,) for one channel or (L, {self.num_channels}) "
                "with L > 0 (transpose a (C, L) array first)"
            )
        if not np.isfinite(values).all():
            raise ValueError(f"series {index}: holds NaN or infinite values; fill or drop them first")
        if self.max_length is not None and values.shape[0] > self.max_length:
            values = values[: self.max_length] if self.truncation_side == "right" else values[-self.max_length :]
        if self.per_series:
            std = values.std(0)  # (C,)
            values = (values - values.mean(0)) / np.where(std > 1e-8, std, 1.0)
        if self.fixed_length and values.shape[0] < self.max_length:
            values = np.concatenate([values, np.zeros((self.max_length - values.shape[0], self.num_channels))])
        return values.astype(np.float32, copy=False)

    def __call__(
        self, raw_series: Any, return_tensors: str | None = None, sampling_rate: int | None = None, **kwargs: Any
    ) -> BatchFeature:
        """Normalised, padded ``input_values`` (B, L, C) float32 and ``attention_mask`` (B, L) of one series or a
        list of series (each ``(L,)`` or ``(L, C)``). ``sampling_rate``, when given, must be the extractor's."""
        if sampling_rate is not None and self.sampling_rate is not None and sampling_rate != self.sampling_rate:
            raise ValueError(f"sampling_rate {sampling_rate} differs from this extractor's {self.sampling_rate}")
        if self._is_single(raw_series):
            raw_series = [raw_series]
        arrays = [self.series(s, i) for i, s in enumerate(raw_series)]
        if not arrays:
            raise ValueError("no series to extract features from")
        length = max(a.shape[0] for a in arrays)
        values = np.zeros((len(arrays), length, self.num_channels), dtype=np.float32)  # (B, L, C)
        mask = np.zeros((len(arrays), length), dtype=np.int64)  # (B, L)
        mean = np.asarray(self.mean, dtype=np.float32)  # (C,)
        std = np.asarray(self.std, dtype=np.float32)  # (C,)
        for i, a in enumerate(arrays):
            values[i, : a.shape[0]] = (a - mean) / std
            mask[i, : a.shape[0]] = 1
        return BatchFeature({"input_values": values, "attention_mask": mask}, tensor_type=return_tensors)

    def _is_single(self, raw: Any) -> bool:
        """Whether ``raw`` is one series rather than a list of them: one level of nesting (``(L,)``), or two with
        several channels (``(L, C)``); a one-channel array ``(L, 1)`` is one series too."""
        depth = _depth(raw)
        if isinstance(raw, np.ndarray) and raw.ndim == 2 and raw.shape[1] == self.num_channels == 1:
            return True
        return depth == 1 or (depth == 2 and self.num_channels > 1)


def _depth(raw: Any) -> int:
    """Levels of nesting of an array, tensor or (nested) list: 0 for a number."""
    if hasattr(raw, "ndim"):
        return int(raw.ndim)
    if isinstance(raw, list | tuple):
        return 1 + (_depth(raw[0]) if raw else 0)
    return 0
