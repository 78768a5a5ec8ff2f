"""Recipes and the two-phase pipeline on the transformers Trainer."""

from .arguments import Recipe
from .optim import param_groups
from .recipes import load_recipe, parse_overrides

__all__ = ["Recipe", "load_recipe", "param_groups", "parse_overrides"]
