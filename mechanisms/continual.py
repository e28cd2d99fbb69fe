"""Continual counting of integer vectors by the binary tree mechanism with exact discrete
Gaussian noise (Dwork, Naor, Pitassi, Rothblum 2010; Chan, Shi, Song 2011), for
increments chosen adaptively. Our extension's engine (not a seed algorithm): it is
what continual-release Winnow (learners/continual_winnow.py) releases its statistic by.

Mechanism. A stream of n blocks brings integer increments g_1, g_2, ... in Z^dim. After
block t closes, the node of the binary tree that ends at t (level l = the number of
trailing zero bits of t, covering blocks t - 2^l + 1 .. t) is released with noise:
alpha^_t = sum of g over that node + Z_t, Z_t ~ N_Z(0, sigma2)^dim, i.i.d. exact discrete
Gaussians drawn from the keyed stream (model, purpose, (epoch, t)). The prefix sum
sum_{i <= t} g_i is estimated by the sum of the released nodes of t's binary
decomposition (at most ``levels`` of them): post-processing. Each block lies in one node
per level, so in at most levels = ceil(log2 n) + 1 released nodes.

Privacy (replace-one neighbours, adaptive increments), proved here:

1. One released node is the discrete Gaussian mechanism N_Z(v, sigma2 I) on an integer
   vector v. For integer shifts, D_a(N_Z(mu, s2) || N_Z(nu, s2)) <= a (mu - nu)^2 / (2 s2)
   for every order a (Canonne, Kamath, Steinke 2020, the discrete Gaussian satisfies
   Delta^2/(2 sigma^2)-zCDP: the normalising sums over Z are equal for integer centres
   and the sum at a non-integer centre is at most the sum at an integer one). Renyi
   divergence adds over independent coordinates, so the product over dim coordinates
   with an integer shift vector w is (||w||_2^2 / (2 sigma2))-zCDP.
2. Neighbouring streams differ in one example, which sits in one block b*. Every other
   block's increment is a function of its own examples and of what was released before
   it (the learner predicts from released statistics only), so conditioned on the same
   past releases every node not containing b* has the same input on both streams (zero
   privacy loss), and a node containing b* differs by g_{b*} - g'_{b*}, whose l2 norm is
   at most ``sensitivity`` (Delta; for continual Winnow 2 sqrt(s)).
3. zCDP composes adaptively (Bun and Steinke 2016, Lemma 2.3): the whole epoch is
   rho = levels * Delta^2 / (2 sigma2)-zCDP. This is the adaptive-stream argument of
   DP-FTRL's tree aggregation (Kairouz et al. 2021) and of Denisov et al. 2022 (Thm 2.1,
   Gaussian linear mechanisms are as private on adaptive streams as on fixed ones),
   made concrete for exact discrete noise.
4. zCDP -> (epsilon, delta) by Google's ``dp-accounting`` RDP accountant (``ZCDpEvent``,
   converted with Canonne-Kamath-Steinke's Proposition 12), in
   ``mechanisms.accounting.zcdp_epsilon``.

A person with at most k examples per epoch, at most one per block (the privacy unit,
mechanisms/participation.py): neighbours differ in a set S of at most k blocks, each by
at most Delta. A node v then differs by a sum of |S cap v| such differences (an integer
vector of norm at most |S cap v| Delta), so by steps 1 and 3 the epoch is
sum_v |S cap v|^2 Delta^2 / (2 sigma2) <= P_k Delta^2 / (2 sigma2)-zCDP, with P_k the
tree's participation norm (``participation_norm2``: at most k^2 levels, exactly levels
for k = 1). ``tree_rho`` takes it as ``participation``.

Epochs on disjoint examples: a new epoch starts a new tree on new examples, from the
previous epochs' *released* statistics (public). Conditioned on everything released
before it, an epoch's input does not depend on an example of another epoch, so by the
same adaptive-composition argument an example costs only its own epoch's rho, however
many epochs run: the per-example guarantee is the epoch's (epsilon, delta), forever.
A person is not confined to one epoch: the per-person guarantee is per epoch (k examples
in it), and a person present in E epochs composes to E times the epoch's rho.

State: for the CSS update only the closed nodes of the current prefix's decomposition
are needed (one per set bit of t), true sums; their noise is recomputed from the key.
"""
from __future__ import annotations

import logging
import math
import multiprocessing
import os
import threading
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

from .accounting import zcdp_epsilon
from .errors import InfeasibleParameters, ParameterError
from .randomness import KeyedRandomness, RandomStream
from .samplers import discrete_gaussian

log = logging.getLogger("dpstream.continual")

TREE_PURPOSE = "continual/tree"


def tree_levels(n_blocks: int) -> int:
    """Levels of the binary tree over n blocks: ceil(log2 n) + 1 (a block's nodes)."""
    if n_blocks < 1:
        raise ParameterError("n_blocks", n_blocks, ">= 1")
    return (n_blocks - 1).bit_length() + 1


def tree_rho(*, sigma2: float, levels: int, sensitivity: float,
             participation: float | None = None) -> float:
    """zCDP of one epoch: levels * Delta^2 / (2 sigma2) for one example (module docstring,
    steps 1-3); for a person, ``participation`` (P_k, mechanisms/participation.py) in place
    of levels (module docstring, "A person")."""
    if not sigma2 > 0:
        raise ParameterError("sigma2", sigma2, "> 0")
    norm2 = levels if participation is None else participation
    return norm2 * sensitivity * sensitivity / (2.0 * sigma2)


def tree_epsilon(*, sigma2: float, levels: int, sensitivity: float, delta: float,
                 participation: float | None = None) -> float:
    """The epsilon (at delta) one epoch of the tree mechanism guarantees (per example, or
    per person with ``participation``)."""
    return zcdp_epsilon(tree_rho(sigma2=sigma2, levels=levels, sensitivity=sensitivity,
                                 participation=participation), delta)


def calibrate_tree_sigma2(*, epsilon: float, delta: float, levels: int, sensitivity: float,
                          participation: float | None = None) -> int:
    """The smallest integer sigma2 with tree_epsilon(...) <= epsilon (bisection on integers;
    epsilon is decreasing in sigma2)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError("epsilon", epsilon, "a finite number > 0")
    if not sensitivity > 0:
        raise ParameterError("sensitivity", sensitivity, "> 0")

    def fits(s2: int) -> bool:
        return tree_epsilon(sigma2=s2, levels=levels, sensitivity=sensitivity, delta=delta,
                            participation=participation) <= epsilon

    hi = 1
    while not fits(hi):
        hi *= 2
        if hi > 10**8:
            raise InfeasibleParameters(
                f"epsilon={epsilon} at delta={delta} needs a noise variance above 1e8 "
                f"(levels={levels}, sensitivity={sensitivity:.4g}"
                + ("): raise epsilon or block size" if participation is None else
                   f", participation norm {participation:.4g}): raise epsilon or block size, "
                   "or lower max_contributions"))
    lo = hi // 2                              # fits(lo) is False or lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def closed_nodes(t: int) -> list[int]:
    """The blocks at which the nodes of t's binary decomposition closed, highest level
    first: (t >> l) << l for each set bit l of t."""
    return [(t >> l) << l for l in range(t.bit_length() - 1, -1, -1) if (t >> l) & 1]


def close_block(alpha: dict[int, np.ndarray], t: int, g: np.ndarray) -> dict[int, np.ndarray]:
    """The CSS update after block t (1-based) with increment g: the new node ending at t
    sums g and the closed nodes of t - 1 below its level; those are dropped. ``alpha``
    maps closing block -> true node sum (the decomposition of t - 1)."""
    level = (t & -t).bit_length() - 1
    node = g.astype(np.int64, copy=True)
    keep = {}
    for start, s in alpha.items():
        if ((start & -start).bit_length() - 1) < level:
            node += s
        else:
            keep[start] = s
    keep[t] = node
    return keep


_PREFETCHER: Executor | None = None
_PREFETCHER_LOCK = threading.Lock()
_IN_A_PROCESS = False
HELPER_NICE = 19            # added to the helper process's niceness (_nice)
PARENT_CHECK = 1.0          # seconds between the helper's checks that its worker lives


def draw_ahead_in_a_process(on: bool = True) -> None:
    """Draw noise blocks ahead in a helper process instead of a thread (the worker turns
    this on at start, streams/cli/commands.py).

    Why a process there: a block was ~0.2-0.3 s of exact sampling in the interpreter
    (~0.08 s since the row sampler, mechanisms/row_samplers.py), and
    in a thread it held the GIL for 12% of the worker's GIL time at 3,000
    continual-Winnow examples/s (py-spy --gil), time the event loop waited for. Why not
    by default: the helper starts by ``spawn`` (forking a process that runs faust's
    threads is unsafe), which imports the caller's main module again, and a library
    user's script without a main guard would run its own top level a second time."""
    global _IN_A_PROCESS
    with _PREFETCHER_LOCK:
        _IN_A_PROCESS = on


def _prefetcher() -> Executor:
    """The one executor that draws noise blocks ahead (``TreeNoise``): a thread, or a
    helper process (``draw_ahead_in_a_process``), started on the first block drawn ahead."""
    global _PREFETCHER
    with _PREFETCHER_LOCK:
        if _PREFETCHER is not None and isinstance(_PREFETCHER, ProcessPoolExecutor) != _IN_A_PROCESS:
            _PREFETCHER.shutdown(wait=False)
            _PREFETCHER = None
        if _PREFETCHER is None:
            _PREFETCHER = (ProcessPoolExecutor(max_workers=1,
                                               mp_context=multiprocessing.get_context("spawn"),
                                               initializer=_helper_start,
                                               initargs=(os.getpid(), _lower_priority))
                           if _IN_A_PROCESS else
                           ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpstream-noise"))
        return _PREFETCHER


def _helper_start(parent: int, lower_priority) -> None:
    """The helper process's initializer: ``lower_priority()``, then a daemon thread that
    ends the helper once ``parent`` (the worker) is gone. A helper waiting on its call
    queue did not notice its worker's death: after a morning of ``kill -9`` tests, 62
    helpers and as many multiprocessing resource trackers were still running, 4.1 GB of
    memory in all; with this, none were left after the same tests and a CI run."""
    lower_priority()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK)
        os._exit(0)

    threading.Thread(target=watch, name="dpstream-noise-parent", daemon=True).start()


def _lower_priority() -> None:
    """Run the helper process in the idle scheduling class (SCHED_IDLE), or at niceness
    +HELPER_NICE where that is not available: it draws a block a whole block ahead, so
    it can wait for CPU that the worker, the broker and the load generator want.

    Why idle, not only niced: a niced helper still keeps a core for its time slice when
    the worker's loop wakes up (a reply from the broker), while the kernel preempts an
    idle-class task at once for any normal one. Traced (bench/trace_worker.py, continual
    Winnow at 9,000 examples/s on 2 cores, interleaved runs): p99 51 / 43 / 42 ms idle
    against 54 / 62 / 44 niced; in bench runs the same day, 70-97% of the slowest 1% of
    events overlapped a draw in five of six runs with the helper niced (15-27% of all
    events), 0-21% in the three with it idle (docs/performance.md, "Where the latency tail goes").
    Starving it is not a risk: the worker never waited for a block in those runs
    (``noise_wait`` traces), and a worker that waits frees its core for the helper."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        _nice()


def _nice() -> None:
    """Niceness +HELPER_NICE (the fallback of ``_lower_priority``)."""
    try:
        os.nice(HELPER_NICE)
    except (AttributeError, OSError):       # not permitted here: the worker's priority
        pass


def start_helper() -> Future:
    """Start the executor that draws noise ahead now (the worker calls it once ready):
    the helper process's start (a ``spawn``: a new interpreter importing numpy and
    dpstream, at the worker's priority until its initializer runs) then falls in the
    worker's start-up, not in the first second of a stream. Traced (bench/trace_worker.py,
    continual Winnow at 8,800 examples/s): started by the first block drawn ahead, it
    overlapped 0.4 s of loop stalls of 12-37 ms each, the slowest 1% of that run.
    The future resolves once the helper runs."""
    return _prefetcher().submit(os.getpid)


def _forget_prefetcher(pool: Executor) -> None:
    """Drop a broken helper (its process died): the next block ahead starts a new one."""
    global _PREFETCHER
    with _PREFETCHER_LOCK:
        if _PREFETCHER is pool:
            _PREFETCHER = None
    pool.shutdown(wait=False, cancel_futures=True)


def draw_block(stream_key: bytes, sigma2: int, rows: int, dim: int) -> np.ndarray:
    """A rows x dim block of discrete Gaussians from the stream ``stream_key`` opens
    (``KeyedRandomness.stream_key``): a pure function of its arguments, so the helper
    process and the caller draw the same block."""
    return discrete_gaussian(RandomStream(stream_key), sigma2, rows * dim).reshape(rows, dim)


class TreeNoise:
    """The keyed noise of one epoch's released nodes, cached for the nodes still in use.

    Node t's noise is row t % c of the c x dim block of discrete Gaussians drawn from the
    keyed stream (model, purpose, (epoch, t // c)), c = max(1, 2^16 // dim) rounded down
    to a power of two: still a pure function of (key, model, epoch, t) for a model's
    fixed dim, and the exact sampler's per-call cost is shared by c nodes.

    A block of 2^16 draws took 0.18-0.31 s here (sigma2 from 10^6 down to 100; 0.08 s
    since the row sampler: 830,000-840,000 draws/s, bench/samplers.py), which a
    stream processor would pay as one stall every c releases (a 300 ms spike in the
    worker's latency, bench/throughput.py). So as soon as a block is taken, the next
    one is drawn ahead (``prefetch``: a whole block's time to do it), in a thread
    or, in the worker, a helper process (``draw_ahead_in_a_process``) that receives the
    derived key of that one block's stream, never the secret: the same pure function computed
    earlier, so the noise, the outputs and replay are unchanged; only when and where it
    is drawn moves.
    """

    def __init__(self, rng: KeyedRandomness, model_id: str, epoch: int, sigma2: int, dim: int,
                 purpose: str = TREE_PURPOSE, *, prefetch: bool = True):
        self.rng, self.model_id, self.epoch = rng, model_id, epoch
        self.sigma2, self.dim, self.purpose = int(sigma2), dim, purpose
        self.per_chunk = 1 << max(0, (max(1, (1 << 16) // dim)).bit_length() - 1)
        self.prefetch = prefetch and self.per_chunk > 1
        self._cache: dict[int, np.ndarray] = {}
        self._chunk: tuple[int, np.ndarray] | None = None
        self._next: tuple[int, Future | None, Executor | None] | None = None

    def __getstate__(self) -> dict:
        """Pickled (and deep-copied) without the block being drawn ahead, a future of a
        thread or process: the copy draws that block again when it needs it, the same
        bytes (``draw_block`` is a pure function). Library users pickle and copy models
        (River's ``check_estimator`` does both)."""
        state = dict(self.__dict__)
        state["_next"] = None
        return state

    def _args(self, c: int) -> tuple:
        return (self.rng.stream_key(self.model_id, self.purpose, (self.epoch, c)), self.sigma2,
                self.per_chunk, self.dim)

    def _ahead(self, c: int) -> tuple[int, Future | None, Executor | None]:
        pool = _prefetcher()
        try:
            return c, pool.submit(draw_block, *self._args(c)), pool
        except Exception as err:            # noqa: BLE001 - a broken helper: draw when needed
            log.warning("noise helper unavailable (%s); drawing on demand", type(err).__name__)
            _forget_prefetcher(pool)
            return c, None, None

    def _take(self, c: int) -> np.ndarray:
        """Chunk c: the block drawn ahead if there is one, else drawn now (the same block:
        ``draw_block`` is a pure function; a helper that failed only moves the work here)."""
        ahead, self._next = self._next, None
        if ahead is not None and ahead[0] == c and ahead[1] is not None:
            try:
                return ahead[1].result()
            except Exception as err:        # noqa: BLE001 - the helper died: draw it here
                log.warning("noise helper failed (%s); drawing on demand", type(err).__name__)
                _forget_prefetcher(ahead[2])
        return draw_block(*self._args(c))

    def expect(self, t: int) -> None:
        """Node t is the next one a release will need: draw its block ahead now unless it
        is the block in use or already on its way. Without it the first block of an
        epoch (and the first after a restart) was drawn on the caller's thread, on demand:
        traced in the worker (continual Winnow, dim 1,001), one 108 ms stall of the
        event loop at the epoch's first release."""
        c = t // self.per_chunk
        if (self.prefetch and self._next is None
                and (self._chunk is None or self._chunk[0] != c)):
            self._next = self._ahead(c)

    def node(self, t: int) -> np.ndarray:
        z = self._cache.get(t)
        if z is None:
            c = t // self.per_chunk
            if self._chunk is None or self._chunk[0] != c:
                self._chunk = (c, self._take(c))
            if self.prefetch and self._next is None:
                self._next = self._ahead(c + 1)
            z = self._chunk[1][t % self.per_chunk].copy()
            self._cache[t] = z
        return z

    def release(self, alpha: dict[int, np.ndarray]) -> np.ndarray:
        """Noisy prefix estimate: sum over the decomposition's nodes of (true + noise)."""
        out = np.zeros(self.dim, dtype=np.int64)
        for t, s in alpha.items():
            out += s + self.node(t)
        for t in [t for t in self._cache if t not in alpha]:
            del self._cache[t]
        return out
