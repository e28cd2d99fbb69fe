"""Goodness-of-fit helpers shared by the sampler and mechanism tests."""
import numpy as np
from scipy.stats import chi2


def chi_square_pvalue(samples: np.ndarray, support: np.ndarray, probs: np.ndarray,
                      min_expected: float = 20.0) -> float:
    """Chi-square test of integer samples against probabilities on ``support``; cells
    with small expectation are pooled into one 'rest' cell."""
    n = samples.size
    expected = n * probs
    keep = expected >= min_expected
    observed = np.array([(samples == v).sum() for v in support[keep]], dtype=float)
    obs = np.append(observed, n - observed.sum())
    exp = np.append(expected[keep], n - expected[keep].sum())
    mask = exp > 0
    stat = float((((obs - exp) ** 2)[mask] / exp[mask]).sum())
    return float(chi2.sf(stat, int(mask.sum()) - 1))
