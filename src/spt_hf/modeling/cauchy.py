"""The Cauchy kernel of S4's NPLR kernel, as a CPU-tuned autograd function (S4, Gu et al. 2022, §3.3).

`paired_cauchy` evaluates the sums  k[m, h, k] = Σ_n v[m, h, n] / (τ_k - μ[h, n])  over both members of each
conjugate pair at the rfft bins of the kernel's length. The (H, N/2, F) Cauchy matrix is never materialised: it is
built chunk by chunk (features x frequencies) in a reused buffer and consumed by one matmul, and the backward
recomputes each chunk instead of saving it. `modeling_s4.S4KernelNPLR` is its only caller, for short kernels (long ones
take blocked powers of Ā there). Its tests live in
tests/models/test_ssm_layers.py: `test_nplr_kernel_equals_dense_powers` compares the whole NPLR kernel with the
explicit powers C Ā^l B̄ of the dense discretised state matrix (the dense reference), and
`test_paired_cauchy_gradcheck_across_chunks` checks this function's backward across chunk boundaries.
"""

import math

import torch
from torch import Tensor

# Real elements (features x N/2 x frequencies) of one chunk of the Cauchy matrix (4 MiB per plane): [Re R | Im R]
# stays in cache between its construction and the matmul that consumes it. 2^18 and 2^20 ran equally fast on the
# quiet 2-core machine (4x larger was 60% slower); the larger needs 4x fewer OpenMP regions.
_CAUCHY_CHUNK = 1 << 20


def _cauchy_chunks(hidden: int, half: int, freqs: int, device: torch.device) -> list[tuple[slice, slice]]:
    """(feature slice, frequency slice) pairs of about `_CAUCHY_CHUNK` elements each (one chunk off the CPU)."""
    if device.type != "cpu":
        return [(slice(0, hidden), slice(0, freqs))]
    if half * freqs <= 1.25 * _CAUCHY_CHUNK:
        step = max(1, _CAUCHY_CHUNK // (half * freqs))
        return [(slice(h, min(h + step, hidden)), slice(0, freqs)) for h in range(0, hidden, step)]
    width = -(-freqs // -(-(half * freqs) // _CAUCHY_CHUNK))
    return [(slice(h, h + 1), slice(f, min(f + width, freqs))) for h in range(hidden) for f in range(0, freqs, width)]


def _resolvent(mu_re: Tensor, mu_im: Tensor, grid: list[Tensor], work: Tensor, out: Tensor) -> Tensor:
    """[Re R | Im R] (h, N/2, 2f) of R = 1/D', D' = |μ|² c_k² - s_k² - 2i Re(μ) s_k c_k, written into `out`.

    D' = c_k² (τ_k - μ)(τ_k - μ̄) with τ_k = i tan(θ_k/2): one conjugate pair of Cauchy terms, scaled by c_k so that
    the Nyquist bin (c = 0) stays finite.
    """
    cos2, neg_sin2, sincos = grid  # (f,) each
    freqs = cos2.shape[0]
    d_re, d_im, inverse = work, out[..., freqs:], out[..., :freqs]  # (h, N/2, f) each
    torch.addcmul(neg_sin2, (mu_re * mu_re + mu_im * mu_im).unsqueeze(-1), cos2, out=d_re)  # |μ|²c² - s²
    torch.mul((2 * mu_re).unsqueeze(-1), sincos, out=d_im)  # -Im D' = 2 Re(μ) s c
    torch.mul(d_re, d_re, out=inverse).addcmul_(d_im, d_im).reciprocal_()  # 1 / |D'|²
    d_im.mul_(inverse)  # Im R = -Im D' / |D'|²
    inverse.mul_(d_re)  # Re R = Re D' / |D'|²
    return out


# The paired Cauchy sums as two custom operators (forward, backward): torch.compile and torch.export treat each as one
# opaque operation instead of tracing the chunked, in-place kernels. A checkpoint's remote code registers the same
# operators; where spt_hf's own copy already did in this process, that registration is used.


def _cauchy_forward(coef: Tensor, mu_re: Tensor, mu_im: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    hidden, rows, half = coef.shape  # rows = 2M: α rows then β rows
    grid = [cos * cos, -sin * sin, sin * cos]
    out = coef.new_empty(rows // 2, 2, hidden, cos.shape[0])  # (M, 2, H, F)
    work = _Workspace(coef, _cauchy_chunks(hidden, half, cos.shape[0], coef.device), half)
    for hs, fs, r in work.resolvents(mu_re, mu_im, grid):
        g = torch.bmm(coef[hs], r, out=work.buffer("g", rows, 2))  # (h, 2M, 2f): [αRe R, αIm R; βRe R, βIm R]
        f, c, s = fs.stop - fs.start, cos[fs], sin[fs]
        u_re, u_im = out[:, 0, hs, fs].transpose(0, 1), out[:, 1, hs, fs].transpose(0, 1)  # (h, M, f)
        torch.mul(g[:, : rows // 2, :f], c, out=u_re).addcmul_(g[:, rows // 2 :, f:], s, value=-1.0)
        torch.mul(g[:, : rows // 2, f:], c, out=u_im).addcmul_(g[:, rows // 2 :, :f], s)
    return out


def _cauchy_backward(
    grad: Tensor, coef: Tensor, mu_re: Tensor, mu_im: Tensor, cos: Tensor, sin: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    hidden, rows, half = coef.shape
    grid = [cos * cos, -sin * sin, sin * cos]
    cos2_x2, sincos_x2 = 2 * grid[0], 2 * grid[2]
    grad_coef, s1, s2 = torch.zeros_like(coef), torch.zeros_like(mu_re), torch.zeros_like(mu_re)
    work = _Workspace(coef, _cauchy_chunks(hidden, half, cos.shape[0], coef.device), half)
    m = rows // 2
    for hs, fs, r in work.resolvents(mu_re, mu_im, grid):
        f, c, s = fs.stop - fs.start, cos[fs], sin[fs]
        gu_re, gu_im = grad[:, 0, hs, fs].transpose(0, 1), grad[:, 1, hs, fs].transpose(0, 1)  # (h, M, f)
        g = work.buffer("g", rows, 2)  # ∂L/∂G (h, 2M, 2f)
        torch.mul(gu_re, c, out=g[:, :m, :f])
        torch.mul(gu_im, c, out=g[:, :m, f:])
        torch.mul(gu_im, s, out=g[:, m:, :f])
        torch.mul(gu_re, -s, out=g[:, m:, f:])
        grad_coef[hs].baddbmm_(g, r.transpose(1, 2))  # (h, 2M, N/2)
        sq = work.buffer("square", half, 2)  # [Re R² | Im R² / 2]
        torch.mul(r[..., :f], r[..., :f], out=sq[..., :f]).addcmul_(r[..., f:], r[..., f:], value=-1.0)
        torch.mul(r[..., :f], r[..., f:], out=sq[..., f:])
        # ∂L/∂D' = -(∂L/∂R) conj(R²), ∂L/∂R = coefᵀ g: its sums over k weighted by c² (real part) and by s·c
        # (imaginary part) are coef-weighted columns of one matmul of the weighted g with R²
        weighted = work.buffer("weighted", 2 * rows, 2)  # (h, 4M, 2f)
        torch.mul(g[..., :f], grid[0][fs], out=weighted[:, :rows, :f])
        torch.mul(g[..., f:], cos2_x2[fs], out=weighted[:, :rows, f:])
        torch.mul(g[..., f:], grid[2][fs], out=weighted[:, rows:, :f])
        torch.mul(g[..., :f], -sincos_x2[fs], out=weighted[:, rows:, f:])
        z = torch.bmm(weighted, sq.transpose(1, 2))  # (h, 4M, N/2)
        s1[hs].sub_((coef[hs] * z[:, :rows]).sum(1))  # Σ_k c_k² ∂L/∂Re D'
        s2[hs].sub_((coef[hs] * z[:, rows:]).sum(1))  # Σ_k s_k c_k ∂L/∂Im D'
    # D' = |μ|²c² - s² - 2i Re(μ) s c  =>  ∂D'/∂Re μ = (2 Re μ c², -2 s c), ∂D'/∂Im μ = (2 Im μ c², 0)
    return grad_coef, 2 * mu_re * s1 - 2 * s2, 2 * mu_im * s1


def _define_operators():
    namespace = torch.ops.spt_hf_v1
    if hasattr(namespace, "paired_cauchy"):  # registered by another copy of this file (remote code and spt_hf)
        return namespace.paired_cauchy, namespace.paired_cauchy_backward

    @torch.library.custom_op("spt_hf_v1::paired_cauchy", mutates_args=())
    def forward(coef: Tensor, mu_re: Tensor, mu_im: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """U[m, h, k] = Σ_n (α[h, m, n] c_k + i β[h, m, n] s_k) R[h, n, k] as (M, 2, H, F): real and imaginary
        planes, computed chunk by chunk (features x frequencies) as G = [α; β] @ [Re R | Im R]: the (H, N/2, F)
        Cauchy matrix is never materialised."""
        return _cauchy_forward(coef, mu_re, mu_im, cos, sin)

    @forward.register_fake
    def _(coef, mu_re, mu_im, cos, sin):
        return coef.new_empty(coef.shape[1] // 2, 2, coef.shape[0], cos.shape[0])

    @torch.library.custom_op("spt_hf_v1::paired_cauchy_backward", mutates_args=())
    def backward(
        grad: Tensor, coef: Tensor, mu_re: Tensor, mu_im: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Gradients of `paired_cauchy` with respect to coef, Re μ and Im μ; each chunk is recomputed, not saved."""
        return _cauchy_backward(grad.contiguous(), coef, mu_re, mu_im, cos, sin)

    @backward.register_fake
    def _(grad, coef, mu_re, mu_im, cos, sin):
        return torch.empty_like(coef), torch.empty_like(mu_re), torch.empty_like(mu_im)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def autograd_backward(ctx, grad):
        coef, mu_re, mu_im, cos, sin = ctx.saved_tensors
        grads = backward(grad, coef, mu_re, mu_im, cos, sin)
        return *grads, None, None

    forward.register_autograd(autograd_backward, setup_context=setup_context)
    return forward, backward


paired_cauchy_planes, paired_cauchy_planes_backward = _define_operators()


class _Workspace:
    """Work buffers sized for the largest chunk, reused across chunks (fresh large allocations page-fault)."""

    def __init__(self, like: Tensor, chunks: list[tuple[slice, slice]], half: int):
        self.like, self.chunks, self.half = like, chunks, half
        self.features = max(hs.stop - hs.start for hs, _ in chunks)
        self.freqs = max(fs.stop - fs.start for _, fs in chunks)
        self.buffers: dict[str, Tensor] = {}
        self.shape: tuple[int, int] = (0, 0)

    def buffer(self, name: str, rows: int, planes: int) -> Tensor:
        """A (h, rows, planes·f) view of the buffer `name` for the current chunk."""
        if name not in self.buffers:
            self.buffers[name] = self.like.new_empty(self.features * rows * planes * self.freqs)
        h, f = self.shape
        return self.buffers[name][: h * rows * planes * f].view(h, rows, planes * f)

    def resolvents(self, mu_re: Tensor, mu_im: Tensor, grid: list[Tensor]):
        """Yield (feature slice, frequency slice, [Re R | Im R] of the chunk) for every chunk."""
        for hs, fs in self.chunks:
            self.shape = (hs.stop - hs.start, fs.stop - fs.start)
            out, work = self.buffer("resolvent", self.half, 2), self.buffer("work", self.half, 1)
            yield hs, fs, _resolvent(mu_re[hs], mu_im[hs], [x[fs] for x in grid], work, out)


def paired_cauchy(coef: Tensor, mu: Tensor, length: int) -> list[tuple[Tensor, Tensor]]:
    """U[m, h, k] = c_k Σ_{n, both members of each conjugate pair} v[m, h, n] / (τ_k - μ[h, n]), as (Re, Im) (H, F).

    Evaluated at the rfft bins of `length`: τ_k = i tan(θ_k / 2), (c_k, s_k) = (cos, sin)(θ_k / 2), θ_k = 2πk/length
    (the roots of unity after the bilinear map). Each pair gives (α c_k + i β s_k) / D' with α = -2 Re(v μ̄),
    β = 2 Re(v): coef = [α; β] (H, 2M, N/2). Returned unbound, so that the backward stacks the gradients once instead
    of zero-filling a full tensor per slice.
    """
    angle = math.pi * torch.arange(length // 2 + 1, device=coef.device, dtype=torch.float64) / length  # θ_k / 2
    cos, sin = angle.cos().to(coef.dtype), angle.sin().to(coef.dtype)
    planes = paired_cauchy_planes(coef, mu.real.contiguous(), mu.imag.contiguous(), cos, sin)  # (M, 2, H, F)
    return [tuple(u.unbind(0)) for u in planes.unbind(0)]
