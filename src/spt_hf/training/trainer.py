"""The HF Trainer with spt_hf's optimiser groups, fixed evaluation masks, and the metrics of each phase."""

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from transformers import EvalPrediction, Trainer

from ..data import IGNORE_INDEX
from ..metrics import load_metric
from .optim import param_groups


class SPTTrainer(Trainer):
    """`Trainer` whose optimiser uses `param_groups` (SSM learning rates, no decay on norms and SSM parameters)
    and whose evaluations draw the same masks every time (`eval_collator_factory` builds a fresh, fixed-seed
    collator per evaluation, so validation metrics are comparable across evaluations)."""

    def __init__(self, *args, eval_collator_factory: Callable | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.eval_collator_factory = eval_collator_factory

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            opt_model = self.model if model is None else model
            groups = param_groups(opt_model, self.args.learning_rate, self.args.weight_decay)
            optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
            self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def _save_rng_state(self, output_dir: str) -> None:
        # The SPT mask stream is part of the random state: a resumed run continues it (one file per process).
        super()._save_rng_state(output_dir)
        if hasattr(self.data_collator, "state_dict"):
            torch.save(self.data_collator.state_dict(), Path(output_dir) / collator_state_file(self.args))

    def _load_rng_state(self, checkpoint) -> None:
        super()._load_rng_state(checkpoint)
        path = Path(checkpoint or "") / collator_state_file(self.args)
        if checkpoint and hasattr(self.data_collator, "load_state_dict") and path.is_file():
            self.data_collator.load_state_dict(torch.load(path, weights_only=True))

    @contextmanager
    def _evaluation_collator(self):
        """Swap in a fresh fixed-seed collator for one evaluation, then restore the training collator."""
        if self.eval_collator_factory is None:
            yield
            return
        train_collator, self.data_collator = self.data_collator, self.eval_collator_factory()
        try:
            yield
        finally:
            self.data_collator = train_collator

    def evaluate(self, *args, **kwargs):
        with self._evaluation_collator():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with self._evaluation_collator():
            return super().predict(*args, **kwargs)


def collator_state_file(args) -> str:
    return f"collator_state_{args.process_index}.pt"


def _first(value):
    return value[0] if isinstance(value, tuple | list) else value


def token_argmax(logits, labels):
    """Keep only argmax ids of LM logits during evaluation (the full (B, L, V) tensor is not needed)."""
    return _first(logits).argmax(-1)


def masked_accuracy_metrics() -> Callable[[EvalPrediction], dict]:
    """Accuracy of the predicted tokens at the masked positions (labels != -100)."""
    accuracy = load_metric("accuracy")

    def compute(prediction: EvalPrediction) -> dict:
        predictions, labels = np.asarray(prediction.predictions), np.asarray(prediction.label_ids)
        keep = labels != IGNORE_INDEX
        result = accuracy.compute(predictions=predictions[keep], references=labels[keep])
        return {"masked_accuracy": result["accuracy"]}

    return compute


def causal_accuracy_metrics() -> Callable[[EvalPrediction], dict]:
    """Next-token accuracy: the prediction at t is scored against the label at t + 1."""
    accuracy = load_metric("accuracy")

    def compute(prediction: EvalPrediction) -> dict:
        predictions = np.asarray(prediction.predictions)[:, :-1]
        labels = np.asarray(prediction.label_ids)[:, 1:]
        keep = labels != IGNORE_INDEX
        result = accuracy.compute(predictions=predictions[keep], references=labels[keep])
        return {"next_token_accuracy": result["accuracy"]}

    return compute


def classification_metrics(problem_type: str) -> Callable[[EvalPrediction], dict]:
    """Accuracy for classification, R² and MSE for regression (shipped `evaluate` modules)."""
    if problem_type == "regression":
        r2 = load_metric("r2")

        def compute(prediction: EvalPrediction) -> dict:
            predictions = np.asarray(_first(prediction.predictions), dtype=np.float32).reshape(-1)
            return r2.compute(predictions=predictions, references=np.asarray(prediction.label_ids).reshape(-1))

        return compute
    accuracy = load_metric("accuracy")

    def compute(prediction: EvalPrediction) -> dict:
        predictions = np.asarray(_first(prediction.predictions)).argmax(-1)
        return accuracy.compute(predictions=predictions, references=np.asarray(prediction.label_ids))

    return compute


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
