"""Mean absolute error (masked SPT on continuous inputs scores the masked positions only)."""

import datasets
import evaluate
import numpy as np


class MeanAbsoluteError(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Mean absolute error between predictions and references.",
            citation="",
            inputs_description="predictions, references: floats of the same length.",
            features=datasets.Features(
                {"predictions": datasets.Value("float32"), "references": datasets.Value("float32")}
            ),
        )

    def _compute(self, predictions, references):
        diff = np.asarray(predictions, dtype=np.float64) - np.asarray(references, dtype=np.float64)
        return {"mae": float(np.abs(diff).mean()) if diff.size else 0.0}
