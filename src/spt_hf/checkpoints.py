"""Checkpoint checks used between the SPT and finetuning phases."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn


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
