"""`spt-hf estimate`: what the phase of a recipe will cost (memory, FLOPs, steps), one real step measured and scaled
to the recipe's batch and steps. Its options also serve `spt-hf spt|finetune --dry_run` and `compare --estimate`."""

import argparse

from ..phases import FINETUNE_PHASE, SPT_PHASE, finetuning_phase
from .options import add_command, spellings


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "what the phase of a recipe will cost: one real step measured, scaled to the recipe's batch and steps"
    usage = "spt-hf estimate --config RECIPE.yaml [--device_memory_gb 80] [--key value ...]"
    parser = add_command(commands, common, "estimate", estimate_command, text, takes_overrides=True, usage=usage)
    parser.add_argument("--config", required=True, metavar="RECIPE.yaml", help="a recipe file or a shipped name")
    add_estimate_options(parser)


def add_estimate_options(parser: argparse.ArgumentParser, flag: str | None = None, text: str = "") -> None:
    """The device and measuring options of an estimate; `flag` (with its help `text`) is the switch that asks for it
    in a command that otherwise trains."""
    if flag:
        parser.add_argument(*spellings(flag), action="store_true", help=text)
    parser.add_argument(
        *spellings("--device_memory_gb"), type=float, default=80.0, help="memory of one device (default %(default)g)"
    )
    parser.add_argument(
        *spellings("--max_measure_length"),
        type=int,
        help="measure longer tasks at this length, its half and quarter and extrapolate (faster, approximate; "
        "default: every task at its full length)",
    )


def estimate_command(args, rest: list[str]) -> int:
    from ..training.recipes import find_recipe, load_recipe, parse_overrides

    path = find_recipe(args.config)
    phase = SPT_PHASE if path.stem.endswith("-spt") else FINETUNE_PHASE
    return print_estimate(load_recipe(path, parse_overrides(rest), phase=phase), args, phase)


def print_estimate(recipe, args, phase: str) -> int:
    """Print the estimate of `recipe`'s phase (a finetuning recipe without a checkpoint: the scratch phase)."""
    from ..training.estimate import estimate_phase, format_estimates

    if phase != SPT_PHASE:
        phase = finetuning_phase(recipe.model.model_name_or_path is not None)
    print(format_estimates([estimate_phase(recipe, phase, args.device_memory_gb, args.max_measure_length)]))
    return 0
