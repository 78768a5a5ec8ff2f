"""Tasks and data for self-pretraining: task specs, loaders of the real formats, generators and SPT collators.

Where things are:

- ``tasks.py``: one :class:`TaskSpec` subclass per benchmark (``TASKS``, :func:`get_task_spec`).
- ``loading.py``: :func:`load_task` (Arrow cache, split conventions, subsampling).
- ``lra.py``, ``hub.py``, ``timeseries.py``, ``offline.py``, ``audio.py``: readers of each source format.
- ``listops_gen.py``, ``pathfinder_gen.py``, ``cli.py``: generators and ``spt-hf generate-data``.
- ``collators.py``: masked / causal SPT, classification and retrieval batches (masking happens only here).
- ``pretraining.py``: the train-only pretraining set and the leakage fingerprint.
- ``vocab.py``: the fixed special ids and the vocabularies.
"""

from .collators import (
    IGNORE_INDEX,
    CausalSPTCollator,
    ClassificationCollator,
    MaskedSPTCollator,
    RetrievalCollator,
    num_masked,
)
from .listops_gen import generate_listops, write_listops_splits
from .loading import default_cache_dir, load_task, make_splits, subsample_train
from .pathfinder_gen import PathfinderParams, generate_pathfinder_image, write_pathfinder_splits
from .pretraining import (
    DataFingerprint,
    DataLeakageError,
    check_no_overlap,
    fingerprint_examples,
    fingerprint_info,
    pretraining_dataset,
)
from .spec import LOAD_OPTIONS, DataFormatError, Normalization, TaskSpec, fit_normalization
from .tasks import TASKS, get_task_spec
from .vocab import (
    BYTE_VOCAB,
    DIGITS_VOCAB,
    EOS_ID,
    LISTOPS_VOCAB,
    MASK_ID,
    PAD_ID,
    UNK_ID,
    Vocabulary,
    special_token_ids,
)

__all__ = [
    "BYTE_VOCAB",
    "DIGITS_VOCAB",
    "EOS_ID",
    "IGNORE_INDEX",
    "LISTOPS_VOCAB",
    "LOAD_OPTIONS",
    "MASK_ID",
    "PAD_ID",
    "TASKS",
    "UNK_ID",
    "CausalSPTCollator",
    "ClassificationCollator",
    "DataFingerprint",
    "DataFormatError",
    "DataLeakageError",
    "MaskedSPTCollator",
    "Normalization",
    "PathfinderParams",
    "RetrievalCollator",
    "TaskSpec",
    "Vocabulary",
    "check_no_overlap",
    "default_cache_dir",
    "fingerprint_examples",
    "fingerprint_info",
    "fit_normalization",
    "generate_listops",
    "generate_pathfinder_image",
    "get_task_spec",
    "load_task",
    "make_splits",
    "num_masked",
    "pretraining_dataset",
    "special_token_ids",
    "subsample_train",
    "write_listops_splits",
    "write_pathfinder_splits",
]
