"""S4 as the paper used it: HiPPO-LegS state matrix in normal-plus-low-rank (NPLR) form, bilinear discretisation,
kernel from a Cauchy kernel + Woodbury correction at the roots of unity; S4D (diagonal) as the simpler option.

Reads top to bottom: HiPPO-LegS -> Cauchy kernel -> NPLR kernel -> S4D kernel -> mixer (the S4 layer).

Notation: H features, N state size (N/2 conjugate pairs stored), L length, Δ step size, μ = Δλ/2. Every
parameter is real (complex values are stored as real pairs, trailing dim 2): complex parameters break safetensors,
NCCL all-reduce and some DDP paths (method.md §8.7). Complex arithmetic happens inside forward only.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers import initialization as init

from .configuration_s4 import S4Config
from .configuration_sequence import SequenceModelConfig
from .fftconv import blocked_powers, compute_dtype, fft_conv
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBackbone, SPTPreTrainedModel

# ----------------------------------------------------------------------------------------------------------------
# HiPPO-LegS in NPLR form
# ----------------------------------------------------------------------------------------------------------------


def hippo_legs(state_size: int) -> tuple[Tensor, Tensor]:
    """The LegS matrices (float64): A_nk = -√(2n+1)√(2k+1) for n > k, -(n+1) for n = k, 0 above; B_n = √(2n+1)."""
    n = torch.arange(state_size, dtype=torch.float64, device="cpu")
    q = torch.sqrt(2 * n + 1)
    A = -torch.tril(q[:, None] * q[None, :], diagonal=-1) - torch.diag(n + 1)  # (N, N)
    return A, q


def hippo_legs_nplr(state_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """Λ, P, B (each (N/2,) complex128) with LegS = V (diag(Λ) - P Pᴴ) Vᴴ on the full conjugate-pair basis.

    A + P Pᵀ with P_n = √(n + 1/2) is -I/2 plus a skew-symmetric matrix, so it is unitarily diagonalisable with
    Re Λ = -1/2 (S4, Gu et al. 2022, Thm. 1). Of each conjugate pair the eigenvalue with Im Λ <= 0 is kept; P and
    B are expressed in that eigenbasis (P ← Vᴴ P, B ← Vᴴ B).
    """
    A, B = hippo_legs(state_size)
    P = torch.sqrt(torch.arange(state_size, dtype=torch.float64, device="cpu") + 0.5)  # (N,)
    skew = A + P[:, None] * P[None, :] + 0.5 * torch.eye(state_size, dtype=torch.float64, device="cpu")  # Sᵀ = -S
    imag, V = torch.linalg.eigh(-1j * skew)  # S v = i w v; eigenvalues ascending: the first N/2 are <= 0
    V = V[:, : state_size // 2]  # (N, N/2)
    lam = torch.complex(torch.full_like(imag[: state_size // 2], -0.5), imag[: state_size // 2])  # (N/2,)
    return lam, V.conj().T @ P.to(V.dtype), V.conj().T @ B.to(V.dtype)


def as_complex(pairs: Tensor) -> Tensor:
    """(..., 2) real pairs -> (...) complex view."""
    return torch.view_as_complex(pairs if pairs.stride(-1) == 1 else pairs.contiguous())


# ----------------------------------------------------------------------------------------------------------------
# Cauchy kernel
# ----------------------------------------------------------------------------------------------------------------

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


class _PairedCauchy(torch.autograd.Function):
    """U[m, h, k] = Σ_n (α[h, m, n] c_k + i β[h, m, n] s_k) R[h, n, k] as (M, 2, H, F): real and imaginary planes.

    Computed chunk by chunk (features x frequencies) as G = [α; β] @ [Re R | Im R]: the (H, N/2, F) Cauchy matrix is
    never materialised, and the backward recomputes each chunk instead of saving it.
    """

    @staticmethod
    def forward(ctx, coef: Tensor, mu_re: Tensor, mu_im: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
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
        ctx.save_for_backward(coef, mu_re, mu_im, cos, sin)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        coef, mu_re, mu_im, cos, sin = ctx.saved_tensors
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
        return grad_coef, 2 * mu_re * s1 - 2 * s2, 2 * mu_im * s1, None, None


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
    planes = _PairedCauchy.apply(coef, mu.real.contiguous(), mu.imag.contiguous(), cos, sin)  # (M, 2, H, F)
    return [tuple(u.unbind(0)) for u in planes.unbind(0)]


def woodbury_spectrum(sums: list[tuple[Tensor, Tensor]], dt: Tensor, length: int) -> Tensor:
    """K̂ (C, H, F) at the rfft bins of `length` from the scaled Cauchy sums U_ab = k_ab / c of `paired_cauchy`.

    With τ = i tan(θ/2) = (Δ/2) g, hc = (Δ/2) cos(θ/2) and 1 + τ = e^{iθ/2} / cos(θ/2):
        K̂ = (1 + τ)(Δ/2)(k_CB - (Δ/2) k_CP k_PB / (1 + (Δ/2) k_PP)) = e^{iθ/2} (Δ/2)(U_CB - U_CP e),
        e = hc U_PB / (1 + hc U_PP),
    finite at the Nyquist bin (cos = 0). Real arithmetic: complex division and conjugate views are slow on CPU.
    """
    dtype = dt.dtype
    angle = math.pi * torch.arange(length // 2 + 1, device=dt.device, dtype=torch.float64) / length  # θ/2 (F,)
    half_dt = (dt / 2).unsqueeze(-1)  # (H, 1)
    hc, hs = half_dt * angle.cos().to(dtype), half_dt * angle.sin().to(dtype)  # (Δ/2) e^{iθ/2} = hc + i hs
    (pb_re, pb_im), (pp_re, pp_im) = sums[-2], sums[-1]
    den_re, den_im = 1 + hc * pp_re, hc * pp_im  # 1 + hc U_PP
    scale = hc / (den_re.square() + den_im.square())
    e_re, e_im = (pb_re * den_re + pb_im * den_im) * scale, (pb_im * den_re - pb_re * den_im) * scale
    spectra = []
    for (cb_re, cb_im), (cp_re, cp_im) in zip(sums[:-2:2], sums[1:-2:2]):  # one per direction
        w_re = cb_re - (cp_re * e_re - cp_im * e_im)  # U_CB - U_CP e
        w_im = cb_im - (cp_re * e_im + cp_im * e_re)
        spectra.append(torch.complex(w_re * hc - w_im * hs, w_re * hs + w_im * hc))
    return torch.stack(spectra)  # (C, H, F)


# ----------------------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------------------


class S4KernelBase(nn.Module):
    """Parameters shared by the NPLR and diagonal kernels: Δ per feature; Λ, B per SSM copy; C per feature and
    direction. Re Λ = -exp(θ) keeps the system stable."""

    def __init__(self, config: S4Config):
        super().__init__()
        self.config = config
        self.hidden_size, self.half = config.hidden_size, config.state_size // 2
        self.n_ssm = config.n_ssm or config.hidden_size
        self.channels = 2 if config.bidirectional else 1
        self.log_dt = nn.Parameter(torch.empty(self.hidden_size))  # log Δ
        self.log_lambda_real = nn.Parameter(torch.empty(self.n_ssm, self.half))  # θ, Re Λ = -exp(θ)
        self.lambda_imag = nn.Parameter(torch.empty(self.n_ssm, self.half))
        self.B = nn.Parameter(torch.empty(self.n_ssm, self.half, 2))
        self.C = nn.Parameter(torch.empty(self.channels, self.hidden_size, self.half, 2))

    def optimizer_overrides(self) -> dict[str, dict]:
        """Method.md §6: Λ, P, B at `ssm_learning_rate`, Δ at the global lr; all weight decay 0. C: ordinary."""
        ssm = {"weight_decay": 0.0}
        if self.config.ssm_learning_rate is not None:
            ssm["lr"] = self.config.ssm_learning_rate
        names = [name for name in ("log_lambda_real", "lambda_imag", "P", "B") if hasattr(self, name)]
        return {"log_dt": {"weight_decay": 0.0}, **{name: dict(ssm) for name in names}}

    def _tile(self, x: Tensor) -> Tensor:
        """(n_ssm, ...) -> (H, ...): feature h uses copy h mod n_ssm."""
        return x.repeat(self.hidden_size // self.n_ssm, *([1] * (x.dim() - 1)))

    def _ssm(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Δ (H,), Λ (H, N/2) and B (H, N/2) complex, in `dtype` precision."""
        lam = torch.complex(-self.log_lambda_real.to(dtype).exp(), self.lambda_imag.to(dtype))  # (n_ssm, N/2)
        return self.log_dt.to(dtype).exp(), self._tile(lam), self._tile(as_complex(self.B.to(dtype)))

    def _init_structure(self) -> None:
        """Fill log Δ ~ U(log dt_min, log dt_max), Λ and B (and P for NPLR) from `config.init`."""
        cfg = self.config
        init.uniform_(self.log_dt, math.log(cfg.time_step_min), math.log(cfg.time_step_max))
        init.constant_(self.log_lambda_real, math.log(0.5))  # Re Λ = -1/2 in every init
        ones = torch.zeros(self.n_ssm, self.half, 2, device="cpu")
        ones[..., 0] = 1.0  # B = 1
        if cfg.init == "random":
            init.normal_(self.lambda_imag)
            init.copy_(self.B, ones)
            if hasattr(self, "P"):
                init.normal_(self.P, std=math.sqrt(0.5))  # complex N(0, 1)
        elif hasattr(self, "P"):
            lam, P, B = hippo_legs_nplr(2 * self.half)
            init.copy_(self.lambda_imag, lam.imag.float().expand(self.n_ssm, -1))
            init.copy_(self.P, torch.view_as_real(P).float().expand(self.n_ssm, -1, -1))
            init.copy_(self.B, torch.view_as_real(B).float().expand(self.n_ssm, -1, -1))
        else:  # S4D-Lin
            lin = math.pi * torch.arange(self.half, dtype=torch.float32, device="cpu")  # Im Λ_n = πn
            init.copy_(self.lambda_imag, lin.expand(self.n_ssm, -1))
            init.copy_(self.B, ones)


class S4KernelNPLR(S4KernelBase):
    """The S4 kernel K (C, H, L) of the bilinear discretisation of A = Λ - P Pᴴ, computed as in S4 (Gu et al. 2022):

        K̂(z) = Σ_l K_l z^l = (2 / (1 + z)) C̃ (g(z) I - A)⁻¹ B,   g(z) = (2/Δ) (1 - z) / (1 + z),

    at the L-th roots of unity z, where C̃ = C (I - Ā^L) (stored as the parameter `C`, L = max_position_embeddings)
    makes the truncated generating function exact; Woodbury turns the resolvent of Λ - P Pᴴ into four Cauchy sums
    k_ab = Σ_n a_n b_n / (g - λ_n), a ∈ {C̃, P̄}, b ∈ {B, P}:  K̂ = (2 / (1 + z)) (k_CB - k_CP k_PB / (1 + k_PP)).
    An inverse FFT gives K. Inputs longer than L double C̃ ← C̃ (I + Ā^L) as often as needed (exact, slower).
    """

    def __init__(self, config: S4Config):
        super().__init__(config)
        self.max_length = config.max_position_embeddings
        self.P = nn.Parameter(torch.empty(self.n_ssm, self.half, 2))
        self._step_cache: tuple | None = None
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """Structured (or random) Λ, P, B; log Δ uniform; C ~ complex N(0, 1) stored as C̃ = C (I - Ā^L)."""
        if self.log_dt.is_meta:
            return
        self._init_structure()
        with torch.no_grad():
            c = torch.randn(self.channels, self.hidden_size, self.half, dtype=torch.complex128, device=self.C.device)
            transition, _ = self.discretize(torch.float64)
            power = torch.linalg.matrix_power(transition, self.max_length)  # Ā^L (H, N, N)
            c_full = torch.cat([c, c.conj()], -1)  # (C, H, N)
            c_tilde = c_full - torch.einsum("chn,hnm->chm", c_full, power)  # C (I - Ā^L)
        init.copy_(self.C, torch.view_as_real(c_tilde[..., : self.half]).to(self.C.dtype))

    def discretize(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Dense bilinear Ā = (I - Δ/2 A)⁻¹ (I + Δ/2 A), B̄ = (I - Δ/2 A)⁻¹ Δ B on the full (N) conjugate basis."""
        dt, lam, B = self._ssm(dtype)
        P = self._tile(as_complex(self.P.to(dtype)))  # (H, N/2)
        lam, P, B = (torch.cat([x, x.conj()], -1) for x in (lam, P, B))  # (H, N)
        A = torch.diag_embed(lam) - P.unsqueeze(-1) * P.conj().unsqueeze(-2)  # (H, N, N)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        half_step = (dt / 2).to(A.dtype)[:, None, None] * A  # (H, N, N)
        backward = eye - half_step
        transition = torch.linalg.solve(backward, eye + half_step)  # (H, N, N)
        return transition, dt.to(A.dtype)[:, None] * torch.linalg.solve(backward, B.unsqueeze(-1)).squeeze(-1)

    def _c_tilde(self, length: int, dtype: torch.dtype) -> tuple[Tensor, int]:
        """C̃ (C, H, N/2) for the grid length L' >= length: L' = max_length, doubled while shorter than length."""
        c_tilde, grid = as_complex(self.C.to(dtype)), self.max_length
        if length <= grid:
            return c_tilde, grid
        transition, _ = self.discretize(dtype)
        power = torch.linalg.matrix_power(transition, grid)  # Ā^L' (H, N, N)
        c_full = torch.cat([c_tilde, c_tilde.conj()], -1)  # (C, H, N)
        while grid < length:
            c_full = c_full + torch.einsum("chn,hnm->chm", c_full, power)  # C̃_2L = C̃_L (I + Ā^L)
            power, grid = power @ power, 2 * grid
        return c_full[..., : self.half], grid

    def forward(self, length: int) -> Tensor:
        """The kernel (C, H, length): C = 2 (forward, backward direction) when bidirectional, else 1."""
        dtype = compute_dtype(self.log_dt)
        dt, lam, B = self._ssm(dtype)  # (H,), (H, N/2), (H, N/2)
        P = self._tile(as_complex(self.P.to(dtype)))  # (H, N/2)
        c_tilde, grid = self._c_tilde(length, dtype)  # (C, H, N/2)
        mu = lam * (dt / 2).unsqueeze(-1)  # (H, N/2)  μ = Δλ/2
        v = torch.stack([a * b for a in (*c_tilde, P.conj()) for b in (B, P)])  # (2C+2, H, N/2) numerators a·b
        coef = torch.cat([-2 * (v * mu.conj()).real, 2 * v.real]).transpose(0, 1).contiguous()  # (H, 2M, N/2) [α; β]
        sums = paired_cauchy(coef, mu, grid)  # 2C+2 sums (Re, Im) (H, F), ordered as v
        spectrum = woodbury_spectrum(sums, dt, grid)  # (C, H, F) K̂ at the roots of unity
        return torch.fft.irfft(spectrum, n=grid)[..., :length]  # (C, H, L)

    def _step_matrices(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Ā, B̄, C (causal channel) on the real basis r = [Re x; Im x] of the state x: (H, N, N), (H, N), (H, N).

        C = C̃ (I - Ā^L)⁻¹ undoes the C̃ reparameterisation. Computed in float64, cached (per dtype) until a
        parameter changes (its `_version`).
        """
        key = (self.C.device, dtype, *(p._version for p in self.parameters()))
        if self._step_cache is not None and self._step_cache[0] == key:
            return self._step_cache[1]
        with torch.no_grad():
            transition, input_vec = self.discretize(torch.float64)  # (H, N, N), (H, N)
            eye = torch.eye(2 * self.half, dtype=transition.dtype, device=transition.device)
            c_tilde = as_complex(self.C[0].to(torch.float64))  # (H, N/2)
            c_tilde = torch.cat([c_tilde, c_tilde.conj()], -1)  # (H, N)
            power = torch.linalg.matrix_power(transition, self.max_length)
            c_out = torch.linalg.solve((eye - power).mT, c_tilde.unsqueeze(-1)).squeeze(-1)  # C = C̃ (I - Ā^L)⁻¹
            # x = T r with T = [[I, iI], [I, -iI]]: the real system r' = T⁻¹ Ā T r + T⁻¹ B̄ u, y = C T r
            identity, i_block = eye[: self.half, : self.half], 1j * eye[: self.half, : self.half]
            basis = torch.cat([torch.cat([identity, i_block], 1), torch.cat([identity, -i_block], 1)])  # T (N, N)
            inverse = torch.linalg.inv(basis)
            matrices = tuple(
                m.real.to(dtype).contiguous()
                for m in (inverse @ transition @ basis, input_vec @ inverse.T, c_out @ basis)
            )
        self._step_cache = (key, matrices)
        return matrices

    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        """Zero real state (B, H, N) of the dense recurrence."""
        return torch.zeros(batch_size, self.hidden_size, 2 * self.half, device=device, dtype=state_dtype(dtype))

    def step(self, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x' = Ā x + B̄ u, y = C x' for u (B, H): O(N²) per feature and token (dense Ā on the real basis)."""
        transition, input_vec, output_vec = self._step_matrices(state.dtype)
        state = torch.einsum("hij,bhj->bhi", transition, state) + input_vec * u.unsqueeze(-1)  # (B, H, N)
        return (state * output_vec).sum(-1), state  # (B, H), (B, H, N)


class S4KernelDiag(S4KernelBase):
    """S4D kernel K_l = 2 Re Σ_n C_n B̄_n Ā_n^l of a diagonal A (bilinear: Ā = (1 + μ)/(1 - μ), B̄ = Δ B/(1 - μ)),
    evaluated with blocked powers Ā^(i·c + j) = (Ā^c)^i Ā^j and one batched matmul (no exp per (h, n, l))."""

    def __init__(self, config: S4Config):
        super().__init__(config)
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        """S4D-Lin (or random) Λ, B = 1, log Δ uniform, C ~ complex N(0, 1)."""
        if self.log_dt.is_meta:
            return
        self._init_structure()
        init.normal_(self.C, std=math.sqrt(0.5))

    def discretize(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """μ = Δλ/2, Ā = (1 + μ)/(1 - μ) and B̄ = Δ B/(1 - μ), each (H, N/2) complex."""
        dt, lam, B = self._ssm(dtype)
        mu = lam * (dt / 2).unsqueeze(-1)  # (H, N/2)
        return mu, (1 + mu) / (1 - mu), B * dt.unsqueeze(-1) / (1 - mu)

    def forward(self, length: int) -> Tensor:
        """The kernel (C, H, length)."""
        mu, _, input_vec = self.discretize(compute_dtype(self.log_dt))  # (H, N/2)
        weights = as_complex(self.C.to(input_vec.real.dtype)) * input_vec  # (C, H, N/2)  C B̄
        log_transition = torch.log(1 + mu) - torch.log(1 - mu)  # log Ā (H, N/2)
        coarse, fine, _ = blocked_powers(log_transition, length)  # (H, N/2, I) Ā^(ic), (H, N/2, c) Ā^j
        left = (weights.unsqueeze(-1) * coarse).permute(1, 0, 3, 2).flatten(1, 2)  # (H, C·I, N/2)
        # 2 Re(left @ fine) = 2 [Re left, Im left] @ [Re fine; -Im fine]: one real batched matmul
        real = torch.bmm(torch.cat([left.real, left.imag], -1), torch.cat([fine.real, -fine.imag], 1))  # (H, C·I, c)
        kernel = 2 * real.view(self.hidden_size, self.channels, -1)[..., :length]  # (H, C, L)
        return kernel.transpose(0, 1)  # (C, H, L)

    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        """Zero state (B, H, N/2, 2): complex x as real pairs."""
        return torch.zeros(batch_size, self.hidden_size, self.half, 2, device=device, dtype=state_dtype(dtype))

    def step(self, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x' = Ā x + B̄ u, y = 2 Re Σ_n C_n x'_n for u (B, H): O(N) per feature and token."""
        with torch.no_grad():
            _, transition, input_vec = self.discretize(state.dtype)  # (H, N/2)
            c_out = as_complex(self.C[0].to(state.dtype))  # (H, N/2)
        x = transition * as_complex(state) + input_vec * u.unsqueeze(-1).to(state.dtype)  # (B, H, N/2)
        return 2 * (c_out * x).real.sum(-1), torch.view_as_real(x)  # (B, H), (B, H, N/2, 2)


def state_dtype(dtype: torch.dtype | None) -> torch.dtype:
    """Recurrent states are kept in float32 (float64 if asked), whatever the model's dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------------------------
# Mixer
# ----------------------------------------------------------------------------------------------------------------


def check_finite(kernel: Tensor, layer: nn.Module) -> None:
    """Raise a FloatingPointError naming the layer if the SSM kernel overflowed (e.g. after a divergent step)."""
    if not torch.isfinite(kernel).all():
        raise FloatingPointError(
            f"{type(layer).__name__} (layer {layer.layer_idx}): the SSM kernel has non-finite values; the SSM "
            "parameters diverged (lower the learning rate or ssm_learning_rate)."
        )


class SSMMixer(nn.Module):
    """The SSM layer shared by S4 and DLR: y = GLU(Linear(H, 2H)(Dropout(GELU(K * u + D ⊙ u)))) on (B, L, H).

    `kernel` maps a length L to the kernels (C, H, L): C = 1 (causal, lags 0..L-1) or C = 2 (bidirectional, the
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
            kernel = self.kernel(hidden_states.shape[1])  # (C, H, L) float32
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

    def init_state(self, batch_size: int, device=None, dtype=None) -> tuple[Tensor, ...]:
        """Zero recurrent state for `batch_size` sequences (real tensors, float32 unless dtype is float64)."""
        self._require_causal()
        return (self.kernel.init_state(batch_size, device, dtype),)

    def step(self, hidden_state: Tensor, state: tuple[Tensor, ...], attention_mask=None, **kwargs):
        """One position (B, H) -> (output (B, H), new state); equals `forward` position by position (eval mode)."""
        self._require_causal()
        with torch.autocast(device_type=hidden_state.device.type, enabled=False):
            u = hidden_state.to(state[0].dtype)  # (B, H)
            y, new_state = self.kernel.step(u, state[0])  # (B, H)
            y = y + self.D.to(u.dtype) * u
        return self._output(y.to(hidden_state.dtype)), (new_state,)


class S4Mixer(SSMMixer):
    """The S4 layer (`SSMMixer` with the NPLR or S4D kernel of `config.kernel`).

    Lengths: S4D computes its kernel at the input length, so any length works. NPLR computes its kernel at
    `max_position_embeddings` for shorter inputs (C̃ is stored for that length) and doubles that length as often
    as needed for longer ones (exact, but slower and with the N x N matrix powers of Ā on the way).
    """

    def __init__(self, config: S4Config, layer_idx: int | None = None):
        kernel = S4KernelNPLR(config) if config.kernel == "nplr" else S4KernelDiag(config)
        super().__init__(config, layer_idx, kernel)


# ----------------------------------------------------------------------------------------------------------------
# Models: the shared backbone with this mixer, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class S4PreTrainedModel(SPTPreTrainedModel):
    config: S4Config


class S4Model(SequenceBackbone, S4PreTrainedModel):
    """S4 backbone: embedding -> layers of one residual block around the S4 layer -> final norm."""

    mixer_classes = (S4Mixer,)


class S4ForMaskedLM(SequenceForMaskedLM, S4PreTrainedModel):
    backbone_class = S4Model


class S4ForCausalLM(SequenceForCausalLM, S4PreTrainedModel, GenerationMixin):
    backbone_class = S4Model


class S4ForSequenceClassification(SequenceForSequenceClassification, S4PreTrainedModel):
    backbone_class = S4Model


class S4ForRetrieval(SequenceForRetrieval, S4PreTrainedModel):
    backbone_class = S4Model


__all__ = [
    "S4PreTrainedModel",
    "S4Model",
    "S4ForMaskedLM",
    "S4ForCausalLM",
    "S4ForSequenceClassification",
    "S4ForRetrieval",
]
