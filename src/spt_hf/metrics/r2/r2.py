"""Coefficient of determination R² (and MSE) for regression tasks such as BIDMC."""

import datasets
import evaluate
import numpy as np


class RSquared(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="R² = 1 - SS_res / SS_tot, and the mean squared error.",
            citation="",
            inputs_description="predictions, references: floats of the same length.",
            features=datasets.Features(
                {"predictions": datasets.Value("float32"), "references": datasets.Value("float32")}
            ),
        )

    def _compute(self, predictions, references):
        predictions = np.asarray(predictions, dtype=np.float64)
        references = np.asarray(references, dtype=np.float64)
        residual = ((references - predictions) ** 2).sum()
        total = ((references - references.mean()) ** 2).sum()
        r2 = 1.0 - residual / total if total > 0 else 0.0
        return {"r2": float(r2), "mse": float(residual / max(len(references), 1))}
