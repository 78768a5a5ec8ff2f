"""Optimiser parameter groups: the SSM groups of docs/method.md §6, declared by the model's config, built here."""

import re

from torch import nn

# transformers' Trainer rule: no weight decay on biases and normalisation parameters.
NO_DECAY_PATTERNS = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]


def param_groups(model: nn.Module, lr: float, weight_decay: float) -> list[dict]:
    """Parameter groups for an AdamW-style optimiser.

    Modules with special parameters (SSM kernels) declare them in `optimizer_overrides()`, a mapping from the
    names of their own parameters to `{"lr": value or None, "weight_decay": value}` read from the model config (e.g.
    S4's Λ, P, B at `ssm_learning_rate` without weight decay). Everything else gets the global `lr` and
    `weight_decay`, except biases and norms (no decay). Each group carries a `name` for logging and tests.
    """
    overrides: dict[int, dict] = {}
    for module in model.modules():
        if hasattr(module, "optimizer_overrides"):
            for name, override in module.optimizer_overrides().items():
                overrides[id(getattr(module, name))] = override
    groups: dict[tuple, dict] = {}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        override = overrides.get(id(parameter))
        if override is not None:
            group_lr = lr if override.get("lr") is None else override["lr"]
            group_wd = override.get("weight_decay", weight_decay)
            label = "ssm"
        else:
            no_decay = any(re.search(pattern, name.lower()) for pattern in NO_DECAY_PATTERNS)
            group_lr, group_wd = lr, 0.0 if no_decay else weight_decay
            label = "no_decay" if no_decay else "default"
        key = (label, group_lr, group_wd)
        group = groups.setdefault(key, {"params": [], "param_names": [], "lr": group_lr, "weight_decay": group_wd})
        group["name"] = f"{label}(lr={group_lr:g}, wd={group_wd:g})"
        group["params"].append(parameter)
        group["param_names"].append(name)
    return list(groups.values())
