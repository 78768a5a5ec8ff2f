"""S4 (NPLR), S4D and DLR layers against independent formulations of the same maths.

Oracles: explicit powers of the dense discretised Ā, one at a time (NPLR), S4's truncated generating function of C̃ at
the roots of unity (NPLR), the complex-exp Vandermonde (S4D), the direct sum of exponentials (DLR), step-by-step
recurrences of the discretised SSMs, a direct double-loop convolution.
Everything is tiny (H = 8, N <= 16, L <= 80) and float64 where the comparison is exact.
"""

import math

import pytest
import torch

import spt_hf.modeling.cauchy as cauchy_module
import spt_hf.modeling.modeling_s4 as s4_module
import spt_hf.modeling.ssm as ssm_module
from spt_hf.modeling.cauchy import paired_cauchy
from spt_hf.modeling.configuration_dlr import DLRConfig
from spt_hf.modeling.configuration_s4 import S4Config
from spt_hf.modeling.modeling_dlr import DLRKernel, DLRMixer
from spt_hf.modeling.modeling_s4 import S4KernelNPLR, S4Mixer, hippo_legs, hippo_legs_nplr, squarings
from spt_hf.modeling.ssm import as_complex, blocked_powers, fft_conv

H, L_MAX = 8, 32
KINDS = ["nplr", "diag", "dlr"]
# NPLR's two algorithms, each forced (S4's Cauchy sums wherever the input is within the stored length, or blocked
# powers at every length) besides the kernels of the other kinds
ALGORITHMS = ["nplr-cauchy", "nplr-powers", "diag", "dlr"]


def use_algorithm(name: str, monkeypatch) -> str:
    """The kind of `name` (an entry of ALGORITHMS), with NPLR's choice of algorithm forced as named."""
    if name.startswith("nplr-"):
        monkeypatch.setattr(s4_module, "_CAUCHY_MAX_WORK", 10**9 if name == "nplr-cauchy" else 0)
        return "nplr"
    return name


def make_config(kind: str, bidirectional: bool = False, **overrides):
    common = {"vocab_size": 10, "hidden_size": H, "bidirectional": bidirectional, "max_position_embeddings": L_MAX}
    if kind == "dlr":
        return DLRConfig(**{"state_size": 16, **common, **overrides})
    return S4Config(**{"state_size": 16, "kernel": kind, "n_ssm": 2, **common, **overrides})


def make_mixer(kind: str, bidirectional: bool = False, dtype=torch.float64, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = make_config(kind, bidirectional, **overrides)
    mixer = DLRMixer(config, 0) if kind == "dlr" else S4Mixer(config, 0)
    return mixer.to(dtype).eval()


def full_pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., N/2) -> (..., N): both members of every conjugate pair."""
    return torch.cat([x, x.conj()], -1)


def ssm_oracle(kernel) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Discretised state matrices (H, N, N), inputs (H, N), outputs (C, H, N) built here from the parameters alone:
    the full complex system with x_{t} = Ā x_{t-1} + B̄ u_t, y_t = Re(C x_t)."""
    if isinstance(kernel, DLRKernel):
        lam = torch.complex(-kernel.lambda_neg_real_sqrt.square(), kernel.lambda_imag)  # (N,)
        transition = torch.diag_embed(lam.exp()).expand(H, -1, -1)
        return transition, torch.ones(H, lam.shape[0], dtype=lam.dtype), as_complex(kernel.W)
    repeat = H // kernel.n_ssm
    dt = kernel.log_dt.exp()
    lam = full_pairs(torch.complex(-kernel.log_lambda_real.exp(), kernel.lambda_imag).repeat(repeat, 1))  # (H, N)
    B = full_pairs(as_complex(kernel.B).repeat(repeat, 1))
    A = torch.diag_embed(lam)
    if isinstance(kernel, S4KernelNPLR):
        P = full_pairs(as_complex(kernel.P).repeat(repeat, 1))
        A = A - P[..., :, None] * P.conj()[..., None, :]
    eye = torch.eye(A.shape[-1], dtype=A.dtype)
    backward = torch.linalg.inv(eye - dt[:, None, None] / 2 * A)  # bilinear
    transition = backward @ (eye + dt[:, None, None] / 2 * A)
    input_vec = dt[:, None] * (backward @ B[..., None])[..., 0]
    C = full_pairs(as_complex(kernel.C))  # (C, H, N)
    if isinstance(kernel, S4KernelNPLR):  # the parameter is C̃ = C (I - Ā^L)
        power = torch.linalg.matrix_power(transition, kernel.max_length)
        C = torch.linalg.solve((eye - power).mT, C[..., None])[..., 0]
    return transition, input_vec, C


def powers_kernel(kernel, length: int) -> torch.Tensor:
    """K_l = Re(C Ā^l B̄) (C, H, L) by explicit powers of the dense Ā."""
    transition, input_vec, C = ssm_oracle(kernel)
    x, out = input_vec.clone(), []
    for _ in range(length):
        out.append((C * x).sum(-1).real)
        x = (transition @ x[..., None])[..., 0]
    return torch.stack(out, -1)


def recurrence(kernel, u: torch.Tensor, channel: int = 0) -> torch.Tensor:
    """y_t = Re(C x_t), x_t = Ā x_{t-1} + B̄ u_t over u (B, L, H), one step at a time."""
    transition, input_vec, C = ssm_oracle(kernel)
    x = torch.zeros(u.shape[0], *input_vec.shape, dtype=input_vec.dtype)  # (B, H, N)
    out = []
    for t in range(u.shape[1]):
        x = torch.einsum("hij,bhj->bhi", transition, x) + input_vec * u[:, t, :, None]
        out.append((C[channel] * x).sum(-1).real)
    return torch.stack(out, 1)  # (B, L, H)


def ssm_part(mixer, u: torch.Tensor) -> torch.Tensor:
    """The mixer's SSM output K * u + D ⊙ u, before GELU and the output layer."""
    return fft_conv(u, mixer.kernel(u.shape[1]), mixer.D)


# --------------------------------------------------------------------------------------------------------------
# Kernels against independent formulations
# --------------------------------------------------------------------------------------------------------------


def test_hippo_legs_nplr_is_legs_in_an_eigenbasis():
    A, B = hippo_legs(16)
    lam, P, B_eig = hippo_legs_nplr(16)
    assert torch.allclose(lam.real, torch.full_like(lam.real, -0.5))
    assert (lam.imag <= 0).all()
    A_eig = torch.diag_embed(full_pairs(lam)) - full_pairs(P)[:, None] * full_pairs(P).conj()[None, :]
    eye = torch.eye(16, dtype=torch.complex128)
    for z in (0.3 + 0.7j, -2.0 + 5j, 1.5 - 0.1j):  # similar systems have equal transfer functions
        legs = B.to(eye.dtype) @ torch.linalg.solve(z * eye - A.to(eye.dtype), B.to(eye.dtype))
        eig = full_pairs(B_eig).conj() @ torch.linalg.solve(z * eye - A_eig, full_pairs(B_eig))
        assert torch.allclose(legs, eig, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("algorithm", ["nplr-cauchy", "nplr-powers"])
@pytest.mark.parametrize("init", ["legs", "random"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_nplr_kernel_equals_dense_powers(algorithm, init, bidirectional, monkeypatch):
    kernel = make_mixer(use_algorithm(algorithm, monkeypatch), bidirectional, init=init).kernel
    for length in (L_MAX, 20, 2 * L_MAX + 7):  # the stored length, shorter (truncated), longer (C̃ doubled)
        expected = powers_kernel(kernel, length)
        assert kernel(length).shape == (2 if bidirectional else 1, H, length)
        torch.testing.assert_close(kernel(length), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("algorithm", ["nplr-cauchy", "nplr-powers"])
@pytest.mark.parametrize("init", ["legs", "random"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_nplr_kernel_is_the_truncated_generating_function_of_c_tilde(algorithm, init, bidirectional, monkeypatch):
    """S4's own formulation: at the L-th roots of unity z (L = max_position_embeddings) the DFT of K is
    C̃ (I - z Ā)⁻¹ B̄ with the stored C̃, with no inverse of I - Ā^L on the way."""
    kernel = make_mixer(use_algorithm(algorithm, monkeypatch), bidirectional, init=init).kernel
    transition, input_vec, _ = ssm_oracle(kernel)
    c_tilde = full_pairs(as_complex(kernel.C))  # (nd, H, N)
    z = torch.exp(-2j * math.pi * torch.arange(L_MAX, dtype=torch.float64) / L_MAX)  # (L,)
    eye = torch.eye(transition.shape[-1], dtype=transition.dtype)
    resolvent = torch.linalg.solve(eye - z[:, None, None, None] * transition, input_vec[..., None])[..., 0]
    expected = torch.einsum("chn,lhn->chl", c_tilde, resolvent)  # (nd, H, L)
    torch.testing.assert_close(torch.fft.fft(kernel(L_MAX).to(expected.dtype)), expected, rtol=0, atol=1e-12)


def test_nplr_powers_of_a_fast_decaying_system_hold_no_subnormal_floats():
    """Large steps make Ā^(2^k) underflow; the squarings flush entries whose products would be subnormal (slow on
    CPUs) instead, forward and backward, and the float32 kernel still equals the float64 one."""
    mixer = make_mixer("nplr", dtype=torch.float32, time_step_min=0.5, time_step_max=1.0)
    transition, _ = mixer.kernel.discretize(torch.float32)
    powers = squarings(transition.detach().requires_grad_(), 12)
    smallest = math.sqrt(torch.finfo(torch.float32).tiny)
    assert powers[-1].abs().max() < smallest  # the decay reaches the range that is flushed
    for power in powers:
        assert ((power == 0) | (power.abs() >= smallest)).all()
    tiny_grad = torch.full_like(powers[2], 1e-25)  # a gradient that small is flushed before the product's backward
    (grad,) = torch.autograd.grad(powers[2], powers[1], grad_outputs=tiny_grad)
    assert (grad == 0).all()
    kernel32 = mixer.kernel(4 * L_MAX)
    kernel64 = mixer.kernel.double()(4 * L_MAX)
    torch.testing.assert_close(kernel32.double(), kernel64, rtol=0, atol=2e-5 * kernel64.abs().max().item())


def test_nplr_powers_export_and_compile_without_graph_breaks(monkeypatch):
    """The blocked powers (tiny configs take the Cauchy path in the model-contract tests) under torch.export and
    under torch.compile(fullgraph=True) with AOTAutograd, forward and backward as in eager mode."""
    use_algorithm("nplr-powers", monkeypatch)
    mixer = make_mixer("nplr", bidirectional=True, dtype=torch.float32)
    x = torch.randn(2, 20, H)
    with torch.no_grad():
        torch.testing.assert_close(torch.export.export(mixer, (x,)).module()(x), mixer(x), rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()
    compiled = torch.compile(
        make_mixer("nplr", bidirectional=True, dtype=torch.float32), backend="aot_eager", fullgraph=True
    )
    x.requires_grad_()
    (grad,) = torch.autograd.grad(mixer(x).square().sum(), x)
    (compiled_grad,) = torch.autograd.grad(compiled(x).square().sum(), x)
    torch.testing.assert_close(compiled_grad, grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_s4d_kernel_equals_complex_exp_vandermonde(bidirectional):
    kernel = make_mixer("diag", bidirectional).kernel
    for length in (1, 2, 17, 80):
        mu, transition, input_vec = kernel.discretize(torch.float64)
        vandermonde = torch.exp(torch.log(transition)[..., None] * torch.arange(length, dtype=torch.float64))
        expected = 2 * torch.einsum("chn,hnl->chl", as_complex(kernel.C) * input_vec, vandermonde).real
        torch.testing.assert_close(kernel(length), expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(kernel(length), powers_kernel(kernel, length), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_dlr_kernel_equals_direct_sum(bidirectional):
    kernel = make_mixer("dlr", bidirectional).kernel
    for length in (1, 5, 33, 80):
        lam = kernel.eigenvalues(torch.float64)
        table = torch.exp(lam[:, None] * torch.arange(length, dtype=torch.float64))  # (N, L)
        expected = torch.einsum("chn,nl->chl", as_complex(kernel.W), table).real
        torch.testing.assert_close(kernel(length), expected, rtol=0, atol=1e-12)


def test_blocked_powers_equal_powers():
    log_a = torch.complex(-torch.rand(3, 4, dtype=torch.float64), 3 * torch.randn(3, 4, dtype=torch.float64))
    for length, block in ((1, None), (10, None), (37, 5), (64, 64)):
        coarse, fine, c = blocked_powers(log_a, length, block)
        table = (coarse.unsqueeze(-1) * fine.unsqueeze(-2)).flatten(-2)[..., :length]  # a^(i c + j)
        expected = torch.exp(log_a[..., None] * torch.arange(length, dtype=torch.float64))
        torch.testing.assert_close(table, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_kernels_are_float32_and_close_to_float64(algorithm, monkeypatch):
    mixer = make_mixer(use_algorithm(algorithm, monkeypatch), bidirectional=True, dtype=torch.float32)
    kernel32 = mixer.kernel(L_MAX)
    kernel64 = mixer.kernel.double()(L_MAX)
    assert kernel32.dtype == torch.float32
    torch.testing.assert_close(kernel32.double(), kernel64, rtol=0, atol=2e-5 * kernel64.abs().max().item())


# --------------------------------------------------------------------------------------------------------------
# Gradients of the custom autograd functions
# --------------------------------------------------------------------------------------------------------------


def test_paired_cauchy_gradcheck_across_chunks(monkeypatch):
    monkeypatch.setattr(cauchy_module, "_CAUCHY_CHUNK", 4 * 5)  # splits features and frequencies into chunks
    coef = torch.randn(3, 4, 4, dtype=torch.float64, requires_grad=True)
    mu = torch.complex(-torch.rand(3, 4, dtype=torch.float64) - 0.1, torch.randn(3, 4, dtype=torch.float64))
    mu.requires_grad_()

    def planes(c, m):
        return torch.stack([torch.stack(pair) for pair in paired_cauchy(c, m, 14)])

    assert torch.autograd.gradcheck(planes, (coef, mu))


def test_fft_conv_gradcheck_across_chunks(monkeypatch):
    u = torch.randn(2, 6, 20, dtype=torch.float64, requires_grad=True)
    D = torch.randn(20, dtype=torch.float64, requires_grad=True)
    for chunk in (2 * 6 * 16, 2 * 6 * 40):  # channel chunks of 16 + 4; two batch entries per chunk
        monkeypatch.setattr(ssm_module, "_CHUNK_ELEMENTS", chunk)
        for channels in (1, 2):
            kernel = torch.randn(channels, 20, 8, dtype=torch.float64, requires_grad=True)
            assert torch.autograd.gradcheck(fft_conv, (u, kernel, D), fast_mode=True)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_kernel_gradcheck(algorithm, monkeypatch):
    kind = use_algorithm(algorithm, monkeypatch)
    extra = {} if kind == "dlr" else {"n_ssm": None}
    kernel = make_mixer(kind, bidirectional=True, state_size=4, hidden_size=2, **extra).kernel
    names = [name for name, _ in kernel.named_parameters()]
    values = tuple(p.detach().clone().requires_grad_() for p in kernel.parameters())

    for length in (11, 2 * L_MAX + 3):  # NPLR: within the stored length, and longer

        def run(*params, length=length):
            return torch.func.functional_call(kernel, dict(zip(names, params)), (length,))

        assert torch.autograd.gradcheck(run, values, fast_mode=True)


# --------------------------------------------------------------------------------------------------------------
# Convolution = recurrence, causality, recurrent step
# --------------------------------------------------------------------------------------------------------------


def test_fft_conv_equals_direct_convolution():
    u, D = torch.randn(2, 9, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    kernel = torch.randn(2, 5, 9, dtype=torch.float64)
    expected = D * u
    for t in range(9):
        for s in range(9):
            lagged = kernel[0, :, t - s] if s <= t else kernel[1, :, s - t - 1]  # backward lags -1..-L
            expected[:, t] += lagged * u[:, s]
    torch.testing.assert_close(fft_conv(u, kernel, D), expected)
    torch.testing.assert_close(fft_conv(u, kernel[:1], D), expected - _backward_part(u, kernel[1]))


def _backward_part(u, kernel):
    out = torch.zeros_like(u)
    for t in range(u.shape[1]):
        for s in range(t + 1, u.shape[1]):
            out[:, t] += kernel[:, s - t - 1] * u[:, s]
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_convolution_equals_recurrence(kind, bidirectional):
    mixer = make_mixer(kind, bidirectional)
    length = 2 * L_MAX + 5 if kind == "nplr" else 40  # NPLR also past the stored length
    u = torch.randn(2, length, H, dtype=torch.float64)
    expected = recurrence(mixer.kernel, u) + mixer.D * u
    if bidirectional:  # backward direction: the recurrence on the reversed sequence, one position later
        backward = recurrence(mixer.kernel, u.flip(1), channel=1).flip(1)  # Σ_j K1[j] u[t + j]
        expected[:, :-1] += backward[:, 1:]
    torch.testing.assert_close(ssm_part(mixer, u), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_causality(kind, bidirectional):
    mixer = make_mixer(kind, bidirectional)
    u = torch.randn(2, 24, H, dtype=torch.float64)
    changed = u.clone()
    changed[:, 11] += 1.0
    before, after = mixer(u), mixer(changed)
    assert torch.equal(before[:, 11:] == after[:, 11:], torch.zeros_like(before[:, 11:], dtype=torch.bool))
    if bidirectional:
        assert (before[:, :11] - after[:, :11]).abs().amax(-1).min() > 1e-8  # every earlier position changes
    else:
        torch.testing.assert_close(before[:, :11], after[:, :11], rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_step_equals_forward(kind, dtype):
    mixer = make_mixer(kind, dtype=dtype)
    length = L_MAX + 9  # NPLR: past the stored length too
    u = torch.randn(3, length, H, dtype=dtype)
    state = mixer.init_state(3, u.device, dtype)
    assert all(not s.is_complex() for s in state.tensors)
    outputs = []
    for t in range(length):
        out, state = mixer.step(u[:, t], state)
        outputs.append(out)
    tolerance = 1e-10 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(torch.stack(outputs, 1), mixer(u), rtol=tolerance, atol=tolerance)


def test_nplr_step_cache_follows_parameter_updates():
    mixer = make_mixer("nplr")
    u = torch.randn(2, H, dtype=torch.float64)
    first, _ = mixer.step(u, mixer.init_state(2))
    with torch.no_grad():
        mixer.kernel.log_dt.add_(0.5)
    second, _ = mixer.step(u, mixer.init_state(2))
    fresh = make_mixer("nplr")
    fresh.load_state_dict(mixer.state_dict())
    torch.testing.assert_close(second, fresh.step(u, fresh.init_state(2))[0])
    assert not torch.allclose(first, second)


@pytest.mark.parametrize("kind", KINDS)
def test_step_rejects_bidirectional(kind):
    mixer = make_mixer(kind, bidirectional=True)
    with pytest.raises(ValueError, match="causal"):
        mixer.init_state(2)
    with pytest.raises(ValueError, match="causal"):
        mixer.step(torch.zeros(2, H, dtype=torch.float64), (torch.zeros(1),))


# --------------------------------------------------------------------------------------------------------------
# Parameters, initialisation, optimiser groups
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_no_complex_tensors_in_state_dict(kind):
    mixer = make_mixer(kind, bidirectional=True, dtype=torch.float32)
    assert all(not t.is_complex() and t.dtype == torch.float32 for t in mixer.state_dict().values())
    assert not [name for name, _ in mixer.named_buffers()]  # everything derived is recomputed in forward


@pytest.mark.parametrize("kind", KINDS)
def test_meta_device_rebuild(kind):
    reference = make_mixer(kind, bidirectional=True, dtype=torch.float32)
    with torch.device("meta"):
        mixer = make_mixer(kind, bidirectional=True, dtype=torch.float32)
    mixer = mixer.to_empty(device="cpu")
    for module in mixer.modules():  # what the PreTrainedModel's `_init_weights` does for uninitialised tensors
        if hasattr(module, "_init_spt_weights"):
            module._init_spt_weights()
        elif isinstance(module, torch.nn.Linear):
            module.reset_parameters()
    assert dict(mixer.named_buffers()).keys() == dict(reference.named_buffers()).keys()
    for name, buffer in reference.named_buffers():
        torch.testing.assert_close(dict(mixer.named_buffers())[name], buffer)
    deterministic = {
        "nplr": ["log_lambda_real", "lambda_imag", "P", "B"],
        "diag": ["log_lambda_real", "lambda_imag", "B"],
    }
    for name in deterministic.get(kind, ["lambda_imag"]):
        torch.testing.assert_close(getattr(mixer.kernel, name), getattr(reference.kernel, name))
    assert torch.isfinite(mixer(torch.randn(2, 16, H))).all()


@pytest.mark.parametrize("kind", KINDS)
def test_init_skips_loaded_tensors(kind):
    mixer = make_mixer(kind, dtype=torch.float32)
    loaded = {name: p.detach().clone() for name, p in mixer.kernel.named_parameters()}
    for p in mixer.kernel.parameters():
        p._is_hf_initialized = True  # what from_pretrained sets on tensors read from a checkpoint
    mixer.kernel._init_spt_weights()
    for name, p in mixer.kernel.named_parameters():
        assert torch.equal(p, loaded[name]), name


@pytest.mark.parametrize("kind", ["nplr", "diag"])
def test_s4_initialisation(kind):
    kernel = make_mixer(kind, dtype=torch.float32, n_ssm=None, hidden_size=64).kernel
    dt = kernel.log_dt.exp()
    assert dt.min() >= 1e-3 and dt.max() <= 0.1 and dt.max() / dt.min() > 10  # log-uniform over [1e-3, 0.1]
    torch.testing.assert_close(kernel.log_lambda_real, torch.full_like(kernel.log_lambda_real, math.log(0.5)))
    assert torch.equal(kernel.lambda_imag[0], kernel.lambda_imag[-1])  # structured init: identical copies
    if kind == "diag":  # S4D-Lin
        torch.testing.assert_close(kernel.lambda_imag[0], math.pi * torch.arange(8, dtype=torch.float32))


def test_dlr_initialisation():
    kernel = make_mixer("dlr", dtype=torch.float32, state_size=256).kernel
    delta = 2 * kernel.lambda_neg_real_sqrt.square()
    assert delta.min() >= 1e-4 * 0.999 and delta.max() <= 0.1 * 1.001
    torch.testing.assert_close(kernel.lambda_imag, 2 * math.pi * torch.arange(256, dtype=torch.float32) / 256)
    assert abs(kernel.W.std().item() * 256 - 1) < 0.1


def test_optimizer_overrides():
    ssm = {"weight_decay": 0.0, "lr": 1e-3}
    nplr = make_mixer("nplr").kernel.optimizer_overrides()
    assert nplr == {"log_dt": {"weight_decay": 0.0}, "log_lambda_real": ssm, "lambda_imag": ssm, "P": ssm, "B": ssm}
    diag = make_mixer("diag", ssm_learning_rate=5e-4).kernel.optimizer_overrides()
    ssm = {"weight_decay": 0.0, "lr": 5e-4}
    assert diag == {"log_dt": {"weight_decay": 0.0}, "log_lambda_real": ssm, "lambda_imag": ssm, "B": ssm}
    dlr = make_mixer("dlr").kernel.optimizer_overrides()
    ssm = {"weight_decay": 0.0, "lr": 1e-4}
    assert dlr == {"lambda_neg_real_sqrt": {"weight_decay": 0.0}, "lambda_imag": ssm, "W": ssm}
    unset = make_mixer("dlr", ssm_learning_rate=None).kernel.optimizer_overrides()
    assert all(group == {"weight_decay": 0.0} for group in unset.values())
    for kind in KINDS:  # keys are direct parameters; C, W-free extras and D stay ordinary
        kernel = make_mixer(kind).kernel
        assert set(kernel.optimizer_overrides()) <= {name for name, _ in kernel.named_parameters(recurse=False)}


# --------------------------------------------------------------------------------------------------------------
# Precision, lengths, errors
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_autocast_bf16_keeps_kernel_float32(kind):
    mixer = make_mixer(kind, bidirectional=True, dtype=torch.float32)
    kernels = []
    mixer.kernel.register_forward_hook(lambda module, args, out: kernels.append(out))
    u = torch.randn(2, 20, H)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mixer(u)
        out_bf16 = mixer(u.bfloat16())
    assert kernels[0].dtype == torch.float32 and all(p.dtype == torch.float32 for p in mixer.parameters())
    assert torch.isfinite(out).all() and out_bf16.dtype == torch.bfloat16 and torch.isfinite(out_bf16).all()
    torch.testing.assert_close(out.float(), mixer(u), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_longer_than_max_position_embeddings_work(kind):
    mixer = make_mixer(kind)
    u = torch.randn(1, 3 * L_MAX, H, dtype=torch.float64)
    torch.testing.assert_close(ssm_part(mixer, u), recurrence(mixer.kernel, u) + mixer.D * u, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(mixer(u)[:, :L_MAX], mixer(u[:, :L_MAX]), rtol=1e-9, atol=1e-9)  # causal prefix


@pytest.mark.parametrize("kind", KINDS)
def test_non_finite_kernel_raises(kind):
    mixer = make_mixer(kind, dtype=torch.float32)
    with torch.no_grad():
        next(mixer.kernel.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="layer 0"):
        mixer(torch.randn(1, 8, H))


@pytest.mark.parametrize(
    ("config_cls", "field", "value"),
    [
        (S4Config, "state_size", 7),
        (S4Config, "n_ssm", 3),
        (S4Config, "kernel", "dplr"),
        (S4Config, "init", "hippo"),
        (S4Config, "time_step_min", 0.5),
        (S4Config, "max_position_embeddings", 0),
        (S4Config, "ssm_learning_rate", -1.0),
        (DLRConfig, "state_size", 0),
        (DLRConfig, "time_step_max", 1e-5),
        (DLRConfig, "ssm_learning_rate", 0.0),
    ],
)
def test_config_validation_names_the_field(config_cls, field, value):
    with pytest.raises(ValueError, match=field):
        config_cls(vocab_size=10, hidden_size=8, **{field: value})


def test_config_defaults_round_trip():
    s4, dlr = S4Config(vocab_size=10), DLRConfig(vocab_size=10)
    assert (s4.model_type, s4.state_size, s4.kernel, s4.init, s4.n_ssm) == ("spt_s4", 64, "nplr", "legs", None)
    assert (s4.time_step_min, s4.time_step_max, s4.ssm_learning_rate) == (1e-3, 0.1, 1e-3)
    assert (dlr.model_type, dlr.state_size, dlr.time_step_min, dlr.ssm_learning_rate) == ("spt_dlr", 1024, 1e-4, 1e-4)
    assert S4Config.from_dict(S4Config(vocab_size=10, kernel="diag", init="random").to_dict()).init == "random"
