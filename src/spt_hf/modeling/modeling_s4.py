"""S4 as the paper used it: HiPPO-LegS state matrix in normal-plus-low-rank (NPLR) form, bilinear discretisation,
S4's C̃ parameterisation; S4D (diagonal) as the simpler option.

Reads top to bottom: HiPPO-LegS -> kernels (shared parameters, the NPLR kernel: S4's Cauchy sums with their Woodbury
correction for short kernels, blocked powers of the discretised state matrix for long ones; the S4D kernel) -> the S4
layer (`SSMMixer` of ssm.py around the kernel) -> models. The Cauchy sums are a CPU-tuned autograd function of their
own (cauchy.py); the layer, the FFT convolution and the recurrent-state helpers are shared with DLR (ssm.py).

Notation: H features, N state size (N/2 conjugate pairs stored), L length, Δ step size, μ = Δλ/2. Every
parameter is real (complex values are stored as real pairs, trailing dim 2): complex parameters break safetensors,
NCCL all-reduce and some DDP paths (docs/method.md §8.7). Complex arithmetic happens inside forward only.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers import initialization as init

from .cauchy import paired_cauchy
from .configuration_s4 import S4Config
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBaseModel, SequencePreTrainedModel
from .precision import Float32Parameters
from .ssm import SSMMixer, as_complex, block_size, blocked_powers, state_dtype

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


# ----------------------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------------------


class S4KernelBase(Float32Parameters):
    """Parameters shared by the NPLR and diagonal kernels: Δ per feature; Λ, B per SSM copy; C per feature and
    direction. Re Λ = -exp(θ) keeps the system stable. All stay float32 under mixed precision (precision.py)."""

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
        """docs/method.md §6: Λ, P, B at `ssm_learning_rate`, Δ at the global lr; all weight decay 0. C: ordinary."""
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


def woodbury_spectrum(sums: list[tuple[Tensor, Tensor]], dt: Tensor, length: int) -> Tensor:
    """K̂ (nd, H, F) at the rfft bins of `length` from the scaled Cauchy sums U_ab = k_ab / c of `paired_cauchy`.

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
    return torch.stack(spectra)  # (nd, H, F)


class _FlushTiny(torch.autograd.Function):
    """x with the entries of magnitude below √(smallest normal float) set to zero, in the forward and in the gradient.

    A product of two such entries is subnormal, and this CPU's matrix products ran 137x slower on inputs whose
    products were subnormal; the entries flushed weigh less than 1e-19 against the entries of order one of a power
    of Ā (||Ā|| <= 1), so the kernel does not change at float32 precision. The gradient passes straight through.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return F.hardshrink(x, math.sqrt(torch.finfo(x.dtype).tiny))

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return F.hardshrink(grad, math.sqrt(torch.finfo(grad.dtype).tiny))


def _real_pairs(z: Tensor) -> Tensor:
    """(..., N/2) complex -> (..., N) real [Re z, Im z]: the coordinates of the state basis r = [Re x; Im x]."""
    return torch.cat([z.real, z.imag], -1)


def _complex_diagonal(d: Tensor) -> Tensor:
    """(H, N/2) complex -> (H, N, N): x ↦ d ⊙ x on the real basis, [[diag Re d, -diag Im d], [diag Im d, diag Re d]]."""
    re, im = torch.diag_embed(d.real), torch.diag_embed(d.imag)
    return torch.cat([torch.cat([re, -im], -1), torch.cat([im, re], -1)], -2)


def squarings(matrix: Tensor, count: int) -> list[Tensor]:
    """[M, M², M⁴, ..., M^(2^(count-1))] for a batch of matrices with ||M|| <= 1, tiny entries flushed to zero."""
    powers = [matrix]
    while len(powers) < count:
        powers.append(_FlushTiny.apply(powers[-1] @ powers[-1]))
    return powers


def power_from_squarings(powers: list[Tensor], exponent: int) -> Tensor:
    """M^exponent as the product of the squarings M^(2^k) of the exponent's binary digits (len(powers) > its top
    bit)."""
    factors = [powers[k] for k in range(exponent.bit_length()) if exponent >> k & 1]
    result = factors[0]
    for factor in factors[1:]:
        result = result @ factor
    return result


# S4's Cauchy sums cost O(N L) element-wise operations per feature and kernel direction, the blocked powers about
# log2(L) N x N matrix products per feature whatever the directions: the 2-core CPU timed them (forward + backward,
# H = 128, N = 64) equal at about (directions + 1) x L = 4096 (causal: Cauchy 42 ms against 49 ms at L = 2048, 76
# against 58 ms at 4096; bidirectional: 60 against 51 ms at 2048), and the powers about 0.07 s against 0.3 s at 16384.
_CAUCHY_MAX_WORK = 4096


class S4KernelNPLR(S4KernelBase):
    """The S4 kernel K (nd, H, L) of the bilinear discretisation of A = Λ - P Pᴴ (S4, Gu et al. 2022):

        K_l = C Ā^l B̄,   C = C̃ (I - Ā^L)⁻¹,

    where C̃ = C (I - Ā^L) is the stored parameter `C` at L = max_position_embeddings, S4's parameterisation: the
    truncated generating function C̃ (I - Ā z)⁻¹ B̄ at the L-th roots of unity z is exactly the DFT of this K.
    Two exact algorithms, picked by the work each needs (`_CAUCHY_MAX_WORK`):

    - S4's (short kernels): that generating function, with Woodbury turning the resolvent of Λ - P Pᴴ into four
      Cauchy sums k_ab = Σ_n a_n b_n / (g - λ_n), a ∈ {C̃, P̄}, b ∈ {B, P}, g(z) = (2/Δ)(1 - z)/(1 + z):
      K̂(z) = (2 / (1 + z)) (k_CB - k_CP k_PB / (1 + k_PP)), then an inverse FFT; computed at L for any shorter
      input. O(N L) element-wise work per feature and direction (cauchy.py).
    - Blocked powers (long kernels, and inputs longer than L): on the real basis r = [Re x; Im x] of the state, where
      Ā is real and ||Ā||₂ <= 1 (A + Aᵀ = 2 Re Λ - 4 p pᵀ is negative definite), l = i·c + j with c = 2^b >= √L;
      V = [Ā^j B̄]_{j<c} (N, c) and W = [C Ā^{ic}]_i (rows, N) are built by doubling from the squarings Ā^(2^k),
      and K = W @ V: about log₂ L batched N x N products per feature, matrix products only.
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
            power = power_from_squarings(squarings(transition, self.max_length.bit_length()), self.max_length)  # Ā^L
            rows = 2 * _real_pairs(c.conj())  # y = 2 Re(c x) = c_r · r: (nd, H, N)
            c_tilde = rows - torch.einsum("chn,hnm->chm", rows, power)  # C (I - Ā^L)
            c_tilde = torch.complex(c_tilde[..., : self.half], -c_tilde[..., self.half :]) / 2
        init.copy_(self.C, torch.view_as_real(c_tilde).to(self.C.dtype))

    def discretize(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """Bilinear Ā = (I - Δ/2 A)⁻¹ (I + Δ/2 A) (H, N, N) and B̄ = (I - Δ/2 A)⁻¹ Δ B (H, N) on the real basis.

        There A = Λ_r - 2 p pᵀ (p = [Re P; Im P]), so I - Δ/2 A = D + Δ p pᵀ with D = I - Δ/2 Λ diagonal in the
        complex coordinates, and Sherman-Morrison gives its inverse in closed form (the denominator is >= 1):
            Ā = (1 + μ)/(1 - μ) - 2 s u vᵀ,   B̄ = Δ (D⁻¹B - s (pᵀD⁻¹B) u),
        with μ = Δλ/2, u = D⁻¹p, v = D⁻ᵀp and s = Δ / (1 + Δ pᵀD⁻¹p).
        """
        dt, lam, B = self._ssm(dtype)  # (H,), (H, N/2), (H, N/2)
        P = self._tile(as_complex(self.P.to(dtype)))  # (H, N/2)
        mu = lam * (dt / 2).unsqueeze(-1)
        inverse = 1 / (1 - mu)  # D⁻¹ as a complex diagonal
        scale = dt / (1 + dt * (P.real.square() + P.imag.square()).mul(inverse.real).sum(-1))  # s (H,)
        u, v = _real_pairs(inverse * P), _real_pairs(inverse.conj() * P)  # (H, N)
        low_rank = (2 * scale)[:, None, None] * u.unsqueeze(-1) * v.unsqueeze(-2)
        transition = _complex_diagonal((1 + mu) * inverse) - low_rank
        inverse_b = inverse * B  # D⁻¹B
        projection = (P.conj() * inverse_b).real.sum(-1)  # pᵀD⁻¹B (H,)
        input_vec = dt[:, None] * (_real_pairs(inverse_b) - (scale * projection)[:, None] * u)
        return transition, input_vec

    def _output_rows(self, powers: list[Tensor], dtype: torch.dtype) -> Tensor:
        """C = C̃ (I - Ā^L)⁻¹ (H, nd, N) on the real basis, from the squarings of Ā (enough for the power L)."""
        c_tilde = 2 * _real_pairs(as_complex(self.C.to(dtype)).conj())  # (nd, H, N)
        eye = torch.eye(c_tilde.shape[-1], dtype=dtype, device=c_tilde.device)
        system = eye - power_from_squarings(powers, self.max_length)  # I - Ā^L (H, N, N)
        # solve_ex: no error check, which would read the result's info on the host (a device sync); I - Ā^L is
        # invertible (||Ā|| < 1)
        return torch.linalg.solve_ex(system.mT, c_tilde.permute(1, 2, 0))[0].mT  # C (I - Ā^L) = C̃

    def forward(self, length: int) -> Tensor:
        """The kernel (nd, H, length): nd = 2 (forward, backward direction) when bidirectional, else 1."""
        if length <= self.max_length and (self.channels + 1) * self.max_length <= _CAUCHY_MAX_WORK:
            return self._cauchy_kernel(length)
        return self._powers_kernel(length)

    def _cauchy_kernel(self, length: int) -> Tensor:
        """S4's algorithm: Cauchy sums and Woodbury at the roots of unity of L, an inverse FFT, truncated to length."""
        dtype = self.kernel_dtype(self.log_dt)
        dt, lam, B = self._ssm(dtype)  # (H,), (H, N/2), (H, N/2)
        P = self._tile(as_complex(self.P.to(dtype)))  # (H, N/2)
        c_tilde = as_complex(self.C.to(dtype))  # (nd, H, N/2)
        mu = lam * (dt / 2).unsqueeze(-1)  # (H, N/2)  μ = Δλ/2
        v = torch.stack([a * b for a in (*c_tilde, P.conj()) for b in (B, P)])  # (M = 2·nd + 2, H, N/2) numerators a·b
        coef = torch.cat([-2 * (v * mu.conj()).real, 2 * v.real]).transpose(0, 1).contiguous()  # (H, 2M, N/2) [α; β]
        sums = paired_cauchy(coef, mu, self.max_length)  # M sums (Re, Im) (H, F), ordered as v
        spectrum = woodbury_spectrum(sums, dt, self.max_length)  # (nd, H, F) K̂ at the roots of unity
        kernel = torch.fft.irfft(spectrum, n=self.max_length)  # (nd, H, max_length)
        if torch.compiler.is_compiling():  # one zero more: the slice to the length is never the whole kernel, a fact
            kernel = F.pad(kernel, (0, 1))  # torch.compile would guard on (a graph for length == max_length)
        return kernel[..., :length]  # (nd, H, L)

    def _powers_kernel(self, length: int) -> Tensor:
        """Blocked powers of Ā on the real basis (class docstring), at the input length."""
        dtype = self.kernel_dtype(self.log_dt)
        transition, input_vec = self.discretize(dtype)  # (H, N, N), (H, N)
        # c = 2^b >= ⌈√max_length⌉ (fixed: no guard on the exact length under torch.compile); 2^r blocks of c
        # cover the length. Under torch.compile they cover more than max_length whatever the input length up to it,
        # so that neither the count of blocks nor the final slice depends on the length (each a guard, a graph for
        # each power of two): a few more rows, cheap next to the squarings; longer inputs still guard per power of 2
        block_bits = math.isqrt(self.max_length - 1).bit_length()
        cover = self.max_length + 1 if torch.compiler.is_compiling() and length <= self.max_length else length
        row_bits = 0
        while (1 << (block_bits + row_bits)) < cover:
            row_bits += 1
        powers = squarings(transition, max(block_bits + row_bits, self.max_length.bit_length()))
        states = input_vec.unsqueeze(-1)  # Ā^j B̄, j < 2^k: (H, N, 2^k)
        for k in range(block_bits):
            states = torch.cat([states, _FlushTiny.apply(powers[k] @ states)], -1)
        rows = self._output_rows(powers, dtype)  # C Ā^{ic}, i < 2^k: (H, 2^k·nd, N), row i·nd + direction
        for k in range(row_bits):
            rows = torch.cat([rows, _FlushTiny.apply(rows @ powers[block_bits + k])], 1)
        blocks = (rows @ states).view(self.hidden_size, -1, self.channels, states.shape[-1])  # (H, 2^r, nd, c)
        return blocks.permute(2, 0, 1, 3).flatten(2)[..., :length]  # (nd, H, length)

    def _step_matrices(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Ā, B̄, C (causal channel) on the real basis r = [Re x; Im x] of the state x: (H, N, N), (H, N), (H, N).

        Computed in float64, cached (per dtype) until a parameter changes (its `_version`).
        """
        key = (self.C.device, dtype, *(p._version for p in self.parameters()))
        if self._step_cache is not None and self._step_cache[0] == key:
            return self._step_cache[1]
        with torch.no_grad():
            transition, input_vec = self.discretize(torch.float64)  # (H, N, N), (H, N)
            rows = self._output_rows(squarings(transition, self.max_length.bit_length()), torch.float64)
            matrices = tuple(m.to(dtype).contiguous() for m in (transition, input_vec, rows[:, 0]))
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
        """The kernel (nd, H, length)."""
        mu, _, input_vec = self.discretize(self.kernel_dtype(self.log_dt))  # (H, N/2)
        weights = as_complex(self.C.to(input_vec.real.dtype)) * input_vec  # (nd, H, N/2)  C B̄
        log_transition = torch.log(1 + mu) - torch.log(1 - mu)  # log Ā (H, N/2)
        block = block_size(self.config.max_position_embeddings)  # fixed: no guard on the length under compile
        coarse, fine, _ = blocked_powers(log_transition, length, block)  # (H, N/2, I) Ā^(ic), (H, N/2, c) Ā^j
        left = (weights.unsqueeze(-1) * coarse).permute(1, 0, 3, 2).flatten(1, 2)  # (H, nd·I, N/2)
        # 2 Re(left @ fine) = 2 [Re left, Im left] @ [Re fine; -Im fine]: one real batched matmul
        real = torch.bmm(torch.cat([left.real, left.imag], -1), torch.cat([fine.real, -fine.imag], 1))  # (H, nd·I, c)
        kernel = 2 * real.view(self.hidden_size, self.channels, -1)[..., :length]  # (H, nd, L)
        return kernel.transpose(0, 1)  # (nd, H, L)

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


# ----------------------------------------------------------------------------------------------------------------
# The S4 layer
# ----------------------------------------------------------------------------------------------------------------


class S4Mixer(SSMMixer):
    """The S4 layer (`SSMMixer` with the NPLR or S4D kernel of `config.kernel`).

    Lengths: both kernels are computed at the input length, so any length works; NPLR's C̃ is stored for
    `max_position_embeddings` and turned into C once per forward.
    """

    def __init__(self, config: S4Config, layer_idx: int | None = None):
        kernel = S4KernelNPLR(config) if config.kernel == "nplr" else S4KernelDiag(config)
        super().__init__(config, layer_idx, kernel)


# ----------------------------------------------------------------------------------------------------------------
# Models: the shared base model with this mixer, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class S4PreTrainedModel(SequencePreTrainedModel):
    config: S4Config
    _is_stateful = True  # a recurrent state cannot be rolled back: transformers refuses assisted decoding


class S4Model(SequenceBaseModel, S4PreTrainedModel):
    """S4 base model: embedding -> layers of one residual block around the S4 layer -> final norm."""

    mixer_classes = (S4Mixer,)


class S4ForMaskedLM(SequenceForMaskedLM, S4PreTrainedModel):
    base_model_class = S4Model


class S4ForCausalLM(SequenceForCausalLM, S4PreTrainedModel, GenerationMixin):
    base_model_class = S4Model


class S4ForSequenceClassification(SequenceForSequenceClassification, S4PreTrainedModel):
    base_model_class = S4Model


class S4ForRetrieval(SequenceForRetrieval, S4PreTrainedModel):
    base_model_class = S4Model


__all__ = [
    "S4PreTrainedModel",
    "S4Model",
    "S4ForMaskedLM",
    "S4ForCausalLM",
    "S4ForSequenceClassification",
    "S4ForRetrieval",
]
