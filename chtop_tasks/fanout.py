"""Run one function over many items in a small thread pool (each item's work is mostly a subprocess)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

POOL_SIZE = max(1, min(os.cpu_count() or 1, 8))


def fan_out(func, items):
    """``func`` over ``items`` in the pool, results in input order (the first failure in that order raises)."""
    items = list(items)
    if len(items) <= 1:
        return [func(item) for item in items]
    with ThreadPoolExecutor(max_workers=POOL_SIZE) as pool:
        return list(pool.map(func, items))
