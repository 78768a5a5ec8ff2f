"""What a phase will cost, before it runs: real training steps of the phase's own model, measured.

The model is built from the recipe as the phase builds it (`pipeline.spt_model`, `pipeline._finetuning_model` from
scratch: a finetuning phase from a checkpoint has the same architecture and cost) and takes a training step at batch
1 and one at batch 3, with the phase's collator, on inputs of the task's full length (no padding: an upper bound for
tasks of variable length). Measured on each step:

- FLOPs, by torch's flop counter (`torch.utils.flop_counter.FlopCounterMode`: matrix products, convolutions and
  attention; FFTs and element-wise operations are not counted);
- activation memory: the bytes of every distinct storage autograd saves for the backward pass
  (`torch.autograd.graph.saved_tensors_hooks`), parameters excluded.

Both depend on the shapes of the step's tensors, not on their values, so the step's matrix products, convolutions,
FFTs and fused attention are not computed (`ProductShapesOnly`): each gives zeros of the shape its kernel would. Every
other operation runs, so whatever the step decides from its data (the masked positions, the padding) is decided as
in training. The counts equal a computed step's (tests/training/test_estimate.py checks every architecture); the
measurement takes a fraction of the time (on a CPU, a Transformer's step at 1,024 positions 6-10x less).

Half the difference of the two steps is the cost per example, the rest the cost per batch (what a step computes once
whatever its batch: an SSM's kernel, MEGA's relative position bias). A phase needs the activations at its
`per_device_train_batch_size`, plus parameters, gradients and AdamW's two moment buffers (16 bytes per float32
parameter). When that exceeds the device memory, the estimate gives the largest per-device batch, and the
gradient-accumulation factor, that fit with the recipe's global batch unchanged.

Every task is measured at its full length unless asked otherwise: with `max_measure_length`, longer tasks are
measured at three shorter lengths instead (that length, its half and quarter) and extrapolated with `b + a·L + c·L²`
through them: per-position costs are linear in L, full attention (materialised or fused) adds the quadratic term and
kernels or tables sized by the model's maximum length a constant one (tests/training/test_estimate.py checks the fit
against a measurement at full length). It is approximate where a cost changes shape past the measured lengths (a
kernel, window or chunk longer than them). Such phases are marked as extrapolated.
"""

import contextlib
import copy
import dataclasses
import gc
import math
import sys
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from ..data import (
    CausalSPTCollator,
    ClassificationCollator,
    MaskedSPTCollator,
    RetrievalCollator,
    get_task_spec,
)
from ..data.vocab import special_token_ids
from ..phases import PHASE_COMMANDS
from .arguments import Recipe, spt_bidirectional
from .task_data import TaskData, backbone_tokenizer_source

# Dense peak throughput (TFLOP/s, no sparsity) from the vendors' data sheets: NVIDIA A100 (SXM) and H100 (SXM).
PEAK_TFLOPS = {"A100": {"bf16": 312.0, "fp32": 19.5}, "H100": {"bf16": 989.0, "fp32": 67.0}}
DEFAULT_UTILISATION = 0.4
BYTES_PER_PARAMETER = 16  # float32 weight + gradient + AdamW's exp_avg and exp_avg_sq
GIB = 1024**3

# Training examples per task as the pipeline splits them by default (validation_from: train), from the datasets'
# published sizes: ListOps 96,000 / Retrieval 147,086 (LRA release's own splits); IMDb 25,000 and CIFAR-10 50,000
# train images less the carved validation (10% and 5,000); Pathfinder and PathX 80% of 200,000 images; Speech
# Commands v0.02 84,848 (the Hub's train split); BIDMC32 5,565 less 10%. With validation_from: test the carved part
# stays in train (`_train_examples`).
TRAIN_EXAMPLES = {
    "listops": (96_000, 0),
    "retrieval": (147_086, 0),
    "text": (22_500, 2_500),
    "image": (45_000, 5_000),
    "scifar": (45_000, 5_000),
    "pathfinder": (160_000, 0),
    "pathx": (160_000, 0),
    "pathx256": (160_000, 0),
    "speech_commands": (84_848, 0),
    "bidmc": (5_009, 556),
}


@dataclass
class StepMeasurement:
    """A measured step: FLOPs (forward + backward) and saved activation bytes, per example and per batch. The part
    per batch is what a step computes once whatever its batch (an SSM's kernel, a position table)."""

    length: int
    flops: float
    activation_bytes: float
    seconds: float
    fixed_flops: float = 0.0
    fixed_activation_bytes: float = 0.0
    extrapolated_from: tuple[int, ...] = ()


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
        memory = f"{self.total_bytes / GIB:.1f} GiB of {self.device_memory_gb:g} GB"
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
        return self.train_flops / (PEAK_TFLOPS[device][precision] * 1e12 * utilisation) / 3600

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
        from ..data.spec import Normalization

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


def phase_model_and_collator(recipe: Recipe, phase: str, task: TaskData):
    """The phase's model (from scratch, as the pipeline builds it) and its collator."""
    from . import pipeline

    spec = task.spec
    if phase == "spt":
        model = pipeline.spt_model(recipe, task)
        if spt_bidirectional(recipe):
            collator = MaskedSPTCollator(spec, recipe.spt.mask_rate, recipe.spt.span_length, seed=0)
        else:
            collator = CausalSPTCollator(spec)
    else:
        model, _ = pipeline._finetuning_model(recipe, task, None)
        collator = (RetrievalCollator if spec.paired else ClassificationCollator)(spec)
    return model, collator


def synthetic_examples(spec, length: int, count: int, seed: int = 0) -> list[dict]:
    """`count` examples of `length` steps in the task's features (random tokens, values or levels, and labels)."""
    gen = torch.Generator().manual_seed(seed)
    first = max(special_token_ids().values()) + 1
    examples = []
    for _ in range(count):
        label = float(torch.rand(1, generator=gen)) if spec.is_regression else int(torch.randint(spec.num_labels, (1,)))
        if spec.input_kind == "tokens":
            example = {"input_ids": torch.randint(first, spec.vocab_size, (length,), generator=gen).tolist()}
            if spec.paired:
                example["input_ids_2"] = torch.randint(first, spec.vocab_size, (length,), generator=gen).tolist()
        else:
            values = torch.randint(0, 256, (length * spec.num_channels,), generator=gen).float()
            example = {"input_values": values.numpy()}
        examples.append({**example, "label": label})
    return examples


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# torch's counter knows the CUDA kernels of scaled_dot_product_attention, not the CPU one: the same formulas for it
CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops,
}


# Element-wise work, reductions, gathers and copies on tensors of at least this many elements are shaped, not computed
# (`ProductShapesOnly`): the attention scores and activations of long inputs, never the ids, masks and labels that the
# step's decisions read (integer and boolean results are always computed).
SHAPES_ONLY_FROM = 4096


def count_step(
    model,
    collator,
    spec,
    length: int,
    batch_size: int,
    device: torch.device,
    compute: bool = False,
    shapes_only_from: int = SHAPES_ONLY_FROM,
) -> tuple[float, float, float]:
    """FLOPs, saved activation bytes (distinct storages, parameters excluded) and seconds of one forward and backward
    pass at (batch_size, length); its products, and its floating-point work on tensors of at least `shapes_only_from`
    elements, are computed only with `compute` (`ProductShapesOnly`). The collator
    is copied: every call draws the same SPT masks. The optimiser step is not taken: its memory is counted per
    parameter (`BYTES_PER_PARAMETER`), its element-wise work is not counted as FLOPs, and on a CPU its fresh state
    made it most of a short step's time."""
    model.to(device).train()
    examples = synthetic_examples(spec, length, batch_size)
    batch = {key: value.to(device) for key, value in copy.deepcopy(collator)(examples).items()}
    start = time.perf_counter()
    with (
        contextlib.nullcontext() if compute else ProductShapesOnly(shapes_only_from),
        FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter,
        SavedActivations(model) as saved,
    ):
        loss = model(**batch).loss
        saved.snapshot()
        loss.backward()
    seconds = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops(), saved.peak_bytes, seconds


# By operator name: matrix products and linear solves, convolutions, FFTs, fused attention, and spt_hf's own S4 kernels
# (the Cauchy sums and the FFT convolution, custom operators that torch sees as one operation each); forward and
# backward.
PRODUCTS = {
    "aten::_linalg_solve_ex",
    "aten::linalg_lu_solve",
    "aten::mm",
    "aten::bmm",
    "aten::addmm",
    "aten::baddbmm",
    "aten::convolution",
    "aten::convolution_backward",
    "aten::_fft_r2c",
    "aten::_fft_c2r",
    "aten::_fft_c2c",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    "spt_hf_v1::paired_cauchy",
    "spt_hf_v1::paired_cauchy_backward",
    "spt_hf_v1::fft_conv",
    "spt_hf_v1::fft_conv_backward",
}


class ProductShapesOnly(TorchDispatchMode):
    """While entered, the operations of `PRODUCTS` (matrix products and solves, convolutions, FFTs, fused attention,
    S4's kernels; forward and backward) are not computed, nor any other functional operation on a tensor of at least
    `min_elements` elements whose results are all floating-point tensors of their own (element-wise work,
    reductions, gathers, copies; not views, not in-place operations, not random draws): each returns zeros with the
    shape, strides and dtype that its meta kernel gives. A flop counter entered inside it still counts each product,
    and autograd still saves the inputs and outputs it saves. An operation without a meta kernel (one whose result's
    shape depends on its values) is computed, and so is every operation with an integer or boolean result, so the
    step's data-dependent decisions (masked positions, padding, label selection) are taken as in training."""

    def __init__(self, min_elements: int = SHAPES_ONLY_FROM):
        super().__init__()
        self.min_elements = min_elements

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable or any(out.alias_info is not None for out in schema.returns):  # in place, `out=`, views
            return func(*args, **kwargs)
        tensors = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        product = func.name() in PRODUCTS
        if not tensors or not (product or self._large_and_deterministic(func, tensors)):
            return func(*args, **kwargs)
        try:
            shapes = func(*tree_map(_on_meta, args), **tree_map(_on_meta, kwargs))
        except (NotImplementedError, RuntimeError):
            return func(*args, **kwargs)
        outputs = [out for out in tree_leaves(shapes) if isinstance(out, torch.Tensor)]
        if not product and not (
            outputs and all(out.dtype.is_floating_point or out.dtype.is_complex for out in outputs)
        ):
            return func(*args, **kwargs)
        return tree_map(
            lambda out: _zeros_like(out, tensors[0].device) if isinstance(out, torch.Tensor) else out, shapes
        )

    def _large_and_deterministic(self, func, tensors: list[torch.Tensor]) -> bool:
        return (
            torch.Tag.nondeterministic_seeded not in func.tags and max(t.numel() for t in tensors) >= self.min_elements
        )


def _on_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


# numpy's zeros come from calloc: a large block is fresh pages that the OS maps, already zero, only when touched. A
# torch zeros writes every page at once, which cost a CPU measurement as much as the element-wise work it replaced.
_NUMPY_DTYPES = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}


def _zeros_like(meta: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Zeros of `meta`'s shape, strides and dtype on `device`, in a storage of the extent a kernel would allocate."""
    if device.type == "cpu" and meta.dtype in _NUMPY_DTYPES:
        extent = (
            0 if meta.numel() == 0 else 1 + sum((size - 1) * stride for size, stride in zip(meta.shape, meta.stride()))
        )
        flat = torch.from_numpy(np.zeros(extent, dtype=_NUMPY_DTYPES[meta.dtype]))
        return flat.as_strided(meta.shape, meta.stride())
    return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=device).zero_()


class SavedActivations:
    """While entered, records each tensor autograd saves for the backward pass (parameters excluded); `snapshot()`,
    called when a forward pass ends, keeps the largest total of distinct storages still held by saved tensors as
    `peak_bytes`. A tensor saved by a part of the graph that the forward pass dropped on the way is freed by then and
    not counted; keyed by addresses alone, a freed storage's address reused by a later one hid that later one, and the
    count varied from step to step."""

    def __init__(self, model: torch.nn.Module):
        self._parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._saved: list[tuple[weakref.ref, int, int]] = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)
        self.peak_bytes = 0.0

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._parameters and storage.device.type != "meta":
            self._saved.append((weakref.ref(tensor), storage.data_ptr(), storage.nbytes()))
        return tensor

    def snapshot(self) -> float:
        held = {pointer: nbytes for tensor, pointer, nbytes in self._saved if tensor() is not None}
        self._saved = [entry for entry in self._saved if entry[0]() is not None]
        self.peak_bytes = max(self.peak_bytes, float(sum(held.values())))
        return self.peak_bytes

    def __enter__(self) -> "SavedActivations":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def measure_step(model, collator, spec, length: int, device: str | None = None, checkpointing: bool = False):
    """Steps at batch 1 and 3: the cost per example (half their difference) and per batch (what remains). With
    `checkpointing` (the recipe's `gradient_checkpointing`) autograd keeps only each layer's input, and the backward
    pass recomputes one layer at a time: the saved bytes are those kept plus one layer's share of the full step's."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    full = _per_example_and_batch(model, collator, spec, length, device)
    if not checkpointing:
        return full
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        kept = _per_example_and_batch(model, collator, spec, length, device)
    finally:
        model.gradient_checkpointing_disable()
    layers = max(1, int(getattr(model.config, "num_hidden_layers", 1) or 1))
    return dataclasses.replace(
        kept,
        activation_bytes=kept.activation_bytes + max(full.activation_bytes - kept.activation_bytes, 0.0) / layers,
        fixed_activation_bytes=kept.fixed_activation_bytes
        + max(full.fixed_activation_bytes - kept.fixed_activation_bytes, 0.0) / layers,
        seconds=full.seconds + kept.seconds,
    )


def _per_example_and_batch(model, collator, spec, length: int, device: torch.device) -> StepMeasurement:
    """The line through the steps at batch 1 and 3, so that the estimate reproduces both. Its part per batch can be
    negative: a batch of one may save less per example than larger ones (block-local attention's key blocks stay
    views of one padded tensor at batch 1, and are copied at larger batches)."""
    flops1, bytes1, seconds1 = count_step(model, collator, spec, length, 1, device)
    flops3, bytes3, seconds3 = count_step(model, collator, spec, length, 3, device)
    flops, activation = max((flops3 - flops1) / 2, 0.0), max((bytes3 - bytes1) / 2, 0.0)
    return StepMeasurement(length, flops, activation, seconds1 + seconds3, flops1 - flops, bytes1 - activation)


def fit_length(steps: list[StepMeasurement], length: int) -> StepMeasurement:
    """`b + a·L + c·L²` through three measurements, evaluated at `length`."""

    def at(field: str) -> float:
        values = [getattr(step, field) for step in steps]
        coefficients = np.polyfit([float(step.length) for step in steps], values, deg=2)
        return max(float(np.polyval(coefficients, length)), max(values))

    return StepMeasurement(
        length,
        at("flops"),
        at("activation_bytes"),
        sum(step.seconds for step in steps),
        at("fixed_flops"),
        at("fixed_activation_bytes"),
        extrapolated_from=tuple(step.length for step in steps),
    )


def measure_phase(recipe: Recipe, phase: str, max_measure_length: int | None = None, device: str | None = None):
    """The phase's model (parameters counted) and its step at the task's full length, measured or extrapolated."""
    task = estimate_task(recipe)
    model, collator = phase_model_and_collator(recipe, phase, task)
    length, checkpointing = task.spec.max_length, bool(recipe.training.gradient_checkpointing)
    if max_measure_length is None or length <= max_measure_length:
        step = measure_step(model, collator, task.spec, length, device, checkpointing)
    else:
        top = 2 ** int(math.log2(max_measure_length))
        lengths = (top // 4, top // 2, top)
        step = fit_length([measure_step(model, collator, task.spec, n, device, checkpointing) for n in lengths], length)
    return task, model, step


def _train_examples(recipe: Recipe) -> int | None:
    if recipe.data.num_train_examples is not None:
        return recipe.data.num_train_examples
    known = TRAIN_EXAMPLES.get(recipe.data.task)
    if known is None:
        return None
    train, carved = known
    total = train + carved if recipe.data.validation_from == "test" else train
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
    kind = PHASE_COMMANDS[phase]  # the two finetuning phases build the same model: one measurement
    key = (kind, recipe.data.task, repr(sorted(recipe.data.task_options.items())), recipe.data.max_length)
    key += (repr(sorted((k, repr(v)) for k, v in recipe.model_config.items())), recipe.spt.objective)
    key += (bool(recipe.training.gradient_checkpointing),)
    if measured is not None and key in measured:
        task_length, parameters, model_type, step = measured[key]
    else:
        task, model, step = measure_phase(recipe, kind, max_measure_length, device)
        task_length, parameters = task.spec.max_length, sum(p.numel() for p in model.parameters())
        model_type = model.config.model_type
        del model
        gc.collect()
        if measured is not None:
            measured[key] = (task_length, parameters, model_type, step)
    training = recipe.training
    examples = _train_examples(recipe)
    steps = optimizer_steps(recipe, examples) or 0
    batch, accumulation = training.per_device_train_batch_size, training.gradient_accumulation_steps
    multiplier = 2 if estimate_task_paired(recipe) else 1
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
        tokens=steps * batch * accumulation * task_length * multiplier,
        flops_per_example=step.flops,
        train_flops=(step.fixed_flops + step.flops * batch) * accumulation * steps,
        activation_bytes_per_example=step.activation_bytes,
        flops_per_batch=step.fixed_flops,
        activation_bytes_per_batch=step.fixed_activation_bytes,
        state_bytes=BYTES_PER_PARAMETER * parameters,
        device=str(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))),
        device_memory_gb=device_memory_gb,
        extrapolated_from=step.extrapolated_from,
        train_examples=examples,
    )


def recipe_name(source: str | None) -> str:
    """A shipped recipe by its name (`pathx/s4-spt.yaml`), any other by its path."""
    if source is None:
        return "(recipe)"
    path, shipped = Path(source).resolve(), Path(__file__).resolve().parents[1] / "recipes"
    return str(path.relative_to(shipped)) if path.is_relative_to(shipped) else source


def estimate_task_paired(recipe: Recipe) -> bool:
    return get_task_spec(recipe.data.task, **recipe.data.task_options).paired


def format_estimates(estimates: list[PhaseEstimate], utilisation: float = DEFAULT_UTILISATION) -> str:
    """A table of the phases' estimates and the plan's totals (FLOPs, GPU-hours on A100 and H100, largest phase)."""
    if not estimates:
        return "spt_hf estimate: no phase to estimate."
    device = estimates[0].device
    lines = [
        f"spt_hf estimate: forward and backward passes of each phase's model measured on {device} at batch 1 and 3 "
        "(float32, the task's full length unless extrapolated); FLOPs by torch's flop counter (matrix products, "
        "convolutions, attention).",
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
            f"{e.activation_bytes / GIB:.1f} | {e.state_bytes / GIB:.2f} | {e.verdict()} |"
        )
    total = sum(e.train_flops for e in estimates)
    largest = max(estimates, key=lambda e: e.train_flops)
    hours = {device: total / (PEAK_TFLOPS[device]["bf16"] * 1e12 * utilisation) / 3600 for device in PEAK_TFLOPS}
    peaks = ", ".join(f"{name} {peak['bf16']:g}" for name, peak in PEAK_TFLOPS.items())
    lines += [
        "",
        f"Total: {len(estimates)} phases, {total:.3g} training FLOPs; at {utilisation:.0%} of the dense bf16 peak "
        f"({peaks} TFLOP/s): " + ", ".join(f"{h:,.1f} {name} GPU-hours" for name, h in hours.items()) + ".",
        f"Largest phase: {largest.recipe} ({largest.phase}), {largest.train_flops:.3g} FLOPs, "
        f"{largest.gpu_hours('A100', utilisation=utilisation):,.1f} A100 GPU-hours.",
    ]
    unfit = [e for e in estimates if not e.fits]
    if unfit:
        lines.append(f"{len(unfit)} phase(s) do not fit {unfit[0].device_memory_gb:g} GB at their per-device batch.")
    extrapolated = [e for e in estimates if e.extrapolated_from]
    if extrapolated:
        models: dict[str, set] = {}  # task (length): its model types, one entry for all seeds and phases
        for e in extrapolated:
            models.setdefault(f"{e.task} ({e.length})", set()).add(e.model_type)
        names = "; ".join(f"{task}: {', '.join(sorted(types))}" for task, types in sorted(models.items()))
        lines.append(
            f"Extrapolated in length (b + a·L + c·L² through three shorter measured steps): {len(extrapolated)} "
            f"phase(s), of {names}."
        )
    return "\n".join(lines)


def estimate_jobs(jobs, device_memory_gb: float = 80.0, max_measure_length: int | None = None):
    """Estimates of a compare plan's phases (`compare.PhaseJob`s), each distinct model and length measured once
    (seeds and training sizes reuse it); phases that cannot be estimated come back with the reason."""
    measured: dict = {}
    estimates, skipped = [], {}
    for job in jobs:
        start, known = time.perf_counter(), len(measured)
        try:
            estimate = estimate_phase(
                job.load_recipe(), job.phase, device_memory_gb, max_measure_length, measured=measured
            )
        except ValueError as error:
            skipped[job.id] = str(error)
            continue
        if len(measured) > known:  # a model not measured before: say so, the measurements take a while on a CPU
            seconds = time.perf_counter() - start
            print(f"estimate: measured {job.id} in {seconds:.0f} s ({len(measured)} model(s))", file=sys.stderr)
        estimates.append(dataclasses.replace(estimate, recipe=f"{job.id}"))
    return estimates, skipped
