"""GPU wall time of a call, the one way every GPU study here times: the
device synchronised before the clock starts and before it stops (no-ops
without CUDA)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def sync() -> None:
    """Waits for the GPU's queued work (nothing without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def mean_time(fn: Callable[[], Any], reps: int) -> float:
    """Seconds a call of fn takes, the mean of reps calls back to back (the
    caller has warmed it: compiled, captured, allocated)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def median_time(fn: Callable[[], Any], reps: int = 3) -> float:
    """Seconds a call of fn takes, the median of reps calls each timed alone,
    after one call that is not timed."""
    fn()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
