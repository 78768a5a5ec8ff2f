"""Checks of a local checkpoint folder before transformers loads it: each safetensors file's header against its size,
the model type and the base model's tensor shapes against config.json, each failure naming the bad file.

`SequencePreTrainedModel.from_pretrained` runs them, also when a checkpoint is loaded as remote code without spt_hf,
so they live in this folder (torch and transformers only); `spt_hf.checkpoints`, the home of the checks between
phases, re-exports them.
"""

import json
from pathlib import Path

import torch
from transformers import PreTrainedConfig


def read_safetensors_header(path: Path) -> dict:
    """The header of a safetensors file, checked against the file size; ValueError naming the file otherwise."""
    size = path.stat().st_size
    problem = None
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if length < 0 or length > size - 8:
            problem = f"header length {length} does not fit in {size} bytes (truncated?)"
        else:
            try:
                header = json.loads(handle.read(length))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                problem = f"corrupted header ({error})"
    if problem is None:
        entries = [entry for name, entry in header.items() if name != "__metadata__"]
        try:
            ends = [_tensor_end(entry) for entry in entries]
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as error:
            problem, ends = f"corrupted header (bad entry: {error!r})", []
    if problem is None and max(ends, default=0) != size - 8 - length:
        problem = f"tensor data covers {max(ends, default=0)} bytes but the file holds {size - 8 - length}"
    if problem is not None:
        raise ValueError(f"{path} is not a valid safetensors file: {problem}. Re-save or re-download the checkpoint.")
    return header


def _tensor_end(entry: dict) -> int:
    """End offset of one tensor entry of a safetensors header (KeyError/TypeError if the entry is malformed)."""
    if not isinstance(entry["shape"], list) or not isinstance(entry["dtype"], str):
        raise TypeError(f"malformed entry {entry!r}")
    return int(entry["data_offsets"][1])


def check_local_checkpoint(cls, folder: Path) -> None:
    """Clear errors, naming the file, for a checkpoint folder that cannot load into `cls`."""
    config_file = folder / "config.json"
    saved = PreTrainedConfig._dict_from_json_file(config_file)  # JSON, with the Infinity/NaN that configs encode
    expected = cls.config_class.model_type if cls.config_class is not None else None
    if expected and saved.get("model_type") != expected:
        raise ValueError(
            f"{config_file} holds a {saved.get('model_type')!r} model, not {expected!r} ({cls.__name__}); load it "
            "with the AutoModelFor... class of its head, which picks the right architecture."
        )
    shapes = {}
    for path in sorted(folder.glob("*.safetensors")):
        for name, entry in read_safetensors_header(path).items():
            if name != "__metadata__":
                shapes[name] = (tuple(entry["shape"]), path.name)
    config = cls.config_class.from_dict({k: v for k, v in saved.items() if k not in ("auto_map", "architectures")})
    with torch.device("meta"):
        base = cls.base_model_class(config) if hasattr(cls, "base_model_class") else cls(config)
    prefix = "" if not hasattr(cls, "base_model_class") else cls.base_model_prefix + "."
    for name, tensor in base.state_dict().items():
        found = shapes.get(prefix + name) or shapes.get(name)
        if found is not None and found[0] != tuple(tensor.shape):
            raise ValueError(
                f"{folder / found[1]}: tensor {prefix + name} has shape {found[0]} but {config_file} describes "
                f"{tuple(tensor.shape)}; the config and the weights come from different models."
            )
