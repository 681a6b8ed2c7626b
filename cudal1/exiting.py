"""How a process of ours ends: without the interpreter's last garbage collections over its heap."""

from __future__ import annotations

import atexit
import gc
import io

# Exact types: isinstance against the io ABCs took 0.9 s over a stage's 400,000 objects.
_BUFFERED = frozenset({io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom})


def skip_final_collection() -> None:
    """Called as a command's process ends (a stage's ``main``, the ``cudal1`` CLI): the interpreter's last
    garbage collections over the heap that Prefect, MLflow, SQLAlchemy and torch leave behind took 2-4 s of
    CPU per stage on the 2-core machine (docs/pipeline.md at 88f971b, "What we learned"), for memory the OS takes back
    anyway. From the first exit handler on (after the interpreter has joined the threads still running),
    the heap is frozen and never collected; the rest of the exit runs as usual: the other atexit handlers
    (Prefect's log and event workers drain there), and objects freed by their reference counts, files
    closed. A file object left open in a reference cycle is no longer closed by a collection, so every open
    file is flushed before the freeze."""
    atexit.register(_flush_and_freeze)


def _flush_and_freeze() -> None:
    for obj in gc.get_objects():  # before the freeze: frozen objects are not listed
        if type(obj) in _BUFFERED and not obj.closed:
            try:
                obj.flush()
            except (OSError, ValueError):  # a closed pipe, a detached buffer: nothing of ours to keep
                pass
    gc.disable()
    gc.freeze()
