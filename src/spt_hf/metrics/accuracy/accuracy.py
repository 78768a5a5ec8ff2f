"""Accuracy: the fraction of predictions equal to their references."""

import datasets
import evaluate
import numpy as np


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Fraction of predictions equal to their references.",
            citation="",
            inputs_description="predictions, references: integer class ids of the same length.",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        predictions, references = np.asarray(predictions), np.asarray(references)
        return {"accuracy": float((predictions == references).mean()) if len(references) else 0.0}
