"""Configuration of the spt_hf Transformer (rotary positions by default, absolute sinusoidal as an option)."""

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from .configuration_sequence import SequenceModelConfig, check_choice

POSITION_EMBEDDING_TYPES = ("rotary", "absolute")


class RotaryTransformerConfig(SequenceModelConfig):
    r"""
    Configuration of [`RotaryTransformerModel`] and its heads. Shared fields (inputs, norms, pooling, heads, SPT
    losses) are documented in `SequenceModelConfig`.

    Args:
        num_attention_heads (`int`, *optional*, defaults to 4):
            Number of attention heads; must divide `hidden_size`.
        intermediate_size (`int`, *optional*, defaults to 512):
            Width of the GELU feed-forward block (the paper uses 1x, 2x or 4x `hidden_size`).
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on attention probabilities.
        position_embedding_type (`str`, *optional*, defaults to `"rotary"`):
            `"rotary"` (RoPE on queries and keys, as in the paper's best Transformer) or `"absolute"` (sinusoidal
            positions added to the input embedding, as in the LRA configs; computed for any length).
        rope_parameters (`dict`, *optional*):
            RoPE settings in transformers' format; defaults to `{"rope_type": "default", "rope_theta": 10000.0}`.
            Every RoPE type of transformers works (`linear`, `dynamic`, `yarn`, `longrope`, `llama3`, ... with their
            parameters, e.g. `{"rope_type": "dynamic", "factor": 2.0}`), validated as transformers validates them.
        max_position_embeddings (`int`, *optional*, defaults to 16384):
            The length the model is meant for: the scaled RoPE types start rescaling their frequencies beyond it
            (longer inputs always work).
        attention_window (`int`, *optional*):
            Block-local attention for long sequences (PathX): the sequence is cut into blocks of this size and each
            query sees its own block and one block on each side (causal mode: only up to itself). `None` = full
            attention.

    Example:

    ```python
    >>> from transformers import AutoConfig, AutoModelForSequenceClassification
    >>> import spt_hf  # registers the model types
    >>> config = AutoConfig.for_model("spt_rotary_transformer", vocab_size=20, hidden_size=32, num_hidden_layers=2,
    ...                               num_attention_heads=4, num_labels=10)
    >>> model = AutoModelForSequenceClassification.from_config(config)
    ```
    """

    model_type = "spt_rotary_transformer"

    num_attention_heads: int = 4
    intermediate_size: int = 512
    attention_dropout: float = 0.0
    position_embedding_type: str = "rotary"
    rope_parameters: dict | None = None
    max_position_embeddings: int = 16384
    attention_window: int | None = None

    def __post_init__(self, **kwargs):
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
        super().__post_init__(**kwargs)
        if self.position_embedding_type == "rotary":
            self.standardize_rope_params()
            rope_type = self.rope_parameters.get("rope_type", "default")
            if rope_type != "default" and rope_type not in ROPE_INIT_FUNCTIONS:
                raise ValueError(
                    f"`rope_parameters` has rope_type={rope_type!r}, which transformers does not define; expected "
                    f"one of {['default', *sorted(ROPE_INIT_FUNCTIONS)]}."
                )
            self.validate_rope()

    def validate_rotary_transformer_fields(self) -> None:
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"`num_attention_heads`={self.num_attention_heads} must be positive and divide "
                f"`hidden_size`={self.hidden_size}."
            )
        if self.position_embedding_type == "rotary" and (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError("Rotary positions need an even head size (`hidden_size / num_attention_heads`).")
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        if self.attention_window is not None and self.attention_window <= 0:
            raise ValueError(f"`attention_window` must be a positive block size or None, got {self.attention_window}.")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


__all__ = ["RotaryTransformerConfig"]
