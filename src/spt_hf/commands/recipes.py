"""`spt-hf recipes`: the recipes shipped with spt_hf, or the path of one."""

import argparse

from .options import add_command


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "list the recipes shipped with spt_hf, or print one's path"
    parser = add_command(commands, common, "recipes", recipes_command, text)
    parser.add_argument(
        "what",
        nargs="*",
        metavar="FOLDER | path NAME",
        help="a folder (cpu, listops, ...), or `path NAME` to print the file of one recipe (for `accelerate launch "
        "--config_file`)",
    )


def recipes_command(args, rest: list[str]) -> int:
    from ..training.recipes import find_recipe, list_recipes

    if args.what[:1] == ["path"]:
        if len(args.what) != 2:
            raise ValueError("usage: spt-hf recipes path NAME (e.g. accelerate/multi_gpu.yaml)")
        print(find_recipe(args.what[1]).resolve())
        return 0
    for name in list_recipes(args.what[0] if args.what else None):
        print(name)
    return 0
