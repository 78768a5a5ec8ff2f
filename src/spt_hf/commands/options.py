"""What the commands' parsers share: how a command is added, the option spellings, the output folder option."""

import argparse


class DeclaredOnUse(argparse.ArgumentParser):
    """A parser that declares its options (`declare(parser)`) the first time it parses, which includes printing its
    help, not when `spt-hf` starts: generate-data's options come from spt_hf.data, whose import loads torch."""

    def __init__(self, *args, declare=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._declare = declare

    def parse_known_args(self, args=None, namespace=None):
        if self._declare is not None:
            declare, self._declare = self._declare, None
            declare(self)
        return super().parse_known_args(args, namespace)


# What `add_command` sets on every command's arguments for the dispatch in cli.py: not options of the command.
DISPATCH_KEYS = ("handler", "command", "builds_models", "takes_overrides")


def add_command(
    commands,
    common: argparse.ArgumentParser,
    name: str,
    handler,
    help: str,
    takes_overrides: bool = False,
    builds_models: bool = True,
    **kwargs,
) -> argparse.ArgumentParser:
    """The parser of `spt-hf NAME`, with `--debug` (from `common`) and `help` as its description; `handler` runs it.
    `takes_overrides`: trailing `--key value` recipe overrides are passed on to the handler instead of refused.
    `builds_models=False`: a command that reads data only, run without registering the Auto classes (which imports
    transformers' models)."""
    parser = commands.add_parser(name, help=help, description=help, parents=[common], **kwargs)
    parser.set_defaults(handler=handler, command=name, builds_models=builds_models)
    if takes_overrides:
        parser.set_defaults(takes_overrides=True)
    return parser


def spellings(option: str) -> tuple[str, ...]:
    """An option's names: `--words_with_underscores`, the CLI's one convention (that of the recipe keys, which are
    TrainingArguments and config fields, and of transformers' own HfArgumentParser), then the hyphenated alias
    (which spt_hf's own options used first; HfArgumentParser accepts it too)."""
    return (option, option.replace("_", "-")) if "_" in option else (option,)


def add_output_dir(parser: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    """`--output_dir`, the one name of an output folder; `--out`, its name in report and generate-data before, still
    works (existing scripts) but is no longer listed."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument(*spellings("--output_dir"), help=help)
    group.add_argument("--out", dest="output_dir", help=argparse.SUPPRESS)
