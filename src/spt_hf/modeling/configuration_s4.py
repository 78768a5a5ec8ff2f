"""Configuration of spt_hf S4 models: the NPLR S4 layer the paper used, and its diagonal variant S4D."""

from .configuration_sequence import (
    SequenceModelConfig,
    check_choice,
    check_positive_int,
    check_ssm_learning_rate,
    check_time_steps,
)

S4_KERNELS = ("nplr", "diag")
S4_INITS = ("legs", "random")


class S4Config(SequenceModelConfig):
    r"""
    Configuration of an S4 model. Shared fields (`hidden_size` = H, `bidirectional`, `hidden_dropout_prob`,
    `initializer_range`, ...) are documented in `SequenceModelConfig`.

    Args:
        state_size (`int`, *optional*, defaults to 64):
            State size N of each SSM; complex conjugate pairs, so N/2 complex values are stored. Must be even.
        n_ssm (`int`, *optional*):
            Number of independent copies of the state matrix and input vector (Λ, P, B), tiled over the H features
            (feature h uses copy h mod n_ssm). Must divide `hidden_size`. None (the official S4 default) means
            `hidden_size`: every feature has its own; Δ and C are always per feature.
        kernel (`str`, *optional*, defaults to `"nplr"`):
            `"nplr"`: the original S4 kernel, A = Λ - P Pᴴ (normal plus low rank), bilinear discretisation; the
            kernel C Ā^l B̄ from S4's Cauchy kernel + Woodbury correction at the roots of unity when short, by
            blocked powers of the discretised state matrix when long (the same kernel, exact either way).
            `"diag"`: S4D, diagonal A, same bilinear discretisation, blocked Vandermonde kernel.
        init (`str`, *optional*, defaults to `"legs"`):
            `"legs"`: structured HiPPO-LegS initialisation (NPLR: Λ, P, B from diagonalising LegS + P Pᵀ; diag:
            S4D-Lin, Λ_n = -1/2 + iπn, B = 1). `"random"`: the paper's ablation, s4's `dplr(scaling="random")`:
            Re Λ = -1/2, Im Λ ~ N(0, 1), B = 1, and (NPLR) P ~ complex N(0, 1).
        time_step_min (`float`, *optional*, defaults to 1e-3):
            Lower end of the log-uniform initialisation of the step size Δ (one per feature).
        time_step_max (`float`, *optional*, defaults to 0.1):
            Upper end of the log-uniform initialisation of Δ.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            NPLR: the length L for which C is stored as C̃ = (I - Ā^L) C (S4's parameterisation); the kernel is
            computed at the input length, shorter or longer. S4D only records this value.
        ssm_learning_rate (`float`, *optional*, defaults to 1e-3):
            Learning rate of Λ, P and B (weight decay 0). None: the global learning rate. Δ always uses the global
            learning rate with weight decay 0; C and D are ordinary parameters.
    """

    model_type = "spt_s4"

    state_size: int = 64
    n_ssm: int | None = None
    kernel: str = "nplr"
    init: str = "legs"
    time_step_min: float = 1e-3
    time_step_max: float = 0.1
    max_position_embeddings: int = 1024
    ssm_learning_rate: float | None = 1e-3

    def validate_s4_fields(self) -> None:
        if not isinstance(self.state_size, int) or self.state_size < 2 or self.state_size % 2:
            raise ValueError(
                f"`state_size` must be a positive even integer (conjugate pairs), got {self.state_size!r}."
            )
        if self.n_ssm is not None and (
            not isinstance(self.n_ssm, int) or self.n_ssm <= 0 or self.hidden_size % self.n_ssm
        ):
            raise ValueError(
                f"`n_ssm` must be None or a positive integer dividing hidden_size={self.hidden_size}, "
                f"got {self.n_ssm!r}."
            )
        check_choice("kernel", self.kernel, S4_KERNELS)
        check_choice("init", self.init, S4_INITS)
        check_time_steps(self)
        check_positive_int(self, "max_position_embeddings")
        check_ssm_learning_rate(self)


__all__ = ["S4Config"]
