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
        chunk_size (`int`, *optional*):
            Attention within chunks of this many positions (MEGA-chunk, linear in the length; the EMA still spans
            the whole sequence). `None`: no chunking, full attention (as transformers' `sliding_window=None`; the
            `-1` of MEGA's code and of configs saved before is read as `None`).
        attention_activation (`str`, *optional*, defaults to `"softmax"`):
            `"softmax"` (scaled by z^-1/2), or MEGA's element-wise `"laplace"` or `"relu2"` on scores divided by the
            number of visible keys (the LRA image tasks use `"laplace"`).
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the attention weights.
        attention_query_block_size (`int`, *optional*):
            Compute each chunk's attention for this many queries at a time, each block recomputed in the backward
            pass (`torch.utils.checkpoint`): the same outputs and gradients, with O(block x chunk) memory per layer
            instead of O(chunk²), at the cost of a second forward pass of the attention. For full attention over
            long inputs (LRA PathX: 16,384 positions, one 16K x 16K float32 matrix is 1 GiB per example). `None`:
            all queries at once.
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
    chunk_size: int | None = None
    attention_activation: str = "softmax"
    attention_dropout: float = 0.0
    attention_query_block_size: int | None = None
    max_position_embeddings: int = 1024

    def __post_init__(self, **kwargs):
        if self.chunk_size == -1 and not isinstance(self.chunk_size, bool):  # MEGA's and older configs' "no chunking"
            self.chunk_size = None
        super().__post_init__(**kwargs)

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
        if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0):
            raise ValueError(f"`chunk_size` must be None (no chunking) or a positive integer, got {self.chunk_size!r}.")
        check_positive_int(self, "attention_query_block_size", optional=True)
        check_choice("attention_activation", self.attention_activation, MEGA_ATTENTION_ACTIVATIONS)
        if not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError(f"`attention_dropout` must be in [0, 1), got {self.attention_dropout}.")

    @property
    def relative_positions(self) -> int:
        """How many offsets the relative position bias covers: the chunk size, or the longest input."""
        return self.max_position_embeddings if self.chunk_size is None else self.chunk_size


__all__ = ["MegaConfig"]
