"""The linear recurrent unit (LRU; Orvieto et al. 2023, "Resurrecting Recurrent Neural Networks for Long Sequences")
as an spt_hf sequence mixer:

    x_t = λ ⊙ x_{t-1} + γ ⊙ (B u_t),   y_t = Re(C x_t) + D ⊙ u_t,   λ = exp(-exp(ν) + i exp(θ)),  γ = √(1 - |λ|²)

with complex diagonal λ (N states), stable exponential parameterisation and the γ normalisation, then
GELU -> Linear(H, 2H) -> GLU. The parallel pass is the causal convolution x = v * λ^l over length (FFT, O(L log L));
`step` is the recurrence itself, O(N) per position. Bidirectional models run a second LRU on the reversed sequence
and add the two.

This file imports spt_hf only from `spt_hf.modeling` (so that checkpoints carry it as remote code) and registers
nothing: `spt_hf_lru.register` does.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import initialization as init

from spt_hf.modeling.configuration_sequence import SequenceModelConfig, check_positive_int
from spt_hf.modeling.mixer import SequenceMixer


class LRUConfig(SequenceModelConfig):
    r"""
    Configuration of an LRU model. Shared fields (`hidden_size`, `bidirectional`, ...) are `SequenceModelConfig`'s.

    Args:
        state_size (`int`, *optional*, defaults to 64):
            Number N of complex states per direction.
        r_min / r_max (`float`, *optional*, defaults to 0.9 / 0.999):
            |λ| is initialised uniformly on the ring r_min <= |λ| <= r_max (the paper's stable initialisation).
        max_phase (`float`, *optional*, defaults to 2π):
            arg λ is initialised uniformly in [0, max_phase].
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            The sequence length the model is meant for (nothing stored depends on it; presets set it to the task's).
    """

    model_type = "lru"

    state_size: int = 64
    r_min: float = 0.9
    r_max: float = 0.999
    max_phase: float = 2 * math.pi
    max_position_embeddings: int = 1024

    def validate_lru_fields(self) -> None:
        check_positive_int(self, "state_size", "max_position_embeddings")
        if not 0 <= self.r_min < self.r_max <= 1:
            raise ValueError(
                f"`r_min` and `r_max` must satisfy 0 <= r_min < r_max <= 1, got {self.r_min}, {self.r_max}."
            )

    @classmethod
    def spt_preset(cls, preset: str) -> dict:
        """The model fields of spt_hf's presets `tiny` and `small` (the optimisation is spt_hf's)."""
        return {"tiny": {"hidden_size": 32, "num_hidden_layers": 2, "state_size": 16}}.get(
            preset, {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 64}
        )


class LRUMixer(SequenceMixer):
    """The LRU layer (module docstring); one parameter set per direction (2 when bidirectional)."""

    def __init__(self, config: LRUConfig, layer_idx: int | None = None):
        super().__init__(config, layer_idx)
        directions, n, h = 1 if self.is_causal else 2, config.state_size, config.hidden_size
        self.nu_log = nn.Parameter(torch.empty(directions, n))
        self.theta_log = nn.Parameter(torch.empty(directions, n))
        self.gamma_log = nn.Parameter(torch.empty(directions, n))
        self.B = nn.Parameter(torch.empty(directions, 2, n, h))  # real and imaginary parts
        self.C = nn.Parameter(torch.empty(directions, 2, h, n))
        self.D = nn.Parameter(torch.empty(h))
        self.output = nn.Linear(h, 2 * h)
        self._init_spt_weights()

    def _init_spt_weights(self) -> None:
        if self.B.is_meta:
            return
        cfg, shape = self.config, self.nu_log.shape
        ring = torch.rand(shape) * (cfg.r_max**2 - cfg.r_min**2) + cfg.r_min**2
        nu_log = torch.log(-0.5 * torch.log(ring))
        init.copy_(self.nu_log, nu_log)
        init.copy_(self.theta_log, torch.log(cfg.max_phase * torch.rand(shape).clamp(min=1e-4)))
        init.copy_(self.gamma_log, 0.5 * torch.log1p(-torch.exp(-2 * nu_log.exp())))  # log √(1 - |λ|²)
        init.normal_(self.B, std=1 / math.sqrt(2 * cfg.hidden_size))
        init.normal_(self.C, std=1 / math.sqrt(cfg.state_size))
        init.normal_(self.D)

    def optimizer_overrides(self) -> dict[str, dict]:
        """The paper trains λ and γ without weight decay."""
        return {name: {"weight_decay": 0.0} for name in ("nu_log", "theta_log", "gamma_log")}

    def _complex(self, direction: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """log λ (N,), γ (N,), B (N, H) and C (H, N) of one direction, complex64."""
        log_lambda = torch.complex(-self.nu_log[direction].exp(), self.theta_log[direction].exp()).to(torch.complex64)
        b, c = self.B[direction].float(), self.C[direction].float()
        return log_lambda, self.gamma_log[direction].exp(), torch.complex(b[0], b[1]), torch.complex(c[0], c[1])

    def _scan(self, u: Tensor, direction: int) -> Tensor:
        """Re(C x) for u (B, L, H) float32: x the recurrence, computed as an FFT convolution over length."""
        log_lambda, gamma, b, c = self._complex(direction)
        length = u.shape[1]
        v = (u.to(torch.complex64) @ b.T) * gamma  # (B, L, N)
        kernel = torch.exp(torch.arange(length, device=u.device).unsqueeze(1) * log_lambda)  # (L, N): λ^l
        size = 2 * length
        x = torch.fft.ifft(torch.fft.fft(v, size, dim=1) * torch.fft.fft(kernel, size, dim=0), dim=1)[:, :length]
        return (x @ c.T).real  # (B, L, H)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None, **kwargs) -> Tensor:
        with torch.autocast(hidden_states.device.type, enabled=False):
            u = hidden_states.float()
            y = self._scan(u, 0)
            if not self.is_causal:
                y = y + self._scan(u.flip(1), 1).flip(1)
            y = y + self.D * u
        return self._output(y.to(hidden_states.dtype))

    def _output(self, y: Tensor) -> Tensor:
        return F.glu(self.output(F.gelu(y)), dim=-1)

    def init_state(self, batch_size: int, device=None, dtype=None) -> Tensor:
        """Zero state (B, N), complex64."""
        return torch.zeros(batch_size, self.config.state_size, device=device, dtype=torch.complex64)

    def step(self, hidden_state: Tensor, state: Tensor, attention_mask=None, **kwargs) -> tuple[Tensor, Tensor]:
        """One position (B, H) of the causal LRU: the recurrence itself."""
        log_lambda, gamma, b, c = self._complex(0)
        u = hidden_state.float()
        state = log_lambda.exp() * state + gamma * (u.to(torch.complex64) @ b.T)
        y = (state @ c.T).real + self.D * u
        return self._output(y.to(hidden_state.dtype)), state


__all__ = ["LRUConfig", "LRUMixer"]
