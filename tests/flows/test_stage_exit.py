"""A stage's process and the CLI end without the interpreter's last garbage collections (cudal1.exiting), and still
runs its atexit handlers and flushes what it wrote."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The first exit handler registered, so the last to run: what it sees is how the process ended.
AT_EXIT = 'atexit.register(lambda: print(f"at exit: gc enabled {gc.isenabled()}, frozen {gc.get_freeze_count() > 0}"))'
ENDED_FROZEN = "at exit: gc enabled False, frozen True"

SCRIPT = textwrap.dedent(f"""
    import atexit, gc, sys
    from pathlib import Path
    from flows._common import main

    out = Path(sys.argv[1])
    {AT_EXIT}
    kept = []

    def flow(params_path: str) -> None:
        handle = open(out, "w")  # left open, buffered, in a reference cycle that no collection frees now
        handle.write(f"ran with {{params_path}}")
        kept.append(kept)
        kept.append(handle)

    sys.argv = ["stage", "--params", "some.yaml"]
    main(flow, "a stage")
""")


def test_a_stage_ends_with_its_heap_frozen_its_exit_handlers_run_and_its_writes_flushed(tmp_path: Path) -> None:
    out = tmp_path / "written.txt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert ENDED_FROZEN in done.stdout, done.stdout
    assert out.read_text() == "ran with some.yaml"


def test_the_cli_ends_the_same_way_and_keeps_its_exit_status(tmp_path: Path) -> None:
    probe = textwrap.dedent(f"""
        import atexit, gc, sys
        {AT_EXIT}
        from cudal1.cli import main
        sys.argv = ["cudal1", *sys.argv[1:]]
        main()
    """)
    shown = subprocess.run([sys.executable, "-c", probe, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "evaluate-one" in shown.stdout, shown.stderr[-2000:]
    assert ENDED_FROZEN in shown.stdout
    missing = subprocess.run([sys.executable, "-c", probe, "evaluate-one", "--reference", str(tmp_path / "none.py"),
                              "--candidate", str(tmp_path / "none.py")], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "Invalid value: --reference" in missing.stderr, missing.stderr[-2000:]
    assert ENDED_FROZEN in missing.stdout


def test_a_thread_still_writing_when_main_returns_has_its_writes_flushed(tmp_path: Path) -> None:
    """The interpreter joins the threads left running before the exit handlers run, so the flush before the freeze
    comes after their writes (a plain interpreter exit, without cudal1.exiting, lost this one too)."""
    out = tmp_path / "late.txt"
    probe = textwrap.dedent("""
        import sys, threading, time
        from flows._common import main

        def late(path):  # opens, writes and drops a file in a reference cycle after main has returned
            time.sleep(0.5)
            handle = open(path, "w")
            handle.write("written late")
            cycle = [handle]
            cycle.append(cycle)

        path, sys.argv = sys.argv[1], ["stage"]
        threading.Thread(target=late, args=(path,)).start()
        main(lambda params_path: None, "a stage")
    """)
    done = subprocess.run([sys.executable, "-c", probe, str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text() == "written late"
