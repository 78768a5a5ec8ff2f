"""One digest format for checkpoint files ({relative path: {sha256, bytes}}): results.json's `checkpoint_files`, a
Trainer checkpoint's manifest and a finetuning phase's fingerprint all read from `checkpoints.file_digests`, and what
was recorded before the formats were one (results.json's bare sha256 per file) still verifies."""

import hashlib
import json
from pathlib import Path

import pytest

from spt_hf.checkpoints import (
    CheckpointIntegrityError,
    digest_problem,
    file_digests,
    verify_file_digests,
    verify_recorded_digests,
)
from spt_hf.training.run_folder import MANIFEST_FILE, checkpoint_problem, commit_checkpoint, phase_extra

WEIGHTS = b"\x00\x01weights" * 100
FLIPPED = WEIGHTS[:-1] + bytes([WEIGHTS[-1] ^ 0x10])  # one bit of the last byte: the same size


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_folder(folder: Path) -> Path:
    """An exported model's files, a file of another kind and a subfolder (neither of which is a model file)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(WEIGHTS)
    (folder / "config.json").write_text('{"model_type": "spt_s4"}')
    (folder / "notes.txt").write_text("not a model file")
    (folder / "checkpoint-2").mkdir()
    (folder / "checkpoint-2" / "config.json").write_text("{}")
    return folder


def test_file_digests_takes_the_model_files_directly_in_the_folder_or_the_files_given(tmp_path):
    folder = model_folder(tmp_path / "spt")
    config = (folder / "config.json").read_bytes()
    assert file_digests(folder) == {
        "config.json": {"sha256": sha(config), "bytes": len(config)},
        "model.safetensors": {"sha256": sha(WEIGHTS), "bytes": len(WEIGHTS)},
    }
    nested = file_digests(folder, [folder / "checkpoint-2" / "config.json", folder / "notes.txt"])
    assert nested == {
        "checkpoint-2/config.json": {"sha256": sha(b"{}"), "bytes": 2},
        "notes.txt": {"sha256": sha(b"not a model file"), "bytes": 16},
    }


@pytest.mark.parametrize(
    "change, recorded_as, problem",
    [
        (None, "entry", None),
        (None, "bare sha256", None),
        ("delete", "entry", "missing"),
        ("delete", "bare sha256", "missing"),
        ("truncate", "entry", f"100 bytes instead of {len(WEIGHTS)} (truncated?)"),
        ("truncate", "bare sha256", f"sha256 {sha(WEIGHTS[:100])} != {sha(WEIGHTS)} recorded when it was written"),
        ("flip a bit", "entry", f"sha256 {sha(FLIPPED)} != {sha(WEIGHTS)} recorded when it was written"),
        ("flip a bit", "bare sha256", f"sha256 {sha(FLIPPED)} != {sha(WEIGHTS)} recorded when it was written"),
    ],
)
def test_digest_problem_reads_both_recorded_shapes(change, recorded_as, problem, tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(WEIGHTS)
    entry = file_digests(tmp_path)["model.safetensors"]
    recorded = entry if recorded_as == "entry" else entry["sha256"]
    if change == "delete":
        path.unlink()
    elif change == "truncate":
        path.write_bytes(WEIGHTS[:100])
    elif change == "flip a bit":
        path.write_bytes(FLIPPED)
    assert digest_problem(path, recorded) == problem


def test_results_json_recorded_before_the_one_format_still_verifies(tmp_path):
    """results.json's `checkpoint_files` as the code before wrote it: a bare sha256 per model file."""
    folder = model_folder(tmp_path / "spt")
    old = {
        "checkpoint_files": {name: sha((folder / name).read_bytes()) for name in ("config.json", "model.safetensors")}
    }
    (folder / "results.json").write_text(json.dumps(old))
    assert verify_recorded_digests(folder) == 2
    (folder / "model.safetensors").write_bytes(WEIGHTS[::-1])
    with pytest.raises(CheckpointIntegrityError, match=r"(?s)Checksum error.*spt/model.safetensors: sha256"):
        verify_recorded_digests(folder)
    verify_file_digests(folder, {"config.json": file_digests(folder)["config.json"]})  # the new shape: verifies


def test_a_trainer_checkpoint_manifest_written_before_still_verifies(tmp_path):
    """The manifest as the code before wrote it (every file under the checkpoint, relative path -> sha256 and size)
    is the one format: it verifies, names a truncated file, and is what `commit_checkpoint` writes today."""
    staging = model_folder(tmp_path / "staging")
    old = {
        str(path.relative_to(staging)): {"sha256": sha(path.read_bytes()), "bytes": path.stat().st_size}
        for path in sorted(p for p in staging.rglob("*") if p.is_file())
    }
    commit_checkpoint(staging, tmp_path / "checkpoint-4")
    checkpoint = tmp_path / "checkpoint-4"
    assert json.loads((checkpoint / MANIFEST_FILE).read_text()) == {"files": old}
    (checkpoint / MANIFEST_FILE).write_text(json.dumps({"files": old}))
    assert checkpoint_problem(checkpoint) is None
    (checkpoint / "checkpoint-2" / "config.json").write_text("{ }")
    assert checkpoint_problem(checkpoint) == "checkpoint-2/config.json: 3 bytes instead of 2 (truncated?)"


def test_a_finetuning_fingerprint_keeps_the_bare_sha256_of_its_checkpoint(tmp_path):
    """Fingerprints recorded before hash {file: sha256}: the same SPT checkpoint must give the same fingerprint."""
    folder = model_folder(tmp_path / "spt")
    expected = {name: sha((folder / name).read_bytes()) for name in ("config.json", "model.safetensors")}
    assert phase_extra(folder) == {"init.weights_sha256": expected}
    assert phase_extra(None) == {}
