"""Configuration of spt_hf Linformer models (Wang et al., "Linformer: Self-Attention with Linear Complexity", 2020)."""

from .configuration_rotary_transformer import RotaryTransformerConfig
from .configuration_sequence import check_bool, check_choice, check_positive_int, with_saved_defaults

PROJECTION_SHARING = ("none", "headwise", "key-value", "layerwise")


class LinformerConfig(RotaryTransformerConfig):
    r"""
    Configuration of a Linformer: the spt_hf Transformer (attention block then GELU feed-forward block per layer)
    whose attention projects keys and values along the sequence, K' = E K and V' = F V with E, F of shape
    (k, max_position_embeddings), so attention costs O(L k). The attention fields shared with the Transformer
    (`num_attention_heads`, `intermediate_size`, `attention_dropout`, `position_embedding_type`, `rope_parameters`)
    are documented in `RotaryTransformerConfig`, the shared fields in `SequenceModelConfig`.

    Linformer has no causal form (the projection mixes every position into every projected key): `bidirectional`
    must be True, and there is no causal LM head; self-pretrain it with the masked objective.

    Args:
        projected_length (`int`, *optional*, defaults to 256):
            k, the number of projected keys and values (the paper's main setting is k = 256). At most
            `max_position_embeddings`.
        projection_sharing (`str`, *optional*, defaults to `"headwise"`):
            How the projections are shared (paper §4): `"none"` (E_i, F_i per head), `"headwise"` (one E and one F
            per layer, shared by its heads), `"key-value"` (one matrix per layer for keys and values, E = F), or
            `"layerwise"` (one matrix for every layer, head, keys and values).
        max_position_embeddings (`int`, *optional*, defaults to 4096):
            The fixed maximum length: E and F have this many columns and an input of length L uses the first L
            (padded positions contribute nothing). Longer inputs are refused.
        bias_after_projection (`bool`, *optional*, defaults to `True`):
            True: the key and value biases are added after the projection along the sequence,
            K' = E (X W_kᵀ) + 1 b_kᵀ (with rotary positions R, E R(X W_kᵀ) + 1 b_kᵀ), as fairseq's
            `examples/linformer` computes (E X) W_kᵀ + 1 b_kᵀ.
            False: before it, K' = E (X W_kᵀ + 1 b_kᵀ), which differs by (E 1 - 1) b_kᵀ and depends on the length
            through the row sums of E. Checkpoints saved before this field existed use False: a saved config.json
            without it loads with False (`from_pretrained`, `from_dict`).
    """

    model_type = "spt_linformer"
    has_causal_form = False
    # Fields added after checkpoints were saved without them, and the value that reproduces those checkpoints.
    saved_defaults = {"bias_after_projection": False}

    projected_length: int = 256
    projection_sharing: str = "headwise"
    max_position_embeddings: int = 4096
    bias_after_projection: bool = True

    def validate_linformer_fields(self) -> None:
        if not self.bidirectional:
            raise ValueError(
                "`bidirectional=False` is not possible for spt_linformer: Linformer has no causal form (its "
                "projection along the sequence mixes every position into every projected key). Use "
                "`bidirectional=True` and masked SPT (`objective: masked`)."
            )
        if self.attention_window is not None:
            raise ValueError(
                f"`attention_window`={self.attention_window} is not used by spt_linformer (its attention is "
                "already linear in the length); leave it None."
            )
        check_positive_int(self, "projected_length")
        check_choice("projection_sharing", self.projection_sharing, PROJECTION_SHARING)
        if self.projected_length > self.max_position_embeddings:
            raise ValueError(
                f"`projected_length`={self.projected_length} must be at most `max_position_embeddings`="
                f"{self.max_position_embeddings} (k <= n: the projection shortens the sequence)."
            )
        check_bool(self, "bias_after_projection")

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """As `PreTrainedConfig.from_dict`; a saved config without `bias_after_projection` (saved before it existed)
        loads with `bias_after_projection=False`, the order it was trained with. `from_pretrained` and the Auto
        classes come here."""
        return super().from_dict(with_saved_defaults(config_dict, cls.saved_defaults), **kwargs)

    @classmethod
    def from_json_file(cls, json_file):
        return cls.from_dict(cls._dict_from_json_file(json_file))


__all__ = ["LinformerConfig"]
