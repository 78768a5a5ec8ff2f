"""A recipe's task: its spec and splits, generated on first use for the CPU recipes' generated tasks."""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import datasets

from ..data import (
    GENERATED_TASKS,
    LOAD_OPTIONS,
    TaskSpec,
    default_cache_dir,
    fit_normalization,
    generate_data,
    get_task_spec,
    load_task,
)
from ..data.custom.splits import validation_warnings
from ..recipes.arguments import Recipe


@dataclass
class TaskData:
    spec: TaskSpec
    splits: datasets.DatasetDict
    data_dir: str | None
    generated: dict | None = None  # the `generate_data` options the data was generated with, if it was

    def config_kwargs(self) -> dict:
        """Model-config fields fixed by the task, so SPT and finetuning agree on inputs (and special ids)."""
        kwargs = dict(self.spec.model_config_kwargs())
        kwargs.pop("input_kind", None)
        kwargs.pop("num_labels", None)
        kwargs.pop("problem_type", None)
        kwargs.pop("id2label", None)  # the head's (head_kwargs)
        kwargs.pop("label2id", None)
        if self.spec.input_kind == "continuous" and not kwargs.get("num_quantized_levels"):
            kwargs.pop("num_quantized_levels", None)
        return kwargs

    def head_kwargs(self) -> dict:
        """Config fields of the finetuning head: labels, problem type and the task's default pooling."""
        names = {k: v for k, v in self.spec.model_config_kwargs().items() if k in ("id2label", "label2id")}
        return {
            "num_labels": self.spec.num_labels,
            "problem_type": self.spec.problem_type,
            "pooling": self.spec.pooling,
            **names,
        }

    def split_sizes(self) -> dict:
        return {name: len(split) for name, split in self.splits.items()}


def load_task_data(recipe: Recipe) -> TaskData:
    """Load (and, for generated tasks without `data_dir`, generate) the recipe's task."""
    data = recipe.data
    options = dict(data.task_options)
    if data.max_length is not None:
        options["max_length"] = data.max_length
    data_dir, generated = options.pop("data_dir", data.data_dir), None  # a custom task's source folder too
    if data_dir is None and data.generate_data:
        data_dir, generated = str(generated_data_dir(data.task, data.generate_data)), dict(data.generate_data)
    elif data_dir is not None and not Path(data_dir).exists():
        raise FileNotFoundError(f"`data_dir` {data_dir} does not exist (task {data.task}).")
    validation_from = options.pop("validation_from", data.validation_from)  # a custom task's option too
    spec = get_task_spec(data.task, validation_from=validation_from, data_dir=data_dir, **options)  # built once
    splits = load_task(
        spec,
        data_dir,
        validation_from=validation_from,
        num_train_examples=data.num_train_examples,
        train_fraction=data.train_fraction,
        seed=recipe.training.seed,
        **{k: v for k, v in options.items() if k in LOAD_OPTIONS},  # cache_dir, split_seed: load_task's own
    )
    spec = fit_normalization(spec, splits["train"])
    tokenizer_source = backbone_tokenizer_source(recipe)
    if tokenizer_source is not None:  # spt_backbone with `backbone_input: tokenizer`: the backbone's own token ids
        from transformers import AutoTokenizer

        from ..data.retokenize import retokenize_task
        from ..modeling.configuration_backbone import backbone_checkpoint

        with backbone_checkpoint(tokenizer_source):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        splits, spec = retokenize_task(splits, spec, tokenizer, name=tokenizer_source)
    for line in validation_report(spec, splits):
        print(f"spt_hf: warning: {line}", flush=True)
    return TaskData(spec, splits, data_dir, generated)


def validation_report(spec: TaskSpec, splits: datasets.DatasetDict) -> list[str]:
    """`validation_warnings` of a phase's splits: too few validation examples, or classes of train it lacks."""
    if "validation" not in splits:
        return []
    validation = splits["validation"]
    labelled = spec.problem_type != "regression" and "label" in validation.column_names
    labels = [splits["train"]["label"], validation["label"]] if labelled else []
    return validation_warnings(len(validation), *labels)


def backbone_tokenizer_source(recipe: Recipe) -> str | None:
    """Where the backbone tokenizer is when the model reads the task through it (`backbone_input: tokenizer`): the
    recipe's `backbone_name_or_path`, or that of the local checkpoint being finetuned."""
    values = dict(recipe.model_config)
    source = recipe.model.model_name_or_path
    if "backbone_input" not in values and source is not None and Path(source, "config.json").is_file():
        saved = json.loads(Path(source, "config.json").read_text())
        values = {key: saved.get(key) for key in ("backbone_input", "backbone_name_or_path")}
    if values.get("backbone_input") != "tokenizer":
        return None
    return values.get("backbone_name_or_path")


def generated_data_dir(task: str, options: dict) -> Path:
    """Generate `task` with `generate_data` options (num_train, num_val, num_test, seed, ...) once, into the cache;
    later calls reuse it. The folder appears atomically, so an interrupted generation never counts."""
    if task not in GENERATED_TASKS:
        raise ValueError(f"`generate_data` works for {list(GENERATED_TASKS)}, not {task!r}; set `data_dir`.")
    key = hashlib.sha256(json.dumps({"task": task, **options}, sort_keys=True).encode()).hexdigest()[:16]
    target = default_cache_dir().parent / "generated" / f"{task}-{key}"
    if target.is_dir():
        return target
    options = dict(options)
    sizes = {name: options.pop(name, None) for name in ("num_train", "num_val", "num_test")}
    missing = [name for name, value in sizes.items() if value is None]
    if missing:
        raise ValueError(f"`generate_data` for {task} needs {missing} (how many examples per split).")
    staging = Path(f"{target}.tmp{os.getpid()}")
    generate_data(task, staging, **sizes, **options)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target
