"""`spt-hf compare --tune`: the search stage, before the plan. The same hyperparameter search for every (task,
architecture, arm), arm = the scratch baseline or finetuning from the SPT checkpoint (docs/tuning.md); its contract
(`TuneSpec`, the arms, the files, the pruner and sampler, `TrialRecord`) is spt_hf/tuning.py's.

Optuna drives it directly from compare's driver (ask and tell), not through `Trainer.hyperparameter_search`: a trial
is one phase of compare's plan, run by the same launchers (local, Slurm, Ray) with the same locks, resume and progress
lines, in its own run folder `<output_dir>/<task>/<arch>/tune/<arm>/trial<k>/`; `hyperparameter_search` would run
trials inside one process and own their folders. Each round asks one trial of every study that still needs one
(a study: one (task, architecture, arm), its trials in `--tune_storage` or SQLite `<output_dir>/tuning.db`),
launches them together, reads each finished phase's validation metric from its results.json and tells the study.
A rerun never repeats a trial that ended; a trial left RUNNING by a killed driver is run again in its folder (its
phase resumes from its checkpoint) and told by its number. The trial phases themselves report their evaluations to
the study as intermediate values and stop where `--tune_pruner` prunes them (training/tune_trial.py): they open the
database at the URL the driver puts in their environment (`TUNE_STORAGE`). `tuning.json` records every trial after
each round, and each study's best trial: the plan (compare/plan.py) reads the chosen values from it for the seeded
phases of each arm, and a dry run how far the search is.
"""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from ..checkpoints import write_json_atomic
from ..phases import SPT_PHASE
from ..recipes.arguments import evaluation_cadence
from ..report.rows import architecture_name, test_metric
from ..training.results import RESULTS_FILE
from ..tuning import (
    ARM_PHASES,
    PAIR_ARM,
    SCRATCH_ARM,
    SPT_ARM,
    SPT_PREFIX,
    SUMMARY_FILE,
    TrialRecord,
    make_pruner,
    make_sampler,
    read_progress,
    require_optuna,
    sampler_text,
    study_name,
)
from .estimate import estimate_jobs
from .plan import PhaseJob, Plan
from .state import phase_finished
from .tune_space import (
    DriverLock,
    distributions,
    load_space,
    sample_values,
    shown_url,
    split_space,
    storage_url,
    trial_environment,
)


@dataclasses.dataclass
class Search:
    """One study: the seeded phase its trials copy (`template`, the first seed's), the SPT phase they start from
    (arm `spt`) or copy (arm `spt_pair`: each trial an SPT + finetuning pair), the space, and the Optuna study."""

    name: str
    arm: str
    template: PhaseJob
    spt_job: PhaseJob | None
    space: dict
    budget: dict
    study: object = None


def searches(spec, jobs: list[PhaseJob]) -> list[Search]:
    """The studies of a tuned comparison, one per (task, architecture, arm), each checked against its recipe."""
    if len(spec.num_train_examples) > 1:
        raise ValueError("--tune searches at one training set size: give one --num_train_examples per tuned compare.")
    first = {}
    for job in jobs:
        first.setdefault((job.task, job.architecture, job.phase), job)
    space, spt_space = split_space(load_space(spec.tune.space), spec.tune.spt)
    found = []
    for (task, arch, phase), job in first.items():
        for arm in spec.tune.arms:
            if phase == ARM_PHASES[arm]:
                spt_job = first.get((task, arch, SPT_PHASE)) if arm != SCRATCH_ARM else None
                template = dataclasses.replace(job, overrides={**job.overrides, **budget(spec)})
                searched = {**space, **spt_space} if arm == PAIR_ARM else space
                search = Search(study_name(task, arch, arm), arm, template, spt_job, searched, budget(spec))
                for trial in trial_jobs(search, 0, sample_values(searched), Path(spec.output_dir)):
                    try:  # each key of the space must be a key of the phase's recipe
                        trial.load_recipe()
                    except ValueError as error:
                        raise ValueError(f"--tune_space: {error}") from None
                found.append(search)
    return found


def budget(spec) -> dict:
    """The trials' step budget: `--tune_max_steps` (instead of the recipe's steps) with the evaluation cadence derived
    from it (the keys the comparison's own options set are kept), or the seeded phases' own."""
    if spec.tune.max_steps is None:
        return {}
    cadence = evaluation_cadence(spec.tune.max_steps)
    return {
        "max_steps": spec.tune.max_steps,
        "total_steps": None,
        **{key: value for key, value in cadence.items() if key not in spec.overrides},
    }


def trial_jobs(search: Search, number: int, params: dict, root: Path) -> list[PhaseJob]:
    """The phases of trial `number` in its own run folder: the template with the trial's values (finetuning after
    the plan's SPT phase in arm `spt`); in arm `spt_pair` first its own SPT phase, with the `spt.` values."""
    job = search.template
    run_dir = root / job.task / job.architecture / "tune" / search.arm / f"trial{number}"
    name = f"tune/{search.name}/trial{number}"
    spt_values = {k.removeprefix(SPT_PREFIX): v for k, v in params.items() if k.startswith(SPT_PREFIX)}
    values = {k: v for k, v in params.items() if not k.startswith(SPT_PREFIX)}
    overrides = {**job.overrides, **values, "output_dir": str(run_dir)}
    depends_on = search.spt_job.id if search.spt_job else None
    jobs = []
    if search.arm == PAIR_ARM:
        spt = search.spt_job
        spt_keys = {**spt.overrides, **search.budget, **spt_values, "output_dir": str(run_dir)}
        jobs.append(dataclasses.replace(spt, id=f"{name}/spt", run_dir=run_dir, overrides=spt_keys))
        overrides["model_name_or_path"], depends_on = str(run_dir / spt.phase), jobs[0].id
    jobs.append(dataclasses.replace(job, id=name, run_dir=run_dir, overrides=overrides, depends_on=depends_on))
    return jobs


def open_studies(spec, found: list[Search]) -> str:
    """Create or load each study (TPE seeded with the first seed, maximising the validation metric, the pruner of
    `--tune_pruner`); return the storage URL. A study another comparison folder created, or that ran with another
    pruner, is refused in one line."""
    optuna = require_optuna()
    url = storage_url(spec.output_dir, spec.tune.storage)
    owner = str(Path(spec.output_dir).resolve())
    for search in found:
        try:
            study = optuna.create_study(
                storage=url,
                study_name=search.name,
                direction="maximize",
                sampler=make_sampler(spec.seeds[0]),
                pruner=make_pruner(spec.tune.pruner),
                load_if_exists=True,
            )
        except Exception as error:  # a URL SQLAlchemy cannot parse, a driver not installed, a database not reached
            why = " ".join(str(error).split("(Background on this error")[0].split())
            raise ValueError(
                f"--tune_storage {shown_url(url)}: cannot open the study database ({type(error).__name__}: {why}); "
                "check the URL, that its driver is installed (mysql+pymysql: pip install pymysql) and the server runs."
            ) from None
        recorded = study.user_attrs.get("output_dir")
        if recorded is None:
            study.set_user_attr("output_dir", owner)
            study.set_user_attr("pruner", spec.tune.pruner)
        elif recorded != owner:
            raise ValueError(
                f"The study {search.name} in {shown_url(url)} belongs to the comparison in {recorded}; give this one "
                "its own --tune_storage (or its --output_dir)."
            )
        pruner = study.user_attrs.get("pruner", "none")
        if pruner != spec.tune.pruner:
            raise ValueError(
                f"The study {search.name} ran its trials with --tune_pruner {pruner}; rerun with --tune_pruner "
                f"{pruner} (a study's trials share one pruner), or give this search another --output_dir."
            )
        search.study = study
    return url


def next_trial(search: Search, n_trials: int, dists: dict, attached: set) -> tuple[int, dict] | None:
    """(number, values) of the study's next trial: one left RUNNING by a killed driver first (re-attached), else a
    new one asked while the study has fewer than `n_trials`; None when the study is done."""
    optuna = require_optuna()
    trials = search.study.get_trials(deepcopy=False)
    for trial in trials:
        if trial.state == optuna.trial.TrialState.RUNNING and (search.name, trial.number) not in attached:
            attached.add((search.name, trial.number))
            return trial.number, dict(trial.params)
    if len(trials) >= n_trials:
        return None
    trial = search.study.ask(fixed_distributions=dists)
    attached.add((search.name, trial.number))
    return trial.number, dict(trial.params)


def run_tuning(spec, plan: Plan, launch: Callable[[list[PhaseJob]], dict]) -> dict[str, dict]:
    """The search stage: run every study to `spec.tune.trials` trials, round by round through `launch` (a launcher
    over a list of phases), the trials copying the seeded phases of `plan` (the comparison planned without the
    search's values). Writes `tuning.json` after each round, which the final plan reads the chosen values from;
    returns {study name: chosen values}."""
    found = searches(spec, plan.jobs)
    root = Path(spec.output_dir)
    with DriverLock(root):
        url = open_studies(spec, found)
        with trial_environment(url):
            run_rounds(spec, plan, launch, found, url)
        best = chosen_values(found)
        write_summary(spec, found, url, root)
    return best


def run_rounds(spec, plan: Plan, launch: Callable[[list[PhaseJob]], dict], found: list[Search], url: str) -> None:
    """Round after round, one new (or re-attached) trial of every study that needs one, launched together and told
    once their phases end, until every study has `spec.tune.trials` trials; `tuning.json` after each round."""
    root = Path(spec.output_dir)
    attached: set = set()
    for round_number in range(1, 10**6):
        batch = {}
        for search in found:
            slot = next_trial(search, spec.tune.trials, distributions(search.space), attached)
            if slot is not None:
                batch[search.name] = (search, slot[0], trial_jobs(search, *slot, root))
        if not batch:
            break
        for search, number, jobs in batch.values():
            params = slot_params(search, number)
            TrialRecord(search.name, number, jobs[-1].phase, spec.tune.pruner, shown_url(url), params).write(
                jobs[-1].run_dir
            )
        print(f"tune: round {round_number}: {', '.join(f'{n} trial {b[1]}' for n, b in batch.items())}", flush=True)
        needed = {s.spt_job.id: s.spt_job for s, *_ in batch.values() if s.arm == SPT_ARM}
        spt_jobs = [job for job in needed.values() if not phase_finished(job, plan.launch.world_size)]
        launch(spt_jobs + [job for *_, jobs in batch.values() for job in jobs])
        for search, number, jobs in batch.values():
            tell(search, number, jobs[-1])
        write_summary(spec, found, url, root)


def slot_params(search: Search, number: int) -> dict:
    return dict(search.study.get_trials(deepcopy=False)[number].params)


def tell(search: Search, number: int, job: PhaseJob) -> None:
    """Tell the study trial `number`'s validation metric (the model its phase selected), that its pruner stopped it
    (its phase's results.json says where), or that it failed."""
    optuna = require_optuna()
    path = job.phase_dir / RESULTS_FILE
    result = json.loads(path.read_text()) if path.is_file() else {}
    value = test_metric(result)[2]
    if value is None:
        search.study.tell(number, state=optuna.trial.TrialState.FAIL)
        print(f"tune: {search.name} trial {number}: failed (no validation metric); see {job.log}", flush=True)
    elif pruned := result.get("tune_pruned"):
        search.study.tell(number, state=optuna.trial.TrialState.PRUNED)
        print(f"tune: {search.name} trial {number}: pruned at step {pruned['step']}", flush=True)
    else:
        search.study.tell(number, value)


def chosen_values(found: list[Search]) -> dict[str, dict]:
    """{study name: the best trial's values} of the studies with a completed trial (the others keep the recipe's)."""
    best = {}
    for search in found:
        trial = best_trial(search.study)
        if trial is not None:
            best[search.name] = dict(trial.params)
        else:
            print(f"tune: {search.name}: no trial completed; its seeded phases keep the recipe's values", flush=True)
    return best


def best_trial(study):
    """The completed trial with the highest value, the lowest-numbered among equal values; None without one.
    (Not `study.best_trial`: Optuna's RDB storage leaves ties to the database, and MySQL returns any of them.)"""
    complete = study.get_trials(deepcopy=False, states=(require_optuna().trial.TrialState.COMPLETE,))
    return max(sorted(complete, key=lambda t: t.number), key=lambda t: t.value, default=None)


def write_summary(spec, found: list[Search], url: str, root: Path) -> Path:
    """`tuning.json`: each study's trials (state, values, validation metric, steps, FLOPs, wall time, folder), its
    best trial, the space, the trial budget and the sampler, for the report."""
    studies = []
    for search in found:
        trials = []
        for trial in search.study.get_trials(deepcopy=False):
            jobs = trial_jobs(search, trial.number, dict(trial.params), root)
            path = jobs[-1].phase_dir / RESULTS_FILE
            result = json.loads(path.read_text()) if path.is_file() else {}
            entry = {"number": trial.number, "state": trial.state.name, "params": trial.params, "value": trial.value}
            entry["curve"] = sorted(trial.intermediate_values.items())  # [step, validation] its phase reported
            entry["pruned_at"] = (result.get("tune_pruned") or {}).get("step")
            spent = [cost(job.phase_dir / RESULTS_FILE) for job in jobs]  # a pair: its SPT phase's cost too
            entry.update({k: None if None in (c[k] for c in spent) else sum(c[k] for c in spent) for k in spent[0]})
            entry.update(path=str(jobs[-1].phase_dir), model=architecture_name(result) if result else None)
            entry["metric"] = test_metric(result)[0] if result else None
            trials.append(entry)
        complete = [t for t in trials if t["state"] == "COMPLETE"]
        ran = [json.loads(Path(t["path"], RESULTS_FILE).read_text()) for t in trials if t["model"]]
        chosen = best_trial(search.study)
        best = next(t for t in complete if t["number"] == chosen.number) if chosen else None
        _, arch, arm = search.name.split("/")
        studies.append(
            dict(
                name=search.name,
                task=search.template.task,
                architecture=arch,
                arm=arm,
                trials_planned=spec.tune.trials,
                max_steps=spec.tune.max_steps,
                space=search.space,
                storage=shown_url(url),
                sampler=sampler_text(spec.seeds[0]),
                pruner=spec.tune.pruner,
                best=best and {k: best[k] for k in ("number", "params", "value")},
                result_task=(ran[0].get("task_name") or ran[0].get("task")) if ran else None,
                model=architecture_name(ran[0]) if ran else None,
                trials=trials,
            )
        )
    path = root / SUMMARY_FILE
    write_json_atomic(path, {"studies": studies})
    return path


def cost(path: Path) -> dict:
    """A trial phase's steps, training FLOPs and wall time (None where it recorded none) from its results.json."""
    result = json.loads(path.read_text()) if path.is_file() else {}
    return {
        "steps": (result.get("budget") or {}).get("steps"),
        "flops": (result.get("compute") or {}).get("flops"),
        "wall_s": (result.get("budget") or {}).get("wall_time_s"),
    }


def search_estimates(spec, jobs: list[PhaseJob], device_memory_gb: float, max_measure_length: int | None):
    """What the search will cost, before anything runs (`--dry_run --estimate --tune`): each study's trial phase
    estimated once (`plan_estimate.estimate_jobs`), times `tune_trials`, as one line per study; and the reasons of
    those that cannot be estimated."""
    n = spec.tune.trials
    found = searches(spec, jobs)
    trials = []
    for search in found:
        for job in trial_jobs(search, 0, {}, Path(spec.output_dir)):
            trials.append(dataclasses.replace(job, id=f"{job.id.replace('/trial0', '')} (x{n} trials)"))
    estimates, skipped = estimate_jobs(trials, device_memory_gb, max_measure_length)
    times = {"optimizer_steps": n, "tokens": n, "train_flops": n}
    return [dataclasses.replace(e, **{k: getattr(e, k) * m for k, m in times.items()}) for e in estimates], skipped


def describe_search(spec, found: list[Search]) -> str:
    """The search in the plan's words, before, during and after it ran (a dry run): its studies and trial budget, and
    how far `tuning.json` says each study is."""
    n = spec.tune.trials
    steps = f"{spec.tune.max_steps} steps each" if spec.tune.max_steps else "each its phase's own steps"
    steps += "; at most: the pruner stops some early" if spec.tune.pruner != "none" else ""
    line = f"tune: {len(found)} studies x {n} trials ({steps}): {len(found) * n} trial phases before the seeded ones"
    progress = read_progress(spec.output_dir)
    studies = [progress.get(search.name) for search in found]
    if all(study is None for study in studies):
        return f"{line}; not started: the seeded phases wait for the values the search will choose"
    if all(study is not None and study.done(n) for study in studies):
        return f"{line}; done: the seeded phases train with its chosen values ({SUMMARY_FILE})"
    counts = ", ".join(f"{s.name} {p.ended if p else 0}/{n}" for s, p in zip(found, studies))
    return f"{line}; trials ended so far: {counts}; the seeded phases wait for the values the search will choose"
