"""`spt-hf push`: push a checkpoint folder, or one phase of a `spt-hf run` folder, to the Hugging Face Hub.

    spt-hf push RUN_OR_CHECKPOINT_DIR --repo-id NAMESPACE/NAME [--phase spt|finetune|scratch] [--private]
                [--revision BRANCH] [--commit-message TEXT]

The token comes from HF_TOKEN or `hf auth login` (there is deliberately no --token option: a token on the command
line ends up in shell histories and process lists).
"""

import argparse
import sys

from .push import RUN_PHASES, HubPushError, MissingHubCredentialsError, push_checkpoint, resolve_push_folder


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spt-hf push",
        description="Push an spt_hf checkpoint (weights, config with auto_map, modeling files, results.json, "
        "TensorBoard logs, model card) to the Hugging Face Hub. The token comes from HF_TOKEN or `hf auth login`.",
    )
    parser.add_argument("path", help="a checkpoint folder (config.json + model.safetensors) or a `spt-hf run` folder")
    parser.add_argument("--repo-id", required=True, help="the Hub repository, NAMESPACE/NAME (created if needed)")
    parser.add_argument("--phase", choices=RUN_PHASES, help="the checkpoint of a run folder to push (default: spt)")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", help="push to this branch (created from main if it does not exist)")
    parser.add_argument("--commit-message", help="the commit message (default: phase and steps)")
    return parser


def push_main(argv: list[str] | None = None) -> int:
    """Entry point of `spt-hf push`: 0 when pushed, 1 when it failed (the message says why); bad arguments exit
    with argparse's usage error (status 2)."""
    args = build_parser().parse_args(argv)
    try:
        folder = resolve_push_folder(args.path, args.phase)
        url = push_checkpoint(
            folder, args.repo_id, private=args.private, revision=args.revision, commit_message=args.commit_message
        )
    except (FileNotFoundError, ValueError, MissingHubCredentialsError, HubPushError) as error:
        print(f"spt-hf push: error: {error}", file=sys.stderr)
        return 1
    print(f"Pushed {folder} to {args.repo_id}{'@' + args.revision if args.revision else ''}: {url}")
    others = [name for name in RUN_PHASES if folder.parent / name != folder and (folder.parent / name).is_dir()]
    if folder.name in RUN_PHASES and others:
        hint = f"spt-hf push {folder.parent} --phase {others[0]} --repo-id NAMESPACE/OTHER_NAME"
        print(f"{folder.parent} also has {', '.join(others)}/ (push each to its own repository: {hint}).")
    return 0


if __name__ == "__main__":
    sys.exit(push_main())
