"""`spt-hf spt`, `spt-hf finetune` and `spt-hf run`: the phases of a recipe, trained (or, with `--dry_run`,
estimated). Their `--help` lists every recipe key, in groups: transformers' HfArgumentParser over the recipe schema
(`training.arguments.argument_parser`), to which these commands add their own options."""

import argparse

from ..phases import BASELINE_PHASE, FINETUNE_PHASE, SPT_PHASE
from .estimate import add_estimate_options, print_estimate, print_estimates
from .options import add_command, spellings

COMMANDS = (
    ("spt", ["pretrain"], "self-pretrain on the task's train split only (recipe <arch>-spt.yaml)"),
    ("finetune", [], "finetune from --model_name_or_path (an SPT checkpoint), or train from scratch without it"),
    ("run", [], "SPT, then finetuning from it (and --with_scratch: the scratch baseline), then the report"),
)


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    for name, aliases, text in COMMANDS:
        usage = f"spt-hf {name} --config RECIPE.yaml [--key value ...]"
        parser = add_command(
            commands,
            common,
            name,
            train_command,
            text,
            takes_overrides=True,
            aliases=aliases,
            add_help=False,
            usage=usage,
        )
        parser.add_argument("-h", "--help", action="store_true", help="list every recipe key, in groups")
        add_options(parser, name)


def add_options(parser: argparse.ArgumentParser, name: str) -> None:
    """The options of `spt-hf NAME` that are not recipe keys, declared once for its parser and its `--help`."""
    parser.add_argument(
        "--config",
        metavar="RECIPE.yaml",
        help="a recipe file, or a shipped recipe's name such as "
        "cpu/digits-transformer-spt.yaml (`spt-hf recipes` lists them)",
    )
    if name == "run":
        parser.add_argument(
            *spellings("--finetune_config"), metavar="RECIPE.yaml", help="default: <name>-finetune.yaml"
        )
        parser.add_argument(*spellings("--with_scratch"), action="store_true", help="also train the scratch baseline")
    phases = "both phases (and the baseline with --with_scratch)" if name == "run" else "the phase"
    add_estimate_options(parser, "--dry_run", f"estimate {phases} (memory, FLOPs, steps) and train nothing")


def train_command(args, rest: list[str]) -> int:
    from ..recipes.arguments import SPT_PHASE_SWITCHES, argument_parser
    from ..recipes.loading import load_recipe, parse_overrides

    if args.help:
        parser = argument_parser(args.command)
        add_options(parser, args.command)
        parser.print_help()
        return 0
    if args.config is None:
        raise ValueError(
            f"`spt-hf {args.command}` needs --config RECIPE.yaml (`spt-hf recipes` lists the shipped ones)."
        )
    overrides = parse_overrides(rest)
    from ..training import pipeline
    from ..training.trainer import SaveOnSignal

    SaveOnSignal.catch_early()  # a Slurm job's time-limit signal: save a checkpoint and stop, never die unsaved

    if args.dry_run and args.command != "run":
        phase = SPT_PHASE if args.command == "spt" else FINETUNE_PHASE
        return print_estimate(load_recipe(args.config, overrides, phase=phase), args, phase)
    if args.command == "spt":
        pipeline.pretrain(load_recipe(args.config, overrides, phase=SPT_PHASE))
    elif args.command == "finetune":
        pipeline.finetune(load_recipe(args.config, overrides, phase=FINETUNE_PHASE))
    else:
        from ..report.comparison import report

        spt_path, finetune_path = sibling_recipes(args.config, args.finetune_config)
        spt_recipe = load_recipe(spt_path, overrides, phase=SPT_PHASE)
        finetune_overrides = {k: v for k, v in overrides.items() if k not in SPT_PHASE_SWITCHES}
        finetune_recipe = load_recipe(finetune_path, finetune_overrides, phase=FINETUNE_PHASE)
        pipeline.refuse_ignored_max_steps(spt_recipe, overrides)
        if args.dry_run:
            return print_estimates(run_phases(spt_recipe, finetune_recipe, args.with_scratch), args)
        result = pipeline.run(spt_recipe, finetune_recipe, args.with_scratch)
        print(report([result["run_dir"]]))
    return 0


def run_phases(spt_recipe, finetune_recipe, with_scratch: bool) -> list:
    """The (recipe, phase) pairs that `spt-hf run` trains, each with the steps `pipeline.run` gives it."""
    from ..training.pipeline import phase_budgets, with_phase

    budgets, root = phase_budgets(spt_recipe, finetune_recipe), spt_recipe.training.output_dir
    phases = [(spt_recipe, SPT_PHASE), (finetune_recipe, FINETUNE_PHASE)]
    phases += [(finetune_recipe, BASELINE_PHASE)] if with_scratch else []
    return [(with_phase(recipe, root, budgets[phase]), phase) for recipe, phase in phases]


def sibling_recipes(config: str, finetune_config: str | None) -> tuple[str, str]:
    """The SPT recipe and its finetuning sibling (`x-spt.yaml` <-> `x-finetune.yaml`) of the one recipe given to
    `spt-hf run` (either of the two), or the two given."""
    from ..recipes.loading import find_recipe, recipe_name

    path = find_recipe(config)
    if path.stem.endswith("-finetune") and finetune_config is None:
        return str(path.with_name(path.name.replace("-finetune", "-spt"))), str(path)
    if finetune_config is None:
        if not path.stem.endswith("-spt"):
            raise ValueError(
                f"Cannot find the finetuning recipe of {recipe_name(path)}: name it <x>-spt.yaml or pass "
                "--finetune_config."
            )
        finetune_config = str(path.with_name(path.name.replace("-spt", "-finetune")))
    return str(path), str(find_recipe(finetune_config))
