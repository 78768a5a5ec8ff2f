"""`AutoModelForRetrieval`: the Auto class of the dual-encoder retrieval heads, which transformers does not have.

It behaves like the built-in Auto classes: `from_config`, `from_pretrained` (also with `trust_remote_code=True`
through the `auto_map` entry that spt_hf checkpoints carry) and `register`.
"""

from collections import OrderedDict

from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping


class AutoModelForRetrieval(_BaseAutoModelClass):
    """Instantiates the retrieval (document-pair) head of a registered spt_hf architecture."""

    _model_mapping = _LazyAutoMapping(OrderedDict(), OrderedDict())
