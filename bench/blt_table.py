"""Writes mechanisms/blt_table.json: BLT parameters (``factorization.optimise_blt``) for
n = 2, 4, ..., 2^17 blocks, and prints each one's max error against the square-root
Toeplitz factorization's and the tree's at the same n (equal rho).

    python bench/blt_table.py          # about five minutes on a 2-core machine
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpstream.mechanisms.factorization import (TABLE, TABLE_MAX, BLTFactorization,  # noqa: E402
                                               SqrtToeplitz, TreeFactorization, max_error,
                                               optimise_blt)


def main() -> None:
    table = {}
    n = 2
    while n <= TABLE_MAX:
        t0 = time.perf_counter()
        p = optimise_blt(n)
        secs = time.perf_counter() - t0
        table[str(n)] = {"theta": list(p.theta), "omega": list(p.omega)}
        blt, sqrt, tree = (max_error(f, n) for f in (BLTFactorization(p), SqrtToeplitz(), TreeFactorization()))
        print(f"n = {n:>7,}: max error BLT {blt:7.2f}, sqrt-Toeplitz {sqrt:7.2f} "
              f"(BLT / sqrt {blt / sqrt:.3f}), tree {tree:6.1f} (tree / BLT {tree / blt:5.2f}); "
              f"optimised in {secs:.1f} s", flush=True)
        n *= 2
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
