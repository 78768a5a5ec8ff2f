"""`spt-hf demo`: the README's main job, SPT against scratch on real offline data (`spt_hf.demo`)."""

import argparse

from .options import add_command, spellings


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = (
        "the README's main job: SPT vs scratch on real offline data; trailing "
        "--key value pairs override recipe keys in every phase"
    )
    parser = add_command(commands, common, "demo", demo_command, text, takes_overrides=True)
    parser.add_argument(*spellings("--output_dir"), default="runs/demo")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 2 3 4")
    parser.add_argument("--architectures", nargs="+", default=["transformer"])


def demo_command(args, rest: list[str]) -> int:
    from ..demo import DEMO_SEEDS, run_demo
    from ..recipes.loading import parse_overrides

    seeds = tuple(args.seeds) if args.seeds else DEMO_SEEDS
    run_demo(args.output_dir, seeds=seeds, architectures=args.architectures, overrides=parse_overrides(rest))
    return 0
