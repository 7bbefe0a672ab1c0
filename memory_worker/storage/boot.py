"""What a bank's boot does to the process around it while it builds records and index in bulk.

- The cyclic garbage collector is paused (`booting`): each of its passes walks every object made
  so far, and a 100k-record boot makes hundreds of thousands (a third of its time went to those
  passes). Nothing a boot makes is garbage, so nothing is left uncollected; the collector is back
  on (if it was on) when the last of overlapping boots ends (banks may load on other threads).
- Then the C heap's free memory is handed back to the operating system (`return_freed_memory`):
  the boot's temporaries (numpy's arrays of every posting, the lists it builds them from) leave
  freed chunks that glibc keeps — its threshold for giving large blocks their own mapping rises
  with every large block freed — ~100 bytes a memory of RSS at 100k that nothing uses.
- In a process that ends with its one command (`ends_with_its_command`: the `memory-worker`
  program running a one-shot command), what exists when a boot ends is frozen instead
  (`gc.freeze`): the collector's first full pass after the boot would walk every record just made
  (~35 ms of a one-shot save into a 10,000-memory bank), and none of it can become garbage that
  matters before the process exits. The collector stays on for what the command makes afterwards.
  A server, or a test calling the CLI in-process, is never frozen: a record it replaces later must
  stay collectable.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from functools import cache

__all__ = ["booting", "ends_with_its_command", "return_freed_memory"]

_lock = threading.Lock()
# Boots under way, whether the collector was on when the first began, and whether any of them
# asked for the freed heap to be handed back.
_state = [0, False, False]
_frozen_at_boot_end = [False]  # set once, by `ends_with_its_command`


def ends_with_its_command() -> None:
    """Declare that this process exits as soon as its one command is done (the CLI program's
    one-shot commands, never a library caller): the objects a boot leaves are frozen then."""
    _frozen_at_boot_end[0] = True


@contextlib.contextmanager
def booting(hand_back: bool = True) -> Iterator[None]:
    """Around a bank's bulk build: the collector paused, free heap memory returned after (not
    when `hand_back` is False: a process about to exit, whose exit returns it all, need not
    spend the milliseconds; another boot overlapping this one still hands it back)."""
    with _lock:
        if _state[0] == 0:
            _state[1] = gc.isenabled()
            _state[2] = False
            gc.disable()
        _state[0] += 1
        _state[2] = _state[2] or hand_back
    try:
        yield
    finally:
        with _lock:
            _state[0] -= 1
            last = _state[0] == 0
            if last and _frozen_at_boot_end[0]:
                gc.freeze()
            if last and _state[1]:
                gc.enable()
            trim = last and _state[2]
        if trim:
            return_freed_memory()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where there is none (macOS, musl, Windows)."""
    import ctypes  # here: the CLI imports this module on its way to a forwarded call

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
