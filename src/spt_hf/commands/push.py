"""`spt-hf push`: a checkpoint folder, or one phase of a run folder, and its model card to the Hub; or, with
`--comparison`, a whole comparison folder (every checkpoint, a dataset repository and a collection)."""

import argparse

from ..phases import PHASES, SPT_PHASE
from .options import add_command, spellings


def add_parsers(commands, common: argparse.ArgumentParser) -> None:
    text = "push a checkpoint folder, one phase of a run folder, or a whole comparison (--comparison) to the Hub"
    parser = add_command(commands, common, "push", push_command, text)
    parser.add_argument(
        "path", nargs="?", help="a checkpoint folder (config.json + model.safetensors) or a `spt-hf run` folder"
    )
    parser.add_argument(*spellings("--repo_id"), help="the Hub repository, NAMESPACE/NAME (created if needed)")
    parser.add_argument("--phase", choices=PHASES, help=f"the phase of a run folder (default {SPT_PHASE})")
    parser.add_argument("--private", action="store_true", help="create the repositories as private")
    parser.add_argument("--revision", help="push to this branch (created from main if it does not exist)")
    parser.add_argument(*spellings("--commit_message"), help="the commit message (default: phase and steps)")
    group = parser.add_argument_group("a whole comparison (docs/hub.md)")
    group.add_argument("--comparison", metavar="FOLDER", help="the --output_dir of a `spt-hf compare`")
    group.add_argument("--namespace", help="the user or organisation that owns the repositories")
    group.add_argument("--name", help="the dataset repository's name, NAMESPACE/NAME (default: the folder's name)")
    group.add_argument(
        *spellings("--repo_name"),
        help="each checkpoint's repository name, from {name} {task} {architecture} {variant} {phase} {seed} "
        "(default: {name}-{task}-{architecture}-{phase}-seed{seed})",
    )
    group.add_argument("--phases", nargs="+", choices=PHASES, help="push only these phases' checkpoints")
    group.add_argument("--seeds", nargs="+", type=int, help="push only these seeds' checkpoints")
    group.add_argument("--architectures", nargs="+", help="push only these architectures' checkpoints")
    group.add_argument(
        *spellings("--include_data"), action="store_true", help="also push the data files the task files name"
    )
    group.add_argument(*spellings("--dry_run"), action="store_true", help="list the repositories, push nothing")


def push_command(args, rest: list[str]) -> int:
    if args.comparison is not None:
        return push_comparison(args)
    if args.path is None or args.repo_id is None:
        raise ValueError(
            "spt-hf push needs a folder and --repo_id NAMESPACE/NAME (one checkpoint), or --comparison FOLDER "
            "--namespace NAMESPACE (a whole comparison)."
        )
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


def push_comparison(args) -> int:
    single = [f"--{key}" for key in ("repo_id", "phase", "revision", "commit_message") if getattr(args, key)]
    if args.path is not None or single:
        given = ", ".join(([args.path] if args.path else []) + single)
        raise ValueError(f"--comparison pushes a whole comparison; leave out {given} (they push one checkpoint).")
    if not args.namespace:
        raise ValueError("--comparison needs --namespace NAMESPACE: the user or organisation owning the repositories.")
    from ..hub.comparison import DEFAULT_REPO_NAME
    from ..hub.publish import publish_comparison

    result = publish_comparison(
        args.comparison,
        args.namespace,
        name=args.name,
        repo_name=args.repo_name or DEFAULT_REPO_NAME,
        phases=args.phases,
        seeds=args.seeds,
        architectures=args.architectures,
        private=args.private,
        include_data=args.include_data,
        dry_run=args.dry_run,
    )
    if args.dry_run:
        print(f"spt_hf: a push of {args.comparison} would write (dry run, nothing pushed):\n{result.listing}")
        return 0
    print(f"spt_hf: {result.uploaded} files uploaded; the comparison: {result.dataset_id} (dataset repository)")
    print(f"spt_hf: collection: {result.collection}")
    return 0
