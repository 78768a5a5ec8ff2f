"""Sharing spt_hf checkpoints on the Hugging Face Hub: model cards rendered from `results.json`, and pushing.

    from spt_hf.hub import publish_comparison, push_checkpoint, render_model_card
    push_checkpoint("runs/digits/spt", "me/digits-transformer-spt")   # or: spt-hf push runs/digits --repo_id ...
    publish_comparison("runs/compare", "me")        # or: spt-hf push --comparison runs/compare --namespace me

The pipeline calls `ensure_push_credentials(training_args, ...)` before training when a recipe sets `push_to_hub`,
and `push_phase(training_args)` once a phase has written its model and results.
"""

from .cards import render_model_card, results_from_folder
from .publish import PublishResult, publish_comparison
from .pull import checkpoint_folder
from .push import (
    HubPushError,
    MissingHubCredentialsError,
    check_credentials,
    ensure_push_credentials,
    push_checkpoint,
    push_phase,
    resolve_push_folder,
    write_model_card,
)

__all__ = [
    "HubPushError",
    "MissingHubCredentialsError",
    "PublishResult",
    "check_credentials",
    "checkpoint_folder",
    "ensure_push_credentials",
    "push_checkpoint",
    "publish_comparison",
    "push_phase",
    "render_model_card",
    "resolve_push_folder",
    "results_from_folder",
    "write_model_card",
]
