"""Tasks and data for self-pretraining: task specs, loaders of the real formats, generators and SPT collators.

Where things are:

- ``spec.py``: :class:`TaskSpec`, what a model and a collator need to know about a task.
- ``tasks.py``: one :class:`TaskSpec` subclass per benchmark (``TASKS``, :func:`get_task_spec`).
- ``loading.py``: :func:`load_task` (Arrow cache, split conventions, subsampling).
- ``readers/``: one module per source format (the LRA release, Hub datasets, ``.ts`` files, offline data, audio).
- ``generators/``: ListOps and Pathfinder generators in the LRA layout (:func:`generate_data`).
- ``collators.py``: padding and the SPT objectives' batches. Masked SPT draws which positions are masked here and
  replaces masked *tokens* by the mask id; for continuous inputs it only marks ``mask_positions``: the learned mask
  vector replaces those positions inside the model (``modeling/blocks.py``, ``SequenceEmbeddings``), and the masked
  LM head takes its loss at those positions only (``modeling/heads.py``).
- ``pretraining.py``: the train-only pretraining set and the leakage fingerprint.
- ``vocab.py``: the fixed special ids and the vocabularies.
"""

from .cache import default_cache_dir
from .collators import (
    IGNORE_INDEX,
    CausalSPTCollator,
    ClassificationCollator,
    MaskedSPTCollator,
    RetrievalCollator,
    num_masked,
)
from .generators import (
    GENERATED_TASKS,
    PathfinderParams,
    generate_data,
    generate_listops,
    generate_pathfinder_image,
    write_listops_splits,
    write_pathfinder_splits,
)
from .loading import load_task, make_splits, subsample_train
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
    "GENERATED_TASKS",
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
    "generate_data",
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
