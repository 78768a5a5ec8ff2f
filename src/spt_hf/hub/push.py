"""Pushing spt_hf checkpoints to the Hugging Face Hub: one checkpoint folder, with its model card, to one repository.

What is pushed (PUSH_PATTERNS): the safetensors weights, `config.json` (with the full `auto_map` spt_hf writes), the
generation config when there is one, the modeling files (`*.py`, for remote code), `results.json`, the SPT data
fingerprint, TensorBoard event files under `runs/`, `README.md` (the model card rendered from `results.json`), and
the preprocessing of raw inputs: the tokenizer or feature extractor files and `task_card.json`.
Never pushed (IGNORE_PATTERNS): Trainer `checkpoint-*` folders, optimizer / scheduler / RNG states, the pickled
`training_args.bin`, caches and hidden files. Files of the pushed kinds that the repository has and the folder
does not are deleted by the same commit, so that the revision holds exactly the pushed checkpoint.

A `spt-hf run` folder holds one checkpoint per phase (`spt/`, `finetune/`, `scratch/`); `resolve_push_folder` picks
one (the SPT checkpoint by default), and the cards of a run's checkpoints include the other phases' numbers (the
finetuning result of an SPT checkpoint, the scratch baseline of a finetuned one).

Credentials come from huggingface_hub (the HF_TOKEN environment variable, or the token saved by `hf auth login`); the
token is passed to the client only, never printed, logged, or written into a file.
"""

import contextlib
import json
import logging
import shlex
from pathlib import Path

from ..checkpoints import write_text_atomic
from ..phases import BASELINE_PHASE, FINETUNE_PHASE, PHASES, RESULTS_FILE, SPT_PHASE
from .cards import render_model_card, results_from_folder
from .data_card import preprocessing_kind, read_task_card

logger = logging.getLogger(__name__)

PUSH_PATTERNS = [
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "*.py",
    RESULTS_FILE,
    "spt_fingerprint.npy",
    "runs/*tfevents*",
    "README.md",
    # the preprocessing every phase saves (docs/pipelines.md): tokenizer or feature extractor, and the task card
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "task_card.json",
]
IGNORE_PATTERNS = [
    "checkpoint-*",
    "*/checkpoint-*",
    "last-checkpoint*",
    "optimizer.*",
    "scheduler.*",
    "rng_state*",
    "training_args.bin",
    "trainer_state.json",
    ".*",
    "*/.*",
    "__pycache__*",
    "*/__pycache__*",
    "_*",
]
CARD_FILE = "README.md"


class MissingHubCredentialsError(RuntimeError):
    """A push was requested but no Hub token is available (raised before anything is trained or uploaded)."""


class HubPushError(RuntimeError):
    """An upload failed; the message says that the local folder is intact and gives the command to retry."""


def check_credentials(token: str | None = None) -> None:
    """Raise MissingHubCredentialsError unless a Hub token is available (`token`, HF_TOKEN, or `hf auth login`)."""
    from huggingface_hub import get_token

    if token or get_token():
        return
    raise MissingHubCredentialsError(
        "Pushing to the Hugging Face Hub needs a token with write access, and none was found. Set the HF_TOKEN "
        "environment variable, or run `hf auth login` once (the token is then read from the Hugging Face home folder)."
    )


def ensure_push_credentials(*training_args) -> None:
    """Check, before anything is trained, that the phases whose TrainingArguments ask for `push_to_hub` can push.

    Raises MissingHubCredentialsError without a token, and ValueError when a recipe names no `hub_model_id`, carries
    `hub_token` (the Trainer would pickle it into `training_args.bin` in every checkpoint), or when two phases would
    push to the same repository and revision.
    """
    targets: dict[tuple, str] = {}
    for args in training_args:
        if not args.push_to_hub:
            continue
        if args.hub_token:
            raise ValueError(
                "Do not put `hub_token` in a recipe or on the command line: the Trainer saves its arguments, token "
                "included, into training_args.bin. Set the HF_TOKEN environment variable or run `hf auth login`."
            )
        if not args.hub_model_id:
            raise ValueError(f"`push_to_hub` needs `hub_model_id: NAMESPACE/NAME` (phase in {args.output_dir})")
        target = (args.hub_model_id, args.hub_revision)
        if target in targets:
            raise ValueError(
                f"The phases writing to {targets[target]} and {args.output_dir} would both push to {args.hub_model_id}"
                f"{'@' + args.hub_revision if args.hub_revision else ''}; give each phase its own `hub_model_id`."
            )
        targets[target] = args.output_dir
    if targets:
        check_credentials()


def resolve_push_folder(path: str | Path, phase: str | None = None) -> Path:
    """The checkpoint folder to push: `path` itself, or the `phase` sub-folder (default "spt") of a run folder."""
    path = Path(path)
    if (path / "config.json").is_file():
        if phase is not None:
            raise ValueError(f"{path} is a checkpoint folder; `--phase` only selects a phase of a `spt-hf run` folder.")
        return path
    phases = [name for name in PHASES if (path / name / "config.json").is_file()]
    if not phases:
        raise FileNotFoundError(
            f"{path} is neither a checkpoint folder (config.json and weights) nor a `spt-hf run` folder with "
            f"{'/, '.join(PHASES)}/ sub-folders."
        )
    phase = phase or SPT_PHASE
    if phase not in phases:
        raise FileNotFoundError(f"The run folder {path} has no {phase}/ checkpoint; it has {phases}.")
    return path / phase


def related_results(folder: Path) -> dict:
    """The results of the other phases a card reports, from the sibling phases of a `spt-hf run` folder or the local
    SPT folder a finetuned checkpoint started from: finetune and scratch results for an SPT checkpoint, SPT and
    scratch results for a checkpoint finetuned from SPT, nothing for the scratch baseline itself."""
    own = results_from_folder(folder)
    siblings = {}
    if folder.name in PHASES:  # a phase folder of a run (or of phases run one by one into the same output_dir)
        for name in PHASES:
            if name != folder.name and (folder.parent / name / RESULTS_FILE).is_file():
                siblings[name] = json.loads((folder.parent / name / RESULTS_FILE).read_text())
    if own["phase"] == SPT_PHASE:
        return {"finetune_results": siblings.get(FINETUNE_PHASE), "scratch_results": siblings.get(BASELINE_PHASE)}
    if own["phase"] == BASELINE_PHASE:
        return {}
    source = Path((own.get("init") or {}).get("model_name_or_path") or "", RESULTS_FILE)
    spt = siblings.get(SPT_PHASE) or (json.loads(source.read_text()) if source.is_file() else None)
    return {"spt_results": spt, "scratch_results": siblings.get(BASELINE_PHASE)}


def model_card_text(folder: str | Path, repo_id: str | None = None, base_model: str | None = None) -> str:
    """The card of `folder`, rendered from its results.json and related phases; `base_model`: the Hub repository it
    was finetuned from, when the results name a local folder (a comparison pushed as a whole)."""
    folder = Path(folder)
    card = render_model_card(
        results_from_folder(folder),
        repo_id=repo_id,
        task_card=read_task_card(folder),
        preprocessing=preprocessing_kind(folder),
        **related_results(folder),
    )
    if base_model is not None:
        card.data.base_model = base_model
    return str(card) + plugin_section(folder)


def write_model_card(folder: str | Path, repo_id: str | None = None) -> Path:
    """Render the card of `folder` (`model_card_text`) and write it into README.md atomically."""
    path = Path(folder) / CARD_FILE
    write_text_atomic(path, model_card_text(folder, repo_id))
    return path


def plugin_section(folder: Path) -> str:
    """The card's lines naming the plugin (and version) whose architecture the checkpoint holds, from the record
    that `save_pretrained` writes beside its code (modeling/plugin_code.py); empty for spt_hf's own architectures."""
    from ..modeling.plugin_code import PLUGIN_FILE

    if not (folder / PLUGIN_FILE).is_file():
        return ""
    record = json.loads((folder / PLUGIN_FILE).read_text())
    name = record.get("plugin") or record["module"]
    version = f" {record['version']}" if record.get("version") else ""
    return (
        f"\n\n## Architecture plugin\n\nThe `{record['model_type']}` architecture comes from the spt_hf plugin "
        f"`{name}`{version}; its code is saved here, so `trust_remote_code=True` loads it without spt_hf or the "
        "plugin installed.\n"
    )


def check_checkpoint_folder(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a `save_pretrained` checkpoint folder.")
    if not any(folder.glob("*.safetensors")):
        raise FileNotFoundError(
            f"{folder} has no safetensors weights (model.safetensors or shards); spt_hf pushes safetensors only: "
            "load the model and `save_pretrained` it again."
        )


def retry_command(folder: Path, repo_id: str, private: bool = False, revision: str | None = None) -> str:
    command = ["spt-hf", "push", str(folder), "--repo_id", repo_id]
    command += ["--revision", revision] if revision else []
    command += ["--private"] if private else []
    return shlex.join(command)


def push_checkpoint(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Push one checkpoint folder, with its model card, to `repo_id` (created if needed); return the commit URL.

    `revision` names a branch, created from `main` when it does not exist. Raises MissingHubCredentialsError before
    any upload without a token, and HubPushError (saying the local folder is intact and how to retry) when the
    upload fails.
    """
    from huggingface_hub import HfApi

    folder = Path(folder)
    check_checkpoint_folder(folder)
    check_credentials(token)
    api = HfApi(token=token)
    results = results_from_folder(folder)
    steps = (results.get("budget") or {}).get("steps")
    message = commit_message or f"spt_hf: {results['phase']} checkpoint ({steps} steps)"
    with explained_failure(folder, repo_id, private, revision, token):
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id  # resolves a bare NAME
    write_model_card(folder, repo_id)
    with explained_failure(folder, repo_id, private, revision, token):
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            commit_message=message,
            allow_patterns=PUSH_PATTERNS,
            ignore_patterns=IGNORE_PATTERNS,
            delete_patterns=stale_files(api, repo_id, revision, folder) or None,
        )
    logger.info("Pushed %s to %s: %s", folder, repo_id, commit.commit_url)
    return commit.commit_url


@contextlib.contextmanager
def explained_failure(folder: Path, repo_id: str, private: bool, revision: str | None, token: str | None):
    """Turn any failure of the client or the server into a HubPushError that says what to do next."""
    try:
        yield
    except Exception as error:  # network, HTTP or client errors: the same advice applies to all
        detail = failure_detail(error, token)
        raise HubPushError(
            f"Pushing {folder} to the Hub repository {repo_id} failed ({detail}).\nThe local checkpoint in {folder} "
            f"is intact (a push writes nothing there but its model card, {CARD_FILE}). Retry with:\n  "
            f"{retry_command(folder, repo_id, private, revision)}"
        ) from error


def stale_files(api, repo_id: str, revision: str | None, folder: Path) -> list[str]:
    """Files of the kinds spt_hf pushes that the repository has and `folder` does not (old shards, another phase's
    fingerprint or logs): the push deletes them, so the revision holds exactly this checkpoint. Files of other kinds
    (.gitattributes, the Trainer's `last-checkpoint/`) are kept."""
    from huggingface_hub.utils import filter_repo_objects

    local = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
    pushed = set(filter_repo_objects(local, allow_patterns=PUSH_PATTERNS, ignore_patterns=IGNORE_PATTERNS))
    remote = api.list_repo_files(repo_id, revision=revision)
    ours = filter_repo_objects(remote, allow_patterns=PUSH_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
    return sorted(path for path in ours if path not in pushed)


def push_phase(training_args, output_dir: str | Path | None = None, commit_message: str | None = None) -> str | None:
    """After a phase has written its model and results.json: when `push_to_hub` is set, push its folder
    (`output_dir`, default `training_args.output_dir`) to `hub_model_id` at `hub_revision`, private per
    `hub_private_repo`. Returns the commit URL, or None. Pushing a folder again uploads only what changed (the card
    once more phases of its run are done)."""
    if not training_args.push_to_hub:
        return None
    return push_checkpoint(
        output_dir or training_args.output_dir,
        training_args.hub_model_id,
        private=bool(training_args.hub_private_repo),
        revision=training_args.hub_revision,
        token=training_args.hub_token,
        commit_message=commit_message,
    )


def failure_detail(error: Exception, token: str | None) -> str:
    """`Type: message` of a failed push, with the token in use (given, or huggingface_hub's) redacted."""
    from huggingface_hub import get_token

    return redact(f"{type(error).__name__}: {error}", token or get_token())


def redact(text: str, token: str | None) -> str:
    """`text` with the token replaced (server and client messages should never contain it; this makes sure)."""
    return text.replace(token, "<token>") if token else text
