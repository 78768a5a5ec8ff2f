"""The life of a phase folder (`<output_dir>/<phase>`): one writer at a time, a recipe it belongs to, checkpoints
that are complete or absent, and a finished phase that is never trained again.

- `PhaseLock`: an exclusive lock file holding the writer's process id, start time and host (and its Slurm job id,
  inside one). A lock whose process is gone (killed) is taken over with a message; a live one makes a second run
  fail at once, naming it. A lock taken on another host inside a Slurm job is judged by whether Slurm still has
  that job queued or running.
- `recipe_fingerprint`: the hash of everything in a resolved recipe that changes the model (not where it is written,
  how often it logs or how many data-loader workers read the data), recorded when the phase starts
  (`spt_hf_phase.json`) and in `results.json`.
- `phase_status`: the one decision whether a phase is finished, and in what state (`PhaseState`), made by the
  phase when it starts (`open_phase`) and by `spt-hf compare` before it launches the phase.
- Trainer checkpoints are committed by `commit_checkpoint`: written into a staging folder, given a manifest of the
  sha256 of every file, then renamed into place; `latest_complete_checkpoint` returns the newest checkpoint whose
  manifest verifies, saying which it skipped and why.

docs/reliability.md states these guarantees; tests/reliability/test_run_lifecycle.py checks them.
"""

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..checkpoints import (
    CheckpointIntegrityError,
    digest_problem,
    file_digests,
    verify_recorded_digests,
    write_json_atomic,
)
from ..hub.pull import checkpoint_folder
from ..slurm_queries import job_alive
from .results import RESULTS_FILE

LOCK_FILE = ".spt_hf.lock"
PHASE_FILE = "spt_hf_phase.json"
MANIFEST_FILE = "spt_hf_checkpoint.json"
STAGING_PREFIX = ".staging-"
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
# Recipe entries that do not change the model a phase trains: where it is written and read from, logging and
# reporting, evaluation batch sizes, data-loader workers (the SPT masks do not depend on them), pushing, packed
# sequences (the same examples, masks and loss targets per step, in other rows: only the rounding differs), padding
# to a multiple (padding-aware models: the same results up to rounding; runs from before the key resume).
NOT_IN_FINGERPRINT = re.compile(
    r"^(source|data\.data_dir|data\.pad_to_multiple_of|spt\.overwrite_output_dir|spt\.allow_eval_overlap"
    r"|spt\.packed_sequences"
    r"|model\.trust_remote_code"
    r"|model\.model_name_or_path"
    r"|training\.(output_dir|logging_dir|run_name|report_to|disable_tqdm|log_level|log_level_replica|logging_\w+"
    r"|per_device_eval_batch_size|eval_accumulation_steps|dataloader_\w+|save_total_limit|push_to_hub|hub_\w+"
    r"|local_rank|use_cpu|print_\w+|debug|ignore_data_skip|resume_from_checkpoint|eval_on_start|\w*token\w*))$"
)


# The fingerprint entry of the checkpoint a phase starts from (`phase_extra`): files, not a recipe key.
CHECKPOINT_KEY = "init.weights_sha256"


class PhaseLockedError(RuntimeError):
    """Another process is writing the phase folder."""


class RecipeChangedError(ValueError):
    """The recipe differs from the one a phase folder was started (or finished) with; `changes` holds the differing
    fingerprint entries, {key: (recorded value, value now)} (empty when the folder has no readable record)."""

    def __init__(self, message: str, changes: dict[str, tuple] | None = None):
        super().__init__(message)
        self.changes = changes or {}


class DiskFullError(OSError, RuntimeError):
    """A checkpoint could not be written for lack of space; earlier checkpoints are intact. (A RuntimeError too: a
    failure the user fixes, which the CLI shows as its one line.)"""


# ----------------------------------------------------------------------------------------------------------------
# The lock
# ----------------------------------------------------------------------------------------------------------------


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (field 22 of /proc/<pid>/stat), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
        return ""  # alive, start time unknown (no /proc)
    return stat.rsplit(")", 1)[1].split()[19]


def _slurm_job_alive(job_id: str) -> bool | None:
    """Whether Slurm has job `job_id` queued or running; None when Slurm cannot be asked from here."""
    if shutil.which("squeue") is None:
        return None
    return job_alive(job_id)


class PhaseLock:
    """An exclusive lock on a phase folder: `LOCK_FILE` created with O_EXCL, removed on release."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / LOCK_FILE
        self.held = False

    def acquire(self) -> "PhaseLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {
            "pid": os.getpid(),
            "start": _process_start(os.getpid()),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        if os.environ.get("SLURM_JOB_ID"):  # judged by Slurm from another node: is that job still alive?
            me["slurm_job"] = os.environ["SLURM_JOB_ID"]
        for _ in range(3):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(descriptor, "w") as handle:
                json.dump(me, handle)
            self.held = True
            return self
        raise PhaseLockedError(f"Could not take the lock {self.path}; remove it if no run uses {self.path.parent}.")

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
        except (OSError, ValueError):
            owner = {}
        pid, host = owner.get("pid"), owner.get("host")
        folder = self.path.parent
        if host == socket.gethostname() and isinstance(pid, int):
            start = _process_start(pid)
            if start is not None and (not owner.get("start") or not start or start == owner["start"]):
                raise PhaseLockedError(
                    f"{folder} is in use by process {pid} on host {host} (since {owner.get('since')}): wait for it "
                    "to finish or stop it; two runs writing one folder would mix their checkpoints."
                )
            print(f"spt_hf: taking over the lock of {folder} from process {pid}, which is no longer running.")
        elif owner.get("slurm_job") and (alive := _slurm_job_alive(str(owner["slurm_job"]))) is not None:
            job = owner["slurm_job"]
            if alive:
                raise PhaseLockedError(
                    f"{folder} is in use by Slurm job {job} (process {pid} on host {host}, since "
                    f"{owner.get('since')}): wait for it to end or cancel it (scancel {job})."
                )
            print(f"spt_hf: taking over the lock of {folder} from Slurm job {job} on {host}, which has ended.")
        elif owner:
            raise PhaseLockedError(
                f"{folder} is in use by process {pid} on host {host} (since {owner.get('since')}); if that run is "
                f"no longer running, remove {self.path}."
            )
        self.path.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> "PhaseLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def live_lock_owner(folder: str | Path) -> dict | None:
    """The owner ({"pid", "host", "since", ...}) of the lock on `folder` if it is a live process on this host; None
    if there is no lock, its process is gone, or it was taken on another host."""
    try:
        owner = json.loads((Path(folder) / LOCK_FILE).read_text())
    except (OSError, ValueError):
        return None
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int):
        return None
    start = _process_start(pid)
    alive = start is not None and (not owner.get("start") or not start or start == owner["start"])
    return owner if alive else None


# ----------------------------------------------------------------------------------------------------------------
# Which recipe a phase belongs to, and whether it is finished
# ----------------------------------------------------------------------------------------------------------------


def flatten(values: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and scalars are leaves."""
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and name not in ("data.task_options", "data.generate_data"):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def recipe_fingerprint(recipe_dict: dict, extra: dict | None = None) -> tuple[str, dict]:
    """(sha256, the entries hashed) of a resolved recipe (`Recipe.to_dict()`) plus `extra` facts of the phase (the
    number of processes, the checkpoint it starts from)."""
    entries = {k: v for k, v in flatten(recipe_dict).items() if not NOT_IN_FINGERPRINT.match(k)}
    entries.update(extra or {})
    canonical = json.dumps(entries, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest(), json.loads(canonical)


def phase_fingerprint(recipe, extra: dict | None = None, world_size: int | None = None) -> tuple[str, dict]:
    """The fingerprint a phase records for `recipe` (in its phase folder): the recipe, the number of processes
    (`world_size`, default this process's) and `extra` facts (the checkpoint finetuning starts from)."""
    processes = recipe.training.world_size if world_size is None else world_size
    return recipe_fingerprint(recipe.to_dict(), {"world_size": processes, **(extra or {})})


def recipe_changes(before: dict, after: dict) -> dict[str, tuple]:
    """{key: (value before, value after)} of the fingerprint entries that differ, by key (`<unset>` for a missing
    one)."""
    keys = sorted(k for k in set(before) | set(after) if before.get(k, "<unset>") != after.get(k, "<unset>"))
    return {k: (before.get(k, "<unset>"), after.get(k, "<unset>")) for k in keys}


def describe_changes(before: dict, after: dict, limit: int = 12) -> str:
    changes = recipe_changes(before, after)
    lines = [f"{k}: {old} -> {new}" for k, (old, new) in list(changes.items())[:limit]]
    if len(changes) > limit:
        lines.append(f"... and {len(changes) - limit} more")
    return "\n  ".join(lines)


class PhaseState(StrEnum):
    """The states of a phase, one vocabulary for the phase itself, `spt-hf compare`'s plan table, its progress
    lines and its result (docs/compare.md lists them). `phase_status` decides the first five from the phase's
    folder; a launcher adds the last four as it runs the phase.

    - NEW: nothing of this recipe in the folder (or `overwrite_output_dir`): the phase trains from step 0.
    - PARTIAL: checkpoints of this recipe: the phase resumes from the newest complete one.
    - WAITING: the checkpoint the phase starts from (`model_name_or_path`, its SPT phase) is not there yet.
    - FINISHED: finished with this recipe: never trained again, its results are read back.
    - CHANGED: the folder holds a phase of another recipe (the differing keys are named) or a finished phase whose
      files changed: left alone, never mixed in.
    - QUEUED: submitted to a scheduler (Slurm, Ray), not started yet.
    - RUNNING: started.
    - FAILED: ran and stopped without finishing (its exit status and log are named).
    - BLOCKED: not started because the phase it starts from failed, changed or was blocked.
    """

    NEW = "new"
    PARTIAL = "partial"
    WAITING = "waiting"
    FINISHED = "finished"
    CHANGED = "changed"
    QUEUED = "queued"
    RUNNING = "running"
    FAILED = "failed"
    BLOCKED = "blocked"


# The states in which a phase will be launched: it trains, resumes, or waits for the phase it starts from.
TO_RUN = (PhaseState.NEW, PhaseState.PARTIAL, PhaseState.WAITING)


@dataclass
class PhaseStatus:
    """What `phase_status` found: the state (NEW, PARTIAL, WAITING, FINISHED or CHANGED), the recipe writing into
    the phase folder, the checkpoint folder it starts from, the fingerprint results.json records
    ({"sha256", "entries"}), the results of a FINISHED phase, and for WAITING and CHANGED the error the phase
    raises (its message says why)."""

    state: PhaseState
    recipe: object = None
    source: Path | None = None
    fingerprint: dict = field(default_factory=dict)
    results: dict | None = None
    error: Exception | None = None

    @property
    def why(self) -> str:
        return "" if self.error is None else str(self.error)


def in_phase_dir(recipe, phase: str):
    """The recipe writing into `<output_dir>/<phase>` (the run folder's subfolder of this phase)."""
    phase_dir = Path(recipe.training.output_dir) / phase
    return dataclasses.replace(recipe, training=dataclasses.replace(recipe.training, output_dir=str(phase_dir)))


def phase_extra(source_folder: Path | None) -> dict:
    """What a finetuning phase's fingerprint adds to its recipe: the files of the checkpoint it starts from (a changed
    SPT checkpoint is a changed recipe)."""
    if source_folder is None:
        return {}
    # The bare sha256 of each file, as fingerprints recorded before the digests took their size: the same checkpoint
    # keeps the same fingerprint.
    return {CHECKPOINT_KEY: {name: d["sha256"] for name, d in file_digests(source_folder).items()}}


def phase_status(recipe, phase: str, world_size: int | None = None) -> PhaseStatus:
    """Whether the `phase` (one of `phases.PHASES`) of `recipe` is finished, and in what state: THE
    decision, made by the phase itself when it starts (`open_phase`) and by `spt-hf compare` before it launches the
    phase (its plan table, what it runs, what it leaves alone). Reads only; never raises for the folder's content
    (WAITING and CHANGED carry the error the phase raises).

    `recipe` is the recipe as the phase loads it (`training.output_dir` is the run folder); `world_size` is the
    number of processes the phase will run on (default: this process's, which is the phase's own when it starts;
    compare passes what its launcher starts, e.g. an accelerate config's `num_processes`).
    """
    recipe = in_phase_dir(recipe, phase)
    source = recipe.model.model_name_or_path
    folder = None
    if source is not None:
        try:
            folder = checkpoint_folder(source)  # a Hub id: its snapshot, checked the same way
        except (FileNotFoundError, ValueError) as error:  # its SPT phase has not exported a model (yet)
            return PhaseStatus(PhaseState.WAITING, recipe, error=error)
    try:
        if folder is not None:
            verify_recorded_digests(folder)  # a flipped byte since the SPT phase wrote it -> checksum error
        sha, entries = phase_fingerprint(recipe, phase_extra(folder), world_size)
        status = _folder_state(Path(recipe.training.output_dir), sha, entries, recipe.phase.overwrite_output_dir)
    except (RecipeChangedError, CheckpointIntegrityError) as error:  # a changed recipe, changed files
        return PhaseStatus(PhaseState.CHANGED, recipe, folder, error=error)
    status.recipe, status.source, status.fingerprint = recipe, folder, {"sha256": sha, "entries": entries}
    return status


def _folder_state(folder: Path, fingerprint: str, entries: dict, overwrite: bool) -> PhaseStatus:
    """NEW, PARTIAL or FINISHED from what `folder` holds; raise RecipeChangedError naming the differing keys when
    the folder was started or finished with another recipe (unless `overwrite`: the phase trains afresh)."""
    if overwrite:
        return PhaseStatus(PhaseState.NEW)  # the phase empties the folder first (`open_phase`)
    results_path, phase_path = folder / RESULTS_FILE, folder / PHASE_FILE
    recorded = None
    if results_path.is_file():
        try:
            results = json.loads(results_path.read_text())
        except ValueError as error:
            raise RecipeChangedError(
                f"{results_path} is not valid JSON ({error}); `--overwrite_output_dir true` trains the phase afresh."
            ) from None
        recorded = results.get("recipe_fingerprint") or {}
        if recorded.get("sha256") == fingerprint:
            verify_recorded_digests(folder)  # a finished phase whose files changed is an error, not a rerun
            return PhaseStatus(PhaseState.FINISHED, results=results)
        state = "finished"
    elif phase_path.is_file():
        recorded = json.loads(phase_path.read_text())
        if recorded.get("sha256") == fingerprint:
            return PhaseStatus(PhaseState.PARTIAL)
        if not any(CHECKPOINT_PATTERN.match(p.name) for p in folder.glob("checkpoint-*")):
            return PhaseStatus(PhaseState.NEW)  # started with another recipe but stopped before anything was saved
        state = "partially trained"
    elif any(CHECKPOINT_PATTERN.match(p.name) for p in folder.glob("checkpoint-*")):
        raise RecipeChangedError(
            f"{folder} holds Trainer checkpoints but no record of the recipe they were trained with; "
            "`--overwrite_output_dir true` trains the phase afresh."
        )
    else:
        return PhaseStatus(PhaseState.NEW)
    before = recorded.get("entries", {})
    raise RecipeChangedError(
        f"The recipe differs from the one the {state} phase in {folder} was trained with:\n  "
        f"{describe_changes(before, entries)}\nUse another output_dir, restore the recipe, or "
        "pass `--overwrite_output_dir true` to train the phase afresh.",
        recipe_changes(before, entries),
    )


def record_phase_start(folder: str | Path, fingerprint: str, entries: dict) -> None:
    write_json_atomic(Path(folder) / PHASE_FILE, {"sha256": fingerprint, "entries": entries})


@contextlib.contextmanager
def open_phase(recipe, phase: str) -> Iterator[PhaseStatus]:
    """Hold the folder of the `phase` of `recipe` (`<output_dir>/<phase>`) for one phase: lock it (main process
    only), decide what it holds (`phase_status`, the same decision `spt-hf compare` makes), empty it if the recipe
    says `overwrite_output_dir`, and record the recipe it belongs to. Yields the status (state NEW, PARTIAL or
    FINISHED); WAITING and CHANGED raise their error (a missing checkpoint to start from, a changed recipe).

    A phase that stops before it saved anything (refused, or a failure while its data loads) leaves nothing behind:
    neither its record nor the folders this call created."""
    training = in_phase_dir(recipe, phase).training
    folder = Path(training.output_dir)
    check_writable_folder(folder, recipe.training.output_dir)
    lock = PhaseLock(folder)
    main = training.process_index == 0
    created = [path for path in (folder, *folder.parents) if not path.exists()]  # deepest first
    try:
        with training.main_process_first(desc="spt_hf phase folder"):  # the main process decides first
            if main:
                lock.acquire()
            status = phase_status(recipe, phase)
            if status.error is not None:
                raise status.error
            if main and status.state == PhaseState.NEW:  # (again, if an earlier start saved nothing)
                if recipe.phase.overwrite_output_dir and folder.is_dir():
                    clear_phase_folder(folder)
                folder.mkdir(parents=True, exist_ok=True)
                record_phase_start(folder, status.fingerprint["sha256"], status.fingerprint["entries"])
        yield status
    except BaseException:
        lock.release()
        if main:
            _remove_unstarted(folder, created)
        raise
    finally:
        lock.release()


def check_writable_folder(folder: Path, output_dir: str) -> None:
    """Refuse, before anything is written, a folder that cannot be made or written (`folder`, inside the user's
    `output_dir`): a file where it or one of its parents should be, or a folder this process may not write into
    (permissions, a read-only mount)."""
    existing = next(path for path in (folder, *folder.parents, Path(".")) if path.exists())
    if not existing.is_dir():
        raise NotADirectoryError(
            f"output_dir {output_dir}: {existing} is a file, not a folder; choose another --output_dir."
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"output_dir {output_dir}: {existing} is not writable (permissions or a read-only file system); choose a "
            "folder you can write to with --output_dir."
        )


def _remove_unstarted(folder: Path, created: list[Path]) -> None:
    """Remove the record of a phase that saved nothing, then the folders `open_phase` created that are empty."""
    if folder.is_dir() and {path.name for path in folder.iterdir()} <= {PHASE_FILE}:
        (folder / PHASE_FILE).unlink(missing_ok=True)
    for path in created:
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def clear_phase_folder(folder: Path) -> None:
    """Remove everything a phase wrote (checkpoints, model, results), keeping the lock."""
    for path in folder.iterdir():
        if path.name == LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints: staged, given a manifest, renamed into place
# ----------------------------------------------------------------------------------------------------------------


def commit_checkpoint(staging: Path, final: Path) -> None:
    """Write the manifest of the staged checkpoint, then rename it to `final` (replacing a stale one)."""
    files = [p for p in staging.rglob("*") if p.is_file() and p != staging / MANIFEST_FILE]
    write_json_atomic(staging / MANIFEST_FILE, {"files": file_digests(staging, files)})
    _fsync_tree(staging)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.rglob("*"), folder]:
        if path.is_file() or path.is_dir():
            try:
                descriptor = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(descriptor)
            except OSError:
                pass
            finally:
                os.close(descriptor)


def checkpoint_problem(folder: Path) -> str | None:
    """Why `folder` is not a complete checkpoint (None if its manifest verifies)."""
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        return f"no {MANIFEST_FILE} (the save did not complete)"
    try:
        recorded = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return f"{MANIFEST_FILE} is unreadable"
    for name, entry in recorded.items():
        if (problem := digest_problem(folder / name, entry)) is not None:
            return f"{name}: {problem}"
    return None


def latest_complete_checkpoint(run_dir: str | Path) -> str | None:
    """The newest checkpoint of `run_dir` whose manifest verifies; each newer one skipped is reported with why."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    steps = sorted(
        ((int(m.group(1)), p) for p in run_dir.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name)) and p.is_dir()),
        reverse=True,
    )
    skipped = []
    for _, path in steps:
        problem = checkpoint_problem(path)
        if problem is None:
            for name, why in skipped:
                print(f"spt_hf: skipping {name}: {why}; resuming from {path.name}.")
            return str(path)
        skipped.append((path.name, problem))
    for name, why in skipped:
        print(f"spt_hf: skipping {name}: {why}; no complete checkpoint left, starting from step 0.")
    return None


def disk_full_error(
    error: BaseException, staging: Path, name: str, run_dir: Path, expected: int = 0
) -> DiskFullError | None:
    """A DiskFullError naming the folder, the space a checkpoint needs and the space free once the partial one in
    `staging` is removed, if `error` (or its cause) is ENOSPC. What a checkpoint needs is the largest of `expected`
    (the caller's count of the bytes it writes), what was written before the disk filled, and an earlier checkpoint."""
    current: BaseException | None = error
    while current is not None:
        if getattr(current, "errno", None) == errno.ENOSPC or "No space left" in str(current):
            break
        current = current.__cause__ or current.__context__
    else:
        return None
    previous = [p for p in run_dir.glob("checkpoint-*") if CHECKPOINT_PATTERN.match(p.name)]
    written = _tree_size(staging)
    needed = max(expected, written, *(_tree_size(p) for p in previous))
    free = shutil.disk_usage(run_dir).free + written  # the partial checkpoint is removed
    kept = ", ".join(sorted(p.name for p in previous))
    again = f"it resumes from the newest complete checkpoint ({kept})" if kept else "it trains from step 0"
    full = DiskFullError(
        f"No space left on the device while writing {name} into {run_dir}: a checkpoint needs about {_size(needed)} "
        f"and {_size(free)} are free. Free some space (or lower save_total_limit) and run the same command again: "
        f"{again}."
    )
    full.errno = errno.ENOSPC
    return full


def _tree_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def _size(size: int) -> str:
    """A size in bytes for a person: 619 KiB, 12.5 MiB, 3.1 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 2**10:.0f} KiB"
