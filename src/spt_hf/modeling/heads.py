"""Heads written once for every architecture: masked LM, causal LM, sequence classification, retrieval.

Identical heads are a scientific requirement (docs/architectures.md): pooling and losses must not drift between
architectures. An architecture declares each head in one line:

    class S4ForMaskedLM(SequenceForMaskedLM, S4PreTrainedModel):
        base_model_class = S4Model

The base model lives under `base_model_prefix` ("model") in every head, so an SPT checkpoint maps one-to-one onto a
finetuning model.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.cache_utils import Cache
from transformers.modeling_outputs import CausalLMOutputWithPast, MaskedLMOutput, SequenceClassifierOutput
from transformers.utils import can_return_tuple

from .configuration_sequence import POOLING_MODES, SequenceModelConfig

# Where an LM head's weight is tied to the input embedding when `config.tie_word_embeddings` (token inputs).
TIED_LM_HEAD = {"lm_head.weight": "model.embeddings.word_embeddings.weight"}


def pool_hidden_states(hidden_states: torch.Tensor, padding_mask: torch.Tensor | None, mode: str) -> torch.Tensor:
    """Pool (B, L, H) over length to (B, H); padded positions never contribute, whatever the mode."""
    batch, length, _ = hidden_states.shape
    if padding_mask is None:
        padding_mask = torch.ones(batch, length, dtype=torch.bool, device=hidden_states.device)
    mask = padding_mask.to(torch.bool)  # (B, L)
    if mode == "mean":
        weights = mask.unsqueeze(-1).to(hidden_states.dtype)  # (B, L, 1)
        return (hidden_states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
    if mode == "max":
        return hidden_states.masked_fill(~mask.unsqueeze(-1), torch.finfo(hidden_states.dtype).min).amax(1)
    positions = torch.arange(length, device=hidden_states.device).expand(batch, length)  # (B, L)
    if mode == "last":
        index = torch.where(mask, positions, -1).amax(1).clamp(min=0)  # last real position, any padding side
    elif mode == "first":
        index = torch.where(mask, positions, length).amin(1).clamp(max=length - 1)  # first real position
    else:
        raise ValueError(f"Unknown pooling {mode!r}; expected one of {list(POOLING_MODES)}.")
    return hidden_states[torch.arange(batch, device=hidden_states.device), index]  # (B, H)


class ClassificationHead(nn.Module):
    """`out_proj(x)` ("linear") or `out_proj(GELU(dense(x)))` ("mlp") on pooled features."""

    def __init__(self, in_features: int, hidden_size: int, num_outputs: int, mlp: bool):
        super().__init__()
        self.dense = nn.Linear(in_features, hidden_size) if mlp else None
        self.out_proj = nn.Linear(hidden_size if mlp else in_features, num_outputs)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            features = F.gelu(self.dense(features))
        return self.out_proj(features)


class SequenceHeadMixin:
    """Holds the base model (`XModel`) under `base_model_prefix`, as transformers' `base_model`, and runs it; shared
    by every head."""

    base_model_class: type[nn.Module]

    uses_mask_embedding = False

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        setattr(self, self.base_model_prefix, self.base_model_class(config))
        mask_embedding = getattr(self.base_model.embeddings, "mask_embedding", None)
        if mask_embedding is not None and not self.uses_mask_embedding:
            # Only masked SPT reads the mask vector; freezing it elsewhere keeps it out of the optimiser and lets
            # DDP run without searching for unused parameters. It is still saved and transferred.
            mask_embedding.requires_grad_(False)

    @property
    def accepts_loss_kwargs(self) -> bool:
        # Only token LM losses normalise by the Trainer's `num_items_in_batch`; the others are per-batch means and
        # must be divided by the gradient-accumulation steps by the Trainer.
        return False

    def get_input_embeddings(self) -> nn.Module | None:
        return self.base_model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.base_model.set_input_embeddings(value)


class LanguageModelHeadMixin(SequenceHeadMixin):
    """Shared by the masked and causal LM heads: one output layer, token or continuous."""

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        if config.is_token_input:
            out_features = config.vocab_size
        elif config.continuous_loss == "cross_entropy":
            out_features = config.num_channels * config.num_quantized_levels
        else:
            out_features = config.num_channels
        self.lm_head = nn.Linear(config.hidden_size, out_features, bias=not config.is_token_input)

    @property
    def accepts_loss_kwargs(self) -> bool:
        return self.config.is_token_input

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Module) -> None:
        self.lm_head = new_embeddings

    def continuous_loss(self, logits: torch.Tensor, labels: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
        """L1 / MSE on values, or cross-entropy over quantised levels, averaged over the selected positions (0 when
        none is): sums masked with `select` (B, L), no boolean indexing (whose data-dependent shape is a host sync)."""
        config = self.config
        batch, length = select.shape
        count = (select.sum() * config.num_channels).clamp(min=1).to(torch.float32)  # selected values
        if config.continuous_loss == "cross_entropy":
            levels = logits.float().view(batch, length, config.num_channels, config.num_quantized_levels)
            if labels.is_floating_point():
                raise ValueError("`continuous_loss='cross_entropy'` needs integer level labels of shape (B, L, C).")
            targets = torch.where(select.unsqueeze(-1), labels.long(), -100)  # (B, L, C); -100: cross_entropy ignores
            return F.cross_entropy(levels.flatten(0, 2), targets.flatten(), reduction="sum") / count
        diff = logits.float() - labels.to(torch.float32)  # (B, L, C)
        errors = diff.abs() if config.continuous_loss == "l1" else diff.square()
        return torch.where(select.unsqueeze(-1), errors, 0.0).sum() / count


class SequenceForMaskedLM(LanguageModelHeadMixin):
    """Masked (denoising) SPT head.

    Tokens: masked positions carry the mask id in `input_ids` and `labels` hold the original id there (-100
    elsewhere); cross-entropy over the vocabulary. Continuous: `mask_positions` (B, L) marks the positions whose
    projected value the base model replaces by its mask vector; the loss (config.continuous_loss) is taken only there,
    against `labels` (defaults to `input_values` for L1/MSE).
    """

    uses_mask_embedding = True
    _tied_weights_keys = TIED_LM_HEAD

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        mask_positions: torch.BoolTensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        outputs = self.base_model(
            input_ids=input_ids,
            input_values=input_values,
            attention_mask=attention_mask,
            mask_positions=mask_positions,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, L, V) or (B, L, C[*levels])
        loss = None
        if self.config.is_token_input:
            if labels is not None:
                loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        elif mask_positions is not None or labels is not None:
            if mask_positions is None:
                raise ValueError("Masked LM on continuous inputs needs `mask_positions` (B, L) with `labels`.")
            if labels is None:
                if self.config.continuous_loss == "cross_entropy":
                    raise ValueError("`continuous_loss='cross_entropy'` needs `labels` holding integer levels.")
                labels = input_values
            select = mask_positions.to(torch.bool)  # the loss is taken at the masked positions only ...
            if attention_mask is not None:
                select = select & attention_mask.to(torch.bool)  # ... that are not padding
            loss = self.continuous_loss(logits, labels, select)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class SequenceForCausalLM(LanguageModelHeadMixin):
    """Causal SPT head: position t predicts element t+1 (`labels` are unshifted; the shift happens here).

    Tokens: cross-entropy over the vocabulary (`labels` -100 at padding), `generate()` supported. Continuous: L1/MSE
    (or level cross-entropy) of the next value; padded targets are excluded through `attention_mask`.
    transformers requires `GenerationMixin` as a direct base listed after the PreTrainedModel:

        class S4ForCausalLM(SequenceForCausalLM, S4PreTrainedModel, GenerationMixin): ...

    `config.use_cache` (default True) is what generate() uses; a forward builds the cache only when asked
    (`use_cache=True`, or a `cache` to continue): spt_hf fills it by running position by position through the mixers'
    recurrent steps, 12-45x slower on a CPU than the parallel pass that a forward otherwise takes.
    """

    _tied_weights_keys = TIED_LM_HEAD

    def __init__(self, config: SequenceModelConfig):
        if not config.has_causal_form:
            raise ValueError(
                f"{type(self).__name__}: {config.model_type} has no causal form, so it has no causal LM head; "
                "self-pretrain it with the masked objective (`objective: masked`)."
            )
        if config.bidirectional:
            raise ValueError(
                f"{type(self).__name__} needs a causal model: set `bidirectional=False` in the config "
                "(a bidirectional model sees the element it must predict)."
            )
        super().__init__(config)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # generate() must not build a DynamicCache from spt_hf's config: the base model says which cache holds its
        # states (`generation_cache()`); `_prepare_cache_for_generation` asks it for an empty one.
        return False

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs) -> None:
        """The base model's empty cache for generate() (filled by the first forward pass): spt_hf's `SequenceCache`, or
        a transformers backbone's own cache (spt_backbone). None when the caller passed a cache or asked for
        `use_cache=False` (then every step runs the whole sequence in parallel)."""
        if model_kwargs.get("cache") is None and generation_config.use_cache is not False:
            cache = self.base_model.generation_cache()
            if cache is not None:
                model_kwargs["cache"] = cache

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        r"""
        use_cache (`bool`, *optional*): return the generation cache (run through the mixers' recurrent steps); None
            or False: the parallel pass, no cache (generate() passes `config.use_cache`).
        The other arguments are the base model's (`SequenceBaseModel.forward`) and `labels` (unshifted).
        """
        outputs = self.base_model(
            input_ids=input_ids,
            input_values=input_values,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, L, V) or (B, L, C[*levels])
        loss = None
        if self.config.is_token_input:
            if labels is not None:
                loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        elif labels is not None or self.config.continuous_loss != "cross_entropy":
            labels = input_values if labels is None else labels
            batch, length = labels.shape[:2]
            select = torch.ones(batch, length - 1, dtype=torch.bool, device=logits.device)
            if attention_mask is not None:
                select = attention_mask[:, 1:].to(torch.bool)  # a padded target is never predicted
            loss = self.continuous_loss(logits[:, :-1], labels[:, 1:], select)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def generate(self, *args, **kwargs):
        if not self.config.is_token_input:
            raise ValueError("generate() needs a token model (config.vocab_size); continuous models have no tokens.")
        return super().generate(*args, **kwargs)


class SequenceForSequenceClassification(SequenceHeadMixin):
    """Pool over length (config.pooling, padding-aware) then a linear or MLP classifier (config.classifier_type).

    Single-label, multi-label or regression by `config.problem_type` (inferred from the labels when unset).
    """

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        mlp = config.classifier_type == "mlp"
        self.classifier = ClassificationHead(config.hidden_size, config.hidden_size, config.num_labels, mlp)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        input_values: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        outputs = self.base_model(
            input_ids=input_ids,
            input_values=input_values,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        pooled = pool_hidden_states(outputs.last_hidden_state, attention_mask, self.config.pooling)  # (B, H)
        logits = self.classifier(pooled)  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@dataclass
class RetrievalOutput(SequenceClassifierOutput):
    """`SequenceClassifierOutput` of a document pair: `hidden_states` / `attentions` are the first document's,
    `hidden_states_2` / `attentions_2` the second's."""

    hidden_states_2: tuple[torch.FloatTensor, ...] | None = None
    attentions_2: tuple[torch.FloatTensor, ...] | None = None


class SequenceForRetrieval(SequenceHeadMixin):
    """LRA Retrieval dual encoder: the same base model encodes each document separately (never concatenated);
    u, v are pooled encodings; [u, v, u - v, u * v] -> Linear(4H, H) -> GELU -> Linear(H, num_labels).
    """

    def __init__(self, config: SequenceModelConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.classifier = ClassificationHead(4 * config.hidden_size, config.hidden_size, config.num_labels, mlp=True)
        self.post_init()

    def encode(self, input_ids=None, input_values=None, attention_mask=None, inputs_embeds=None, **kwargs):
        """Pooled encoding (B, H) of one document, and the base model's outputs."""
        outputs = self.base_model(
            input_ids=input_ids,
            input_values=input_values,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        return pool_hidden_states(outputs.last_hidden_state, attention_mask, self.config.pooling), outputs

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        input_ids_2: torch.LongTensor | None = None,
        attention_mask_2: torch.Tensor | None = None,
        input_values: torch.FloatTensor | None = None,
        input_values_2: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        inputs_embeds_2: torch.FloatTensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> RetrievalOutput:
        if input_ids_2 is None and input_values_2 is None and inputs_embeds_2 is None:
            raise ValueError("The retrieval head needs a second document: pass `input_ids_2` (or `input_values_2`).")
        extra = {"output_hidden_states": output_hidden_states, "output_attentions": output_attentions}
        u, first = self.encode(input_ids, input_values, attention_mask, inputs_embeds, **extra)  # (B, H)
        v, second = self.encode(input_ids_2, input_values_2, attention_mask_2, inputs_embeds_2, **extra)  # (B, H)
        logits = self.classifier(torch.cat([u, v, u - v, u * v], dim=-1))  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float(), labels.long())
        return RetrievalOutput(
            loss=loss,
            logits=logits,
            hidden_states=first.hidden_states,
            attentions=first.attentions,
            hidden_states_2=second.hidden_states,
            attentions_2=second.attentions,
        )
