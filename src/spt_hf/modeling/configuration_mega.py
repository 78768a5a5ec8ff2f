"""Configuration of spt_hf MEGA models (Ma et al., "Mega: Moving Average Equipped Gated Attention", ICLR 2023)."""

from .configuration_sequence import SequenceModelConfig, check_choice, check_positive_int

MEGA_ATTENTION_ACTIVATIONS = ("softmax", "laplace", "relu2")


class MegaConfig(SequenceModelConfig):
    r"""
    Configuration of a MEGA model: each layer is a moving-average gated attention block (multi-dimensional damped
    EMA, then single-head gated attention) followed by MEGA's normalised feed-forward block, each inside the shared
    residual block. Shared fields (`hidden_size` = D, `bidirectional`, `norm_type`, `prenorm`, ...) are documented in
    `SequenceModelConfig`; `hidden_dropout_prob` is MEGA's `dropout` (on the EMA output and on each block's update).

    Args:
        ema_projection_size (`int`, *optional*, defaults to 16):
            Dimension h of the multi-dimensional damped EMA: each of the D features is expanded to h EMA components
            (MEGA's `n_dim`; 16 in every LRA run).
        shared_representation_size (`int`, *optional*, defaults to 64):
            Width z of the shared representation Z from which the single-head queries and keys are derived by
            per-dimension scales and offsets (MEGA's `z_dim`).
        intermediate_size (`int`, *optional*, defaults to 256):
            Width of the values and of the reset gate (MEGA's `hidden_dim`, usually 2 D).
        nffn_hidden_size (`int`, *optional*, defaults to 256):
            Width of the normalised feed-forward block (MEGA's `ffn_hidden_dim`; the LRA runs use `hidden_dim`).
        chunk_size (`int`, *optional*, defaults to -1):
            Attention within chunks of this many positions (MEGA-chunk, linear in the length; the EMA still spans
            the whole sequence). `-1`: no chunking, full attention.
        attention_activation (`str`, *optional*, defaults to `"softmax"`):
            `"softmax"` (scaled by z^-1/2), or MEGA's element-wise `"laplace"` or `"relu2"` on scores divided by the
            number of visible keys (the LRA image tasks use `"laplace"`).
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the attention weights.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            The longest input without chunking: the learned relative position bias covers offsets up to this length
            (up to `chunk_size` with chunking, where any length works).

    Example:

    ```python
    >>> from transformers import AutoConfig, AutoModelForSequenceClassification
    >>> import spt_hf  # registers the model types
    >>> config = AutoConfig.for_model("spt_mega", vocab_size=20, hidden_size=32, num_labels=10, chunk_size=16)
    >>> model = AutoModelForSequenceClassification.from_config(config)
    ```
    """

    model_type = "spt_mega"

    ema_projection_size: int = 16
    shared_representation_size: int = 64
    intermediate_size: int = 256
    nffn_hidden_size: int = 256
    chunk_size: int = -1
    attention_activation: str = "softmax"
    attention_dropout: float = 0.0
    max_position_embeddings: int = 1024

    def validate_mega_fields(self) -> None:
        check_positive_int(
            self,
            "ema_projection_size",
            "shared_representation_size",
            "intermediate_size",
            "nffn_hidden_size",
            "max_position_embeddings",
        )
        chunk = self.chunk_size
        if not isinstance(chunk, int) or isinstance(chunk, bool) or (chunk != -1 and chunk <= 0):
            raise ValueError(f"`chunk_size` must be -1 (no chunking) or a positive integer, got {self.chunk_size!r}.")
        check_choice("attention_activation", self.attention_activation, MEGA_ATTENTION_ACTIVATIONS)
        if not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"`attention_dropout` must be in [0, 1), got {self.attention_dropout}.")

    @property
    def relative_positions(self) -> int:
        """How many offsets the relative position bias covers: the chunk size, or the longest input."""
        return self.chunk_size if self.chunk_size > 0 else self.max_position_embeddings


__all__ = ["MegaConfig"]
