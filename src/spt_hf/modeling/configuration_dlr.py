"""Configuration of spt_hf DLR models (diagonal linear RNN, Gupta et al. 2022, as used in the paper)."""

from .configuration_sequence import (
    SequenceModelConfig,
    check_positive_int,
    check_ssm_learning_rate,
    check_time_steps,
)


class DLRConfig(SequenceModelConfig):
    r"""
    Configuration of a DLR model: the S4 layer structure with the kernel K[h, l] = Re Σ_n W[h, n] exp(λ_n l).
    Shared fields (`hidden_size` = H, `bidirectional`, `hidden_dropout_prob`, ...) are documented in
    `SequenceModelConfig`.

    Args:
        state_size (`int`, *optional*, defaults to 1024):
            Number N of complex eigenvalues λ, shared by all features and both directions.
        time_step_min (`float`, *optional*, defaults to 1e-4):
            Lower end of the log-uniform initialisation of Δ_n, which sets Re λ_n = -Δ_n / 2.
        time_step_max (`float`, *optional*, defaults to 0.1):
            Upper end of the log-uniform initialisation of Δ_n.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            The sequence length the model is meant for. The DLR kernel has no stored length: it is computed at the
            input length, so longer inputs also work.
        ssm_learning_rate (`float`, *optional*, defaults to 1e-4):
            Learning rate of Im λ and W (weight decay 0). None: the global learning rate. Re λ always uses the
            global learning rate with weight decay 0.
    """

    model_type = "spt_dlr"

    state_size: int = 1024
    time_step_min: float = 1e-4
    time_step_max: float = 0.1
    max_position_embeddings: int = 1024
    ssm_learning_rate: float | None = 1e-4

    def validate_dlr_fields(self) -> None:
        check_positive_int(self, "state_size", "max_position_embeddings")
        check_time_steps(self)
        check_ssm_learning_rate(self)


__all__ = ["DLRConfig"]
