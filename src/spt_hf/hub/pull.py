"""A local folder for a checkpoint given as a folder or a Hub repository id.

Finetuning checks the checkpoint it starts from (architecture, bit-exact backbone transfer, and, through
`spt_fingerprint.npy`, that SPT saw no evaluation data). `checkpoint_folder` lets those checks run on a Hub
checkpoint exactly as on a local one: it downloads the repository's model files into the Hub cache.
"""

from pathlib import Path

# Everything a checkpoint check reads: weights, configs, modeling files, results, the SPT data fingerprint.
PULL_PATTERNS = ["*.safetensors", "*.safetensors.index.json", "*.json", "*.py", "spt_fingerprint.npy", "README.md"]


def checkpoint_folder(model_name_or_path: str, revision: str | None = None) -> Path:
    """`model_name_or_path` itself when it is a folder, else the downloaded snapshot of that Hub repository."""
    path = Path(model_name_or_path)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model_name_or_path, revision=revision, allow_patterns=PULL_PATTERNS))
