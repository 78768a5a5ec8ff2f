"""WAV decoding and resampling for the speech tasks (Speech Commands and the offline spoken digits).

Only the standard library's ``wave`` module and (to resample) scipy are used, so no audio backend is needed;
clips become raw 16 kHz float waveforms in [-1, 1], padded with zeros (or cut) to a fixed number of samples.
"""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import numpy as np

from ..spec import DataFormatError

SAMPLE_RATE = 16_000
RATE_RANGE = (1_000, 384_000)  # Hz; outside it a header is corrupt (and resampling would take forever)
WAV_FORMAT = (
    f"a PCM WAV file (8, 16 or 32 bit integer samples), mono or multi-channel, {RATE_RANGE[0]}-{RATE_RANGE[1]} Hz"
)


def read_wav(source: str | Path | bytes, name: str | None = None) -> tuple[np.ndarray, int]:
    """Decode a PCM WAV file (path or bytes) into float64 samples in [-1, 1] (mono mix) and its sample rate."""
    label = name or (str(source) if not isinstance(source, bytes) else "<wav bytes>")
    handle = io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")  # noqa: SIM115
    try:
        with handle, wave.open(handle, "rb") as w:
            rate, width, channels, declared = w.getframerate(), w.getsampwidth(), w.getnchannels(), w.getnframes()
            frames = w.readframes(declared)
    except (wave.Error, EOFError, RuntimeError, struct.error) as err:  # wave raises RuntimeError on a bad chunk size
        raise DataFormatError(f"{label}: cannot decode ({type(err).__name__}: {err}); expected {WAV_FORMAT}") from None
    dtypes = {1: np.uint8, 2: np.int16, 4: np.int32}
    if width not in dtypes:
        raise DataFormatError(f"{label}: {8 * width}-bit samples are not supported; expected {WAV_FORMAT}")
    if not RATE_RANGE[0] <= rate <= RATE_RANGE[1]:
        raise DataFormatError(f"{label}: sample rate {rate} Hz; expected {WAV_FORMAT}")
    if len(frames) != declared * width * channels or declared == 0:
        raise DataFormatError(
            f"{label}: truncated or empty: the header declares {declared} frames of {width * channels} bytes, the "
            f"file holds {len(frames)} bytes of samples; expected {WAV_FORMAT}"
        )
    samples = np.frombuffer(frames, dtype=dtypes[width]).astype(np.float64)
    # 8-bit WAV is unsigned around 128; wider samples are signed
    samples = (samples - 128.0) / 128.0 if width == 1 else samples / float(2 ** (8 * width - 1))
    samples = samples.reshape(-1, channels).mean(axis=1)  # (T,)
    return samples, rate


def to_fixed_length(samples: np.ndarray, rate: int, length: int = SAMPLE_RATE) -> np.ndarray:
    """Resample to 16 kHz (polyphase) and pad with zeros or cut at the end to ``length``; returns (length, 1)."""
    if rate != SAMPLE_RATE:
        from scipy.signal import resample_poly  # scipy comes with scikit-learn; needed only to resample

        g = np.gcd(rate, SAMPLE_RATE)
        samples = resample_poly(samples, SAMPLE_RATE // g, rate // g)
    out = np.zeros(length, dtype=np.float32)
    n = min(length, samples.shape[0])
    out[:n] = np.clip(samples[:n], -1.0, 1.0)
    return out.reshape(length, 1)  # (L, 1)
