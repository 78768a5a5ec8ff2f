"""Measuring one training step of a model without training it: its FLOPs and the activation memory it saves.

`count_step` takes a forward and backward pass on synthetic examples of a given length (`synthetic_examples`: random
tokens, values or levels, and labels), collated by the phase's own collator. Measured on each step:

- FLOPs, by spt_hf's flop counter (`cost/flops.py`, the one a trained phase records its cost with: matrix
  products, convolutions, attention, FFTs and spt_hf's custom operators; element-wise operations are not counted);
- activation memory: the bytes of every distinct storage autograd saves for the backward pass
  (`SavedActivations`, `torch.autograd.graph.saved_tensors_hooks`), parameters excluded.

Both depend on the shapes of the step's tensors, not on their values, so the step's matrix products, convolutions,
FFTs and fused attention are not computed (`ProductShapesOnly`): each gives zeros of the shape its kernel would. Every
other operation runs, so whatever the step decides from its data (the masked positions, the padding) is decided as
in training. The counts equal a computed step's (tests/training/test_estimate.py checks every architecture); the
measurement takes a fraction of the time (on a CPU, a Transformer's step at 1,024 positions 6-10x less).

`measure_step` takes a step at batch 1 and one at batch 3: half their difference is the cost per example, the rest
the cost per batch (what a step computes once whatever its batch: an SSM's kernel, MEGA's relative position bias).
`fit_length` extrapolates steps measured at three shorter lengths with `b + a·L + c·L²`: per-position costs are linear
in L, full attention (materialised or fused) adds the quadratic term and kernels or tables sized by the model's
maximum length a constant one (tests/training/test_estimate.py checks the fit against a measurement at full length).
It is approximate where a cost changes shape past the measured lengths (a kernel, window or chunk longer than them).
"""

import contextlib
import copy
import dataclasses
import time
import weakref
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from ..data.vocab import special_token_ids
from .flops import flop_counter, on_meta


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
    elements, are computed only with `compute` (`ProductShapesOnly`). The collator is copied: every call draws the
    same SPT masks. The optimiser step is not taken: its memory is counted per parameter (the estimate's
    `BYTES_PER_PARAMETER`), its element-wise work is not counted as FLOPs, and on a CPU its fresh state made it most
    of a short step's time."""
    model.to(device).train()
    examples = synthetic_examples(spec, length, batch_size)
    batch = {key: value.to(device) for key, value in copy.deepcopy(collator)(examples).items()}
    start = time.perf_counter()
    with (
        contextlib.nullcontext() if compute else ProductShapesOnly(shapes_only_from),
        flop_counter() as counter,
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
            shapes = func(*tree_map(on_meta, args), **tree_map(on_meta, kwargs))
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
