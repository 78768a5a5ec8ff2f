"""The two phases of the method and the baseline: `pretrain` (the SPT phase, on the train split only), `finetune`
(from an SPT checkpoint, a Hub model, or from scratch) and `run` (both, plus the scratch baseline).

`output_dir` is the run folder: each phase writes its model, Trainer checkpoints and `results.json` into its own
subfolder named after the phase, `spt/`, `finetune/` (from a checkpoint) or `scratch/`, so phases never resume each
other's checkpoints. The phase names are the same everywhere (CLI, folders, results.json, budgets): see
`spt_hf/phases.py`.
"""

import dataclasses
import os
from pathlib import Path

import numpy as np
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    set_seed,
)
from transformers.utils import logging as transformers_logging

from .. import phases
from ..auto import AutoModelForRetrieval
from ..checkpoints import (
    file_digests,
    verify_backbone_transfer,
    verify_loaded_tensors,
    write_directory_atomically,
)
from ..cost.compute import phase_compute
from ..data import (
    CausalSPTCollator,
    ClassificationCollator,
    MaskedSPTCollator,
    RetrievalCollator,
    check_no_overlap,
    fingerprint_info,
    pretraining_dataset,
)
from ..data.pretraining import DataFingerprint, IndexedExamples
from ..data.spec import TaskSpec
from ..hub import ensure_push_credentials, push_phase
from ..phases import BASELINE_PHASE, FINETUNE_PHASE, SPT_PHASE, start_kind
from ..preprocessing import processing_class, write_task_card
from ..recipes.arguments import (
    PHASE_FIELDS,
    Recipe,
    evaluation_cadence,
    refuse_packing,
    selection_metric,
    spt_bidirectional,
)
from ..recipes.loading import validate_recipe
from .results import phase_results, write_results
from .run_folder import PhaseState, in_phase_dir, latest_complete_checkpoint, open_phase
from .task_data import TaskData, load_task_data
from .trainer import (
    PhaseClock,
    PhaseEarlyStopping,
    PhaseTrainer,
    ResumedBestByMetric,
    causal_accuracy_metrics,
    classification_metrics,
    masked_accuracy_metrics,
    token_argmax,
)
from .tune_trial import pruned_at, trial_callbacks

FINGERPRINT_FILE = "spt_fingerprint.npy"


def model_config(recipe: Recipe, task: TaskData, **phase_fields):
    """A new config for `recipe.model.model_type` fitted to the task (vocabulary or channels, labels, pooling)."""
    values = {**task.config_kwargs(), **recipe.model_config, **phase_fields}
    return AutoConfig.for_model(recipe.model.model_type, **values)


def phase_model(recipe: Recipe, phase: str, task: TaskData, folder: Path | None = None):
    """The model `phase` trains and how it starts: the SPT phase's new model (init None), else the classifier from
    `folder` (checked) or from scratch, with its init kind. The dry run's estimate builds each phase's model here,
    from scratch: a finetuning phase from a checkpoint has the same architecture and cost."""
    if phase == SPT_PHASE:
        return _spt_model(recipe, task), None
    return _finetuning_model(recipe, task, folder)


def phase_collator(recipe: Recipe, phase: str, spec: TaskSpec, exact_lengths: bool = False):
    """The collator of `phase`'s batches: masked SPT (masks a pure function of the recipe's seed and each indexed
    example: exact resume, fixed evaluation masks) or causal SPT, packed if the recipe packs; else the classifier's
    (pairs for Retrieval), padding to the recipe's `pad_to_multiple_of`. The dry run's estimate collates its steps
    with it too, with `exact_lengths` (padded to the longest example only: it measures at the lengths it chose)."""
    # a handful of padded lengths: few compiled graphs and FFT plans
    multiple = None if exact_lengths else recipe.data.pad_to_multiple_of
    if phase != SPT_PHASE:
        return (RetrievalCollator if spec.paired else ClassificationCollator)(spec, pad_to_multiple_of=multiple)
    spt, seed = recipe.spt, recipe.training.seed
    if spt_bidirectional(recipe):
        return MaskedSPTCollator(
            spec,
            spt.mask_rate,
            spt.span_length,
            seed=seed,
            rank=0,
            packed=spt.packed_sequences,
            pad_to_multiple_of=multiple,
        )
    return CausalSPTCollator(spec, packed=spt.packed_sequences, pad_to_multiple_of=multiple)


def _spt_model(recipe: Recipe, task: TaskData):
    """The SPT phase's new model: ForMaskedLM (masked SPT) or ForCausalLM (causal SPT), fitted to the task."""
    bidirectional = spt_bidirectional(recipe)
    loss = "cross_entropy" if task.spec.spt_target == "levels" else recipe.model_config.get("continuous_loss", "l1")
    config = model_config(recipe, task, bidirectional=bidirectional, continuous_loss=loss)
    return (AutoModelForMaskedLM if bidirectional else AutoModelForCausalLM).from_config(config)


def refuse_unpackable_model(model) -> None:
    """`packed_sequences: true` with a built model that cannot keep packed sequences apart: one line, before any
    training (the recipe was checked already; the built model also knows spt_backbone's backbone from a checkpoint
    and its attention implementation)."""
    refuse_packing(type(model.base_model).packing_refusal(model.config))


def pretrain(recipe: Recipe, callbacks: list | None = None) -> dict:
    """Self-pretrain on the task's train split with the recipe's objective; save a ForMaskedLM/ForCausalLM model
    (with `push_to_hub`, push it with results.json and its model card once they are written). A finished phase is
    left alone and its results returned."""
    validate_recipe(recipe, SPT_PHASE)
    ensure_push_credentials(in_phase_dir(recipe, SPT_PHASE).training)  # no token, no hub_model_id: fail before training
    with open_phase(recipe, SPT_PHASE) as status:
        if status.state == PhaseState.FINISHED:
            return _finished(SPT_PHASE, status.recipe, status.results)
        return _pretrain(status.recipe, status.fingerprint, callbacks)


def _pretrain(recipe: Recipe, fingerprint: dict, callbacks: list | None) -> dict:
    clock = PhaseClock()  # the phase's wall time, across resumes
    set_seed(recipe.training.seed)
    task = load_task_data(recipe)
    bidirectional = spt_bidirectional(recipe)
    model, _ = phase_model(recipe, SPT_PHASE, task)
    if recipe.spt.packed_sequences:
        refuse_unpackable_model(model)
    train_set = pretraining_dataset(task.splits, task.spec)
    columns = train_set.column_names
    evaluation = {name: task.splits[name].select_columns(columns) for name in ("validation", "test")}
    collator = phase_collator(recipe, SPT_PHASE, task.spec)
    if bidirectional:  # indexed examples: masks as a pure function of (seed, epoch, example)
        _refuse_persistent_workers(recipe)
        train_set = IndexedExamples(train_set)
        evaluation = {name: IndexedExamples(split, epoch=-1) for name, split in evaluation.items()}
    tokens = task.spec.input_kind == "tokens"
    # token accuracies are recorded in the learning curve; the checkpoint is chosen by the loss (`selection_metric`)
    metrics = (masked_accuracy_metrics() if bidirectional else causal_accuracy_metrics()) if tokens else None
    trainer = PhaseTrainer(
        model=model,
        args=_phase_arguments(recipe, SPT_PHASE),
        train_dataset=train_set,
        eval_dataset=evaluation["validation"],
        data_collator=collator,
        processing_class=processing_class(task.spec),  # saved with every checkpoint: raw inputs work
        compute_metrics=metrics,
        preprocess_logits_for_metrics=token_argmax if tokens else None,
        callbacks=callbacks,
    )
    _announce(SPT_PHASE, trainer, f"{len(train_set)} SPT examples")
    data_fingerprint = fingerprint_info(pretraining_dataset(task.splits, task.spec))
    results = _train_and_evaluate(trainer, recipe, task, SPT_PHASE, clock, evaluation)
    results["recipe_fingerprint"] = fingerprint
    if trainer.is_world_process_zero():
        output_dir = recipe.training.output_dir
        write_directory_atomically(lambda tmp: np.save(tmp / FINGERPRINT_FILE, data_fingerprint.hashes), output_dir)
        results["data"]["pretraining_fingerprint"] = data_fingerprint.to_dict()
        _write_phase_results(output_dir, results)
        push_phase(recipe.training)
        _summary(SPT_PHASE, results)  # once, by the main process (every process of a launch gets here)
    return results


def finetune(recipe: Recipe, callbacks: list | None = None) -> dict:
    """Finetune a classifier: from an SPT checkpoint (backbone transfer verified), any Hub classifier, or scratch
    (with `push_to_hub`, push it with results.json and its model card once they are written). A finished phase is
    left alone and its results returned."""
    phase = finetuning_phase(recipe)
    validate_recipe(recipe, phase)
    ensure_push_credentials(in_phase_dir(recipe, phase).training)
    with open_phase(recipe, phase) as status:  # a Hub id is resolved to its snapshot and checked the same way
        if status.state == PhaseState.FINISHED:
            return _finished(phase, status.recipe, status.results)
        return _finetune(status.recipe, phase, status.source, status.fingerprint, callbacks)


def finetuning_phase(recipe: Recipe) -> str:
    """The phase `spt-hf finetune` runs for `recipe` (`phases.finetuning_phase`)."""
    return phases.finetuning_phase(recipe.model.model_name_or_path is not None)


def _finetune(recipe: Recipe, phase: str, folder: Path | None, fingerprint: dict, callbacks: list | None) -> dict:
    clock = PhaseClock()  # the phase's wall time, across resumes
    set_seed(recipe.training.seed)
    task = load_task_data(recipe)
    model, init = phase_model(recipe, phase, task, folder)
    trial = trial_callbacks(recipe.training.output_dir, phase)  # a `compare --tune` trial reports to its study
    trainer = PhaseTrainer(
        model=model,
        args=_phase_arguments(recipe, phase, task.spec.problem_type),
        train_dataset=task.splits["train"],
        eval_dataset=task.splits["validation"],
        data_collator=phase_collator(recipe, phase, task.spec),
        processing_class=processing_class(task.spec),  # saved with every checkpoint: pipeline() on raw inputs
        compute_metrics=classification_metrics(task.spec.problem_type),
        callbacks=[*(callbacks or []), *trial],
    )
    _announce(phase, trainer, f"{len(task.splits['train'])} training examples, init {init}")
    evaluation = {name: task.splits[name] for name in ("validation", "test")}
    results = _train_and_evaluate(trainer, recipe, task, phase, clock, evaluation)
    results["init"] = {"kind": init, "model_name_or_path": recipe.model.model_name_or_path}
    if pruned := pruned_at(trial):
        results["tune_pruned"] = pruned
        print(f"spt_hf: the tuning trial's pruner stopped {phase} at step {pruned['step']}.", flush=True)
    results["recipe_fingerprint"] = fingerprint
    if trainer.is_world_process_zero():
        _write_phase_results(recipe.training.output_dir, results)
        push_phase(recipe.training)
        _summary(phase, results)  # once, by the main process (every process of a launch gets here)
    return results


def _finetuning_model(recipe: Recipe, task: TaskData, folder: Path | None):
    """The classifier to finetune and what it starts from (`StartKind`): `folder` (checked), or a new model (random
    initialisation, or text-pretrained backbone weights that its config loads)."""
    head_auto = AutoModelForRetrieval if task.spec.paired else AutoModelForSequenceClassification
    phase_fields = {k: v for k, v in recipe.model_config.items() if k in PHASE_FIELDS}
    head_fields = {**task.head_kwargs(), **phase_fields}
    if folder is None:
        return head_auto.from_config(model_config(recipe, task, **head_fields)), start_kind(recipe.model_config)
    _check_architecture(recipe, str(folder))
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the expected head swap gets one line below, not a load report
    try:
        model, info = head_auto.from_pretrained(  # safetensors only: no pickled weights from user or Hub files
            str(folder),
            trust_remote_code=recipe.model.trust_remote_code,
            use_safetensors=True,
            output_loading_info=True,
            **head_fields,
        )
    finally:
        transformers_logging.set_verbosity(verbosity)
    new = sorted({key.rsplit(".", 1)[0] for key in info["missing_keys"]})
    dropped = sorted({key.rsplit(".", 1)[0] for key in info["unexpected_keys"]})
    print(
        f"spt_hf: {type(model).__name__} from {folder}: the backbone is loaded; new (initialised) head: "
        f"{', '.join(new) or 'none'}; not used from the checkpoint: {', '.join(dropped) or 'nothing'}.",
        flush=True,
    )
    if hasattr(model, "base_model_prefix") and any(folder.glob("*.safetensors")):
        verify_backbone_transfer(model, folder)  # every backbone tensor came from the checkpoint ...
        verify_loaded_tensors(model, folder)  # ... and every checkpoint tensor was loaded unchanged
    _check_leakage(recipe, task, str(folder))
    return model, start_kind(recipe.model_config, spt_checkpoint=(folder / FINGERPRINT_FILE).is_file())


def _refuse_persistent_workers(recipe: Recipe) -> None:
    if recipe.training.dataloader_persistent_workers and recipe.training.dataloader_num_workers > 0:
        raise ValueError(
            "`dataloader_persistent_workers: true` keeps the first epoch's workers, which would draw the first "
            "epoch's SPT masks again in every epoch; leave it false for masked SPT."
        )


def _finished(phase: str, recipe: Recipe, results: dict) -> dict:
    folder = recipe.training.output_dir
    if os.environ.get("RANK", "0") != "0":  # a launched process other than the main one (no Trainer exists yet)
        return results
    print(
        f"spt_hf: the {phase} phase in {folder} is finished ({results['budget']['steps']} steps; "
        f"{_headline_metric(results)}): nothing to do. `--overwrite_output_dir true` trains it again.",
        flush=True,
    )
    return results


def _summary(phase: str, results: dict) -> None:
    """The one line that ends a phase: metric, steps, time, where the results went (main process only)."""
    minutes = (results["budget"]["wall_time_s"] or 0) / 60
    print(
        f"spt_hf: {phase} done in {minutes:.1f} min, {results['budget']['steps']} steps; {_headline_metric(results)};"
        f" results in {Path(results['output_dir']) / 'results.json'}",
        flush=True,
    )


def _headline_metric(results: dict) -> str:
    metrics = results["metrics"]
    name = (metrics.get("metric_for_best_model") or "loss").removeprefix("eval_")
    values = [
        f"{split} {name} {metrics[split].get(f'{prefix}_{name}', float('nan')):.4g}"
        for split, prefix in (("validation", "eval"), ("test", "test"))
    ]
    return ", ".join(values)


def _write_phase_results(output_dir: str, results: dict) -> None:
    """results.json with the sha256 of every exported model file, checked whenever the pipeline loads it again."""
    results["checkpoint_files"] = file_digests(output_dir)
    write_results(output_dir, results)


def _announce(phase: str, trainer: PhaseTrainer, what: str) -> None:
    """One line per process, so a distributed launch shows that every process runs, and how."""
    args, kind = trainer.args, trainer.accelerator.distributed_type.value
    if args.world_size == 1:
        where = f"one process on {args.device.type} (no data parallelism)"
    else:
        how = f"FSDP, {kind}" if trainer.is_fsdp_enabled else f"data parallel, {kind}"
        where = f"process {args.process_index} of {args.world_size} ({how})"
    print(f"spt_hf: {phase} on {where}: {what}", flush=True)


def _phase_arguments(recipe: Recipe, phase: str, problem_type: str = "single_label_classification"):
    """The recipe's TrainingArguments with the phase's model-selection metric (`selection_metric`). The Trainer does
    not reload the best checkpoint itself: the phase evaluates the final model first, then the best
    (`_train_and_evaluate`), and records both."""
    metric, greater = selection_metric(recipe, phase, problem_type)
    changes = {"load_best_model_at_end": False, "metric_for_best_model": metric, "greater_is_better": greater}
    return dataclasses.replace(recipe.training, **changes)


def _train_and_evaluate(
    trainer: PhaseTrainer, recipe, task: TaskData, phase: str, clock: PhaseClock, evaluation
) -> dict:
    """Train (resuming from the newest complete checkpoint), evaluate the final model and, when the recipe asks for
    the best checkpoint (`load_best_model_at_end`), the best one, on `evaluation` ("validation", "test"); export the
    selected model. The learning curve is kept as trained: these evaluations are recorded apart from it."""
    output_dir = recipe.training.output_dir
    train_output, stopped = _train(trainer, recipe, phase, clock)
    curve = list(trainer.state.log_history)

    def evaluate() -> dict:
        return {
            "validation": trainer.evaluate(evaluation["validation"]),
            "test": trainer.evaluate(evaluation["test"], metric_key_prefix="test"),
        }

    evaluations = {"selected": "final", "final": evaluate()}
    best = trainer.state.best_model_checkpoint
    if recipe.training.load_best_model_at_end and best is not None:
        if trainer.state.best_global_step != trainer.state.global_step:
            trainer._load_best_model()
            evaluations["best"] = evaluate()
        else:
            evaluations["best"] = evaluations["final"]
        evaluations["selected"] = "best"
    export_model(trainer, output_dir, task.spec)
    results = phase_results(phase, recipe, task, trainer, train_output, evaluations, curve, clock, stopped)
    results["compute"] = phase_compute(trainer)  # FLOPs of one real step x steps; not part of the wall time
    return results


def _train(trainer: PhaseTrainer, recipe: Recipe, phase: str, clock: PhaseClock):
    """`trainer.train`, resuming from the newest complete checkpoint (its best chosen again by the phase's metric,
    its wall time counted on by `clock`), stopped early after `early_stopping_patience` evaluations without
    improvement. Returns the train output and the step early stopping stopped at (None: it ran its budget)."""
    resume = latest_complete_checkpoint(recipe.training.output_dir)
    trainer.add_callback(clock)  # every checkpoint records the time spent up to it
    if resume:
        _check_resumed_form(trainer.model, resume)
        print(f"spt_hf: resuming {phase} from {resume}", flush=True)
        trainer.add_callback(ResumedBestByMetric())
        clock.resume_from(resume)
    patience = recipe.training.early_stopping_patience
    if patience is None:
        return trainer.train(resume_from_checkpoint=resume), None
    stopper = PhaseEarlyStopping(patience)
    if resume:
        stopper.resume_from(resume)
    trainer.add_callback(stopper)
    try:
        output = trainer.train(resume_from_checkpoint=resume)
    finally:
        trainer.remove_callback(stopper)  # the phase's final evaluations (validation and test) decide nothing
    if stopper.stopped_at is not None:
        print(
            f"spt_hf: {phase} stopped early at step {stopper.stopped_at} of {trainer.state.max_steps}: "
            f"{patience} evaluations without improvement of {trainer.args.metric_for_best_model}.",
            flush=True,
        )
    return output, stopper.stopped_at


def _check_resumed_form(model, checkpoint: str) -> None:
    """A checkpoint written before a field that changed an architecture's arithmetic existed (`saved_defaults` of its
    config: SPADE's `s4_pointwise`, Linformer's `bias_after_projection`) holds the old form; resuming it into a model
    of the new default would drop or misuse weights. Refuse in one line naming the field to set."""
    fields = getattr(type(model.config), "saved_defaults", {})
    if not fields or not Path(checkpoint, "config.json").is_file():
        return
    saved = type(model.config).from_json_file(Path(checkpoint, "config.json"))
    for name in fields:
        if getattr(saved, name) != getattr(model.config, name):
            raise ValueError(
                f"{checkpoint} was saved with `{name}: {str(getattr(saved, name)).lower()}` and this recipe builds "
                f"`{name}: {str(getattr(model.config, name)).lower()}`; add `{name}: "
                f"{str(getattr(saved, name)).lower()}` to the recipe to resume it, or `--overwrite_output_dir true` "
                "to train the phase afresh."
            )


def export_model(trainer: PhaseTrainer, output_dir: str, spec: TaskSpec | None = None) -> None:
    """Save the final (best) model into `output_dir` with the Trainer's tokenizer or feature extractor and, for a
    spec with a task card, `task_card.json`; each file written whole under a temporary name first."""
    # `_internal_call=True`: only save. With `push_to_hub` the Trainer would also push here, before results.json and
    # the model card exist (and bypassing the atomic export); the phase pushes them all afterwards (`push_phase`).
    if trainer.is_world_process_zero():

        def save(tmp: Path) -> None:
            trainer.save_model(tmp, _internal_call=True)
            if spec is not None:
                write_task_card(spec, tmp)

        write_directory_atomically(save, output_dir)
    else:
        trainer.save_model(output_dir, _internal_call=True)  # takes part in gathering sharded weights


def _check_architecture(recipe: Recipe, source: str) -> None:
    """The finetune recipe must not silently change the architecture of the checkpoint it starts from."""
    if not Path(source).is_dir():
        return
    saved = AutoConfig.from_pretrained(source, trust_remote_code=recipe.model.trust_remote_code)
    if recipe.model.model_type and saved.model_type != recipe.model.model_type:
        raise ValueError(
            f"{source} holds a {saved.model_type} model but the recipe asks for {recipe.model.model_type}."
        )
    values = {
        key: value for key, value in recipe.model_config.items() if key not in PHASE_FIELDS and hasattr(saved, key)
    }
    clashes = {
        key: (getattr(saved, key), value)
        for key, value in _as_configured(saved, values).items()
        if _differs(getattr(saved, key), value)
    }
    if clashes:
        raise ValueError(
            f"The recipe's architecture differs from the checkpoint {source} (checkpoint, recipe): {clashes}. "
            "Architecture hyperparameters are identical between SPT and finetuning; remove them from the recipe."
        )


def _as_configured(saved, values: dict) -> dict:
    """The recipe's `values` as the checkpoint's config class stores them (a spelling the class normalises, such as
    MEGA's `chunk_size: -1` for None, equals the normalised value); a nested config given as a dict stays as given."""
    plain = {key: value for key, value in values.items() if not isinstance(value, dict)}
    try:
        built = type(saved).from_dict({**saved.to_dict(), **plain})
    except (ValueError, TypeError):  # values the class refuses: compared as given (and refused when the model is built)
        return values
    return {key: value if isinstance(value, dict) else getattr(built, key) for key, value in values.items()}


def _differs(saved, value) -> bool:
    """Whether a recipe value differs from the checkpoint's. A nested config given as a dict (spt_backbone's
    `backbone_config`) differs only in the keys the recipe sets; YAML lists equal saved tuples."""
    if isinstance(value, dict) and hasattr(saved, "to_dict"):
        saved = saved.to_dict()
    if isinstance(value, dict) and isinstance(saved, dict):
        return any(_differs(saved.get(key), item) for key, item in value.items())
    if isinstance(value, list | tuple) and isinstance(saved, list | tuple):
        return list(value) != list(saved)
    return saved != value


def _check_leakage(recipe: Recipe, task: TaskData, source: str) -> None:
    path = Path(source, FINGERPRINT_FILE)
    if not path.is_file():
        return
    seen = DataFingerprint.load(path)  # a plain .npy read without pickle, its header checked against its size
    # An input that this phase's own train split holds too is the dataset's duplicate across splits (the custom
    # task's leakage report counts those), not one that only SPT saw.
    seen = np.setdiff1d(seen.hashes, fingerprint_info(task.splits["train"]).hashes)
    for split in ("validation", "test"):
        check_no_overlap(seen, task.splits[split], allow_overlap=recipe.phase.allow_eval_overlap, name=split)


def phase_budgets(spt_recipe: Recipe, finetune_recipe: Recipe) -> dict:
    """The steps of each phase of a recipe pair (`phases.phase_budgets`). `spt-hf run` and `spt-hf compare` both
    take them."""
    spt, tied = spt_recipe.training.max_steps, spt_recipe.phase
    return phases.phase_budgets(spt, finetune_recipe.training.max_steps, tied.total_steps, tied.spt_fraction)


def refuse_ignored_max_steps(spt_recipe: Recipe, overrides: dict) -> None:
    """Refuse a --max_steps override that the recipe pair's tied budgets would ignore
    (`phases.refuse_ignored_max_steps`). The one check of `spt-hf run` and `spt-hf compare`."""
    phases.refuse_ignored_max_steps(spt_recipe.phase.total_steps, overrides, spt_recipe.source)


def with_phase(recipe: Recipe, output_dir: Path, max_steps: int | None, model_name_or_path=...) -> Recipe:
    """A copy of `recipe` for the run folder `output_dir`, with a step budget (and the evaluation cadence derived
    with it, `evaluation_cadence`) and (optionally) a starting model."""
    training = recipe.training
    changes = {"output_dir": str(output_dir)}
    if max_steps is not None:
        changes.update(max_steps=max_steps, **evaluation_cadence(max_steps, training))
    model = recipe.model
    if model_name_or_path is not ...:
        model = dataclasses.replace(model, model_name_or_path=model_name_or_path)
    return dataclasses.replace(recipe, training=dataclasses.replace(training, **changes), model=model)


def run(spt_recipe: Recipe, finetune_recipe: Recipe, with_scratch: bool = False) -> dict:
    """SPT, then finetuning from its checkpoint, and optionally the baseline phase (`scratch/`: the finetuning
    recipe without the SPT checkpoint); writes a run summary."""
    ensure_push_credentials(spt_recipe.training, finetune_recipe.training)  # both phases, before any training
    root = Path(spt_recipe.training.output_dir)
    budgets = phase_budgets(spt_recipe, finetune_recipe)
    spt_dir = root / SPT_PHASE
    summary = {"run_dir": str(root), "budgets": budgets, "phases": {}}
    summary["phases"][SPT_PHASE] = pretrain(with_phase(spt_recipe, root, budgets[SPT_PHASE]))
    finetuning = with_phase(finetune_recipe, root, budgets[FINETUNE_PHASE], str(spt_dir))
    summary["phases"][FINETUNE_PHASE] = finetune(finetuning)
    if with_scratch:
        # The baseline is not pushed (it would land in the finetuned model's repository); its numbers go in the cards.
        baseline = with_phase(finetune_recipe, root, budgets[BASELINE_PHASE], None)
        baseline = dataclasses.replace(baseline, training=dataclasses.replace(baseline.training, push_to_hub=False))
        summary["phases"][BASELINE_PHASE] = finetune(baseline)
    compact = {name: _headline(result) for name, result in summary["phases"].items()}
    write_results(root, {"run_dir": str(root), "budgets": budgets, "phases": compact})
    if spt_recipe.training.should_save:  # the cards again, now that they can report every phase (only they change)
        message = "spt_hf: model card with the run's other phases"
        push_phase(spt_recipe.training, spt_dir, commit_message=message)
        push_phase(finetune_recipe.training, root / FINETUNE_PHASE, commit_message=message)
    return summary


def _headline(result: dict) -> dict:
    metrics = result["metrics"]
    return {
        "output_dir": result["output_dir"],
        "steps": result["budget"]["steps"],
        "wall_time_s": result["budget"]["wall_time_s"],
        "validation": metrics["validation"],
        "test": metrics["test"],
    }
