"""`spt-hf push`: a checkpoint folder, or one phase of a run folder, and its model card to the Hub."""

import argparse

from ..phases import PHASES, SPT_PHASE
from .options import add_command, spellings


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "push a checkpoint folder, or one phase of a run folder, to the Hub"
    parser = add_command(commands, common, "push", push_command, text)
    parser.add_argument("path", help="a checkpoint folder (config.json + model.safetensors) or a `spt-hf run` folder")
    parser.add_argument(
        *spellings("--repo_id"), required=True, help="the Hub repository, NAMESPACE/NAME (created if needed)"
    )
    parser.add_argument("--phase", choices=PHASES, help=f"the phase of a run folder (default {SPT_PHASE})")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="push to this branch (created from main if it does not exist)")
    parser.add_argument(*spellings("--commit_message"), help="the commit message (default: phase and steps)")


def push_command(args, rest: list[str]) -> int:
    from ..hub.push import push_checkpoint, resolve_push_folder

    folder = resolve_push_folder(args.path, args.phase)
    url = push_checkpoint(
        folder, args.repo_id, private=args.private, revision=args.revision, commit_message=args.commit_message
    )
    print(f"Pushed {folder} to {args.repo_id}{'@' + args.revision if args.revision else ''}: {url}")
    others = [name for name in PHASES if folder.parent / name != folder and (folder.parent / name).is_dir()]
    if folder.name in PHASES and others:
        hint = f"spt-hf push {folder.parent} --phase {others[0]} --repo_id NAMESPACE/OTHER_NAME"
        print(f"{folder.parent} also has {', '.join(others)}/ (push each to its own repository: {hint}).")
    return 0
