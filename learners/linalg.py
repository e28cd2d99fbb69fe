"""Linear algebra whose results do not depend on the CPU: what a replay on another machine
must reproduce bit for bit (the logistic blocks' and the student's fits, the halfspace
votes).

Why not ``@`` and ``np.linalg``: numpy hands matrix products to BLAS and solves to
LAPACK, and OpenBLAS picks its kernel per CPU at run time (``OPENBLAS_CORETYPE`` forces
one), each summing a product's terms in its own order. An attacker's pass fitted the
student's logistic regression on the same released answers under two kernels and got
different last bits of theta; queries placed on its boundary were then answered
differently, and a replay on the other machine reported 14 mismatched answers.

Here a product is ``np.einsum`` without ``optimize``: numpy's own sum-of-products loops,
one code path per numpy build whatever the CPU (``optimize`` would route it to BLAS
through ``tensordot``). A symmetric solve is a Cholesky factorisation written with those
products. So the same numpy version gives the same bits on every CPU: the tests run the
fits under several OpenBLAS kernels and numpy's run-time CPU-feature dispatch switched
down (``NPY_DISABLE_CPU_FEATURES``). Cost: about 2.5x a BLAS Gram matrix at n = 5,000,
d = 257 on this machine (0.1 s), negligible at a block's size.
"""
from __future__ import annotations

import math

import numpy as np

PIVOT_FLOOR = 1e-12   # relative to the largest diagonal entry (``solve_psd``)


def dot(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A x for a matrix A (rows . x) or a vector A (a scalar array)."""
    return np.einsum("...j,j->...", np.asarray(A, dtype=float), np.asarray(x, dtype=float))


def weighted_gram(Z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Z^T diag(w) Z."""
    Z = np.asarray(Z, dtype=float)
    return np.einsum("ni,nj->ij", Z * np.asarray(w, dtype=float)[:, None], Z)


def solve_psd(H: np.ndarray, g: np.ndarray) -> np.ndarray:
    """x with H x = g for a symmetric positive (semi-)definite H, by Cholesky (H = L L^T)
    and two triangular solves. A pivot below PIVOT_FLOOR times the largest diagonal entry
    (or times 1, when every diagonal entry is below 1; a NaN pivot too: H is then not
    finite) (H singular, or indefinite by rounding: two columns equal after the rows' clamp, their
    sums so large that the ridge was lost to rounding, made ``np.linalg.solve`` raise in an
    attacker's pass, and every later event of the model was dead-lettered) is raised to
    it: the factor is then that of H + E for a diagonal E >= 0, small beside H's largest
    entry (not beside a small pivot's), so x is still a descent direction for Newton's
    method, whose line search decides the step."""
    H = np.asarray(H, dtype=float)
    n = len(H)
    L = np.zeros_like(H)
    floor = PIVOT_FLOOR * max(1.0, float(np.max(np.abs(np.diag(H))))) if n else 0.0
    for j in range(n):
        v = H[j:, j] - np.einsum("ik,k->i", L[j:, :j], L[j, :j])
        pivot = v[0] if v[0] > floor else floor
        L[j, j] = math.sqrt(pivot)
        L[j + 1:, j] = v[1:] / L[j, j]
    z = np.zeros(n)
    g = np.asarray(g, dtype=float)
    for i in range(n):
        z[i] = (g[i] - np.einsum("k,k->", L[i, :i], z[:i])) / L[i, i]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (z[i] - np.einsum("k,k->", L[i + 1:, i], x[i + 1:])) / L[i, i]
    return x
