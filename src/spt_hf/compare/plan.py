"""The plan of a comparison, its first stage (plan -> state -> launch -> report): which recipe pair serves each
(task, architecture), the phases that seeds, training set sizes and budgets expand it into, with their dependencies
(finetuning after its SPT; the baseline independent), and how they are launched. The later stages read the `Plan`,
never the `CompareSpec`.

Every phase is one `spt-hf spt` or `spt-hf finetune` command writing its own run folder
`<output_dir>/<task>/<architecture>/<variant>/seed<k>/`, so a comparison is resumable by construction: each phase
leaves a finished phase alone and resumes a killed one (docs/reliability.md).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..phases import BASELINE_PHASE, FINETUNE_PHASE, PHASE_COMMANDS, SPT_PHASE, start_kind
from ..recipes.arguments import SPT_ONLY_KEYS, SPT_PHASE_SWITCHES, evaluation_cadence
from ..recipes.loading import RECIPES_DIR, SEED_RANGE, find_recipe, load_recipe
from ..recipes.presets import compare_task_recipes, task_file_name
from ..training.pipeline import phase_budgets, refuse_ignored_max_steps
from ..tuning import PAIR_ARM, TuneSpec, chosen_overrides, read_progress, seeded_arm, study_name
from .processes import PhaseProcesses, phase_processes

BUDGETS = ("equal", "tied")
LAUNCHERS = ("local", "submitit", "ray")


@dataclass
class CompareSpec:
    """What to compare. Field names are the keys of `spt-hf compare --config compare.yaml`.

    Args:
        tasks / architectures: the recipe pairs `<task>/<arch>-{spt,finetune}.yaml` (paper recipes) or
            `<task>-<arch>-{spt,finetune}.yaml` (e.g. `recipes_dir: cpu`) to run; `task_configs` adds tasks.
        seeds: one run of every phase per seed.
        recipes_dir: the folder of the `tasks`' recipes. None (the default): the paper recipes shipped with spt_hf;
            else a folder of one's own (a path to an existing folder, which wins over the shipped folder of the same
            name), or a shipped folder by name (`recipes/cpu` or `cpu`). A `recipes/` folder in the working directory
            is used only when named.
        output_dir: where the run folders and the report go.
        with_scratch: also train the baseline phase (finetuning without an SPT checkpoint: from random
            initialisation, or from the text-pretrained weights the recipe names; folder `scratch/`).
        num_train_examples: training set sizes (sample complexity); None is the whole training split.
        budget: None as the recipes say; "equal": each phase its own recipe's steps; "tied": SPT and finetuning
            share `total_steps` (split by `spt_fraction`) and the baseline phase gets all of it.
        launcher: "local" (subprocesses), "submitit" (Slurm jobs), "ray" (Ray tasks).
        max_parallel: phases run at once by the local launcher; jobs queued or running at once on Slurm.
        overrides: recipe keys set in every phase (`--key value` on the command line).
        task_overrides: recipe keys set in every phase of one task: {task: {key: value}} (YAML only).
        accelerate_config: run each phase under `accelerate launch --config_file` this file (a path or a shipped
            name such as `accelerate/multi_gpu.yaml`; every launcher).
        submitit: `cluster` (slurm | local | debug), `partition`, `timeout_min`, `nodes`, `gpus_per_node` (one
            process per GPU), `processes_per_node` (without GPUs), `cpus_per_task`, `mem_gb`, `account`, `qos`,
            `signal_delay_s`, `max_num_timeout`, `folder` (docs/compare.md).
        ray: `address` (default: a local instance), `num_cpus` and `num_gpus` per phase (one process per GPU),
            `processes` (without GPUs), `max_retries` (of a phase whose worker or process was killed; default 2).
        skip_missing_pairs: plan every (task, architecture) that has a recipe pair and list the others (in the
            plan and the report) instead of refusing the comparison (the paper ran DLR on four tasks only).
        task_configs: task files (`task:` and `task_options:`), each a task of the comparison named after its file
            (`presets.task_file_name`), beside or instead of `tasks`: their recipes `recipes/presets.py` writes into
            `<output_dir>/recipes` for each architecture, at the size `preset` (tiny, small, paper; default small),
            with `max_steps` / `num_train_epochs` of `overrides` in them. (YAML: `task_configs:` or `task_config:`.)
        tune: the search of `--tune` (`tuning.TuneSpec`, from the `--tune` and `--tune_*` options or the `tune: true`
            and `tune_*:` YAML keys): run before the plan (compare/tune.py), whose seeded phases then read its chosen
            values from `OUTPUT_DIR/tuning.json`. None: no search.
        early_stopping_patience: stop every phase of every arm (tuning trials too) after this many evaluations
            without improvement of its validation signal (SPT: its loss; finetuning and baseline: the task metric);
            the step budget becomes a cap. None: every phase trains its whole budget.
        extends: a comparison pushed with `spt-hf push --comparison` (NAMESPACE/NAME, its dataset repository) that
            this one adds architectures to: its results are fetched into `OUTPUT_DIR/published/` and join the
            report; the comparison must have its settings (`compare/published.py`), refused otherwise.
    """

    tasks: list[str] = field(default_factory=list)
    architectures: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    recipes_dir: str | None = None
    output_dir: str = "runs/compare"
    with_scratch: bool = True
    num_train_examples: list[int | None] = field(default_factory=lambda: [None])
    budget: str | None = None
    launcher: str = "local"
    max_parallel: int = 1
    overrides: dict = field(default_factory=dict)
    task_overrides: dict = field(default_factory=dict)
    accelerate_config: str | None = None
    submitit: dict = field(default_factory=dict)
    ray: dict = field(default_factory=dict)
    skip_missing_pairs: bool = False
    task_configs: list[str] = field(default_factory=list)
    preset: str | None = None
    early_stopping_patience: int | None = None
    tune: TuneSpec | None = None
    extends: str | None = None

    def __post_init__(self) -> None:
        if self.task_configs and self.recipes_dir is not None and not self.tasks:
            raise ValueError(
                "--recipes_dir is the folder of the --tasks' recipes; a task file's recipes are written into "
                "OUTPUT_DIR/recipes: leave --recipes_dir out, or name --tasks from it beside --task_config."
            )
        if self.preset is not None and not self.task_configs:
            raise ValueError("--preset goes with --task_config TASK.yaml (the recipes of --tasks set their own sizes).")
        refuse_owned_overrides(self.overrides, "overrides")
        for task, keys in self.task_overrides.items():
            refuse_owned_overrides(keys, f"task_overrides.{task}")
        if not (self.tasks or self.task_configs) or not self.architectures or not self.seeds:
            raise ValueError("A comparison needs at least one task, one architecture and one seed.")
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
                raise ValueError(f"`seeds` holds {seed!r}; each seed must be an integer from 0 to {SEED_RANGE[1]}.")
        if self.budget is not None and self.budget not in BUDGETS:
            raise ValueError(f"`budget`={self.budget!r}; expected one of {list(BUDGETS)} (or leave it out).")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"`launcher`={self.launcher!r}; expected one of {list(LAUNCHERS)}.")
        if not isinstance(self.max_parallel, int) or self.max_parallel < 1:
            raise ValueError(f"`max_parallel` must be a positive integer, got {self.max_parallel!r}.")
        if self.tune is not None and not isinstance(self.tune, TuneSpec):
            raise ValueError(
                f"`tune`={self.tune!r}; give a spt_hf.tuning.TuneSpec (or None): on the command line --tune and the "
                "--tune_* options, in YAML `tune: true` and the `tune_*:` keys."
            )
        names = [*self.tasks, *task_file_tasks(self.task_configs, self.tasks)]
        unknown = sorted(set(self.task_overrides) - set(names))
        if unknown:
            raise ValueError(f"`task_overrides` names tasks {unknown} that the comparison does not run: {names}.")
        for n in self.num_train_examples:
            if n is not None and (not isinstance(n, int) or n < 1):
                raise ValueError(f"`num_train_examples` holds {n!r}; each must be a positive integer.")


def task_file_tasks(task_configs: list[str], tasks: list[str] = ()) -> dict[str, Path]:
    """{task name: task file} of a comparison's task files, each named after its file (`presets.task_file_name`: its
    recipes and run folders go by that name). Two files of one name, or a file named as one of `tasks`, would share
    run folders: refused in one line naming both."""
    found: dict[str, Path] = {}
    for task_config in task_configs:
        path = Path(task_config)
        name = task_file_name(path)
        if name in found:
            raise ValueError(f"The task files {found[name]} and {path} both name the task {name!r}: rename one.")
        if name in tasks:
            raise ValueError(f"The task file {path} names the task {name!r}, as --tasks {name} does: rename the file.")
        found[name] = path
    return found


# Recipe keys the plan sets in every phase itself, and the comparison option that sets each (None: nothing to set).
OWNED_KEYS = {
    "output_dir": "--output_dir (YAML: output_dir)",
    "seed": "--seeds (YAML: seeds)",
    "num_train_examples": "--num_train_examples N ... full (YAML: num_train_examples)",
    "model_name_or_path": None,
}


def refuse_owned_overrides(overrides: dict, where: str) -> None:
    """A recipe override of a key the plan sets per phase would be replaced (`output_dir`, `seed`) or would train
    something else than its folder says (`num_train_examples` in a `full` folder): refused, naming the option."""
    for key in overrides:
        name = key.replace("-", "_")
        if name in OWNED_KEYS:
            option = OWNED_KEYS[name]
            fix = f"use compare's {option}" if option else "compare sets it per phase (the SPT checkpoint, or none)"
            raise ValueError(f"`{key}` in the recipe overrides ({where}) is compare's own key: {fix}.")


@dataclass
class PhaseJob:
    """One phase of the plan: the command that runs it and the phase it waits for.

    `phase` is one of `phases.PHASES`; `kind` is what the phase starts from (`phases.StartKind`, decided when the
    plan loads its recipe): finetuning from its SPT checkpoint, the SPT phase and the baseline from random
    initialisation or from the text-pretrained weights their recipe loads."""

    id: str
    phase: str
    task: str
    architecture: str
    variant: str
    seed: int
    recipe: Path
    overrides: dict
    run_dir: Path
    steps: str
    depends_on: str | None = None
    kind: str = ""
    awaits: str | None = None  # a seeded phase of a tuned comparison whose search has not chosen its values yet

    def __post_init__(self) -> None:
        if self.phase not in PHASE_COMMANDS:
            raise ValueError(f"PhaseJob phase {self.phase!r}; expected one of {list(PHASE_COMMANDS)}.")

    @property
    def phase_dir(self) -> Path:
        return self.run_dir / self.phase

    @property
    def log(self) -> Path:
        return self.run_dir / "logs" / f"{self.phase}.log"

    def load_recipe(self):
        """The phase's recipe as its command loads it (every check of `load_recipe` for this phase)."""
        return load_recipe(self.recipe, self.overrides, phase=self.phase)

    @property
    def words(self) -> list[str]:
        """The phase as `spt-hf` arguments: `spt|finetune --config RECIPE --key value ...`."""
        words = [PHASE_COMMANDS[self.phase], "--config", str(self.recipe)]
        for key, value in self.overrides.items():
            words += [f"--{key}", json.dumps(value) if not isinstance(value, str) else value]
        return words


@dataclass
class Launch:
    """How the phases run (the `CompareSpec` fields of the launch stage): the launcher and its options, and the
    processes each phase runs on (`world_size` over `machines`; `compare/processes.py`), which its fingerprint
    records."""

    launcher: str = "local"
    max_parallel: int = 1
    accelerate_config: str | None = None
    submitit: dict = field(default_factory=dict)
    ray: dict = field(default_factory=dict)
    world_size: int = 1
    machines: int = 1

    @property
    def processes(self) -> PhaseProcesses:
        return PhaseProcesses(self.world_size, self.machines, self.accelerate_config)


@dataclass
class Plan:
    """What the later stages read: the phases (each SPT phase before the finetuning that waits for it), how they
    are launched, and the folder of the run folders and the report."""

    jobs: list[PhaseJob]
    launch: Launch
    output_dir: Path
    missing_pairs: list[tuple[str, str]] = field(default_factory=list)  # (task, architecture) without recipes
    recipes_folder: Path = RECIPES_DIR  # where the recipes of the plan's named tasks come from (`recipe_folder`)
    task_files: dict[str, Path] = field(default_factory=dict)  # task name -> its task file (recipes written)

    @property
    def recipes_source(self) -> str:
        """Where the plan's recipes come from, in words (`folder_text`): the named tasks' folder, and the task files
        whose recipes were written into `<output_dir>/recipes`."""
        if not self.task_files:
            return folder_text(self.recipes_folder)
        files = ", ".join(f"{name} <- {path}" for name, path in self.task_files.items())
        written = f"written into {self.output_dir / 'recipes'} from the task files ({files})"
        named = sorted({job.task for job in self.jobs} - set(self.task_files))
        return f"{folder_text(self.recipes_folder)} for {', '.join(named)}; {written}" if named else written


def task_recipe_pair(recipes_dir: str | None, task: str, architecture: str) -> tuple[Path, Path]:
    """The SPT and finetuning recipes of (task, architecture) in `recipes_dir` (`recipe_folder`); a clear error lists
    the pairs the folder has when this one is missing."""
    folder = recipe_folder(recipes_dir)
    for pattern in (f"{task}/{architecture}-{{}}.yaml", f"{task}-{architecture}-{{}}.yaml"):
        spt, finetune = folder / pattern.format(SPT_PHASE), folder / pattern.format(FINETUNE_PHASE)
        if spt.is_file() and finetune.is_file():
            return spt, finetune
    available = sorted(available_pairs(folder))
    elsewhere = [] if recipes_dir is not None else shipped_folders_with(task, architecture)
    hint = f" The shipped folder {elsewhere[0]} has it: pass --recipes_dir {elsewhere[0]}." if elsewhere else ""
    raise FileNotFoundError(
        f"No recipe pair for task {task!r} and architecture {architecture!r} in {folder_text(folder)} (looked for "
        f"{task}/{architecture}-spt.yaml and {task}-{architecture}-spt.yaml with their -finetune siblings). "
        f"It has: {', '.join(f'{t}/{a}' for t, a in available) or 'no recipe pairs'}.{hint}"
    )


def shipped_folders_with(task: str, architecture: str) -> list[str]:
    """The shipped recipe folders (`cpu`, ...) that hold the pair `<task>-<architecture>-{spt,finetune}.yaml`."""
    folders = sorted(p for p in RECIPES_DIR.iterdir() if p.is_dir())
    return [p.name for p in folders if (task, architecture) in available_pairs(p)]


def recipe_folder(recipes_dir: str | None) -> Path:
    """The folder of a comparison's recipes: the shipped paper recipes when `recipes_dir` is None, whatever folders
    the working directory holds (a local `recipes/` replaces nothing unless named); a named folder that exists (the
    user's own, which wins over a shipped folder of the same name: it was named); else a shipped folder by name."""
    if recipes_dir is None:
        return RECIPES_DIR
    path = Path(recipes_dir).expanduser()
    if path.is_dir():
        return path
    name = Path(*path.parts[1:]) if path.parts[:1] == ("recipes",) else path
    if (RECIPES_DIR / name).is_dir():
        return RECIPES_DIR / name
    raise FileNotFoundError(
        f"`recipes_dir` {recipes_dir} is neither a folder nor a folder of the shipped recipes (`spt-hf recipes` "
        "lists them); leave --recipes_dir out for the shipped paper recipes."
    )


def folder_text(folder: Path) -> str:
    """Where a comparison's recipes come from, as the plan and its errors say it: a shipped folder by its name, or
    the user's own folder by its path."""
    if folder.resolve().is_relative_to(RECIPES_DIR):
        shipped = folder.resolve().relative_to(RECIPES_DIR)
        return f"the recipes shipped with spt_hf ({Path('recipes', shipped)})"
    return f"your folder {folder} ({folder.resolve()}), not the shipped recipes"


def available_pairs(folder: Path) -> set[tuple[str, str]]:
    """(task, architecture) of every <name>-spt.yaml with a -finetune sibling under `folder`."""
    pairs = set()
    spt_name, finetune_name = f"-{SPT_PHASE}.yaml", f"-{FINETUNE_PHASE}.yaml"
    for spt in folder.rglob(f"*{spt_name}"):
        if not spt.with_name(spt.name.replace(spt_name, finetune_name)).is_file():
            continue
        stem = spt.name.removesuffix(spt_name)
        if spt.parent != folder:
            pairs.add((spt.parent.name, stem))
        elif "-" in stem:
            pairs.add(tuple(stem.split("-", 1)))
    return pairs


def budget_overrides(spec: CompareSpec, keys: dict, spt_recipe: Path, finetune_recipe: Path) -> tuple[dict, dict]:
    """max_steps overrides of each phase and a text of the steps each will take (for the plan), for the recipe
    pair with the comparison's `keys` (overrides) applied. The steps come from `pipeline.phase_budgets`, as for
    `spt-hf run`, and a --max_steps that tied budgets would ignore is refused by the same check."""
    spt = load_recipe(spt_recipe, keys, phase=SPT_PHASE)
    budget = spec.budget or ("tied" if spt.phase.total_steps else "equal")
    if spec.budget == "equal" and keys.get("total_steps") is not None:
        raise ValueError(
            f"--total_steps {keys['total_steps']} ties the SPT and finetuning budgets, but `budget: equal` gives each "
            "phase its own max_steps and would ignore it: pass --budget tied, or --max_steps without --total_steps."
        )
    shared = {}
    if budget == "equal" and spt.phase.total_steps:  # the recipe ties budgets; "equal" gives each phase its max_steps
        shared = {"total_steps": None}
        spt = load_recipe(spt_recipe, {**keys, **shared}, phase=SPT_PHASE)
    elif budget == "tied" and not spt.phase.total_steps:
        raise ValueError(
            f"`budget: tied` needs `total_steps` (SPT and finetuning share them): {spt_recipe.name} sets none; "
            "pass --total_steps N."
        )
    refuse_ignored_max_steps(spt, keys)
    finetune = load_recipe(finetune_recipe, _finetune_keys(keys), phase=FINETUNE_PHASE)
    steps = phase_budgets(spt, finetune)
    if budget == "equal":  # each phase its recipe's steps, or the comparison's --max_steps (derived evaluations)
        overrides = {phase: dict(shared) for phase in PHASE_COMMANDS}
        derived = {phase: (keys.get("max_steps"), None) for phase in PHASE_COMMANDS}
    else:
        overrides = {phase: {"max_steps": value} for phase, value in steps.items()}
        trainings = {SPT_PHASE: spt.training, FINETUNE_PHASE: finetune.training, BASELINE_PHASE: finetune.training}
        derived = {phase: (value, trainings[phase]) for phase, value in steps.items()}
    for phase, (value, training) in derived.items():  # unless the comparison sets them itself
        cadence = evaluation_cadence(value, training) if value else {}
        overrides[phase].update({k: v for k, v in cadence.items() if k not in keys})
    epochs = {SPT_PHASE: spt.training.num_train_epochs, FINETUNE_PHASE: finetune.training.num_train_epochs}
    epochs[BASELINE_PHASE] = epochs[FINETUNE_PHASE]
    patience = keys.get("early_stopping_patience")
    rule = budget + (f", early stopping {patience}" if patience else "")
    text = {k: (f"{v} steps" if v and v > 0 else f"{epochs[k]:g} epochs") + f" ({rule})" for k, v in steps.items()}
    return overrides, text


def early_stopping(spec: CompareSpec) -> dict:
    """The recipe key that `--early_stopping_patience` sets in every phase of every arm (none when it is off)."""
    patience = spec.early_stopping_patience
    return {} if patience is None else {"early_stopping_patience": patience}


def _finetune_keys(overrides: dict) -> dict:
    return {k: v for k, v in overrides.items() if k not in SPT_ONLY_KEYS + SPT_PHASE_SWITCHES}


def build_plan(spec: CompareSpec) -> Plan:
    """Every phase of the comparison, SPT phases before the finetuning that waits for them, and how they are
    launched. Recipes are checked (loaded for their phase) before anything runs; the task files' recipes are written
    first (`recipes/presets.py: compare_task_recipes`), and their tasks planned after the named ones."""
    sources, task_files = task_sources(spec)
    root = Path(spec.output_dir)
    jobs: list[PhaseJob] = []
    missing = []
    progress = read_progress(root) if spec.tune is not None else {}
    for task, (recipes_dir, overrides) in sources.items():
        for arch in spec.architectures:
            try:
                recipes = task_recipe_pair(recipes_dir, task, arch)
            except FileNotFoundError as error:
                if not spec.skip_missing_pairs:
                    raise FileNotFoundError(
                        f"{error} To plan every pair that exists and list the missing ones, pass --skip_missing_pairs "
                        "(YAML: skip_missing_pairs: true)."
                    ) from None
                missing.append((task, arch))
                continue
            keys = {**overrides, **spec.task_overrides.get(task, {}), **early_stopping(spec)}
            budgets = budget_overrides(spec, keys, *recipes)
            tuned = tuned_phases(spec, progress, task, arch)
            for size in spec.num_train_examples:
                variant = "full" if size is None else f"n{size}"
                for seed in spec.seeds:
                    where = dict(task=task, architecture=arch, variant=variant, seed=seed)
                    where["run_dir"] = root / task / arch / variant / f"seed{seed}"
                    common = {**keys, "output_dir": str(where["run_dir"]), "seed": seed}
                    if size is not None:
                        common["num_train_examples"] = size
                    jobs += run_jobs(spec, recipes, common, budgets, where, tuned)
    folder = recipe_folder(spec.recipes_dir) if spec.tasks else root / "recipes"
    if not jobs and missing:
        raise FileNotFoundError(f"None of the (task, architecture) pairs has recipes in {folder_text(folder)}.")
    for job in jobs:  # every phase's recipe, as that phase will load it, before anything runs
        spt_checkpoint = True if job.phase == FINETUNE_PHASE else None  # the checkpoint of its own SPT phase
        job.kind = start_kind(job.load_recipe().model_config, spt_checkpoint)
    return Plan(jobs, phase_launch(spec), root, missing, folder, task_files)


def task_sources(spec: CompareSpec) -> tuple[dict[str, tuple[str | None, dict]], dict[str, Path]]:
    """{task: (its recipes folder, the overrides of its phases)}, the named tasks first, and {task: task file}. A task
    file's recipes are written into `<output_dir>/recipes` here, with the budget keys of the overrides in them."""
    task_files = task_file_tasks(spec.task_configs, spec.tasks)
    sources = {task: (spec.recipes_dir, spec.overrides) for task in spec.tasks}
    if task_files:
        folder, rest = compare_task_recipes(
            list(task_files.values()), spec.architectures, spec.preset, spec.output_dir, spec.overrides, spec.budget
        )
        sources.update({name: (str(folder), rest) for name in task_files})
    return sources, task_files


def tuned_phases(spec: CompareSpec, progress: dict, task: str, architecture: str) -> dict[str, tuple[dict, str | None]]:
    """{phase: (the recipe overrides its arm's search chose, what it still awaits)} of one (task, architecture) of a
    tuned comparison: a study that has run its trials (`tuning.json`, `progress`) gives its chosen values (none when
    no trial completed: the recipe's); before that the phase keeps its recipe's values and awaits the search."""
    if spec.tune is None:
        return {}
    tuned = {}
    for phase in PHASE_COMMANDS:
        arm = seeded_arm(spec.tune, phase)
        if phase == SPT_PHASE and arm != PAIR_ARM:
            continue  # the `spt` arm's trials finetune from the plan's own SPT phase: its values are the recipe's
        name = study_name(task, architecture, arm)
        study = progress.get(name)
        if study is not None and study.done(spec.tune.trials):
            tuned[phase] = (chosen_overrides(study.best or {}, phase, arm), None)
        else:
            ran = f"{study.ended}/{spec.tune.trials} trials" if study else "not started"
            tuned[phase] = ({}, f"search {name} ({ran})")
    return tuned


def run_jobs(
    spec: CompareSpec,
    recipes: tuple[Path, Path],
    common: dict,
    budgets: tuple[dict, dict],
    where: dict,
    tuned: dict | None = None,
):
    """The phases of one run folder (`where`: task, architecture, variant, seed, run_dir): SPT, the finetuning that
    starts from its checkpoint and, with `with_scratch`, the baseline. `common` holds the keys every phase gets,
    `budgets` the max_steps overrides of each phase and the text of its steps (`budget_overrides`), `tuned` what a
    tuned comparison's search chose for each phase (`tuned_phases`)."""
    (spt_recipe, finetune_recipe), (overrides, steps) = recipes, budgets
    chosen = {phase: values for phase, (values, _) in (tuned or {}).items()}
    awaits = {phase: text for phase, (_, text) in (tuned or {}).items()}
    name = f"{where['task']}/{where['architecture']}/{where['variant']}/seed{where['seed']}"
    finetune_common = _finetune_keys(common)
    spt_job = PhaseJob(
        f"{name}/{SPT_PHASE}",
        SPT_PHASE,
        recipe=spt_recipe,
        overrides={**common, **overrides[SPT_PHASE], **chosen.get(SPT_PHASE, {})},
        steps=steps[SPT_PHASE],
        awaits=awaits.get(SPT_PHASE),
        **where,
    )
    finetune_keys = {**finetune_common, **overrides[FINETUNE_PHASE]}
    finetune_keys["model_name_or_path"] = str(where["run_dir"] / SPT_PHASE)
    finetune_keys.update(chosen.get(FINETUNE_PHASE, {}))
    jobs = [
        spt_job,
        PhaseJob(
            f"{name}/{FINETUNE_PHASE}",
            FINETUNE_PHASE,
            recipe=finetune_recipe,
            overrides=finetune_keys,
            steps=steps[FINETUNE_PHASE],
            depends_on=spt_job.id,
            awaits=awaits.get(FINETUNE_PHASE),
            **where,
        ),
    ]
    if spec.with_scratch:
        baseline_keys = {**finetune_common, **overrides[BASELINE_PHASE], **chosen.get(BASELINE_PHASE, {})}
        jobs.append(
            PhaseJob(
                f"{name}/{BASELINE_PHASE}",
                BASELINE_PHASE,
                recipe=finetune_recipe,
                overrides=baseline_keys,
                steps=steps[BASELINE_PHASE],
                awaits=awaits.get(BASELINE_PHASE),
                **where,
            )
        )
    return jobs


def phase_launch(spec: CompareSpec) -> Launch:
    """How the plan's phases are launched: the launcher's options, and one process per device."""
    layout = phase_processes(spec.launcher, spec.accelerate_config, spec.submitit, spec.ray)
    return Launch(
        spec.launcher,
        spec.max_parallel,
        layout.accelerate_config,
        dict(spec.submitit),
        dict(spec.ray),
        layout.processes,
        layout.machines,
    )


__all__ = ["CompareSpec", "Launch", "PhaseJob", "Plan", "build_plan", "find_recipe", "task_recipe_pair"]
