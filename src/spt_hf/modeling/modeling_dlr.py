"""DLR, the diagonal linear RNN of Gupta, Mehta and Berant (2022) as used in the paper: the S4 layer with the kernel

    K[h, l] = Re Σ_n W[h, n] exp(λ_n l),   λ_n = -a_n² + i b_n,   l = 0..L-1,

no discretisation and no B; the N eigenvalues λ are shared by all features and both directions, W is per feature
and direction. Reads top to bottom: kernel -> mixer. All parameters are real (W as real pairs).
"""

import math

import torch
from torch import Tensor, nn
from transformers import GenerationMixin
from transformers import initialization as init

from .configuration_dlr import DLRConfig
from .heads import SequenceForCausalLM, SequenceForMaskedLM, SequenceForRetrieval, SequenceForSequenceClassification
from .modeling_sequence import SequenceBaseModel, SequencePreTrainedModel
from .precision import Float32Parameters
from .ssm import SSMMixer, as_complex, block_size, blocked_powers, state_dtype


class DLRKernel(Float32Parameters):
    """The DLR kernel (nd, H, L), nd = 2 directions when bidirectional (else 1); its parameters stay float32 under
    mixed precision (precision.py).

    exp(λ l) with l = i·c + j is the product exp(λ i c) exp(λ j) (blocked powers): the contraction over n is one
    real GEMM (⌈L/c⌉·nd·H, 2N) x (2N, c) against a small (N, c) table; no (N, L) exp table and no transcendental per
    (n, l). Initialisation (official code): Δ_n ~ logU(time_step_min, time_step_max), a_n = √(Δ_n / 2),
    b_n = 2πn/N, Re and Im of W ~ N(0, 1)/N.
    """

    def __init__(self, config: DLRConfig):
        super().__init__()
        self.config = config
        self.hidden_size, self.state_size = config.hidden_size, config.state_size
        self.channels = 2 if config.bidirectional else 1
        self.lambda_neg_real_sqrt = nn.Parameter(torch.empty(self.state_size))  # a, Re λ = -a²
        self.lambda_imag = nn.Parameter(torch.empty(self.state_size))  # b
        self.W = nn.Parameter(torch.empty(self.channels, self.hidden_size, self.state_size, 2))
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        if self.W.is_meta:
            return
        cfg = self.config
        log_dt = torch.empty(self.state_size, dtype=torch.float64, device="cpu").uniform_(
            math.log(cfg.time_step_min), math.log(cfg.time_step_max)
        )
        init.copy_(self.lambda_neg_real_sqrt, (log_dt.exp() / 2).sqrt())
        init.copy_(
            self.lambda_imag,
            2 * math.pi * torch.arange(self.state_size, dtype=torch.float64, device="cpu") / self.state_size,
        )
        init.normal_(self.W, std=1.0 / self.state_size)

    def optimizer_overrides(self) -> dict[str, dict]:
        """docs/method.md §6: Im λ and W at `ssm_learning_rate`, Re λ at the global lr; all weight decay 0."""
        ssm = {"weight_decay": 0.0}
        if self.config.ssm_learning_rate is not None:
            ssm["lr"] = self.config.ssm_learning_rate
        return {"lambda_neg_real_sqrt": {"weight_decay": 0.0}, "lambda_imag": dict(ssm), "W": dict(ssm)}

    def eigenvalues(self, dtype: torch.dtype) -> Tensor:
        """λ (N,) complex."""
        return torch.complex(-self.lambda_neg_real_sqrt.to(dtype).square(), self.lambda_imag.to(dtype))

    def forward(self, length: int) -> Tensor:
        """The kernel (nd, H, length)."""
        dtype = self.kernel_dtype(self.W)
        # block c ≈ √(L·nd·H) balances the (L/c)·nd·H·N products of `left` against the N·c of the `fine` table; L is
        # the configured length, not the input's: no guard on the exact length under torch.compile
        block = block_size(self.config.max_position_embeddings * self.channels * self.hidden_size)
        coarse, fine, block = blocked_powers(self.eigenvalues(dtype), length, block)  # (N, I), (N, c)
        weights = as_complex(self.W.to(dtype)).flatten(0, 1)  # (nd·H, N)
        left = weights.unsqueeze(0) * coarse.T.contiguous().unsqueeze(1)  # (I, nd·H, N): W exp(λ i c)
        # Re(left @ fine) with (re, im) interleaved along n: [Re x, Im x] · [Re f, -Im f]
        right = torch.stack([fine.real, -fine.imag], 1).flatten(0, 1)  # (2N, c)
        kernel = torch.view_as_real(left).flatten(2).flatten(0, 1) @ right  # (I·nd·H, c)
        kernel = kernel.view(-1, self.channels, self.hidden_size, block).permute(1, 2, 0, 3)  # (nd, H, I, c)
        return kernel.reshape(self.channels, self.hidden_size, -1)[..., :length]  # (nd, H, L)

    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        """Zero state (B, H, N, 2): complex as real pairs."""
        return torch.zeros(batch_size, self.hidden_size, self.state_size, 2, device=device, dtype=state_dtype(dtype))

    def step(self, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """x' = exp(λ) x + u, y = Re Σ_n W_n x'_n for u (B, H): O(N) per feature and token."""
        with torch.no_grad():
            transition = self.eigenvalues(state.dtype).exp()  # (N,)
            weights = as_complex(self.W[0].to(state.dtype))  # (H, N)
        x = transition * as_complex(state) + u.unsqueeze(-1).to(transition.dtype)  # (B, H, N)
        return (weights * x).real.sum(-1), torch.view_as_real(x)  # (B, H), (B, H, N, 2)


class DLRMixer(SSMMixer):
    """The DLR layer: `SSMMixer` (FFT convolution + D skip, GELU, dropout, Linear(H, 2H), GLU) with the DLR kernel.

    Lengths: the kernel is computed at the input length, so inputs longer than `max_position_embeddings` work.
    """

    def __init__(self, config: DLRConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx, DLRKernel(config))


# ----------------------------------------------------------------------------------------------------------------
# Models: the shared base model with this mixer, and the shared heads
# ----------------------------------------------------------------------------------------------------------------


class DLRPreTrainedModel(SequencePreTrainedModel):
    config: DLRConfig
    _is_stateful = True  # a recurrent state cannot be rolled back: transformers refuses assisted decoding


class DLRModel(SequenceBaseModel, DLRPreTrainedModel):
    """DLR base model: embedding -> layers of one residual block around the DLR layer -> final norm."""

    mixer_classes = (DLRMixer,)


class DLRForMaskedLM(SequenceForMaskedLM, DLRPreTrainedModel):
    base_model_class = DLRModel


class DLRForCausalLM(SequenceForCausalLM, DLRPreTrainedModel, GenerationMixin):
    base_model_class = DLRModel


class DLRForSequenceClassification(SequenceForSequenceClassification, DLRPreTrainedModel):
    base_model_class = DLRModel


class DLRForRetrieval(SequenceForRetrieval, DLRPreTrainedModel):
    base_model_class = DLRModel


__all__ = [
    "DLRPreTrainedModel",
    "DLRModel",
    "DLRForMaskedLM",
    "DLRForCausalLM",
    "DLRForSequenceClassification",
    "DLRForRetrieval",
]
