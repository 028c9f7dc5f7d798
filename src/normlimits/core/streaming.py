"""One stream of items fed to several consumers in lockstep: each consumer sees every item as it
comes, only one item is in memory at a time (the bench's workloads and the audit's yardsticks share
one forward pass per window this way)."""

from __future__ import annotations

import resource
import sys
import time
from typing import Any, Callable, Iterable, Iterator

from greenlet import greenlet


class PeakMemory:
    """Peak resident set size, resettable where the kernel allows it.

    On Linux, writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark ``VmHWM``
    (no other effect), so the peak of one stretch of work is exact. Elsewhere :meth:`reset` does
    nothing and :meth:`peak` is the process's lifetime peak (``resource.getrusage``).
    """

    def __init__(self) -> None:
        self.resettable = False
        self.highest = 0
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
            self.resettable = self._hwm() is not None
        except OSError:
            self.resettable = False

    @staticmethod
    def _hwm() -> int | None:
        try:
            with open("/proc/self/status") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def reset(self) -> None:
        """Start a new stretch (Linux only; a no-op elsewhere)."""
        if self.resettable:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")

    def peak(self) -> int:
        """Peak RSS in bytes since the last :meth:`reset` (or over the process's life)."""
        value = self._hwm() if self.resettable else None
        if value is None:
            value = self.lifetime_peak()
        self.highest = max(self.highest, value)
        return value

    def overall(self) -> int:
        """The largest peak seen by this object or recorded by the kernel for the process."""
        return max(self.highest, self.lifetime_peak())

    @staticmethod
    def lifetime_peak() -> int:
        """The process's peak RSS in bytes over its whole life."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


_END = object()


class _Consumer:
    """A function of an iterable, run as a coroutine (a greenlet) strictly one turn at a time.

    The producer hands over an item with :meth:`step`; the function runs until it asks for the
    next one (or returns), so the time between hand-over and hand-back is this consumer's own.
    Everything runs on the calling thread: measured here, torch's CPU kernels called from a second
    OS thread ran the gradient workload 2.3 times slower than on the main thread (5.5 against
    2.4 s a window at GPT-2's size: their intra-op parallelism did not engage), and every thread
    got its own malloc arena (peak memory 3 instead of 1.5 GiB). A greenlet has neither cost.
    """

    def __init__(self, name: str, fn: Callable[[Iterator], Any]):
        self.key = name
        self.fn = fn
        self._greenlet: greenlet | None = None
        self._item: Any = None
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.items_taken = 0

    def _feed(self) -> Iterator:
        item = self._item
        while item is not _END:
            self.items_taken += 1
            yield item
            item = None   # hold no reference while the producer makes the next item (memory)
            item = self._greenlet.parent.switch()   # this turn ends; the next item comes back

    def _body(self) -> None:
        try:
            self.result = self.fn(self._feed())
        except BaseException as exc:  # re-raised by the producer
            self.error = exc
        finally:
            self.finished = True
            self._item = None

    def step(self, item: Any) -> None:
        """Hand ``item`` (or the end marker) over and return when the consumer's turn ends."""
        if self.finished:
            return
        if self._greenlet is None:           # the first turn starts the function
            self._item = item
            self._greenlet = greenlet(self._body)
            self._greenlet.switch()
        else:
            self._greenlet.switch(item)
        self._item = None


class Lockstep:
    """Feed one stream of items to several iterable-consuming functions, one item at a time.

    ``consumers`` maps a name to ``fn(iterable) -> result``. :meth:`run` draws each item from
    ``produce`` once, hands it to every consumer in order, and times every turn; memory holds one
    item (plus whatever a consumer keeps from the previous one). After the stream ends, every
    function finishes (its final step is timed too) and its result is in :attr:`results`.
    Errors raised by a consumer are re-raised by :meth:`run` once every consumer has stopped.
    """

    def __init__(self, consumers: dict[str, Callable[[Iterator], Any]],
                 memory: PeakMemory | None = None):
        self.names = list(consumers)
        self._consumers = {k: _Consumer(k, fn) for k, fn in consumers.items()}
        self.memory = memory or PeakMemory()
        self.metric_seconds = {k: 0.0 for k in self.names}
        self.metric_cpu_seconds = {k: 0.0 for k in self.names}
        self.peak_rss = {k: 0 for k in self.names}
        self.produce_cpu_seconds = 0.0
        self.item_seconds: dict[str, list[float]] = {k: [] for k in self.names}
        self.produce_item_seconds: list[float] = []
        self.final_seconds = {k: 0.0 for k in self.names}
        self.produce_peak_rss = 0
        self.items = 0
        self.results: dict[str, Any] = {}

    @property
    def produce_seconds(self) -> float:
        """Wall time of the producer (the forward passes), summed over the items."""
        return sum(self.produce_item_seconds)

    def _turn(self, name: str, item: Any) -> None:
        consumer = self._consumers[name]
        if consumer.finished:
            return
        self.memory.reset()
        start, cpu = time.perf_counter(), time.process_time()
        consumer.step(item)
        elapsed = time.perf_counter() - start
        self.metric_seconds[name] += elapsed
        self.metric_cpu_seconds[name] += time.process_time() - cpu
        if item is _END:
            self.final_seconds[name] += elapsed
        else:
            self.item_seconds[name].append(elapsed)
        self.peak_rss[name] = max(self.peak_rss[name], self.memory.peak())

    def run(self, produce: Iterable) -> dict[str, Any]:
        """Consume ``produce`` (timed as the producer's work) through every consumer."""
        source = iter(produce)
        failure: BaseException | None = None
        try:
            while True:
                self.memory.reset()
                start, cpu = time.perf_counter(), time.process_time()
                try:
                    item = next(source)
                except StopIteration:
                    break
                self.produce_item_seconds.append(time.perf_counter() - start)
                self.produce_cpu_seconds += time.process_time() - cpu
                self.produce_peak_rss = max(self.produce_peak_rss, self.memory.peak())
                self.items += 1
                for name in self.names:
                    self._turn(name, item)
                del item
                if any(c.error is not None for c in self._consumers.values()):
                    break
        except BaseException as exc:  # the producer failed: stop every consumer first
            failure = exc
        for name in self.names:
            self._turn(name, _END)
        if failure is not None:
            raise failure
        for name, consumer in self._consumers.items():
            if consumer.error is not None and not isinstance(consumer.error, Exception):
                raise consumer.error             # a Ctrl-C (or exit) is not a workload's failure
            if consumer.error is not None:
                raise RuntimeError(f"bench workload {name!r} failed: {consumer.error!r}") \
                    from consumer.error
            self.results[name] = consumer.result
        return self.results
