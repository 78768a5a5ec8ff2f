"""How spt_hf counts FLOPs: one table of formulas for torch's flop counter, used wherever a FLOP is counted.

A phase's recorded cost (results.json's `compute`, `cost/compute.py`) and the dry run's estimate of it
(`training/estimate.py`) both count with `flop_counter()`, so the two count the same operations by construction.

torch's own formulas: 2·M·N·K per matrix product (`mm`, `addmm`, `bmm`, `baddbmm`), convolutions and the CUDA
attention kernels. Added here (`flop_formulas`): the CPU attention kernel (the same formula as the CUDA ones), in-place
`addmm_` / `baddbmm_`, FFTs (2.5·n·log2 n per real transform of length n, 5·n·log2 n per complex one: the radix-2
count), the depthwise convolution's backward (torch's formula overcounts it), and spt_hf's custom operators (the FFT
convolution, the Cauchy kernel), whose own operations are counted by running their implementation again under a
counter of its own, on the meta device. Not counted, as in torch's counter: elementwise operations (activations,
norms, the optimiser's update), which are O(parameters + activations) per step against the matmuls'
O(parameters × tokens). Complex matrix products count as real ones (1×, not 4×).
"""

import math

import torch
from torch.utils import flop_counter as torch_flop_counter
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

from ..modeling import cauchy, ssm

aten = torch.ops.aten


def _fft_flops(factor: float, lengths_of: str):
    """Transforms along `dim` of the input (r2c, c2c) or of the output (c2r: the real signal's lengths)."""

    def count(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
        signal = out_shape if lengths_of == "output" else self_shape
        n = math.prod(signal[d] for d in dim)
        transforms = math.prod(signal) // max(1, n)
        return int(factor * n * math.log2(n) * transforms) if n > 1 else 0

    return count


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return torch_flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kw):
    return torch_flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _convolution_backward_flops(grad_out_shape, x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """Each gradient (input, weight) costs what the forward convolution does. torch's formula leaves the groups out of
    the weight gradient, counting a depthwise convolution (Mamba's) once per channel too many."""
    output_mask, transposed = args[-1], args[4]
    forward = torch_flop_counter.conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(output_mask[0]) + int(output_mask[1]))


def _same_as(op):
    """torch's own formula of `op` (already taking tensors) for its in-place variant."""
    formula = torch_flop_counter.flop_registry[op]

    def count(*args, **kwargs) -> int:
        return formula(*args, **kwargs)

    count._get_raw = True
    return count


def on_meta(value):
    """A tensor's twin on the meta device (same shape, strides and dtype; no data); anything else as it is."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def _rerun(implementation):
    """A formula for a custom operator: its implementation run again under a counter of its own, on meta twins of
    its inputs. Its operations' counts depend on their shapes only, so nothing is computed (a measured step's
    inputs, or the zeros of the estimate's `ProductShapesOnly`, alike); on the meta device the implementation takes
    its accelerator path (one chunk, where a CPU takes cache-sized chunks of the same transforms and products)."""

    def count(*args, out_val=None, **kwargs) -> int:
        with FlopCounterMode(display=False, custom_mapping=flop_formulas()) as inner:
            implementation(*tree_map(on_meta, args), **tree_map(on_meta, kwargs))
        return inner.get_total_flops()

    count._get_raw = True  # FlopCounterMode hands such formulas the tensors, not their shapes
    return count


def flop_formulas() -> dict:
    """FlopCounterMode's `custom_mapping`: the operations torch's counter has no formula for (module docstring)."""
    formulas = {
        aten._fft_r2c: _fft_flops(2.5, "input"),
        aten._fft_c2r: _fft_flops(2.5, "output"),
        aten._fft_c2c: _fft_flops(5.0, "input"),
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
        aten.convolution_backward: _convolution_backward_flops,
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


def flop_counter() -> FlopCounterMode:
    """A counter of FLOPs with spt_hf's formulas (`flop_formulas`), printing nothing: enter it around a step."""
    return FlopCounterMode(display=False, custom_mapping=flop_formulas())
