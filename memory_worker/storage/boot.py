"""What a bank's boot does to the process around it while it builds records and index in bulk.

- The cyclic garbage collector is paused (`booting`): each of its passes walks every object made
  so far, and a 100k-record boot makes hundreds of thousands (a third of its time went to those
  passes). Nothing a boot makes is garbage, so nothing is left uncollected; the collector is back
  on (if it was on) when the last of overlapping boots ends (banks may load on other threads).
- Then the C heap's free memory is handed back to the operating system (`return_freed_memory`):
  the boot's temporaries (numpy's arrays of every posting, the lists it builds them from) leave
  freed chunks that glibc keeps — its threshold for giving large blocks their own mapping rises
  with every large block freed — ~100 bytes a memory of RSS at 100k that nothing uses.
- And what the process holds when the boot ends is frozen (`gc.freeze`): moved out of the
  collector's sight, so its passes walk only what is made afterwards. Left in its young
  generations, the boot's records were walked by the next passes: ~180 ms of them inside the
  first recall after a 100k boot (`bench/gc_pauses.py`), later full passes over the whole bank
  that stall every caller (305 ms measured at 100k), ~35 ms of a one-shot save into a full 10k
  bank. Frozen objects are still freed by their reference counts (a replaced record, an index
  rebuilt); only garbage held in a cycle needs a pass, and a bank's own object graph is such a
  cycle, so a bank leaving RAM (`Bank.close`) thaws everything again (`thaw`) and the next full
  pass frees it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from functools import cache

__all__ = ["booting", "return_freed_memory", "thaw"]

_lock = threading.Lock()
# Boots under way, whether the collector was on when the first began, and whether any of them
# asked for the freed heap to be handed back.
_state = [0, False, False]


@contextlib.contextmanager
def booting(hand_back: bool = True) -> Iterator[None]:
    """Around a bank's bulk build: the collector paused, what the process holds frozen when the
    last overlapping boot ends, free heap memory returned after (not when `hand_back` is False:
    a process about to exit, whose exit returns it all, need not spend the milliseconds; another
    boot overlapping this one still hands it back). A one-shot process's door imports the
    service under it too (`adapters.doors.open_door`): modules are never garbage either."""
    with _lock:
        if _state[0] == 0:
            _state[1] = gc.isenabled()
            _state[2] = False
            gc.disable()
        _state[0] += 1
        _state[2] = _state[2] or hand_back
    built = False
    try:
        yield
        built = True
    finally:
        with _lock:
            _state[0] -= 1
            last = _state[0] == 0
            if last and built:  # a failed boot's remains are garbage: left to the collector
                gc.freeze()
            if last and _state[1]:
                gc.enable()
            trim = last and _state[2]
        if trim:
            return_freed_memory()


def thaw() -> None:
    """Put what boots froze back under the collector (`gc.unfreeze`): a bank is leaving RAM, and
    its object graph holds cycles that only a full pass frees (frozen, it would never be)."""
    gc.unfreeze()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where there is none (macOS, musl, Windows)."""
    import ctypes  # here: a one-shot process, which never trims, does not load it

    try:
        # The process's own symbols (libc's among them): no `find_library`, which runs ldconfig.
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):  # TypeError: Windows' CDLL takes no None
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


def return_freed_memory() -> bool:
    """Give the C heap's free pages back to the OS (glibc's `malloc_trim(0)`: a few milliseconds,
    nothing in use moves). False where the C library has no such call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
