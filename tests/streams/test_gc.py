"""The worker's collector setting (streams/worker/tuning.py hold_full_collections), observed
through the collector's own callbacks: while the worker runs, young passes go on and free
young cycles, and no full pass runs by itself (the worker's timer runs it when idle)."""
import gc
import weakref

from dpstream.streams.worker.tuning import hold_full_collections


class Node:
    def __init__(self):
        self.me = self


def test_a_ready_worker_runs_young_passes_and_no_full_pass_by_itself():
    before = gc.get_threshold()
    passes = []

    def seen(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    try:
        hold_full_collections()
        gc.callbacks.append(seen)
        cycle = Node()
        alive = weakref.ref(cycle)
        del cycle
        keep = [[Node() for _ in range(100)] for _ in range(5_000)]   # 500,000 tracked objects
        assert alive() is None                          # a young pass freed the cycle
        assert passes and 2 not in passes, sorted(set(passes))
        del keep
    finally:
        gc.callbacks.remove(seen)
        gc.unfreeze()
        gc.set_threshold(*before)
