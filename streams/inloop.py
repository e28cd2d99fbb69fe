"""faust's Kafka consumer on the worker's own event loop instead of its own thread.

Why. faust runs aiokafka's consumer in a thread with a second event loop
(``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread``, a mode
``QueueServiceThread``); every call to it crosses threads through a method queue, and
the two threads share one GIL. Profiled at 23,000 DP-Winnow examples/s (py-spy, ~10 s),
faust's consumer thread was active in 41% of the samples, 58% of those in its loop's
selector, its real work (fetch requests and their decoding) about 17% of a core; the
loop thread showed 6% in socket writes while perf put all kernel time at 9% of the
process (a run with a busy loop on the other core): most likely hand-overs of the GIL,
not work. Side by side (bench/throughput.py, two runs
on one fresh broker): DP-Winnow capacity 51,726 and 50,376 examples/s on the loop
against 41,079 and 47,271 with the thread; at half capacity p50 7 and 7 ms against 21
and 17 ms, p99 48 and 46 against 68 and 48 ms.

What changes. ``InLoopConsumerThread`` is faust's consumer-thread class with its thread
taken out: ``thread_loop`` is the worker's loop, ``start`` serves the service as a task
of that loop (``ServiceThread._serve``) instead of in a new thread, ``call_thread``
awaits the call directly, and ``_gather_remaining_tasks`` (which, in a thread, cancels
every task left on the thread's loop: here, the whole app's) does nothing. Everything
else is faust's own code: the aiokafka consumer, rebalance listener, commits, seeks,
the rebalance callbacks through the consumer's method queue (now a hop within one
loop). Install with ``install(app)`` before the consumer is created.

faust internals relied on (faust-streaming 0.15.x, pinned below 0.16):
``Transport.Consumer`` (the class ``create_consumer`` instantiates),
``Consumer._new_consumer_thread``, mode's ``ServiceThread`` fields ``_thread_started``,
``_thread_running``, ``parent_loop`` / ``thread_loop`` and ``_serve``.
"""
from __future__ import annotations

import asyncio

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Consumer
from mode.utils.futures import maybe_async


class InLoopConsumerThread(AIOKafkaConsumerThread):
    """faust's aiokafka consumer service, served on the caller's loop (no thread)."""

    def __init__(self, consumer, *, loop=None, **kwargs):
        loop = loop or asyncio.get_event_loop()
        super().__init__(consumer, loop=loop, thread_loop=loop, **kwargs)
        self._close_thread_loop_on_stop = False     # the loop is the worker's
        self._serving: asyncio.Future | None = None

    async def start(self) -> None:
        assert not self._thread_started.is_set()
        self._thread_started.set()
        self._thread_running = self.parent_loop.create_future()
        self._serving = asyncio.ensure_future(self._serve())
        try:
            # _serve notifies _thread_running once started; a failed start ends _serve
            done, _ = await asyncio.wait({self._thread_running, self._serving},
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._serving in done:
                self._serving.result()              # re-raise the start's error
        finally:
            self._thread_running = None

    async def call_thread(self, fun, *args, **kwargs):
        """The call, awaited here (some callers pass plain functions, as the method
        queue allows: ``maybe_async``, as mode's ``MethodQueue`` does)."""
        return await maybe_async(fun(*args, **kwargs))

    async def _gather_remaining_tasks(self) -> None:
        """Nothing: on a thread's own loop this cancels every task left there; on the
        worker's loop those are the app's (its own futures are stopped by mode)."""


class InLoopConsumer(Consumer):
    def _new_consumer_thread(self) -> InLoopConsumerThread:
        return InLoopConsumerThread(self, loop=self.loop, beacon=self.beacon)


def install(app) -> None:
    """Make ``app`` create its consumer on its own loop (call before the worker starts)."""
    app.transport.Consumer = InLoopConsumer
