"""What a phase will cost, before it runs: training steps of the phase's own model, measured, scaled to the phase.

The model and its collator are those the phase builds (`pipeline.phase_model` from scratch: a finetuning phase from
a checkpoint has the same architecture and cost; `pipeline.phase_collator`). Its step is measured at batch 1 and 3 on
inputs of the length the recipe's data has (`data_length`), without computing its products (`cost/measure.py`):
FLOPs, counted as a trained phase records them (`cost/flops.py`), and the activation memory autograd saves, each
per example and per batch.

A phase needs the activations at its `per_device_train_batch_size`, plus parameters, gradients and AdamW's two moment
buffers (16 bytes per float32 parameter). When that exceeds the device memory, the estimate gives the largest
per-device batch, and the gradient-accumulation factor, that fit with the recipe's global batch unchanged. Its
optimiser steps are the recipe's `max_steps`, or its epochs over the task's training examples (the task spec's
`train_examples`).

The length: the collator pads each batch to its longest example. A generated task's (the CPU recipes'
`generate_data`) is the expected longest of a per-device batch of the generator's examples, drawn without writing
any; a `data_dir` task's that `load_task` has cached, the same from its cached training examples; any other task's
is its maximum, the recipe's `max_length` where it sets one (an upper bound: the data is not read, which for LRA's
tasks takes minutes). The output says which length each phase was measured at, and why.

Every phase is measured at that length unless asked otherwise: with `max_measure_length`, longer ones are
measured at three shorter lengths instead (that length, its half and quarter) and extrapolated with `b + a·L + c·L²`
through them (`measure.fit_length`). Such phases are marked as extrapolated.
"""

import dataclasses
import gc
import math
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow.compute as pc
import torch

from ..cost.measure import fit_length, measure_step
from ..data import get_task_spec
from ..data.collators import padded_length
from ..data.generators import generated_lengths
from ..data.loading import cache_path
from ..data.spec import DataFormatError, Normalization, TaskSpec
from ..phases import PHASE_COMMANDS
from ..recipes.arguments import Recipe
from .pipeline import phase_collator, phase_model
from .task_data import TaskData, backbone_tokenizer_source

# Dense peak throughput (TFLOP/s, no sparsity) from the vendors' data sheets: NVIDIA A100 (SXM) and H100 (SXM).
PEAK_TFLOPS_PER_S = {"A100": {"bf16": 312.0, "fp32": 19.5}, "H100": {"bf16": 989.0, "fp32": 67.0}}
DEFAULT_UTILISATION = 0.4
BYTES_PER_PARAMETER = 16  # float32 weight + gradient + AdamW's exp_avg and exp_avg_sq
GIB = 1024**3
MIN_MEASURE_LENGTH = 16  # `max_measure_length`'s least: its quarter, the shortest step measured, is 4 positions
LENGTH_SAMPLE = 512  # examples drawn from a generator to know its lengths (0.1 s of the CPU recipes' ListOps)


def gpu_hours(flops: float, device: str, precision: str = "bf16", utilisation: float = DEFAULT_UTILISATION) -> float:
    """Hours that `flops` take on one `device` (a `PEAK_TFLOPS_PER_S` name) at `utilisation` of its dense peak."""
    return flops / (PEAK_TFLOPS_PER_S[device][precision] * 1e12 * utilisation) / 3600


@dataclass
class PhaseEstimate:
    """The cost of one phase of one recipe on one device; sizes in bytes, FLOPs as counted by torch."""

    recipe: str
    phase: str
    task: str
    model_type: str
    parameters: int
    length: int
    per_device_batch: int
    accumulation: int
    optimizer_steps: int
    tokens: int
    flops_per_example: float
    train_flops: float
    activation_bytes_per_example: float
    state_bytes: int
    device: str
    device_memory_gb: float
    extrapolated_from: tuple[int, ...] = ()
    train_examples: int | None = None
    length_source: str = ""  # why the phase was measured at `length` (`data_length`)
    flops_per_batch: float = 0.0  # computed once per forward and backward pass, whatever the batch
    activation_bytes_per_batch: float = 0.0

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.accumulation

    @property
    def activation_bytes(self) -> float:
        return self.activations_at(self.per_device_batch)

    def activations_at(self, batch: int) -> float:
        return self.activation_bytes_per_batch + batch * self.activation_bytes_per_example

    @property
    def total_bytes(self) -> float:
        return self.state_bytes + self.activation_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.device_memory_gb * GIB

    def fitting_batch(self) -> tuple[int, int] | None:
        """The largest per-device batch dividing the global batch that fits, and its accumulation; None if even
        batch 1 does not fit (the phase needs model or sequence parallelism)."""
        room = self.device_memory_gb * GIB - self.state_bytes
        for batch in range(self.global_batch, 0, -1):
            if self.global_batch % batch == 0 and self.activations_at(batch) <= room:
                return batch, self.global_batch // batch
        return None

    def verdict(self) -> str:
        memory = f"{significant(self.total_bytes / GIB)} GiB of {self.device_memory_gb:g} GiB"
        if self.fits:
            return f"fits ({memory})"
        fitting = self.fitting_batch()
        if fitting is None:
            return f"does not fit ({memory}) even at batch 1: needs model or sequence parallelism"
        batch, accumulation = fitting
        return (
            f"does not fit ({memory}): per_device_train_batch_size {batch} x gradient_accumulation_steps "
            f"{accumulation} keeps the global batch {self.global_batch}"
        )

    def gpu_hours(self, device: str, precision: str = "bf16", utilisation: float = DEFAULT_UTILISATION) -> float:
        return gpu_hours(self.train_flops, device, precision, utilisation)

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values.update(total_bytes=self.total_bytes, fits=self.fits, verdict=self.verdict())
        return values


def estimate_task(recipe: Recipe) -> TaskData:
    """The recipe's task as the model config needs it (spec only: no data is read). Read through a pretrained
    backbone's tokenizer, its inputs are as long as the task's length times the most tokens any symbol takes."""
    options = dict(recipe.data.task_options)
    if recipe.data.max_length is not None:
        options["max_length"] = recipe.data.max_length
    spec = get_task_spec(recipe.data.task, **options)
    if spec.input_kind == "continuous" and spec.normalization is None:  # the statistics do not change the cost
        spec = dataclasses.replace(
            spec, normalization=Normalization((0.0,) * spec.num_channels, (1.0,) * spec.num_channels)
        )
    source = backbone_tokenizer_source(recipe)
    if source is not None:  # `backbone_input: tokenizer`: the task in the backbone's token ids, at its longest
        from transformers import AutoTokenizer

        from ..data.retokenize import backbone_spec
        from ..modeling.configuration_backbone import backbone_checkpoint

        with backbone_checkpoint(source):
            tokenizer = AutoTokenizer.from_pretrained(source)
        spec = backbone_spec(spec, tokenizer, name=source)
    return TaskData(spec, splits={}, data_dir=None)


def expected_longest(lengths: list[int], batch: int) -> float:
    """The expected longest of `batch` examples drawn without replacement from `lengths` (sorted ascending): the
    k-th of n is the longest with probability C(k-1, batch-1) / C(n, batch)."""
    batch = min(batch, len(lengths))
    weighted = sum(length * math.comb(k - 1, batch - 1) for k, length in enumerate(lengths, start=1))
    return weighted / math.comb(len(lengths), batch)


def data_length(recipe: Recipe, spec: TaskSpec) -> tuple[int, str]:
    """The length at which the phase's steps are measured, and why (the module docstring); `spec` as the model reads
    the task (`estimate_task`)."""
    data = recipe.data
    if backbone_tokenizer_source(recipe) is not None:
        return spec.max_length, "the task's maximum in the backbone's tokens"
    if generates_data(recipe):
        options = {k: v for k, v in data.generate_data.items() if k not in ("num_train", "num_val", "num_test", "seed")}
        drawn = generated_lengths(data.task, LENGTH_SAMPLE, seed=data.generate_data.get("seed", 0), **options)
        end = 1 if getattr(spec, "append_eos", False) else 0  # the reader's end token
        lengths, source = [n + end for n in drawn], "generated examples"
    else:
        lengths, source = cached_train_lengths(recipe, spec), "training examples in the task's cache"
    if lengths is None:
        if data.max_length is not None:
            return spec.max_length, "the recipe's max_length"
        return spec.max_length, "the task's maximum (its data is not read; an upper bound where lengths vary)"
    multiple = data.pad_to_multiple_of  # a batch's padded length: its longest example's, rounded up to a multiple
    lengths = sorted(padded_length(min(n, spec.max_length), multiple, spec.max_length) for n in lengths)
    batch = recipe.training.per_device_train_batch_size
    longest = math.ceil(expected_longest(lengths, batch))
    padding = f" to a multiple of {multiple}" if multiple else ""
    return longest, f"the expected longest of {batch} {source}, as batches are padded{padding} (longest {lengths[-1]})"


def cached_train_lengths(recipe: Recipe, spec: TaskSpec) -> list[int] | None:
    """The lengths of a `data_dir` task's raw training examples where `load_task` has cached them (read from the
    Arrow columns in a second); None where it has not: building the cache reads the whole data."""
    if recipe.data.data_dir is None:
        return None
    try:
        folder = cache_path(spec, spec.locate(recipe.data.data_dir))
    except (OSError, DataFormatError):  # the run reports a missing or malformed data_dir; the estimate needs none
        return None
    if not (folder / "dataset_dict.json").is_file():
        return None
    raw = datasets.load_from_disk(str(folder))
    split = raw["pool"] if "pool" in raw else raw["train"]  # a pool is divided into the splits at load time
    columns = [name for name in ("input_ids", "input_ids_2", "input_values") if name in split.column_names]
    steps = [pc.list_value_length(split.data.table.column(name)).to_numpy() for name in columns]
    return (np.maximum.reduce(steps) // (spec.num_channels if "input_values" in columns else 1)).tolist()


def measure_phase(recipe: Recipe, phase: str, max_measure_length: int | None = None, device: str | None = None):
    """The phase's model (parameters counted), its step at the length of the recipe's data, measured or
    extrapolated, and why that length (`data_length`)."""
    task = estimate_task(recipe)
    model, _ = phase_model(recipe, phase, task)
    collator = phase_collator(recipe, phase, task.spec, exact_lengths=True)
    (length, why), checkpointing = data_length(recipe, task.spec), bool(recipe.training.gradient_checkpointing)
    if max_measure_length is None or length <= max_measure_length:
        step = measure_step(model, collator, task.spec, length, device, checkpointing)
    else:
        top = 2 ** int(math.log2(max_measure_length))
        lengths = (top // 4, top // 2, top)
        step = fit_length([measure_step(model, collator, task.spec, n, device, checkpointing) for n in lengths], length)
    return task, model, step, why


def generates_data(recipe: Recipe) -> bool:
    """Whether the phase trains on data its recipe generates (`generate_data`, no `data_dir`), as `load_task_data`."""
    return recipe.data.data_dir is None and bool(recipe.data.generate_data)


def train_examples(recipe: Recipe, spec: TaskSpec) -> int | None:
    """The phase's training examples: the recipe's `num_train_examples`, else the generated training split's or the
    task's published ones as the recipe splits them (`TaskSpec.train_examples`), times its `train_fraction`; None
    where the task's size is unknown."""
    if recipe.data.num_train_examples is not None:
        return recipe.data.num_train_examples
    if generates_data(recipe):
        total = recipe.data.generate_data.get("num_train")
    else:
        total = spec.train_examples(recipe.data.validation_from)
    if total is None:
        return None
    if recipe.data.train_fraction is not None:
        total = max(1, round(recipe.data.train_fraction * total))
    return total


def optimizer_steps(recipe: Recipe, train_examples: int | None) -> int | None:
    """The phase's optimiser steps: `max_steps`, or epochs times the steps per epoch (as the Trainer counts)."""
    training = recipe.training
    if training.max_steps and training.max_steps > 0:
        return training.max_steps
    if train_examples is None:
        return None
    batches = math.ceil(train_examples / training.per_device_train_batch_size)
    per_epoch = max(1, batches // training.gradient_accumulation_steps)
    return math.ceil(per_epoch * training.num_train_epochs)


def mean_batch(per_device_batch: int, train_examples: int | None) -> float:
    """The mean batch the Trainer trains on: an epoch of n examples is ceil(n / b) batches (the last one short, as
    `dataloader_drop_last` is off), so n / ceil(n / b) examples each; b where n is unknown. 25 examples at batch 32
    are one batch of 25."""
    if not train_examples:
        return float(per_device_batch)
    return train_examples / math.ceil(train_examples / per_device_batch)


def _measured(recipe: Recipe, phase: str, max_measure_length: int | None, device: str | None, measured: dict | None):
    """(length, parameters, model type, step, why that length) of the phase's model: measured, or from `measured`
    where the same model, task and length were (a finetuning phase and the baseline share the classifier)."""
    kind = PHASE_COMMANDS[phase]  # the two finetuning phases build the same model: one measurement
    key = (kind, recipe.data.task, repr(sorted(recipe.data.task_options.items())), recipe.data.max_length)
    key += (repr(sorted((k, repr(v)) for k, v in recipe.model_config.items())), recipe.spt.objective)
    key += (bool(recipe.training.gradient_checkpointing), recipe.spt.packed_sequences)
    key += (recipe.data.data_dir, repr(sorted(recipe.data.generate_data.items())))  # the length of its data
    key += (recipe.training.per_device_train_batch_size,)
    if measured is not None and key in measured:
        return measured[key]
    _, model, step, why = measure_phase(recipe, kind, max_measure_length, device)
    result = (step.length, sum(p.numel() for p in model.parameters()), model.config.model_type, step, why)
    del model
    gc.collect()
    if measured is not None:
        measured[key] = result
    return result


def estimate_phase(
    recipe: Recipe,
    phase: str,
    device_memory_gb: float = 80.0,
    max_measure_length: int | None = None,
    device: str | None = None,
    measured: dict | None = None,
) -> PhaseEstimate:
    """The estimate of `phase` ("spt", "finetune" or "scratch") of `recipe`. `measured` caches the step of each
    (model, task, length) across calls (seeds and training sizes share it)."""
    task_length, parameters, model_type, step, why = _measured(recipe, phase, max_measure_length, device, measured)
    spec, training = get_task_spec(recipe.data.task, **recipe.data.task_options), recipe.training
    examples = train_examples(recipe, spec)
    steps = optimizer_steps(recipe, examples) or 0
    batch, accumulation = training.per_device_train_batch_size, training.gradient_accumulation_steps
    seen = mean_batch(batch, examples)  # FLOPs and tokens at the batches trained on, not the recipe's batch size
    multiplier = 2 if spec.paired else 1
    return PhaseEstimate(
        recipe=recipe_name(recipe.source),
        phase=phase,
        task=recipe.data.task,
        model_type=model_type,
        parameters=parameters,
        length=task_length,
        per_device_batch=batch,
        accumulation=accumulation,
        optimizer_steps=steps,
        tokens=round(steps * seen * accumulation * task_length * multiplier),
        flops_per_example=step.flops,
        train_flops=(step.fixed_flops + step.flops * seen) * accumulation * steps,
        activation_bytes_per_example=step.activation_bytes,
        flops_per_batch=step.fixed_flops,
        activation_bytes_per_batch=step.fixed_activation_bytes,
        state_bytes=BYTES_PER_PARAMETER * parameters,
        device=str(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))),
        device_memory_gb=device_memory_gb,
        extrapolated_from=step.extrapolated_from,
        train_examples=examples,
        length_source=why,
    )


def recipe_name(source: str | None) -> str:
    """A shipped recipe by its name (`pathx/s4-spt.yaml`), any other by its path."""
    if source is None:
        return "(recipe)"
    path, shipped = Path(source).resolve(), Path(__file__).resolve().parents[1] / "recipes"
    return str(path.relative_to(shipped)) if path.is_relative_to(shipped) else source


def significant(value: float) -> str:
    """`value` with three significant digits, whole above 100 and "< 0.01" below: never a "0.0" that is not zero."""
    if value == 0:
        return "0"
    if abs(value) < 0.01:
        return "< 0.01"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def counted(count: int, noun: str) -> str:
    """`count` and `noun`, plural unless one: "1 phase", "2 phases"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_estimates(estimates: list[PhaseEstimate], utilisation: float = DEFAULT_UTILISATION) -> str:
    """A table of the phases' estimates and the plan's totals (FLOPs, GPU-hours on A100 and H100, largest phase)."""
    if not estimates:
        return "spt_hf estimate: no phase to estimate."
    device = estimates[0].device
    lines = [
        f"spt_hf estimate: forward and backward passes of each phase's model measured on {device} at batch 1 and 3 "
        "(float32, at the length of the recipe's data: see Lengths below); FLOPs counted as a trained phase records "
        "them (matrix products, convolutions, attention, FFTs, S4's kernels).",
        "| recipe | phase | parameters | length | steps | batch x accum | tokens | train FLOPs | act. GiB | "
        "state GiB | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in estimates:
        length = f"{e.length}" + (
            f" (extrapolated from {', '.join(map(str, e.extrapolated_from))})" if e.extrapolated_from else ""
        )
        steps = f"{e.optimizer_steps:,}" if e.optimizer_steps else "? (train size unknown)"
        lines.append(
            f"| {e.recipe} | {e.phase} | {e.parameters / 1e6:.2f}M | {length} | {steps} | "
            f"{e.per_device_batch} x {e.accumulation} | {e.tokens:.3g} | {e.train_flops:.3g} | "
            f"{significant(e.activation_bytes / GIB)} | {significant(e.state_bytes / GIB)} | {e.verdict()} |"
        )
    total = sum(e.train_flops for e in estimates)
    largest = max(estimates, key=lambda e: e.train_flops)
    hours = {device: gpu_hours(total, device, utilisation=utilisation) for device in PEAK_TFLOPS_PER_S}
    peaks = ", ".join(f"{name} {peak['bf16']:g}" for name, peak in PEAK_TFLOPS_PER_S.items())
    lines += [
        "",
        f"Total: {counted(len(estimates), 'phase')}, {total:.3g} training FLOPs; at {utilisation:.0%} of the dense "
        f"bf16 peak ({peaks} TFLOP/s): "
        + ", ".join(f"{significant(h)} {name} GPU-hours" for name, h in hours.items())
        + ".",
        f"Largest phase: {largest.recipe} ({largest.phase}), {largest.train_flops:.3g} FLOPs, "
        f"{significant(largest.gpu_hours('A100', utilisation=utilisation))} A100 GPU-hours.",
    ]
    return "\n".join(lines + notes(estimates))


def notes(estimates: list[PhaseEstimate]) -> list[str]:
    """The lines under the totals: the length each task was measured at and why, the phases that do not fit and
    those extrapolated in length."""
    lengths = {f"{e.task} at {e.length}, {e.length_source}" for e in estimates}
    lines = ["Lengths: " + "; ".join(sorted(lengths)) + "."]
    unfit = [e for e in estimates if not e.fits]
    if unfit:
        verb = "does" if len(unfit) == 1 else "do"
        lines.append(
            f"{counted(len(unfit), 'phase')} {verb} not fit {unfit[0].device_memory_gb:g} GiB at the per-device batch."
        )
    extrapolated = [e for e in estimates if e.extrapolated_from]
    if extrapolated:
        models: dict[str, set] = {}  # task (length): its model types, one entry for all seeds and phases
        for e in extrapolated:
            models.setdefault(f"{e.task} ({e.length})", set()).add(e.model_type)
        names = "; ".join(f"{task}: {', '.join(sorted(types))}" for task, types in sorted(models.items()))
        lines.append(
            f"Extrapolated in length (b + a·L + c·L² through three shorter measured steps): "
            f"{counted(len(extrapolated), 'phase')}, of {names}."
        )
    return lines
