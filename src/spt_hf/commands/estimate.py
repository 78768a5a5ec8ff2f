"""`spt-hf estimate`: what the phase of a recipe will cost (memory, FLOPs, steps), one real step measured and scaled
to the recipe's batch and steps. Its options also serve `spt-hf spt|finetune --dry_run` and `compare --estimate`."""

import argparse
import math

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
        *spellings("--device_memory_gb"),
        type=device_memory,
        default=80.0,
        help="memory of one device in GiB (default %(default)g)",
    )
    parser.add_argument(
        *spellings("--max_measure_length"),
        type=measure_length,
        help="measure longer tasks at this length, its half and quarter and extrapolate (faster, approximate; "
        "default: every task at its full length)",
    )


def device_memory(text: str) -> float:
    """`--device_memory_gb`: a positive, finite number of GiB."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"expected the memory of one device in GiB, a positive number such as 80; got {text!r}"
        )
    return value


def measure_length(text: str) -> int:
    """`--max_measure_length`: a whole number of positions, at least the estimate's `MIN_MEASURE_LENGTH`."""
    from ..training.estimate import MIN_MEASURE_LENGTH

    if not text.strip().isdigit() or int(text) < MIN_MEASURE_LENGTH:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of positions of at least {MIN_MEASURE_LENGTH} (measured at it, its half and "
            f"quarter), such as 1024; got {text!r}"
        )
    return int(text)


def estimate_command(args, rest: list[str]) -> int:
    from ..recipes.loading import find_recipe, load_recipe, parse_overrides

    path = find_recipe(args.config)
    phase = SPT_PHASE if path.stem.endswith("-spt") else FINETUNE_PHASE
    return print_estimate(load_recipe(path, parse_overrides(rest), phase=phase), args, phase)


def print_estimate(recipe, args, phase: str) -> int:
    """Print the estimate of `recipe`'s phase (a finetuning recipe without a checkpoint: the scratch phase)."""
    if phase != SPT_PHASE:
        phase = finetuning_phase(recipe.model.model_name_or_path is not None)
    return print_estimates([(recipe, phase)], args)


def print_estimates(phases: list, args) -> int:
    """Print the estimates of the (recipe, phase) pairs, each distinct model and length measured once."""
    from ..training.estimate import estimate_phase, format_estimates

    measured: dict = {}
    memory, longest = args.device_memory_gb, args.max_measure_length
    print(format_estimates([estimate_phase(r, p, memory, longest, measured=measured) for r, p in phases]))
    return 0
