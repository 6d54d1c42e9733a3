"""asyncio helpers shared by the proxy's modules (Python 3.10 and later)."""

from __future__ import annotations

import asyncio
import contextlib


@contextlib.asynccontextmanager
async def _compat_timeout(delay: float):
    """asyncio.timeout for Python 3.10: cancel the task, raise TimeoutError."""
    task, fired = asyncio.current_task(), []
    handle = asyncio.get_running_loop().call_later(delay, lambda: (fired.append(1), task.cancel()))
    try:
        yield
    except asyncio.CancelledError:
        if fired:
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


timeout = getattr(asyncio, "timeout", _compat_timeout)
TIMEOUTS = (TimeoutError, asyncio.TimeoutError)   # distinct classes before 3.11
