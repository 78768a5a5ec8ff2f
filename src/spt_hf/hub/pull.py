"""A local folder for a checkpoint given as a folder or a Hugging Face Hub repository id.

Finetuning checks the checkpoint it starts from (architecture, bit-exact backbone transfer, and, through
`spt_fingerprint.npy`, that SPT saw no evaluation data). `checkpoint_folder` lets those checks run on a Hub
checkpoint exactly as on a local one: it downloads the repository's model files into the Hub cache. A name that looks
like a local path is never sent to the Hub: a typo in a path is a "not found" error naming what was looked for, and a
folder that is not a checkpoint (a killed SPT phase, a run folder) says what it holds.
"""

import os
import re
from pathlib import Path

from ..phases import PHASES

# Everything a checkpoint check reads: weights, configs, modeling files, results, the SPT data fingerprint.
PULL_PATTERNS = ["*.safetensors", "*.safetensors.index.json", "*.json", "*.py", "spt_fingerprint.npy", "README.md"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def looks_local(name: str) -> bool:
    """A path rather than a Hub id: absolute, relative with ./ or ../ or ~, more than one '/', or its first
    component an existing local folder."""
    if name.startswith(("/", "./", "../", "~")) or os.sep != "/" and os.sep in name:
        return True
    if name.count("/") > 1 or not HUB_ID.match(name):
        return True
    return "/" in name and Path(name.split("/")[0]).is_dir()


def checkpoint_folder(model_name_or_path: str, revision: str | None = None) -> Path:
    """`model_name_or_path` itself when it is a checkpoint folder, else the downloaded snapshot of that Hub
    repository. Raises FileNotFoundError / ValueError saying what a local path holds when it is not a checkpoint."""
    path = Path(model_name_or_path).expanduser()
    if path.is_dir():
        problem = not_a_checkpoint(path)
        if problem:
            raise ValueError(f"`model_name_or_path` {model_name_or_path}: {problem}")
        return path
    if looks_local(model_name_or_path):
        missing = next((p for p in [path, *path.parents] if not p.exists()), path)
        raise FileNotFoundError(
            f"`model_name_or_path` {model_name_or_path} does not exist (no folder {missing}); pass the folder of a "
            "finished phase (`<output_dir>/spt`) or a Hub id NAMESPACE/NAME."
        )
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model_name_or_path, revision=revision, allow_patterns=PULL_PATTERNS))


def not_a_checkpoint(folder: Path) -> str | None:
    """Why a folder cannot be loaded as a model (None if it holds config.json and safetensors weights)."""
    has_config = (folder / "config.json").is_file()
    has_weights = any(folder.glob("*.safetensors")) or (folder / "model.safetensors.index.json").is_file()
    if has_config and has_weights:
        return None
    checkpoints = sorted(p.name for p in folder.glob("checkpoint-*") if p.is_dir())
    phases = [name for name in PHASES if (folder / name).is_dir()]
    if checkpoints:
        return (
            f"holds Trainer checkpoints ({', '.join(checkpoints)}) but no exported model (config.json and "
            "model.safetensors): the phase did not finish. Run its command again to resume it, then finetune from "
            "this folder."
        )
    if phases:
        return (
            f"is a run folder (it holds {', '.join(p + '/' for p in phases)}); pass the phase folder, e.g. "
            f"{folder / phases[0]}."
        )
    held = sorted(p.name for p in folder.iterdir())[:8]
    what = "config.json" if not has_config else "safetensors weights (model.safetensors)"
    return f"is not a checkpoint folder: it has no {what} (it holds {held or 'nothing'})."
