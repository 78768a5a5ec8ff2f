"""`spt-hf recipes`: the recipes shipped with spt_hf, or the path of one; with `--task_config`, the recipes of a task
file written as editable YAML (`recipes/presets.py`)."""

import argparse

from .options import add_command, add_output_dir, spellings


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "list the recipes shipped with spt_hf, or print one's path; or write the recipes of a task file"
    parser = add_command(commands, common, "recipes", recipes_command, text)
    parser.add_argument(
        "what",
        nargs="*",
        metavar="FOLDER | path NAME",
        help="a folder (cpu, listops, ...), or `path NAME` to print the file of one recipe (for `accelerate launch "
        "--config_file`)",
    )
    add_task_recipe_options(parser)
    parser.add_argument("--architectures", nargs="+", help="with --task_config: architectures (s4, transformer, ...)")
    add_budget_options(parser)
    add_budget_rule_option(parser)
    add_output_dir(parser, "with --task_config: the folder the recipes are written into")
    parser.add_argument("--overwrite", action="store_true", help="with --task_config: replace recipes that differ")


def add_task_recipe_options(parser: argparse.ArgumentParser, several: bool = False) -> None:
    """The options that make recipes of a task file (`spt-hf recipes`; `spt-hf compare`, `several` task files)."""
    parser.add_argument(
        *spellings("--task_config"),
        metavar="TASK.yaml",
        nargs="+" if several else None,
        help="task files (`task:` and `task_options:`), a task each"
        if several
        else "a task file (`task:` and `task_options:`)",
    )
    parser.add_argument(
        *spellings("--preset"),
        help="with --task_config: model sizes; tiny (tests), small (a CPU; default), paper (the paper's LRA settings "
        "for the closest length)",
    )


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """A phase's budget in the written recipes (`spt-hf compare` takes them as trailing recipe keys)."""
    parser.add_argument(*spellings("--max_steps"), type=int, help="with --task_config: optimiser steps per phase")
    parser.add_argument(*spellings("--num_train_epochs"), type=float, help="with --task_config: epochs per phase")


def add_budget_rule_option(parser: argparse.ArgumentParser) -> None:
    """The budget rule of the written recipes, as `spt-hf compare --budget` (`recipes/presets.py: budget_rule`)."""
    parser.add_argument(
        "--budget",
        choices=("tied", "equal"),  # recipes/presets.py: BUDGETS (not imported here: the CLI starts light)
        help="with --task_config: tied (SPT and finetuning share total_steps, the baseline gets all of it; default) "
        "or equal (each phase its own max_steps)",
    )


def recipes_command(args, rest: list[str]) -> int:
    from ..recipes.loading import find_recipe, list_recipes

    if args.task_config is not None:
        return write_task_recipes(args)
    if args.architectures or args.preset or args.output_dir or args.max_steps or args.num_train_epochs or args.budget:
        raise ValueError(
            "--architectures, --preset, --output_dir, budgets and --budget go with --task_config TASK.yaml."
        )
    if args.what[:1] == ["path"]:
        if len(args.what) != 2:
            raise ValueError("usage: spt-hf recipes path NAME (e.g. accelerate/multi_gpu.yaml)")
        print(find_recipe(args.what[1]).resolve())
        return 0
    for name in list_recipes(args.what[0] if args.what else None):
        print(name)
    return 0


def write_task_recipes(args) -> int:
    """`spt-hf recipes --task_config TASK.yaml --architectures ... --output_dir DIR`: write and list the recipes."""
    from ..recipes.presets import task_file_recipes, write_recipes

    if args.what:
        raise ValueError(f"`spt-hf recipes --task_config` takes no folder or `path` ({' '.join(args.what)}).")
    if not args.architectures or not args.output_dir:
        raise ValueError("`spt-hf recipes --task_config TASK.yaml` needs --architectures A ... and --output_dir DIR.")
    recipes, origin = task_file_recipes(
        args.task_config, args.architectures, args.preset, args.max_steps, args.num_train_epochs, args.budget
    )
    for path in write_recipes(recipes, args.output_dir, origin, overwrite=args.overwrite):
        print(path)
    return 0
