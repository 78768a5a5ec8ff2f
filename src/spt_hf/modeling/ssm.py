"""The SSM layer shared by S4 and DLR, and its numerical primitives.

    SSMMixer:  y = GLU(Linear(H, 2H)(Dropout(GELU(K * u + D ⊙ u))))   on (B, L, H)

An architecture supplies the kernel module K (S4's NPLR or diagonal kernel, DLR's kernel): a module mapping a length L
to kernels (nd, H, L) of nd = 1 (causal) or 2 (bidirectional) directions, with `init_state`/`step` for the recurrent
form. This file holds what every such layer shares: the FFT convolution y = K * u + D ⊙ u (causal or bidirectional),
the blocked power tables a^l of diagonal state matrices, complex numbers stored as real pairs, and the layer itself.

Everything here runs in float32 (float64 when given float64, for the tests) with autocast disabled: the SSM kernel
and the spectra lose too much in bf16/fp16.

Speed (2-core CPU, docs/benchmarks.md): the convolution works on small chunks of channels, FFTs a pre-zeroed 2L
buffer (instead of `n=2L` padding), multiplies spectra in place and writes its output straight into (B, L, H), so no
(B, H, L) transpose or big temporary is ever allocated. The backward recomputes the input spectrum chunk by chunk
instead of saving a (B, H, L+1) complex tensor.
"""

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import initialization as init

from .cache import MixerState
from .configuration_sequence import SequenceModelConfig

# ----------------------------------------------------------------------------------------------------------------
# Complex numbers as real pairs, recurrent-state precision
# ----------------------------------------------------------------------------------------------------------------


def as_complex(pairs: Tensor) -> Tensor:
    """(..., 2) real pairs -> (...) complex view."""
    return torch.view_as_complex(pairs if pairs.stride(-1) == 1 else pairs.contiguous())


def state_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """Recurrent states are kept in float32 (float64 if asked), whatever the model's dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------------------------
# FFT convolution and blocked powers
# ----------------------------------------------------------------------------------------------------------------


# Channels x 2L floats of one FFT chunk (4 MiB): small enough for the cache (one rfft of 256 channels x 32768 runs
# at a fifth of the speed of 32 channels), large enough that few chunks (= OpenMP regions) are needed; the 2-core
# machine measured 2^19 to 2^21 equally fast when quiet, and fewer regions suffer less when other processes compete.
_CHUNK_ELEMENTS = 1 << 20


def compute_dtype(tensor: Tensor) -> torch.dtype:
    """float64 stays float64 (tests); everything else (fp32, bf16, fp16) is computed in float32."""
    return torch.float64 if tensor.dtype == torch.float64 else torch.float32


def _chunks(batch: int, hidden: int, length: int, device: torch.device) -> list[tuple[slice, slice]]:
    """(batch slice, channel slice) pairs covering (B, H) in chunks of about `_CHUNK_ELEMENTS` / 2L channels.

    Chunking is a CPU cache optimisation: on accelerators one chunk (everything at once) is faster.
    """
    if device.type != "cpu":
        return [(slice(0, batch), slice(0, hidden))]
    channels = max(1, _CHUNK_ELEMENTS // (2 * length))
    if channels >= hidden:  # whole rows of H, several batch entries at a time
        step_b = max(1, channels // hidden)
        return [(slice(b, min(b + step_b, batch)), slice(0, hidden)) for b in range(0, batch, step_b)]
    step_h = max(16, channels - channels % 16)  # 16 floats = one 64-byte cache line of a (B, L, H) row
    return [
        (slice(b, b + 1), slice(h, min(h + step_h, hidden))) for b in range(batch) for h in range(0, hidden, step_h)
    ]


def _padded(source: Tensor, cache: dict) -> Tensor:
    """Copy (b, L, h) into the first half of a reused zero (b, h, 2L) buffer (the second half stays zero)."""
    b, length, h = source.shape
    key = (b, h)
    if key not in cache:
        cache[key] = source.new_zeros(b, h, 2 * length)
    buffer = cache[key]
    buffer[..., :length].copy_(source.transpose(1, 2))  # (b, h, L)
    return buffer


def _skip_out(y: Tensor, u: Tensor, D: Tensor, out: Tensor, cache: dict) -> None:
    """out (b, L, h) = y[..., :L]ᵀ + D ⊙ u for y (b, h, 2L), u and out (b, L, h) strided views of (B, L, H)."""
    length = u.shape[1]
    if y.shape[0] == 1:  # a contiguous 2-D transpose first: torch's blocked transpose beats a strided addcmul
        key = ("t", y.shape[1])
        if key not in cache:
            cache[key] = y.new_empty(length, y.shape[1])
        transposed = cache[key].copy_(y[0, :, :length].T)  # (L, h)
        torch.addcmul(transposed, u[0], D, out=out[0])
    else:
        torch.addcmul(y[..., :length].transpose(1, 2), u, D, out=out)


def _fft_conv_forward(u: Tensor, kernel: Tensor, D: Tensor) -> Tensor:
    """y[b, t, h] = Σ_s k[h, (t - s) mod 2L] u[b, s, h] + D[h] u[b, t, h] for a 2L-periodic kernel k (H, 2L).

    The kernel of positive lags sits at k[:, :L], that of negative lags -j at k[:, 2L - j]; zero padding of u to
    2L makes the circular convolution linear (no wrap-around).
    """
    batch, length, hidden = u.shape
    kernel_f = torch.fft.rfft(kernel)  # (H, L+1)
    out = torch.empty_like(u)  # (B, L, H)
    buffers: dict = {}
    for bs, hs in _chunks(batch, hidden, length, u.device):
        spectrum = torch.fft.rfft(_padded(u[bs, :, hs], buffers))  # (b, h, L+1)
        spectrum.mul_(kernel_f[hs])  # convolution theorem, in place
        y = torch.fft.irfft(spectrum, n=2 * length)  # (b, h, 2L)
        _skip_out(y, u[bs, :, hs], D[hs], out[bs, :, hs], buffers)  # (b, L, h)
    return out


def _fft_conv_backward(
    grad_out: Tensor, u: Tensor, kernel: Tensor, D: Tensor, need_u: bool, need_k: bool, need_d: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of `_fft_conv_forward` (empty tensors for those not needed); the input spectrum is recomputed
    chunk by chunk instead of being saved."""
    batch, length, hidden = u.shape
    grad_out = grad_out.contiguous()
    kernel_f = torch.fft.rfft(kernel)  # (H, L+1)
    grad_u = torch.empty_like(u) if need_u else u.new_empty(0)
    grad_kf = torch.zeros_like(kernel_f) if need_k else None  # (H, L+1)
    grad_d = torch.zeros_like(D) if need_d else D.new_empty(0)
    kernel_conj = kernel_f.conj_physical()  # (H, L+1)
    u_buffers: dict = {}
    g_buffers: dict = {}
    for bs, hs in _chunks(batch, hidden, length, u.device):
        g_padded = _padded(grad_out[bs, :, hs], g_buffers)  # (b, h, 2L)
        g_spectrum = torch.fft.rfft(g_padded)  # (b, h, L+1)
        if need_k or need_d:
            u_padded = _padded(u[bs, :, hs], u_buffers)  # (b, h, 2L)
        if need_d:
            grad_d[hs].add_((u_padded[..., :length] * g_padded[..., :length]).sum((0, 2)))  # (h,)
        if need_k:
            # dL/dk[j] = Σ_t g[t] u[t - j]: a correlation, spectrum G·conj(U) summed over the batch
            product = torch.fft.rfft(u_padded).conj_physical_().mul_(g_spectrum)  # (b, h, L+1)
            grad_kf[hs].add_(product[0] if product.shape[0] == 1 else product.sum(0))  # (h, L+1)
        if need_u:
            # dL/du[s] = Σ_t g[t] k[t - s]: correlation with the kernel, spectrum G·conj(K)
            y = torch.fft.irfft(g_spectrum.mul_(kernel_conj[hs]), n=2 * length)  # (b, h, 2L)
            _skip_out(y, grad_out[bs, :, hs], D[hs], grad_u[bs, :, hs], g_buffers)  # (b, L, h)
    grad_kernel = torch.fft.irfft(grad_kf, n=2 * length) if need_k else kernel.new_empty(0)  # (H, 2L)
    return grad_u, grad_kernel, grad_d


def _define_fft_conv():
    """The FFT convolution as custom operators (forward, backward): torch.compile and torch.export see one opaque
    operation each instead of the chunked in-place kernels. A checkpoint's remote code registers the same operators;
    where spt_hf's own copy already did in this process, that registration is used."""
    namespace = torch.ops.spt_hf_v1
    if hasattr(namespace, "fft_conv"):
        return namespace.fft_conv

    @torch.library.custom_op("spt_hf_v1::fft_conv", mutates_args=())
    def forward(u: Tensor, kernel: Tensor, D: Tensor) -> Tensor:
        return _fft_conv_forward(u, kernel, D)

    @forward.register_fake
    def _(u, kernel, D):
        return torch.empty_like(u)

    @torch.library.custom_op("spt_hf_v1::fft_conv_backward", mutates_args=())
    def backward(
        grad_out: Tensor, u: Tensor, kernel: Tensor, D: Tensor, need_u: bool, need_k: bool, need_d: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        return _fft_conv_backward(grad_out, u, kernel, D, need_u, need_k, need_d)

    @backward.register_fake
    def _(grad_out, u, kernel, D, need_u, need_k, need_d):
        sized = [(u, need_u), (kernel, need_k), (D, need_d)]
        return tuple(torch.empty_like(t) if need else t.new_empty(0) for t, need in sized)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def autograd_backward(ctx, grad_out):
        u, kernel, D = ctx.saved_tensors
        needs = ctx.needs_input_grad
        grads = backward(grad_out, u, kernel, D, *needs)
        return tuple(grad if need else None for grad, need in zip(grads, needs))

    forward.register_autograd(autograd_backward, setup_context=setup_context)
    return forward


_fft_conv_op = _define_fft_conv()


def periodic_kernel(kernel: Tensor, length: int) -> Tensor:
    """(nd, H, Lk) kernels, Lk >= L -> (H, 2L) kernel of the circular convolution of length 2L.

    nd = 1: causal, lags 0..L-1. nd = 2: bidirectional, kernel[0] at lags 0..L-1 and kernel[1] flipped and shifted to
    lags -1..-L (position 2L-1-j holds lag -(j+1)), so D ⊙ u alone covers lag 0 of the backward direction.
    """
    forward = kernel[0, :, :length]  # (H, L)
    if kernel.shape[0] == 1:
        backward = forward.new_zeros(forward.shape)  # (H, L)
    else:
        backward = kernel[1, :, :length].flip(-1)  # (H, L)
    return torch.cat([forward, backward], dim=-1)  # (H, 2L)


def fft_conv(u: Tensor, kernel: Tensor, D: Tensor) -> Tensor:
    """y = K * u + D ⊙ u along the length of u (B, L, H) for kernels (nd, H, Lk), Lk >= L, and skip D (H,).

    nd = 1 is causal (y[t] sees u[<= t]); nd = 2 is bidirectional (kernel[1] is the backward direction). Computed in
    float32 (float64 for float64 inputs) with autocast disabled; returns (B, L, H) in the dtype of u.
    """
    if kernel.dim() != 3 or kernel.shape[0] not in (1, 2) or kernel.shape[-1] < u.shape[1]:
        raise ValueError(f"fft_conv expects kernels (1 or 2, H, >= L={u.shape[1]}); got {tuple(kernel.shape)}.")
    dtype = compute_dtype(u)
    with torch.autocast(device_type=u.device.type, enabled=False):
        periodic = periodic_kernel(kernel.to(dtype), u.shape[1])  # (H, 2L)
        out = _fft_conv_op(u.to(dtype).contiguous(), periodic, D.to(dtype))  # (B, L, H)
    return out.to(u.dtype)


def block_size(reference_length: int) -> int:
    """The block c = ⌈√reference⌉ of `blocked_powers` for kernels of about `reference_length` (a config's length, a
    plain int): a kernel computed at any input length with this fixed c does not depend on the exact length through
    Python integer arithmetic, so torch.compile traces one graph for every length (no guard on it)."""
    return math.isqrt(max(reference_length - 1, 0)) + 1


def blocked_powers(log_a: Tensor, length, block: int | None = None) -> tuple[Tensor, Tensor, int]:
    """a^l for l < length as the outer product a^(i·c) · a^j, l = i·c + j, block c (default ⌈√length⌉).

    Only about N·(L/c + 2√c) complex exponentials instead of N·L (the complex-exp Vandermonde): the caller
    contracts `coarse` (..., N, ⌈L/c⌉) and `fine` (..., N, c) with one matmul; `fine` itself is the product of two
    smaller tables (a^(j1·s) a^j2, s ≈ √c). Exponents are formed in float64 so that the phase l·Im(log a) stays
    exact for l up to 10^5; the tables come back as complex64 (complex128 for float64 inputs). A given block (a plain
    int, see `block_size`) is used as it is, even above the length, so that a symbolic length under torch.compile
    only sets the number of coarse entries.
    """
    block = block_size(length) if block is None else max(1, block)
    out_dtype = torch.complex128 if log_a.dtype == torch.complex128 else torch.complex64
    log_a = log_a.to(torch.complex128)

    def table(count: int, multiplier: int) -> Tensor:  # a^(m·multiplier), m < count: (..., N, count)
        exponent = log_a.unsqueeze(-1) * (torch.arange(count, device=log_a.device, dtype=torch.float64) * multiplier)
        return torch.polar(exponent.real.exp(), exponent.imag).to(out_dtype)

    sub = math.isqrt(block - 1) + 1
    fine = table(-(-block // sub), sub).unsqueeze(-1) * table(sub, 1).unsqueeze(-2)  # (..., N, ⌈c/s⌉, s)
    return table(coarse_count(length, block), block), fine.flatten(-2)[..., :block], block


def coarse_count(length, block: int):
    """The number of coarse entries of `blocked_powers`: ⌈length / block⌉ eagerly; under torch.compile one or two
    more (length // block + 2), so that the count is never 1 and the blocks never end exactly at the length. Both are
    facts torch.compile would otherwise guard on (a broadcast of size 1, a slice [:length] that is a no-op), each
    guard a second dynamic graph for the lengths on its other side; the extra entries are sliced off."""
    if torch.compiler.is_compiling():
        return length // block + 2
    return -(-length // block)


@contextmanager
def exact_float32_matmuls() -> Iterator[None]:
    """TF32 off for the matmuls of an SSM/EMA kernel, whatever the user enabled (`tf32: true`,
    `torch.backends.cuda.matmul.allow_tf32`): with TF32 the NPLR kernel is off by 3-8e-3 relative, bf16's precision,
    which the float32 kernels exist to avoid. Restored on exit. While torch.compile traces, the global setting stays
    (a compiled graph follows the setting it was compiled under)."""
    matmul = torch.backends.cuda.matmul
    if torch.compiler.is_compiling() or not matmul.allow_tf32:
        yield
        return
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = True


# ----------------------------------------------------------------------------------------------------------------
# The layer
# ----------------------------------------------------------------------------------------------------------------


def check_finite(kernel: Tensor, layer: nn.Module) -> None:
    """Raise a FloatingPointError naming the layer if the SSM kernel overflowed (e.g. after a divergent step); a host
    read, skipped with `config.check_values=False` (the Trainer's training steps)."""
    if not layer.config.check_values or torch.compiler.is_compiling():
        return
    if not torch.isfinite(kernel).all():  # a check export cannot trace
        raise FloatingPointError(
            f"{type(layer).__name__} (layer {layer.layer_idx}): the SSM kernel has non-finite values; the SSM "
            "parameters diverged (lower the learning rate or ssm_learning_rate)."
        )


class SSMMixer(nn.Module):
    """The SSM layer shared by S4 and DLR: y = GLU(Linear(H, 2H)(Dropout(GELU(K * u + D ⊙ u)))) on (B, L, H).

    `kernel` maps a length L to the kernels (nd, H, L): nd = 1 (causal, lags 0..L-1) or nd = 2 (bidirectional, the
    second at lags -1..-L), both directions from one kernel call per forward. The kernel and the FFT convolution run
    in float32 with autocast disabled; the output linear layer follows the surrounding autocast. Causal layers
    also run recurrently (`init_state`, `step`) for generation.
    """

    def __init__(self, config: SequenceModelConfig, layer_idx: int | None, kernel: nn.Module):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.kernel = kernel
        self.D = nn.Parameter(torch.empty(config.hidden_size))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.output_linear = nn.Linear(config.hidden_size, 2 * config.hidden_size)
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """D ~ N(0, 1) as in the official code (an ordinary parameter: global lr and weight decay)."""
        init.normal_(self.D)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None, **kwargs) -> Tensor:
        """(B, L, H) -> (B, L, H). Padded positions must already be zero (right padding); the mask is unused."""
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            with exact_float32_matmuls():
                kernel = self.kernel(hidden_states.shape[1])  # (nd, H, L) float32
            check_finite(kernel, self)
            y = fft_conv(hidden_states, kernel, self.D)  # (B, L, H) in the input dtype
        return self._output(y)

    def _output(self, y: Tensor) -> Tensor:
        y = self.dropout(F.gelu(y))  # (..., H)
        return F.glu(self.output_linear(y), dim=-1)  # (..., 2H) -> (..., H)

    def _require_causal(self) -> None:
        if self.config.bidirectional:
            raise ValueError(
                f"{type(self).__name__}.step/init_state need a causal model (bidirectional=False): a bidirectional "
                "layer sees future positions and has no recurrent form."
            )

    def init_state(self, batch_size: int, device=None, dtype=None) -> MixerState:
        """Zero recurrent state for `batch_size` sequences (real tensors, float32 unless dtype is float64)."""
        self._require_causal()
        return MixerState(self.kernel.init_state(batch_size, device, dtype))

    def step(self, hidden_state: Tensor, state: MixerState, attention_mask=None, **kwargs):
        """One position (B, H) -> (output (B, H), new state); equals `forward` position by position (eval mode)."""
        self._require_causal()
        (x,) = state.tensors
        with torch.autocast(device_type=hidden_state.device.type, enabled=False):
            u = hidden_state.to(x.dtype)  # (B, H)
            y, new_state = self.kernel.step(u, x)  # (B, H)
            y = y + self.D.to(u.dtype) * u
        return self._output(y.to(hidden_state.dtype)), MixerState(new_state)
