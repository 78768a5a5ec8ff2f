"""What a phase cost: floating-point operations of its training, counted on one real step.

`phase_compute` takes one batch of the phase's training set (its first `per_device_train_batch_size` examples,
collated by the phase's own collator, so padded as training pads them), runs forward and backward on it under
`torch.utils.flop_counter.FlopCounterMode`, and multiplies: FLOPs per optimiser step = the counted micro-batch ×
gradient-accumulation steps × processes; the phase's FLOPs = that × its optimiser steps. The parameters' gradients
are taken with `torch.autograd.grad` (the same backward, without touching `.grad`, the optimiser or data-parallel
hooks) and every buffer is restored afterwards, so counting changes nothing the phase then evaluates or saves.

What is counted. torch's formulas: 2·M·N·K per matrix product (`mm`, `addmm`, `bmm`, `baddbmm`), convolutions and
the CUDA attention kernels. Added here: the CPU attention kernel (the same formula as the CUDA ones), in-place
`addmm_` / `baddbmm_`, FFTs (2.5·n·log2 n per real transform of length n, 5·n·log2 n per complex one: the radix-2
count), and spt_hf's custom operators (the FFT convolution, the Cauchy kernel), whose own operations are counted by
running their implementation again under the counter. Not counted, as in torch's counter: elementwise operations
(activations, norms, the optimiser's update), which are O(parameters + activations) per step against the matmuls'
O(parameters × tokens). Complex matrix products count as real ones (1×, not 4×). Evaluation is not counted.

With inputs padded to the longest sequence of each batch (variable-length tasks), steps differ in length; the count
is that of the first batch, whose shape is recorded (`counted_batch`).
"""

import math
import time

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

aten = torch.ops.aten


def _fft_flops(factor: float, lengths_of: str):
    """Transforms along `dim` of the input (r2c, c2c) or of the output (c2r: the real signal's lengths)."""

    def count(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
        signal = out_shape if lengths_of == "output" else self_shape
        n = math.prod(signal[d] for d in dim)
        transforms = math.prod(signal) // max(1, n)
        return int(factor * n * math.log2(n) * transforms) if n > 1 else 0

    return count


def _cpu_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kw) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _convolution_backward(grad_out_shape, x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """Each gradient (input, weight) costs what the forward convolution does. torch's formula leaves the groups out of
    the weight gradient, counting a depthwise convolution (Mamba's) once per channel too many."""
    output_mask, transposed = args[-1], args[4]
    forward = flop_counter.conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def _same_as(op):
    """torch's own formula of `op` (already taking tensors) for its in-place variant."""
    formula = flop_counter.flop_registry[op]

    def count(*args, **kwargs) -> int:
        return formula(*args, **kwargs)

    count._get_raw = True
    return count


def _rerun(implementation):
    """A formula for a custom operator: its implementation run again under a counter of its own."""

    def count(*args, out_val=None, **kwargs) -> int:
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=flop_formulas()) as inner:
            implementation(*args, **kwargs)
        return inner.get_total_flops()

    count._get_raw = True  # FlopCounterMode hands such formulas the tensors, not their shapes
    return count


def flop_formulas() -> dict:
    """FlopCounterMode's `custom_mapping`: the operations torch's counter has no formula for (module docstring)."""
    from ..modeling import cauchy, ssm

    formulas = {
        aten._fft_r2c: _fft_flops(2.5, "input"),
        aten._fft_c2r: _fft_flops(2.5, "output"),
        aten._fft_c2c: _fft_flops(5.0, "input"),
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward,
        aten.convolution_backward: _convolution_backward,
        aten.addmm_: _same_as(aten.addmm),
        aten.baddbmm_: _same_as(aten.baddbmm),
    }
    custom = torch.ops.spt_hf_v1
    for name, implementation in (
        ("fft_conv", ssm._fft_conv_forward),
        ("fft_conv_backward", ssm._fft_conv_backward),
        ("paired_cauchy", cauchy._cauchy_forward),
        ("paired_cauchy_backward", cauchy._cauchy_backward),
    ):
        formulas[getattr(custom, name)] = _rerun(implementation)
    return formulas


def count_step_flops(model: torch.nn.Module, loss_fn) -> tuple[int, dict[str, int]]:
    """FLOPs of `loss_fn(model)` and its backward to every trainable parameter, in training mode, and per operation.
    The model's mode and buffers (running statistics, counters of forward passes) are as they were afterwards."""
    was_training = model.training
    buffers = {name: buffer.detach().clone() for name, buffer in model.named_buffers()}
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    try:
        with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as counter:
            loss = loss_fn(model)
            torch.autograd.grad(loss, params, allow_unused=True)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(buffers[name])
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return counter.get_total_flops(), by_op


def phase_compute(trainer) -> dict:
    """results.json's `compute` of a phase that has trained (module docstring): FLOPs per optimiser step and in all,
    the counted batch's shapes, and how long counting took."""
    args = trainer.args
    start = time.perf_counter()
    if trainer.is_fsdp_enabled:  # parameters are sharded across processes: no single-process step to count
        return {"flops": None, "flops_per_step": None, "note": "not counted under FSDP"}
    dataset = trainer.train_dataset
    size = min(args.per_device_train_batch_size, len(dataset))
    inputs = trainer._prepare_inputs(trainer.data_collator([dataset[i] for i in range(size)]))

    def loss_fn(model):
        with trainer.compute_loss_context_manager():
            return trainer.compute_loss(model, inputs)

    micro, by_op = count_step_flops(trainer.model, loss_fn)
    per_step = micro * args.gradient_accumulation_steps * args.world_size
    return {
        "flops": per_step * trainer.state.global_step,
        "flops_per_step": per_step,
        "counted_batch": {k: list(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)},
        "flops_by_operation": by_op,
        "count_seconds": round(time.perf_counter() - start, 4),
        "method": "torch.utils.flop_counter.FlopCounterMode on one forward + backward (spt_hf.training.compute)",
    }
