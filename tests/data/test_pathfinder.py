"""Pathfinder / PathX: the generator writes LRA's layout, the loader reads it (and LRA's quirks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spt_hf.cli import main as cli_main
from spt_hf.data import DataFormatError, PathfinderParams, generate_pathfinder_image, get_task_spec, load_task
from spt_hf.data.generators.pathfinder import write_pathfinder_splits


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pf")
    argv = [
        "pathfinder",
        "--output_dir",
        str(out),
        "--num-train",
        "40",
        "--num-val",
        "5",
        "--num-test",
        "5",
        "--images-per-batch",
        "20",
        "--seed",
        "1",
    ]
    assert cli_main(["generate-data", *argv]) == 0
    return out


def _lra_copy(generated: Path, dest: Path) -> Path:
    """A copy of the generated level folder without our splits.json, under lra_release/lra_release/."""
    level = dest / "lra_release" / "lra_release" / "pathfinder32" / "curv_contour_length_14"
    shutil.copytree(generated / "pathfinder32" / "curv_contour_length_14", level)
    (level / "splits.json").unlink()
    return level


def test_generator_writes_lra_layout(generated: Path) -> None:
    level = generated / "pathfinder32" / "curv_contour_length_14"
    assert sorted(p.name for p in (level / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy", "3.npy"]
    rows = (level / "metadata" / "0.npy").read_text().splitlines()
    assert len(rows) == 20
    folder, name, index, label = rows[3].split()[:4]
    assert (folder, name, index) == ("imgs/0", "sample_3.png", "3") and label in ("0", "1")
    with Image.open(level / folder / name) as img:
        assert img.mode == "L" and img.size == (32, 32)
    assert json.loads((level / "splits.json").read_text())["test"] == ["3.npy"]


def test_generated_folder_loads_with_requested_sizes(generated: Path) -> None:
    ds = load_task("pathfinder", data_dir=generated)
    assert {k: len(v) for k, v in ds.items()} == {"train": 40, "validation": 5, "test": 5}
    x = ds["train"][0]["input_values"]
    assert isinstance(x, np.ndarray) and isinstance(ds["train"][0]["label"], int)
    assert x.shape == (1024,) and x.dtype == np.uint8 and x.max() == 255  # raw intensities, as stored
    labels = ds["train"]["label"]
    assert 0 < sum(labels) < len(labels)


def test_release_layout_splits_80_10_10(generated: Path, tmp_path: Path) -> None:
    _lra_copy(generated, tmp_path)
    ds = load_task("pathfinder", data_dir=tmp_path)
    assert {k: len(v) for k, v in ds.items()} == {"train": 40, "validation": 5, "test": 5}
    again = load_task("pathfinder", data_dir=tmp_path / "lra_release")
    assert again["test"]["label"] == ds["test"]["label"]


def test_unreadable_images_are_skipped_with_a_count(generated: Path, tmp_path: Path) -> None:
    level = _lra_copy(generated, tmp_path)
    (level / "imgs" / "0" / "sample_1.png").write_bytes(b"")  # LRA ships one empty PNG
    (level / "imgs" / "1" / "sample_2.png").write_bytes(b"not a png")
    with pytest.warns(UserWarning, match="skipped 2 unreadable image"):
        ds = load_task("pathfinder", data_dir=level)
    assert sum(len(v) for v in ds.values()) == 48


def test_wrong_size_image_names_the_file(generated: Path, tmp_path: Path) -> None:
    level = _lra_copy(generated, tmp_path)
    bad = level / "imgs" / "2" / "sample_0.png"
    Image.new("L", (31, 32)).save(bad)
    with pytest.raises(DataFormatError, match=r"sample_0\.png.*31x32, expected 32x32"):
        load_task("pathfinder", data_dir=level)


def test_bad_metadata_row_names_the_line(generated: Path, tmp_path: Path) -> None:
    level = _lra_copy(generated, tmp_path)
    meta = level / "metadata" / "1.npy"
    lines = meta.read_text().splitlines()
    lines[4] = "imgs/1 sample_4.png 4 7 14"
    meta.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match=rf"{meta}:5: label 7 is outside 0..1"):
        load_task("pathfinder", data_dir=level)


def test_missing_layout_says_what_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pathfinder32/curv_contour_length_14"):
        load_task("pathfinder", data_dir=tmp_path)


def test_images_are_seeded_and_balanced() -> None:
    params = PathfinderParams.for_resolution(32)
    first = generate_pathfinder_image(params, np.random.default_rng([4, 0]))
    again = generate_pathfinder_image(params, np.random.default_rng([4, 0]))
    assert np.array_equal(first[0], again[0]) and first[1] == again[1]
    labels = [generate_pathfinder_image(params, np.random.default_rng([4, i]))[1] for i in range(60)]
    assert 15 < sum(labels) < 45


def test_pathx_resolution_and_contour_level(tmp_path: Path) -> None:
    params = PathfinderParams.for_resolution(128, contour_length=9)
    assert params.marker_radius == 3.0 and params.seed_distance == 20.0
    write_pathfinder_splits(tmp_path, 2, 1, 1, params, seed=0)
    ds = load_task("pathx", data_dir=tmp_path, contour_length=9)
    assert len(ds["train"]) == 2 and ds["test"][0]["input_values"].shape == (16384,)
    assert get_task_spec("pathx").max_length == 16384 and get_task_spec("pathx256").max_length == 65536


def test_spec_targets_raw_intensities() -> None:
    spec = get_task_spec("pathfinder")
    assert spec.spt_target == "levels" and spec.num_quantized_levels == 256
    assert spec.normalization.mean == (127.5,)


def test_workers_do_not_change_the_images(tmp_path: Path) -> None:
    params = PathfinderParams.for_resolution(32)
    one = write_pathfinder_splits(tmp_path / "one", 30, 5, 5, params, seed=2, images_per_batch=10)
    two = write_pathfinder_splits(tmp_path / "two", 30, 5, 5, params, seed=2, images_per_batch=10, workers=2)
    for meta in sorted((one / "metadata").iterdir()):
        assert meta.read_text() == (two / "metadata" / meta.name).read_text()
    for png in sorted((one / "imgs").rglob("*.png")):
        assert png.read_bytes() == (two / png.relative_to(one)).read_bytes()
