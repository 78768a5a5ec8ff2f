"""Recipes and the two-phase pipeline on the transformers Trainer."""

from .arguments import Recipe, load_recipe, parse_overrides
from .optim import param_groups

__all__ = ["Recipe", "load_recipe", "param_groups", "parse_overrides"]
