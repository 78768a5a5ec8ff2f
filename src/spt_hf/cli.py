"""The `spt-hf` command (also `python -m spt_hf`): the commands of `spt_hf.commands` registered under one parser, and
the one way their errors are shown.

    spt-hf spt --config RECIPE.yaml [--key value ...]        self-pretraining (alias: spt-hf pretrain)
    spt-hf finetune --config RECIPE.yaml [--key value ...]   finetuning from --model_name_or_path, or from scratch
    spt-hf run --config RECIPE-spt.yaml [--with_scratch]     SPT, finetuning (and the scratch baseline), the report
    spt-hf compare --tasks T... --architectures A... [...]   the comparison table over seeds, resumable
    spt-hf estimate --config RECIPE.yaml                     memory, FLOPs and steps of a phase (also --dry_run)
    spt-hf inspect --task_config TASK.yaml [--json]          what a custom task infers from its data
    spt-hf report RUN_DIR [RUN_DIR ...]                      the comparison table and plots of finished runs
    spt-hf push RUN_OR_CHECKPOINT_DIR --repo_id NAME         a checkpoint and its model card to the Hub
    spt-hf generate-data TASK --output_dir DIR --num_train N ...  ListOps / Pathfinder data in the LRA layout
    spt-hf recipes [FOLDER]                                  the recipes shipped with spt_hf (path NAME: one file)
    spt-hf demo                                              the README's main job

RECIPE.yaml is a path or the name of a shipped recipe (`cpu/digits-transformer-spt.yaml`). Mistakes (a bad recipe,
a missing folder, a corrupted checkpoint) print one line saying what is wrong and how to fix it; `--debug` (or
SPT_HF_DEBUG=1) shows the traceback. Internal errors always show it.
"""

import argparse
import os
import shlex
import sys
import traceback
from pathlib import Path

from .commands import compare, demo, estimate, generate_data, inspect, push, recipes, report, train
from .commands.options import DeclaredOnUse
from .phases import PHASE_COMMANDS, Terminated, end_with_parent, interrupts_latched

PACKAGE_DIR = Path(__file__).resolve().parent
USER_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    FileNotFoundError,
    NotADirectoryError,
    FileExistsError,
    PermissionError,
    FloatingPointError,
    RuntimeError,
)
# The commands that an interrupt leaves resumable: the same command again goes on from the last checkpoints.
RESUMABLE = ("spt", "finetune", "run", "compare", "demo")
COMMANDS = (
    train,
    estimate,
    compare,
    inspect,
    report,
    push,
    generate_data,
    recipes,
    demo,
)  # as `spt-hf --help` lists them


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "takes_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    debug = args.debug or os.environ.get("SPT_HF_DEBUG", "").lower() in ("1", "true", "yes")
    end_with_parent()  # a phase that a launcher started ends with it
    try:
        with interrupts_latched():  # (a Ctrl-C that Python dropped in a finalizer still stops the command)
            if args.builds_models:
                from .registry import register_auto_classes  # here, not at the top: --help answers without torch

                register_auto_classes()  # deferred by the package in the command's own process (spt_hf/command.py)
            return args.handler(args, rest) or 0
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line, no traceback (a second Ctrl-C here ends it anyway)
        terminated = isinstance(interrupt, Terminated)  # (SIGTERM, where a command turns it into an interrupt)
        print(interrupted_line(args.command, argv, str(interrupt), "SIGTERM" if terminated else ""), file=sys.stderr)
        return 143 if terminated else 130
    except Exception as error:
        if debug or not is_user_error(error):
            raise
        print(f"spt-hf {args.command}: error: {error}", file=sys.stderr)
        print("(--debug or SPT_HF_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def interrupted_line(command: str, argv: list[str], stopped: str, by: str = "") -> str:
    """What an interrupted command says: what interrupted it when not Ctrl-C (`by`, e.g. SIGTERM), what stopped
    (`stopped`, from the command, e.g. compare's phases) and, for the commands that resume (`RESUMABLE`), that the
    same command resumes, spelled out."""
    interrupted = f"interrupted by {by}" if by else "interrupted"
    if command not in RESUMABLE:
        return f"spt-hf {command}: {interrupted}{': ' + stopped if stopped else ''}."
    again = "spt-hf " + shlex.join(argv)
    stopped = stopped or ("the phase stopped" if command in PHASE_COMMANDS.values() else "stopped")
    return f"spt-hf {command}: {interrupted}: {stopped}; the same command resumes from the last checkpoint: {again}"


def is_user_error(error: BaseException) -> bool:
    """A mistake of the user's that spt_hf itself diagnosed: an error of the kinds spt_hf raises with a message
    naming the problem and the fix, by a `raise` statement of spt_hf's own code. The same kinds of error raised
    anywhere else (inside a library, or by an operation of ours such as a failed lookup) are bugs: traceback."""
    if not isinstance(error, USER_ERRORS):
        return False
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not Path(frames[-1].filename).resolve().is_relative_to(PACKAGE_DIR):
        return False
    return (frames[-1].line or "").lstrip().startswith("raise")


def build_parser() -> argparse.ArgumentParser:
    """The `spt-hf` parser: each command of `COMMANDS` adds its own, with `--debug` everywhere."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of errors")
    parser = argparse.ArgumentParser(
        prog="spt-hf", description="Self-pretraining (SPT) of long-sequence models.", parents=[common]
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=DeclaredOnUse)
    for command in COMMANDS:
        command.add_parsers(commands, common)
    return parser


if __name__ == "__main__":
    sys.exit(main())
