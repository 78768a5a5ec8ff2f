"""BIDMC / ``.ts`` regression files: our small files of that format, and aeon's bundled real sets if installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spt_hf.data import ClassificationCollator, DataFormatError, fit_normalization, get_task_spec, load_task
from spt_hf.data.readers.timeseries import aeon_data_dir

HEADER = """# BIDMC-like test file
@problemName BIDMC32HR
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength true
@seriesLength {length}
@targetLabel true
@data
"""


def _write_ts(folder: Path, name: str, n: int, length: int = 40, seed: int = 0, channels: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    series = rng.normal(50.0, 10.0, (n, channels, length)).round(3)
    targets = rng.uniform(60, 120, n).round(2)
    lines = [
        ":".join(",".join(f"{v:g}" for v in dim) for dim in s) + f":{t:g}" for s, t in zip(series, targets, strict=True)
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(HEADER.format(length=length) + "\n".join(lines) + "\n")
    return series


def test_bidmc_ts_files_load_as_raw_regression(tmp_path: Path) -> None:
    train = _write_ts(tmp_path / "BIDMC32HR", "BIDMC32HR_TRAIN.ts", 30)
    _write_ts(tmp_path / "BIDMC32HR", "BIDMC32HR_TEST.ts", 8, seed=1)
    ds = load_task("bidmc", data_dir=tmp_path)
    assert {k: len(v) for k, v in ds.items()} == {"train": 27, "validation": 3, "test": 8}
    full = load_task("bidmc", data_dir=tmp_path, validation_from="test")
    x = full["train"][0]["input_values"].reshape(-1, 2)  # stored flat, step-major
    assert x.shape == (40, 2) and np.allclose(x, train[0].T, atol=1e-4)  # raw, (L, C)
    spec = get_task_spec("bidmc")
    assert spec.is_regression and spec.metric == "r2" and spec.normalization is None
    fitted = fit_normalization(spec, ds["train"])
    assert abs(fitted.normalization.mean[0] - 50.0) < 2.0 and abs(fitted.normalization.std[1] - 10.0) < 2.0
    batch = ClassificationCollator(fitted)([ds["train"][i] for i in range(4)])
    assert batch["labels"].dtype.is_floating_point and batch["input_values"].shape == (4, 40, 2)
    assert abs(float(batch["input_values"].mean())) < 0.5
    with pytest.raises(ValueError, match="fit_normalization"):
        ClassificationCollator(spec)([ds["train"][0]])


def test_ts_errors_name_file_and_line(tmp_path: Path) -> None:
    _write_ts(tmp_path, "BIDMC32HR_TRAIN.ts", 3, channels=3)
    _write_ts(tmp_path, "BIDMC32HR_TEST.ts", 3)
    with pytest.raises(DataFormatError, match=r"BIDMC32HR_TRAIN\.ts:11: 3 dimensions, expected 2"):
        load_task("bidmc", data_dir=tmp_path)
    path = tmp_path / "BIDMC32HR_TRAIN.ts"
    _write_ts(tmp_path, "BIDMC32HR_TRAIN.ts", 3)
    path.write_text(path.read_text().replace("@targetLabel true\n", ""))
    with pytest.raises(DataFormatError, match="not a regression file"):
        load_task("bidmc", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"BIDMC32RR_TRAIN\.ts"):
        load_task("bidmc", data_dir=tmp_path, dataset_name="BIDMC32RR")
    with pytest.raises(TypeError, match="pass num_channels"):
        get_task_spec("bidmc", dataset_name="Other")


@pytest.mark.skipif(aeon_data_dir() is None, reason="aeon not installed (optional: pip install aeon)")
def test_aeon_bundled_regression_sets() -> None:
    ds = load_task("bidmc", dataset_name="Covid3Month")
    assert {k: len(v) for k, v in ds.items()} == {"train": 126, "validation": 14, "test": 61}
    assert ds["test"][0]["input_values"].shape == (84,)
    two = load_task("bidmc", data_dir=aeon_data_dir(), dataset_name="CardanoSentiment")
    assert len(two["test"]) == 33 and two["test"][0]["input_values"].shape == (48,)
