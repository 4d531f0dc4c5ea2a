"""Give the memory freed by a capture back to the operating system.

Why: glibc keeps freed memory in the process heap (after a large free its mmap threshold rises to
32 MB, so later tensors come from the heap and fragment it). A process capturing config after
config on the CPU grew by tens of MB per config and ran out of memory on a long collection;
``malloc_trim`` returns the free pages (measured on 12 CPU captures: +1.3 GB without it, +43 MB
with it). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def return_freed_memory() -> bool:
    """Free unreachable cycles, then release the heap's free pages; whether the allocator could
    be asked."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
