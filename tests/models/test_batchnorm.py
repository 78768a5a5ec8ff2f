"""MaskedBatchNorm (modeling/blocks.py): float32 statistics as accurate as a float64 reference (a large mean, padded
positions excluded), the same outputs and gradients as the former float64-sums implementation, no float64 tensor
for a float32 input, and a synchronised (one gloo rank) norm that torch.compile traces in one graph."""

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from spt_hf.modeling.blocks import MaskedBatchNorm

B, L, H = 3, 17, 8


def inputs(offset: float = 0.0, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = offset + torch.randn(B, L, H, generator=generator) * torch.linspace(0.1, 3.0, H)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 10:] = 0
    mask[2, 3:] = 0
    return x, mask


def reference(x, mask, weight, bias, eps=1e-5):
    """float64: statistics over the real positions only (boolean selection), biased variance."""
    real = x.reshape(-1, H)[mask.reshape(-1).bool()]
    mean, var = real.mean(0), real.var(0, unbiased=False)
    return (x - mean) * weight / torch.sqrt(var + eps) + bias, mean, real.var(0, unbiased=True)


def former(norm, x, mask):
    """The implementation before float32 two-pass statistics: float64 sums of x and x² over the real positions."""
    flat64 = x.reshape(-1, H).double()
    real = mask.reshape(-1, 1).double()
    weighted = flat64 * real
    count = real.sum().clamp(min=1.0)
    mean = weighted.sum(0) / count
    var = ((weighted * flat64).sum(0) / count - mean.pow(2)).clamp(min=0.0)
    scale = norm.weight * torch.rsqrt(var.float() + norm.eps)
    return (x.float() - mean.float()) * scale + norm.bias


def norm_with_affine(seed: int = 1) -> MaskedBatchNorm:
    norm = MaskedBatchNorm(H)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(H, generator=generator))
        norm.bias.copy_(0.1 * torch.randn(H, generator=generator))
    return norm


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_float32_statistics_match_a_float64_reference(offset):
    x, mask = inputs(offset)
    norm = norm_with_affine()
    out = norm(x, mask)
    weight, bias = norm.weight.detach().double(), norm.bias.detach().double()
    want, mean, unbiased = reference(x.double(), mask, weight, bias)
    real = mask.bool()
    assert out.dtype == torch.float32
    # x - mean in float32 is off by the float32 spacing at |mean| (6e-5 at 1e3), over the smallest std 0.1
    torch.testing.assert_close(out[real].double(), want[real], rtol=0, atol=2e-5 + 1e-3 * offset / 1e3)
    torch.testing.assert_close(norm.running_mean.double(), 0.1 * mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(norm.running_var.double(), 0.9 + 0.1 * unbiased, rtol=1e-6, atol=1e-7)


def test_gradients_match_a_float64_reference_and_the_former_values():
    x, mask = inputs(offset=2.0)
    norm = norm_with_affine()
    x32 = x.clone().requires_grad_()
    grad = torch.randn(B, L, H, generator=torch.Generator().manual_seed(3)) * mask.unsqueeze(-1)
    out = norm(x32, mask)
    torch.testing.assert_close(out, former(norm, x, mask), rtol=1e-5, atol=1e-5)
    out.backward(grad)
    x64 = x.double().requires_grad_()
    weight, bias = (p.detach().double().requires_grad_() for p in (norm.weight, norm.bias))
    reference(x64, mask, weight, bias)[0].backward(grad.double())
    for got, want in ((x32.grad, x64.grad), (norm.weight.grad, weight.grad), (norm.bias.grad, bias.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


class Float64Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(
            isinstance(t, torch.Tensor) and t.dtype == torch.float64
            for t in (out if isinstance(out, tuple) else (out,))
        ):
            self.found.append(str(func))
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_float64_copy_of_the_activation(dtype):
    x, mask = inputs(offset=5.0)
    norm = MaskedBatchNorm(H)
    x = x.to(dtype).requires_grad_()
    with Float64Recorder() as recorder:
        out = norm(x, mask)
        out.float().square().sum().backward()
    assert out.dtype == dtype and not recorder.found


def test_eval_uses_the_running_statistics():
    x, mask = inputs()
    norm = norm_with_affine()
    norm(x, mask)
    norm.eval()
    scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
    torch.testing.assert_close(norm(x, mask), (x - norm.running_mean) * scale + norm.bias)


def test_synchronised_statistics_compile_in_one_graph():
    x, mask = inputs(offset=1.0)
    expected = norm_with_affine()(x, mask)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        norm = norm_with_affine()
        compiled = torch.compile(norm, backend="eager", fullgraph=True)
        out = compiled(x, mask)
        out.sum().backward()
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(out, expected)
    assert norm.weight.grad is not None and norm.num_batches_tracked.item() == 1
