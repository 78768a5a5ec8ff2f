"""The `spt-hf` command (also `python -m spt_hf`).

spt-hf pretrain --config recipes/<task>/<arch>-spt.yaml [--key value ...]
spt-hf finetune --config recipes/<task>/<arch>-finetune.yaml [--model_name_or_path DIR_OR_HUB_ID]
spt-hf run --config recipes/<task>/<arch>-spt.yaml [--with-scratch]   (finds <arch>-finetune.yaml beside it)
spt-hf report RUN_DIR [RUN_DIR ...]
spt-hf generate-data TASK --out DIR --num-train N --num-val N --num-test N
spt-hf demo
"""

import argparse
import sys
from pathlib import Path

RECIPE_COMMANDS = ("pretrain", "finetune", "run")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "push":
        from .hub.cli import push_main

        return push_main(argv[1:])
    if argv and argv[0] == "generate-data":
        from .data.cli import generate_data_main

        return generate_data_main(argv[1:])
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command in RECIPE_COMMANDS:
        from .hub import HubPushError, MissingHubCredentialsError

        try:
            return run_recipe_command(args, rest, parser)
        except (MissingHubCredentialsError, HubPushError) as error:  # the message says what to do; no traceback
            print(f"spt-hf {args.command}: error: {error}", file=sys.stderr)
            return 1
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "report":
        from .training.results import report

        print(report(args.run_dirs, args.out))
    elif args.command == "demo":
        from .demo import run_demo

        run_demo(args.output_dir, seeds=args.seeds, architectures=args.architectures)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spt-hf", description="Self-pretraining (SPT) of long-sequence models.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("pretrain", "self-pretrain on the task's train split (recipe ...-spt.yaml)"),
        ("finetune", "finetune from an SPT checkpoint, a Hub model, or from scratch (recipe ...-finetune.yaml)"),
        ("run", "SPT then finetuning (and --with-scratch: the scratch baseline), then the comparison"),
    ):
        command = commands.add_parser(name, help=text, description=text, add_help=False)
        command.add_argument("-h", "--help", action="store_true", help="list every recipe key")
        command.add_argument("--config", help="YAML recipe; every key can be overridden with --key value")
        if name == "run":
            command.add_argument("--finetune-config", help="finetuning recipe (default: <name>-finetune.yaml)")
            command.add_argument("--with-scratch", action="store_true", help="also train the scratch baseline")
    report = commands.add_parser("report", help="Markdown table and PNG plots of run folders")
    report.add_argument("run_dirs", nargs="+", help="folders holding results.json files")
    report.add_argument("--out", help="where report.md and the plots go (default: the first folder)")
    demo = commands.add_parser("demo", help="the README's main job: SPT vs scratch on real offline data")
    demo.add_argument("--output-dir", default="runs/demo")
    demo.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    demo.add_argument("--architectures", nargs="+", default=["transformer"])
    commands.add_parser("push", help="push a checkpoint or a run's phase to the Hugging Face Hub (see its --help)")
    commands.add_parser("generate-data", help="write ListOps / Pathfinder data in the LRA layout (see its --help)")
    return parser


def run_recipe_command(args, rest: list[str], parser) -> int:
    from .training.arguments import argument_parser, load_recipe, parse_overrides

    if args.help:
        argument_parser().print_help()
        print("\nAny field of the model type's config (hidden_size, num_hidden_layers, state_size, ...) is a key too.")
        return 0
    if args.config is None:
        parser.error(f"{args.command} needs --config RECIPE.yaml")
    overrides = parse_overrides(rest)
    from .training import pipeline

    if args.command == "pretrain":
        pipeline.pretrain(load_recipe(args.config, overrides))
    elif args.command == "finetune":
        pipeline.finetune(load_recipe(args.config, overrides))
    else:
        spt_path, finetune_path = recipe_pair(args.config, args.finetune_config)
        result = pipeline.run(
            load_recipe(spt_path, overrides), load_recipe(finetune_path, overrides), args.with_scratch
        )
        from .training.results import report

        print(report([result["run_dir"]]))
    return 0


def recipe_pair(config: str, finetune_config: str | None) -> tuple[str, str]:
    """The SPT recipe and its finetuning sibling (`x-spt.yaml` <-> `x-finetune.yaml`)."""
    path = Path(config)
    if path.stem.endswith("-finetune") and finetune_config is None:
        return str(path.with_name(path.name.replace("-finetune", "-spt"))), str(path)
    if finetune_config is None:
        if not path.stem.endswith("-spt"):
            raise ValueError(
                f"Cannot find the finetuning recipe of {path}: name it <x>-spt.yaml or pass --finetune-config."
            )
        finetune_config = str(path.with_name(path.name.replace("-spt", "-finetune")))
    return str(path), finetune_config
