"""Configuration of spt_hf Performer models (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021)."""

from .configuration_rotary_transformer import RotaryTransformerConfig
from .configuration_sequence import check_positive_int


class PerformerConfig(RotaryTransformerConfig):
    r"""
    Configuration of a Performer: the spt_hf Transformer (attention block then GELU feed-forward block per layer)
    whose softmax attention is estimated by FAVOR+ (positive orthogonal random features), linear in the length; the
    causal form uses prefix sums. The attention fields shared with the Transformer (`num_attention_heads`,
    `intermediate_size`, `position_embedding_type`, `rope_parameters`, `max_position_embeddings`) are documented in
    `RotaryTransformerConfig`, the shared fields in `SequenceModelConfig`. FAVOR+ never forms the attention matrix,
    so `attention_dropout` must stay 0 and `attention_window` None.

    Args:
        num_random_features (`int`, *optional*, defaults to 256):
            m, the number of positive random features per head (blocks of orthogonal Gaussian rows with chi-distributed
            lengths); the estimate of softmax attention has variance O(1/m). 256 is the Performer code's default.
        feature_redraw_interval (`int`, *optional*, defaults to 1000):
            In training mode, new random features are drawn after this many forward passes of the base model (the
            paper resamples the features periodically; 1000 is the PyTorch Performer's default). Draws are seeded (a
            saved per-layer seed and the draw count), so a run is reproducible and a reloaded model continues from the
            same features.
            `None`: never redraw. Never in eval mode. Under torch.compile the forward does not count (it would break
            the graph): spt_hf's Trainer counts before each training step, or call the base model's
            `count_training_call()` before each compiled training forward yourself.
    """

    model_type = "spt_performer"

    num_random_features: int = 256
    feature_redraw_interval: int | None = 1000

    def validate_performer_fields(self) -> None:
        check_positive_int(self, "num_random_features")
        check_positive_int(self, "feature_redraw_interval", optional=True)
        if self.attention_window is not None:
            raise ValueError(
                f"`attention_window`={self.attention_window} is not used by spt_performer (FAVOR+ is already linear in "
                "the length); leave it None."
            )
        if self.attention_dropout != 0.0:
            raise ValueError(
                f"`attention_dropout`={self.attention_dropout} cannot apply to spt_performer: FAVOR+ never forms the "
                "attention matrix. Leave it 0.0 (use `hidden_dropout_prob` for dropout)."
            )


__all__ = ["PerformerConfig"]
