"""Decision lists as large-margin halfspaces (seed 000 Sec. 4.3; Blum-Singh 1990,
Dhagat-Hellerstein 1994, Valiant 1999) and the nonnegative 2d embedding.

A monotone 1-decision list over x in {-1,+1}^d: rules (v_i, b_i), i < r, "if x_{v_i}
= +1 then b_i", and a default b_r; outputs in {-1, +1}. Construction: write
[x_v = 1] = (1 + x_v)/2 and give every rule in the j-th block of equal outputs
(the D + 1 maximal runs; the default closes the last) the weight a_j, where

    a_j = 1 + sum of a_{blk(l)} over later rules l (default included) with b_l != b_j.

If the first true rule lies in block j, rules in block j and later rules with the
same output only add to b_j * value, and the opposite ones subtract at most
a_j - 1, so b_j * value >= 1. Over the d + 1 variables (x, 1) this is the vector
v_x = sum_i b_i a_i e_{v_i} / 2 and constant b_r a_r + sum_i b_i a_i / 2; the
margin is min |<v, (x,1)>| / ||v||_1 >= 1/||v||_1, and a_j <= r^(D+1-j) gives
Omega(1/r^D). ``exact_margin`` computes the minimum exactly (first-true-rule
analysis), and the tests compare it with brute force for small d.
"""
from __future__ import annotations

import itertools

import numpy as np

from dpstream.mechanisms.errors import ParameterError


def _blocks(bits: list[int]) -> list[int]:
    blk, out = 0, []
    for i, b in enumerate(bits):
        if i and b != bits[i - 1]:
            blk += 1
        out.append(blk)
    return out


def decision_list_weights(rules, default: int, d: int) -> np.ndarray:
    """Unnormalised v in R^{d+1} (last coordinate: the constant feature)."""
    if default not in (-1, 1) or any(b not in (-1, 1) for _, b in rules):
        raise ParameterError("bits", [b for _, b in rules] + [default], "values in {-1, +1}")
    if len({v for v, _ in rules}) != len(rules) or any(not 0 <= v < d for v, _ in rules):
        raise ParameterError("rules", "<variables>", f"distinct variables in [0, {d})")
    bits = [b for _, b in rules] + [default]
    blk = _blocks(bits)
    a = [0.0] * (max(blk) + 1)
    for j in reversed(range(len(a))):
        first = blk.index(j)
        a[j] = 1.0 + sum(a[blk[l]] for l in range(first + 1, len(bits))
                         if blk[l] > j and bits[l] != bits[first])
    v = np.zeros(d + 1)
    for i, (var, b) in enumerate(rules):
        v[var] += b * a[blk[i]] / 2
        v[d] += b * a[blk[i]] / 2
    v[d] += default * a[blk[-1]]
    return v


def evaluate_list(rules, default: int, X: np.ndarray) -> np.ndarray:
    """A decision list's label for each row of X (seed 000 Sec. 2: the first rule that fires,
    else the default)."""
    out = np.full(X.shape[0], default)
    open_ = np.ones(X.shape[0], dtype=bool)
    for var, b in rules:
        hit = open_ & (X[:, var] == 1)
        out[hit] = b
        open_ &= ~hit
    return out


def exact_margin(rules, default: int, v: np.ndarray) -> float:
    """min over x in {-1,1}^d of |<v, (x, 1)>| / ||v||_1, via the first true rule i:
    rules before i are false, rule i is true, later rules are free (each takes the sign
    that hurts), and variables not in the list contribute 0 (their weight is 0)."""
    d = v.size - 1
    norm = float(np.abs(v).sum())
    coef = [v[var] for var, _ in rules]            # +-x_var contributes +-coef
    worst = np.inf
    for i in range(len(rules) + 1):                # i = len(rules): all rules false
        before = -sum(coef[:i])                    # x = -1 on earlier rule variables
        fixed = before + (coef[i] if i < len(rules) else 0.0) + v[d]
        out = rules[i][1] if i < len(rules) else default
        later = coef[i + 1:] if i < len(rules) else []
        worst = min(worst, out * fixed - sum(abs(c) for c in later))
    return float(worst / norm)


def brute_force_margin(rules, default: int, v: np.ndarray, d: int) -> tuple[float, bool]:
    """(min |<v,(x,1)>|/||v||_1, agrees everywhere) over all 2^d inputs (tests only)."""
    X = np.array(list(itertools.product((-1, 1), repeat=d)))
    vals = X @ v[:d] + v[d]
    agree = np.array_equal(np.where(vals >= 0, 1, -1), evaluate_list(rules, default, X))
    return float(np.abs(vals).min() / np.abs(v).sum()), bool(agree)


def nonnegative_embedding(v: np.ndarray) -> np.ndarray:
    """v in R^n -> (max(v,0), max(-v,0)) in R^2n: <v', (z, -z)> = <v, z>, same l1 norm."""
    return np.concatenate([np.maximum(v, 0), np.maximum(-v, 0)])
