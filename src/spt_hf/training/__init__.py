"""The phase engine: the SPT, finetuning and baseline phases on the transformers Trainer (`pipeline`, `trainer`,
`optim`), the life of a phase folder (`run_folder`, `results`), a recipe's task data (`task_data`), a phase's cost
before it runs (`estimate`) and the phase's side of a tuning trial (`tune_trial`)."""

from ..recipes.arguments import Recipe
from ..recipes.loading import load_recipe, parse_overrides
from .optim import param_groups

__all__ = ["Recipe", "load_recipe", "param_groups", "parse_overrides"]
