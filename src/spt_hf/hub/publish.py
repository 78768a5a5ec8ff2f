"""`spt-hf push --comparison`: a comparison folder to the Hub (what goes where: hub/comparison.py).

The order makes an interrupted push resume cleanly: the checkpoints first, each its own commit, then the dataset
repository whose card and manifest link them, then the collection. Each repository is brought to its files by
`sync.sync_repo`, so a repository that already holds them gets no commit, and a second push uploads nothing.
Credentials are huggingface_hub's (HF_TOKEN or `hf auth login`); the token goes to the client only.
"""

import contextlib
import json
import shlex
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ..phases import RESULTS_FILE
from .comparison import (
    DEFAULT_REPO_NAME,
    MANIFEST_FILE,
    PUBLISHED_DIR,
    REPORT_PATTERNS,
    RESULTS_DIR,
    Cell,
    exported,
    find_cells,
    hub_url,
    listing,
    manifest_entry,
    model_repo,
    published_repos,
    repo_ids,
)
from .data_card import TASK_CARD_FILE
from .push import CARD_FILE, HubPushError, check_credentials, failure_detail
from .sync import RepoFiles, SyncOutcome, matches_any, size_text, sync_repo

REPORT_FILE = "report.md"
# HTTP statuses of a Hub that has no collections API (an unknown endpoint, or one it does not allow).
NO_COLLECTIONS = (404, 405, 501)


@dataclass
class PublishResult:
    """What a comparison push did: the dataset repository, every repository's outcome (none after a dry run), the
    listing printed first, and the collection (its slug, or the note saying why there is none)."""

    dataset_id: str
    listing: str
    outcomes: list[SyncOutcome] = field(default_factory=list)
    collection: str | None = None

    @property
    def uploaded(self) -> int:
        return sum(len(outcome.uploaded) for outcome in self.outcomes)


def chosen(cells: list[Cell], phases, seeds, architectures) -> list[Cell]:
    """The exported checkpoints a push sends: every one, or those of the given phases, seeds and architectures."""
    return [
        cell
        for cell in cells
        if exported(cell)
        and (not phases or cell.phase in phases)
        and (seeds is None or cell.seed in seeds)
        and (not architectures or cell.architecture in architectures)
    ]


def read_settings(root: Path) -> dict | None:
    """compare's settings of this comparison, with the architectures of the published comparisons it extends."""
    path = root / MANIFEST_FILE
    settings = json.loads(path.read_text()).get("settings") if path.is_file() else None
    for published in sorted((root / PUBLISHED_DIR).glob(f"*/{MANIFEST_FILE}")):
        theirs = json.loads(published.read_text()).get("settings") or {}
        if settings is not None:
            names = [*theirs.get("architectures", []), *settings.get("architectures", [])]
            settings = {**settings, "architectures": list(dict.fromkeys(names))}
    return settings


def task_data_files(cells: list[Cell]) -> dict[str, Path]:
    """{data/TASK/FILE: local file} of the data files the comparison's task files name (generated tasks have none)."""
    files: dict[str, Path] = {}
    for cell in cells:
        entries = (cell.results().get("recipe_fingerprint") or {}).get("entries") or {}
        named = (entries.get("data.task_options") or {}).get("data_files") or []
        named = named.values() if isinstance(named, dict) else [named] if isinstance(named, str) else named
        for name in named:
            for path in sorted(Path(name).rglob("*")) if Path(name).is_dir() else [Path(name)]:
                if path.is_file():
                    files[f"data/{cell.task}/{path.name}"] = path
    return files


def dataset_card(dataset_id: str, report_text: str, models: list[dict]) -> str:
    """The dataset repository's README.md: card metadata, how to use it, the checkpoints, then the report."""
    from huggingface_hub import DatasetCardData

    data = DatasetCardData(
        pretty_name=dataset_id.split("/")[-1],
        tags=["spt_hf", "self-pretraining", "comparison"],
        configs=[{"config_name": "runs", "data_files": "runs.csv"}],
    )
    rows = [
        f"| {m['task']} | {m['architecture']} | {m['variant']} | {m['seed']} | {m['phase']} | "
        f"[{m['repo_id']}]({hub_url(m['repo_id'])}) |"
        for m in sorted(models, key=lambda m: m["path"])
    ]
    table = "\n".join(
        ["| task | architecture | variant | seed | phase | checkpoint |", "|---|---|---|---|---|---|", *rows]
    )
    return (
        f"---\n{data.to_yaml()}\n---\n\n# {dataset_id}: an spt_hf comparison\n\n"
        f"Rebuild the table from this repository alone: `spt-hf report --from_hub {dataset_id}`. Add an architecture "
        f"to it: `spt-hf compare ... --extends {dataset_id}`. `runs.csv` holds every run's numbers; "
        f"`{RESULTS_DIR}/` every phase's results.json; `{MANIFEST_FILE}` the settings and the checkpoints.\n\n"
        f"## Checkpoints\n\n{table}\n\n{report_text}"
    )


def dataset_repo(root: Path, dataset_id: str, cells: list[Cell], manifest: dict, include_data: bool) -> RepoFiles:
    """The comparison's dataset repository: card, report files, recipes, task cards, results and manifest."""
    report = root / REPORT_FILE
    if not report.is_file():
        raise FileNotFoundError(f"{root} has no {REPORT_FILE}: run `spt-hf report {root}` first, then push.")
    files: dict = {p.name: p for p in sorted(root.iterdir()) if p.is_file() and matches_any(p.name, REPORT_PATTERNS)}
    files.pop(MANIFEST_FILE, None)
    files.update({f"recipes/{p.name}": p for p in sorted((root / "recipes").glob("*.yaml"))})
    for cell in cells:
        files[f"{RESULTS_DIR}/{cell.path}/{RESULTS_FILE}"] = cell.folder / RESULTS_FILE
        if (cell.folder / TASK_CARD_FILE).is_file():
            files.setdefault(f"tasks/{cell.task}/{TASK_CARD_FILE}", cell.folder / TASK_CARD_FILE)
    if include_data:
        files.update(task_data_files(cells))
    files[MANIFEST_FILE] = (json.dumps(manifest, indent=2) + "\n").encode()
    files[CARD_FILE] = dataset_card(dataset_id, report.read_text(), manifest["models"]).encode()
    return RepoFiles(dataset_id, "dataset", files)


def remote_models(api, dataset_id: str) -> list[dict]:
    """The checkpoints the published manifest of `dataset_id` lists (none when there is no such repository yet)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    try:
        path = hf_hub_download(dataset_id, MANIFEST_FILE, repo_type="dataset", token=api.token)
    except (EntryNotFoundError, RepositoryNotFoundError):
        return []
    return json.loads(Path(path).read_text()).get("models", [])


def group_in_collection(api, dataset_id: str, items: list[tuple[str, str]], private: bool) -> str:
    """Add the repositories to the namespace's collection named after the comparison; return its slug, or a note
    when the Hub has no collections."""
    from huggingface_hub.errors import HfHubHTTPError

    namespace, name = dataset_id.split("/")
    try:
        collection = api.create_collection(
            name[:60],
            namespace=namespace,
            description=f"spt_hf comparison {dataset_id}",
            private=private,
            exists_ok=True,
        )
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", None)
        if status in NO_COLLECTIONS:
            return f"no collection: the Hub at {hub_url('').rstrip('/')} has no collections API (HTTP {status})"
        raise
    present = {item.item_id for item in collection.items}
    for item_id, item_type in items:
        if item_id not in present:
            api.add_collection_item(collection.slug, item_id, item_type, exists_ok=True)
    return collection.slug


def retry_command(root: Path, namespace: str, name: str) -> str:
    return shlex.join(["spt-hf", "push", "--comparison", str(root), "--namespace", namespace, "--name", name])


@contextlib.contextmanager
def explained(root: Path, namespace: str, name: str, token: str | None):
    """Any failure of the client or the server as a HubPushError saying that a rerun resumes."""
    try:
        yield
    except Exception as error:
        detail = failure_detail(error, token)
        raise HubPushError(
            f"Pushing the comparison {root} failed ({detail}). Nothing local changed, and the repositories already "
            f"pushed stay as they are; rerun to resume: {retry_command(root, namespace, name)}"
        ) from error


def publish_comparison(
    folder: str | Path,
    namespace: str,
    name: str | None = None,
    repo_name: str = DEFAULT_REPO_NAME,
    phases: list[str] | None = None,
    seeds: list[int] | None = None,
    architectures: list[str] | None = None,
    private: bool = False,
    include_data: bool = False,
    dry_run: bool = False,
    token: str | None = None,
) -> PublishResult:
    """Push a comparison folder: its checkpoints (or those chosen), the dataset repository and the collection.
    `dry_run`: list the repositories, their file counts and sizes, and push nothing (no token needed)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"No comparison folder {root}: give the --output_dir of a `spt-hf compare`.")
    cells = find_cells(root)
    if not any(exported(cell) for cell in cells) and not any(cell.published for cell in cells):
        raise FileNotFoundError(f"{root} holds no finished phase of a comparison (TASK/ARCH/VARIANT/seedN/PHASE/).")
    name = name or root.resolve().name
    dataset_id = f"{namespace}/{name}"
    pushing = chosen(cells, phases, seeds, architectures)
    repos = repo_ids([c for c in cells if exported(c)], namespace, name, repo_name)
    if dry_run:
        known = {**published_repos(root), **{c.path: repos[c.path] for c in pushing}}
        return PublishResult(dataset_id, listing(uploads(root, dataset_id, cells, pushing, known, include_data)))
    check_credentials(token)
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    result = PublishResult(dataset_id, "")
    with explained(root, namespace, name, token):
        known = {m["path"]: m["repo_id"] for m in remote_models(api, dataset_id)}
        known.update({**published_repos(root), **{c.path: repos[c.path] for c in pushing}})
        planned = uploads(root, dataset_id, cells, pushing, known, include_data)
        result.listing = listing(planned)
        print(f"spt_hf: pushing the comparison {root}:\n{result.listing}", flush=True)
        for upload in planned:
            outcome = sync_repo(api, upload, private, f"spt_hf: comparison {dataset_id}")
            result.outcomes.append(outcome)
            print(f"spt_hf: {outcome_text(outcome)}", flush=True)
        items = [(m, "model") for m in sorted(set(known.values()))] + [(dataset_id, "dataset")]
        result.collection = group_in_collection(api, dataset_id, items, private)
    return result


def uploads(root: Path, dataset_id: str, cells: list[Cell], pushing: list[Cell], known: dict, include_data: bool):
    """The model repositories of the checkpoints pushed now, then the dataset repository (its manifest lists every
    checkpoint already on the Hub, `known`)."""
    models = [model_repo(cell, known, dataset_id) for cell in pushing]
    by_path = {cell.path: cell for cell in cells}
    manifest = {
        "name": dataset_id,
        "spt_hf": metadata.version("spt_hf"),
        "settings": read_settings(root),
        "models": [manifest_entry(by_path[path], repo) for path, repo in sorted(known.items()) if path in by_path],
    }
    return [*models, dataset_repo(root, dataset_id, cells, manifest, include_data)]


def outcome_text(outcome: SyncOutcome) -> str:
    if outcome.commit_url is None:
        return f"{outcome.repo_type} {outcome.repo_id}: up to date, nothing uploaded"
    deleted = f", {len(outcome.deleted)} deleted" if outcome.deleted else ""
    return (
        f"{outcome.repo_type} {outcome.repo_id}: {len(outcome.uploaded)} files uploaded "
        f"({size_text(outcome.uploaded_bytes)}){deleted}"
    )
