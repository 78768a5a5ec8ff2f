"""Publishing a whole `spt-hf compare` folder on the Hub, and reading one back.

    spt-hf push --comparison runs/compare --namespace me [--dry_run]     # publish_comparison("runs/compare", "me")
    spt-hf report --from_hub me/compare                                 # the table, rebuilt from the Hub

What goes where:
- Every exported checkpoint (`TASK/ARCH/VARIANT/seedN/PHASE/` of the comparison folder, or those chosen by phase,
  seed and architecture) to its own model repository, NAMESPACE/ + `repo_name` filled with `name`, `task`,
  `architecture`, `variant`, `phase` and `seed` (DEFAULT_REPO_NAME). It holds what `spt-hf push` sends for one
  checkpoint, and its card adds a section linking the comparison and the related checkpoints: the SPT checkpoint names
  the models finetuned from it; a finetuned model names its SPT checkpoint (also its card's `base_model`) and the
  baseline of the same seed, which names it back.
- One dataset repository, NAMESPACE/NAME: `README.md` (the comparison's report.md, with a table of the checkpoints),
  the report's files (runs.csv, runs.json, aggregate.json, tuning.json, the plots), `recipes/`, `tasks/TASK/` (each
  task's `task_card.json`), `results/PHASE_PATH/results.json` of every phase (what `spt-hf report --from_hub`
  reads), and `comparison.json` (MANIFEST_FILE): the settings `spt-hf compare` recorded and every checkpoint's
  repository. Training data only when asked (`include_data`: the data files of the comparison's task files).
- A collection of them all, where the Hub offers collections (a note otherwise).

A comparison that extends a published one (`spt-hf compare --extends NS/NAME`) holds the published phases' results
under `published/`: they join the report and the dataset repository, and their checkpoints keep their repositories.
"""

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..phases import BASELINE_PHASE, FINETUNE_PHASE, PHASES, RESULTS_FILE, SPT_PHASE
from ..tuning import TRIAL_FILE
from .pull import not_a_checkpoint
from .push import CARD_FILE, IGNORE_PATTERNS, PUSH_PATTERNS, model_card_text
from .sync import RepoFiles, matches_any, size_text

MANIFEST_FILE = "comparison.json"  # in a comparison folder: compare's settings; on the Hub: those and the checkpoints
PUBLISHED_DIR = "published"  # in a comparison folder: the results of the published comparison it extends
RESULTS_DIR = "results"  # in the dataset repository: every phase's results.json, at its path in the comparison
DEFAULT_REPO_NAME = "{name}-{task}-{architecture}-{phase}-seed{seed}"
REPORT_PATTERNS = ["*.csv", "*.json", "*.png"]  # the report's files, at the top of the comparison folder
SEED_FOLDER = re.compile(r"^seed(\d+)$")
# The Hub's rule for a repository name (huggingface_hub.utils.validate_repo_id checks the same, and the length).
REPO_NAME = re.compile(r"^(?!.*(--|\.\.))[A-Za-z0-9][\w.-]{0,94}[A-Za-z0-9_]$|^[A-Za-z0-9]$")


@dataclass(frozen=True)
class Cell:
    """One phase of a comparison: where it sits (`path`: TASK/ARCH/VARIANT/seedN/PHASE) and the folder holding its
    results.json (with its exported checkpoint, unless it comes from a published comparison)."""

    task: str
    architecture: str
    variant: str
    seed: int
    phase: str
    folder: Path
    published: bool = False

    @property
    def path(self) -> str:
        return f"{self.task}/{self.architecture}/{self.variant}/seed{self.seed}/{self.phase}"

    def sibling(self, phase: str) -> str:
        return self.path.rsplit("/", 1)[0] + f"/{phase}"

    def results(self) -> dict:
        return json.loads((self.folder / RESULTS_FILE).read_text())


def cell_at(folder: Path, root: Path, published: bool = False) -> Cell | None:
    """The cell of a phase folder under `root`, or None for anything else (a tuning trial, a stray results.json)."""
    parts = folder.relative_to(root).parts
    if len(parts) != 5 or parts[4] not in PHASES or not SEED_FOLDER.match(parts[3]):
        return None
    if (folder.parent / TRIAL_FILE).is_file():
        return None
    seed = int(SEED_FOLDER.match(parts[3]).group(1))
    return Cell(parts[0], parts[1], parts[2], seed, parts[4], folder, published)


def find_cells(root: Path) -> list[Cell]:
    """The phases of the comparison folder `root` that finished (results.json), its own and the published ones."""
    cells = []
    for results in sorted(root.rglob(RESULTS_FILE)):
        relative = results.relative_to(root).parts
        if relative[0] == PUBLISHED_DIR:
            base = root.joinpath(*relative[:3]) if len(relative) > 3 and relative[2] == RESULTS_DIR else None
            cell = cell_at(results.parent, base, published=True) if base else None
        else:
            cell = cell_at(results.parent, root)
        if cell is not None:
            cells.append(cell)
    return cells


def published_repos(root: Path) -> dict[str, str]:
    """{phase path: repository} of the checkpoints of the published comparisons under `root/published/`."""
    repos = {}
    for manifest in sorted((root / PUBLISHED_DIR).glob(f"*/{MANIFEST_FILE}")):
        repos.update({entry["path"]: entry["repo_id"] for entry in json.loads(manifest.read_text())["models"]})
    return repos


def repo_ids(cells: list[Cell], namespace: str, name: str, template: str) -> dict[str, str]:
    """{phase path: NAMESPACE/REPO} of the cells' checkpoints, named by `template`; refused in one line when a name
    is not a valid repository name or two checkpoints would share one."""
    named: dict[str, str] = {}
    owner: dict[str, str] = {}
    for cell in cells:
        fields = {"name": name, "task": cell.task, "architecture": cell.architecture, "variant": cell.variant}
        try:
            repo = template.format(**fields, phase=cell.phase, seed=cell.seed)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(
                f"--repo_name {template!r} does not fill ({error}); use the fields {{name}}, {{task}}, "
                "{architecture}, {variant}, {phase} and {seed}."
            ) from None
        if not REPO_NAME.match(repo):
            raise ValueError(
                f"--repo_name gives {repo!r} for {cell.path}, not a Hub repository name (letters, digits, '-', '_' "
                "and '.', at most 96, no '--' or '..'): shorten --name or --repo_name."
            )
        if repo in owner:
            raise ValueError(
                f"{owner[repo]} and {cell.path} would both push to {namespace}/{repo}: add the field that tells them "
                "apart ({variant} for training set sizes) to --repo_name."
            )
        owner[repo] = cell.path
        named[cell.path] = f"{namespace}/{repo}"
    return named


def hub_url(repo_id: str, repo_type: str = "model") -> str:
    from huggingface_hub import constants

    return f"{constants.ENDPOINT}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"


def link(repo_id: str) -> str:
    return f"[{repo_id}]({hub_url(repo_id)})"


def links_section(cell: Cell, repos: dict[str, str], dataset_id: str) -> str:
    """The model card's section on the comparison: the dataset repository, and the checkpoints related to this one."""
    related = {phase: repos.get(cell.sibling(phase)) for phase in PHASES}
    lines = [
        "\n\n## Part of a comparison\n",
        f"This checkpoint is one run of the comparison [{dataset_id}]({hub_url(dataset_id, 'dataset')}) (task "
        f"`{cell.task}`, architecture `{cell.architecture}`, seed {cell.seed}): its report, per-seed results and "
        f"the other checkpoints are there, and `spt-hf report --from_hub {dataset_id}` rebuilds its table.\n",
    ]
    if cell.phase == SPT_PHASE and related[FINETUNE_PHASE]:
        lines.append(f"- Finetuned from this checkpoint: {link(related[FINETUNE_PHASE])}")
    if cell.phase == FINETUNE_PHASE and related[SPT_PHASE]:
        lines.append(f"- Finetuned from the self-pretrained checkpoint {link(related[SPT_PHASE])}")
    if cell.phase == FINETUNE_PHASE and related[BASELINE_PHASE]:
        lines.append(f"- Its baseline (the same recipe and seed, no SPT): {link(related[BASELINE_PHASE])}")
    if cell.phase == BASELINE_PHASE and related[FINETUNE_PHASE]:
        lines.append(f"- The same recipe and seed finetuned after SPT: {link(related[FINETUNE_PHASE])}")
    return "\n".join(lines) + "\n"


def model_repo(cell: Cell, repos: dict[str, str], dataset_id: str) -> RepoFiles:
    """A checkpoint's repository: its files as `spt-hf push` sends them, and its card with the comparison's links."""
    from huggingface_hub.utils import filter_repo_objects

    local = sorted(p.relative_to(cell.folder).as_posix() for p in cell.folder.rglob("*") if p.is_file())
    chosen = filter_repo_objects(local, allow_patterns=PUSH_PATTERNS, ignore_patterns=IGNORE_PATTERNS)
    files: dict = {path: cell.folder / path for path in chosen if path != CARD_FILE}
    base = repos.get(cell.sibling(SPT_PHASE)) if cell.phase == FINETUNE_PHASE else None
    card = model_card_text(cell.folder, repos[cell.path], base_model=base) + links_section(cell, repos, dataset_id)
    files[CARD_FILE] = card.encode()
    return RepoFiles(repos[cell.path], "model", files, owned=lambda path: matches_any(path, PUSH_PATTERNS))


def manifest_entry(cell: Cell, repo_id: str) -> dict:
    results = cell.results()
    test = (results.get("metrics") or {}).get("test") or {}
    return {
        "repo_id": repo_id,
        "path": cell.path,
        "task": cell.task,
        "architecture": cell.architecture,
        "variant": cell.variant,
        "seed": cell.seed,
        "phase": cell.phase,
        "test": {k: v for k, v in test.items() if k.endswith(("accuracy", "r2", "loss"))},
    }


def fetch_published(dataset_id: str, into: Path, revision: str | None = None) -> Path:
    """Copy the results and manifest of the published comparison `dataset_id` into `into` (replaced); return it."""
    from huggingface_hub import snapshot_download

    snapshot = Path(
        snapshot_download(
            dataset_id, repo_type="dataset", revision=revision, allow_patterns=[f"{RESULTS_DIR}/**", "*.json"]
        )
    )
    if not (snapshot / MANIFEST_FILE).is_file():
        raise FileNotFoundError(
            f"The dataset repository {dataset_id} has no {MANIFEST_FILE}: it is not a comparison pushed with "
            "`spt-hf push --comparison`."
        )
    staging = into.with_name(into.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(snapshot, staging)
    shutil.rmtree(into, ignore_errors=True)
    staging.rename(into)
    return into


def listing(uploads: list[RepoFiles]) -> str:
    """Every repository a push writes, with its file count and size, and the totals."""
    lines = [f"  {u.repo_type:<7} {u.repo_id}  {len(u.files)} files, {size_text(u.size)}" for u in uploads]
    files, size = sum(len(u.files) for u in uploads), sum(u.size for u in uploads)
    return "\n".join([*lines, f"  {len(uploads)} repositories, {files} files, {size_text(size)} in all"])


def exported(cell: Cell) -> bool:
    return not cell.published and not_a_checkpoint(cell.folder) is None
