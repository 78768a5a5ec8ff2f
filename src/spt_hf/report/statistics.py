"""Is the difference real? The paired comparison of `spt-hf report`: two sides' test metrics paired over the seeds both
have (the same seed draws the same training subset, data order and SPT masks), their mean difference with its 95%
t-interval, the paired t-test and the exact sign-flip test ("n too small" below `MIN_PAIRS` pairs).
"""

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .rows import Run

MIN_PAIRS = 3  # below this, no interval and no test: "n too small"
ALPHA = 0.05


@dataclass
class Paired:
    """a − b over the seeds both sides have: the mean difference, its 95% t-interval, the paired t-test's and the
    exact sign-flip test's two-sided p-values; `unpaired` lists the seeds only one side has (left out)."""

    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    p_t: float | None = None
    p_sign: float | None = None
    unpaired: dict = field(default_factory=dict)

    @property
    def significant(self) -> bool:
        return self.p_t is not None and self.p_t < ALPHA


def by_seed(runs: list[Run], scale: float) -> dict[int, float]:
    """Test metric per seed (runs of one seed on one side, e.g. the same scratch run in two folders, averaged)."""
    values = defaultdict(list)
    for run in runs:
        if run.seed is not None and run.test is not None:
            values[run.seed].append(run.test * scale)
    return {seed: float(np.mean(v)) for seed, v in values.items()}


def paired_difference(a: dict[int, float], b: dict[int, float]) -> Paired:
    """Paired comparison of two sides given per seed (see `Paired`); same seed, same training subset, data order and
    SPT masks (docs/compare.md)."""
    seeds = sorted(set(a) & set(b))
    unpaired = {side: sorted(set(x) - set(seeds)) for side, x in (("a", a), ("b", b)) if set(x) - set(seeds)}
    result = Paired(n=len(seeds), unpaired=unpaired)
    d = np.array([a[s] - b[s] for s in seeds])  # (n,)
    result.mean = float(d.mean()) if seeds else None
    if result.n < MIN_PAIRS:
        return result
    from scipy import stats

    se = float(d.std(ddof=1)) / np.sqrt(len(d))
    if se == 0:  # every seed differs by the same amount: no spread to test against
        result.low = result.high = result.mean
        result.p_t = 0.0 if result.mean != 0 else 1.0
    else:
        half = float(stats.t.ppf(1 - ALPHA / 2, len(d) - 1)) * se
        result.low, result.high = result.mean - half, result.mean + half
        result.p_t = float(2 * stats.t.sf(abs(result.mean) / se, len(d) - 1))
    result.p_sign = sign_flip_p(d)
    return result


def sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided sign-flip (paired permutation) test of mean(d) = 0: the share of the 2^n sign assignments
    whose |mean| is at least the observed one. Its smallest value is 2/2^n (0.25 for 3 seeds, 0.0625 for 5)."""
    n = len(d)
    signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # (2^n, n) of ±1
    means = np.abs(signs @ d) / n  # (2^n,)
    observed = abs(d.mean())
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))
