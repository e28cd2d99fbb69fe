"""The worker's interpreter settings (streams/tuning.py hold_full_collections,
shorten_thread_switches)."""
import gc
import sys
import weakref

from dpstream.streams.tuning import SWITCH_INTERVAL, hold_full_collections, shorten_thread_switches


class Node:
    def __init__(self):
        self.me = self


def test_a_ready_worker_freezes_its_heap_holds_full_passes_and_still_collects_young_cycles():
    before = gc.get_threshold()
    try:
        hold_full_collections()
        assert gc.get_freeze_count() > 0                 # the startup heap left the collector's view
        assert gc.get_threshold()[:2] == before[:2]      # young generations as before
        assert gc.get_threshold()[2] >= 1_000_000_000    # automatic full passes held back
        cycle = Node()
        alive = weakref.ref(cycle)
        del cycle
        gc.collect(1)                                    # a young pass frees a fresh cycle
        assert alive() is None
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_ready_worker_hands_the_gil_to_the_consumer_thread_within_a_millisecond():
    before = sys.getswitchinterval()
    try:
        shorten_thread_switches()
        assert sys.getswitchinterval() == SWITCH_INTERVAL <= 0.001 < before
    finally:
        sys.setswitchinterval(before)
