"""A comparison's settings, recorded beside its results, and the check that lets a comparison extend a published
one fairly.

`spt-hf compare` records what makes its rows comparable in `OUTPUT_DIR/comparison.json` (`settings`): the tasks,
architectures, recipe folder, seeds, training set sizes, baseline, budget rule, preset, early stopping, recipe
overrides and the search. `spt-hf push --comparison` publishes them with the results. `spt-hf compare --extends
NS/NAME` fetches a published comparison's results into `OUTPUT_DIR/published/` (they join the report, and a push of
the folder sends the union) and trains only the architectures it adds, after checking that they get the published
comparison's settings: a new arm trained with other seeds, another budget rule or patience would not be comparable
to the rows it joins, so it is refused in one line naming each difference.
"""

import dataclasses
import json
from pathlib import Path

from ..checkpoints import write_json_atomic
from ..hub.comparison import MANIFEST_FILE, PUBLISHED_DIR, fetch_published
from ..recipes.loading import RECIPES_DIR
from .plan import CompareSpec, recipe_folder, task_file_tasks

# The settings an extension must share with the comparison it extends (tasks and architectures are checked apart).
SHARED_SETTINGS = (
    "recipes",
    "seeds",
    "num_train_examples",
    "with_scratch",
    "budget",
    "preset",
    "early_stopping_patience",
    "overrides",
    "task_overrides",
    "tune",
)


def comparison_settings(spec: CompareSpec) -> dict:
    """What makes the rows of a comparison comparable with another's (as JSON)."""
    return {
        "tasks": [*spec.tasks, *task_file_tasks(spec.task_configs, spec.tasks)],
        "architectures": list(spec.architectures),
        "recipes": recipes_label(spec),
        "seeds": list(spec.seeds),
        "num_train_examples": list(spec.num_train_examples),
        "with_scratch": spec.with_scratch,
        "budget": spec.budget,
        "preset": spec.preset,
        "early_stopping_patience": spec.early_stopping_patience,
        "overrides": spec.overrides,
        "task_overrides": spec.task_overrides,
        "tune": tune_settings(spec),
    }


def tune_settings(spec: CompareSpec) -> dict | None:
    """The search's settings, without its study storage: where the trials were kept changes no row, and a database
    URL can hold a password, which must never reach a file that is pushed."""
    if spec.tune is None:
        return None
    return {key: value for key, value in dataclasses.asdict(spec.tune).items() if key != "storage"}


def recipes_label(spec: CompareSpec) -> str | None:
    """Where the named tasks' recipes come from, the same on every machine: a shipped folder by its name
    (`recipes` for the paper's, `recipes/cpu`), "own folder" for a folder of one's own; None without named tasks
    (task files' recipes are the preset's)."""
    if not spec.tasks:
        return None
    folder = recipe_folder(spec.recipes_dir).resolve()
    if not folder.is_relative_to(RECIPES_DIR):
        return "own folder"
    return Path("recipes", folder.relative_to(RECIPES_DIR)).as_posix()


def record_settings(spec: CompareSpec) -> Path:
    """Write the comparison's settings into OUTPUT_DIR/comparison.json; the architectures of earlier calls into the
    same folder are kept (adding an architecture to a comparison folder extends it)."""
    path = Path(spec.output_dir) / MANIFEST_FILE
    settings = comparison_settings(spec)
    if path.is_file():
        earlier = json.loads(path.read_text()).get("settings") or {}
        names = [*earlier.get("architectures", []), *settings["architectures"]]
        settings["architectures"] = list(dict.fromkeys(names))
    write_json_atomic(path, {"settings": settings})
    return path


def extension_problems(ours: dict, theirs: dict) -> list[str]:
    """Why a comparison with settings `ours` cannot extend one with `theirs` (empty when it can)."""
    problems = [
        f"{key} {ours[key]!r} (published: {theirs.get(key)!r})"
        for key in SHARED_SETTINGS
        if json.dumps(ours[key], sort_keys=True) != json.dumps(theirs.get(key), sort_keys=True)
    ]
    again = sorted(set(ours["architectures"]) & set(theirs.get("architectures", [])))
    if again:
        problems.append(f"architectures {again} are already in it (give only those to add)")
    new_tasks = sorted(set(ours["tasks"]) - set(theirs.get("tasks", [])))
    if new_tasks:
        problems.append(f"tasks {new_tasks} are not in it (its tasks: {theirs.get('tasks')})")
    return problems


def extend_published(spec: CompareSpec) -> Path:
    """Fetch the published comparison `spec.extends` into OUTPUT_DIR/published/ and check that `spec` extends it
    fairly (ValueError naming every difference otherwise); return the folder it went to."""
    folder = Path(spec.output_dir) / PUBLISHED_DIR / spec.extends.replace("/", "__")
    fetch_published(spec.extends, folder)
    theirs = json.loads((folder / MANIFEST_FILE).read_text()).get("settings")
    if theirs is None:
        raise ValueError(
            f"{spec.extends} records no comparison settings (pushed from a folder without {MANIFEST_FILE}), so an "
            "extension cannot be checked for fairness; run the whole comparison instead."
        )
    problems = extension_problems(comparison_settings(spec), theirs)
    if problems:
        raise ValueError(f"This comparison cannot extend {spec.extends}: {'; '.join(problems)}.")
    return folder
