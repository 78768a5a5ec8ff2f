"""Checkpoint checks used between the SPT and finetuning phases, and the atomic file writes every phase uses.

The checks of a folder's own files that loading runs (`check_local_checkpoint`, `read_safetensors_header`) are
defined in modeling/checkpoint_files.py, because checkpoints loaded as remote code run them without spt_hf; they are
re-exported here.
"""

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from .modeling.checkpoint_files import check_local_checkpoint as check_local_checkpoint  # re-exported
from .modeling.checkpoint_files import read_safetensors_header as read_safetensors_header  # re-exported
from .phases import RESULTS_FILE


def load_checkpoint_tensors(checkpoint_dir: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a `save_pretrained` folder (single or sharded safetensors), by name."""
    folder = Path(checkpoint_dir)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(
            f"No safetensors weights in {folder}: expected model.safetensors or model.safetensors.index.json."
        )
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(load_file(folder / name))
    return tensors


def verify_backbone_transfer(model: nn.Module, checkpoint_dir: str | Path) -> int:
    """Check that every backbone tensor of `model` equals the checkpoint's, bit for bit; return how many.

    The backbone is everything under `model.base_model_prefix` (embedding incl. mask vector, all blocks, norms and
    their running statistics, final norm); heads are ignored. Raises RuntimeError naming every tensor that is missing
    from the checkpoint or differs from it, as the official SPT code does after loading.
    """
    saved = load_checkpoint_tensors(checkpoint_dir)
    prefix = model.base_model_prefix + "."
    problems, checked = [], 0
    for name, tensor in model.state_dict().items():
        if not name.startswith(prefix):
            continue
        reference = saved.get(name, saved.get(name[len(prefix) :]))  # a bare backbone saves without the prefix
        if reference is None:
            problems.append(f"{name}: missing from the checkpoint")
        elif reference.shape != tensor.shape or not torch.equal(reference.to(tensor.device), tensor):
            problems.append(f"{name}: differs from the checkpoint")
        checked += 1
    if checked == 0:
        problems.append(f"the model has no tensors under '{prefix}'")
    if problems:
        raise RuntimeError(
            f"Backbone transfer from {checkpoint_dir} failed for {len(problems)} tensor(s):\n  " + "\n  ".join(problems)
        )
    return checked


# Files of an exported model whose sha256 the pipeline records in results.json and checks before loading again.
CHECKPOINT_FILE_PATTERNS = (
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "*.py",
    "*.npy",
)


class CheckpointIntegrityError(RuntimeError):
    """A checkpoint file differs from what the pipeline wrote (a flipped byte, a truncated copy)."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_digests(folder: str | Path, paths: Iterable[Path] | None = None) -> dict[str, dict]:
    """The one digest format of spt_hf's manifests: {path relative to `folder`: {"sha256": ..., "bytes": ...}} of the
    files `paths` under `folder`, by default the model files directly in it (CHECKPOINT_FILE_PATTERNS: weights,
    configs, code, fingerprint). results.json records it as `checkpoint_files`, a Trainer checkpoint's manifest
    (`run_folder.MANIFEST_FILE`) as `files`."""
    folder = Path(folder)
    if paths is None:
        paths = {p for pattern in CHECKPOINT_FILE_PATTERNS for p in folder.glob(pattern) if p.is_file()}
    return {str(p.relative_to(folder)): {"sha256": sha256_file(p), "bytes": p.stat().st_size} for p in sorted(paths)}


def digest_problem(path: Path, recorded: dict | str) -> str | None:
    """Why the file `path` no longer matches its recorded digest, or None: missing, another size, another sha256.
    `recorded` is a `file_digests` entry, or a bare sha256 (results.json's `checkpoint_files` before it took the
    manifests' format)."""
    if not path.is_file():
        return "missing"
    entry = recorded if isinstance(recorded, dict) else {"sha256": recorded}
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        return f"{size} bytes instead of {entry['bytes']} (truncated?)"
    if (actual := sha256_file(path)) != entry["sha256"]:
        return f"sha256 {actual} != {entry['sha256']} recorded when it was written"
    return None


def verify_file_digests(folder: str | Path, digests: dict[str, dict | str]) -> None:
    """Raise CheckpointIntegrityError naming each recorded file that is missing or changed (`digest_problem`)."""
    folder = Path(folder)
    problems = []
    for name, recorded in digests.items():
        if (problem := digest_problem(folder / name, recorded)) is not None:
            problems.append(f"{folder / name}: {problem}")
    if problems:
        raise CheckpointIntegrityError(
            "Checksum error: the checkpoint changed after it was written:\n  "
            + "\n  ".join(problems)
            + "\nRestore the files (or re-run the phase that wrote them)."
        )


def verify_recorded_digests(folder: str | Path) -> int:
    """Check the digests that the phase's results.json recorded for `folder`; return how many files were checked."""
    results = Path(folder) / RESULTS_FILE
    if not results.is_file():
        return 0
    digests = json.loads(results.read_text()).get("checkpoint_files", {})
    verify_file_digests(folder, digests)
    return len(digests)


def verify_loaded_tensors(model: nn.Module, checkpoint_dir: str | Path) -> int:
    """Check that every tensor the checkpoint holds equals the loaded model's (heads included); return how many."""
    saved = load_checkpoint_tensors(checkpoint_dir)
    state = model.state_dict()
    prefix = getattr(model, "base_model_prefix", "") + "."
    mismatched = []
    for name, tensor in saved.items():
        loaded = state.get(name, state.get(prefix + name))
        if loaded is not None and (loaded.shape != tensor.shape or not torch.equal(loaded.cpu(), tensor)):
            mismatched.append(name)
    if mismatched:
        raise CheckpointIntegrityError(f"Loaded tensors differ from {checkpoint_dir}: {mismatched}")
    return len(saved)


def write_directory_atomically(build, target: str | Path) -> None:
    """Let `build(tmp_dir)` write files into a fresh temporary folder beside `target`, then move each file into
    `target` with an atomic rename: a crash never leaves a half-written file that later loads."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=target))
    try:
        build(tmp)
        for path in tmp.iterdir():
            if path.is_file():
                os.replace(path, target / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """Write JSON to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it; the file gets the umask's permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
    ) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(f.name, 0o666 & ~current_umask())  # a temporary file is private (0600); results are not
    os.replace(f.name, path)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
