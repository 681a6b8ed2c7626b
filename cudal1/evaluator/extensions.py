"""Hooks around torch's extension builder, installed in a candidate's worker before its code runs.

Its jobs:

- **Count builds**, so the batch knows whether importing and constructing a program built its extension
  or whether the build waits for the first ``forward`` (CUDA-L1's programs do both); the second kind is
  then warmed up on the GPU by a build worker instead of compiling on the timed path.
- **Remember failed builds.** Many released programs try to compile an extension, catch the failure and
  fall back to PyTorch. A build that fails leaves nothing in torch's cache, so every fresh worker
  compiled it again for 12-17 s just to fail. A failure
  of a given build (same name, sources and flags) is written next to the candidate's builds and raised
  again at once by later calls, with the original message: the program takes the same fallback, sooner.
  Only compiler failures are remembered (torch's "Error building extension"), never a timeout or a
  failure to load a built module, so a transient problem is not frozen into the cache.

- **Say why a cached build was done again.** A build whose folder already holds its module should load
  it in a second; on one H200 L1-32's loaded in 57-75 s, cold and warm, where every earlier run loaded it
  in 0.4-3.4 s, and the device waited behind that load. Before
  such a call ninja is asked, in a dry run, what it would redo and why; after it, whether the module
  was written again; a call of ``SLOW_LOAD_S`` or more that wrote nothing says so (and whether torch's
  lock file was there before it), and one whose folder held no module says that. The answer is the
  load's ``builds.rebuilt`` (the evaluation's ``cache_rebuilt``).

- **Mend a damaged build log.** A folder whose ninja dependency log two ninjas wrote at once makes every
  later build compile again, for good (toolchain.damaged). Before a build call the log is read; a damaged one
  is removed, so this build compiles once and writes it afresh (the load's ``builds.healed``, the
  evaluation's ``cache_healed``).

- **Name builds the same in every process.** Some programs name their extension after the process
  (``name=f"masked_cumsum_{os.getpid()}"``: L1-65, L1-93, L1-96, L2-47 of CUDA-L1's H100 release), so
  torch's cache, keyed by name, missed in every fresh worker and each load compiled again, 30-70 s on
  the H100 host, warm cache or not. The process id in a name
  becomes ``pid`` (and the old name in the inline sources, where a program wrote it into its own
  module declaration, becomes the new one): the build is the same, its name no longer depends on
  which worker asks.

The cache folder belongs to one candidate (its source hash), so a program can only poison its own
entries. This module imports torch, the standard library and toolchain only: the worker imports it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cudal1.evaluator import toolchain

FAILED = ".cudal1-failed-builds"
SLOW_LOAD_S = 5.0  # a cached module loads in well under a second; a load this long is recorded
_BUILD_PATH = re.compile(r"\S*/([^/\s]+\.(?:cpp|cu|cuh|h))\b")


@dataclass
class BuildLog:
    """What the program asked of the extension builder in this worker."""

    calls: int = 0
    failed: list[str] = field(default_factory=list)  # builds that failed here (compiler errors)
    cached: list[str] = field(default_factory=list)  # builds answered from a failure remembered earlier
    rebuilt: list[str] = field(default_factory=list)  # cached builds done again (ninja's reason) or slow to load
    healed: list[str] = field(default_factory=list)  # build folders whose damaged deps log was removed first

    def summary(self) -> dict[str, Any]:
        summary = {"calls": self.calls, "failed": len(self.failed), "cached_failures": len(self.cached),
                   "first_error": error_lines((self.failed + self.cached or [""])[0])}
        if self.rebuilt:
            summary["rebuilt"] = " | ".join(self.rebuilt)[:1200]
        if self.healed:
            summary["healed"] = " | ".join(self.healed)[:600]
        return summary


def mentions_builds(source: str) -> bool:
    """Whether a program may call torch's extension builder (it names the module or ``load_inline``)."""
    return "cpp_extension" in source or "load_inline" in source


def mentions_compile(source: str) -> bool:
    """Whether a program may use torch.compile's machinery (``torch.compile``, ``torch._dynamo``,
    ``torch._inductor``; the template baselines do): it compiles on its first call, so on a GPU a build
    worker warms it up and the timed worker finds the inductor and Triton caches of its own source filled
    (see process.py); its worker makes torch.compile's start before its load (Worker.load) and its fork
    server's warm imports are made for it (zygote.py): one rule, so the three never disagree."""
    return "torch.compile" in source or "_dynamo" in source or "_inductor" in source


def build_key(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A build's identity: the builder, its arguments, and the contents of source files it names.

    >>> a = build_key("load_inline", ("m",), {"cpp_sources": "int f();"})
    >>> a == build_key("load_inline", ("m",), {"cpp_sources": "int f();"}), len(a)
    (True, 64)
    >>> a == build_key("load_inline", ("m",), {"cpp_sources": "int g();"})
    False
    """
    digest = hashlib.sha256(kind.encode())
    digest.update(json.dumps([list(args), sorted(kwargs.items())], default=str).encode())
    sources = kwargs.get("sources", args[1] if kind == "load" and len(args) > 1 else [])
    for path in [sources] if isinstance(sources, (str, os.PathLike)) else list(sources or []):
        try:
            digest.update(Path(path).read_bytes())
        except (OSError, TypeError):
            pass
    return digest.hexdigest()


def error_lines(message: str, limit: int = 600) -> str:
    r"""The compiler's error lines of a failed build, else its tail. torch puts the whole ninja log into
    the exception, command lines first: those are dropped (one can exceed the limit on its own and hide
    the error), and build paths are cut to the file name.

    >>> error_lines("Error building extension 'm': [1/2] c++ -O3 x.cpp\nFAILED: main.o\n"
    ...             "/tmp/b/m/main.cpp:3:1: error: 'f' was not declared\nninja: build stopped")
    "Error building extension 'm' | main.cpp:3:1: error: 'f' was not declared"
    """
    picked = []
    for raw in message.splitlines():
        line = raw.strip()
        if line.startswith("Error building extension"):
            line = line.split(": [", 1)[0]
        elif line.startswith(("[", "FAILED:")) or "error" not in line.lower():
            continue
        picked.append(_BUILD_PATH.sub(r"\1", line))
    return (" | ".join(picked) if picked else message[-limit:])[:limit]


def _is_compiler_failure(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "Error building extension" in str(exc)


def stable_name(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                pid: int | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The build's arguments with the process id in its name replaced by ``pid`` (see the module's
    docstring); unchanged when the name holds no process id. The old name is replaced in inline sources
    too, so a module declared under it still matches; sources are otherwise untouched.

    >>> args, kw = stable_name("load_inline", (), {"name": "cumsum_4242", "cpp_sources": "m_cumsum_4242"}, 4242)
    >>> kw["name"], kw["cpp_sources"]
    ('cumsum_pid', 'm_cumsum_pid')
    >>> stable_name("load_inline", ("relu_v42",), {"cpp_sources": "int f();"}, 4242)[0]
    ('relu_v42',)
    """
    pid = os.getpid() if pid is None else pid
    name = _name(args, kwargs)
    if not isinstance(name, str):
        return args, kwargs
    stable = re.sub(rf"(?<!\d){pid}(?!\d)", "pid", name)
    if stable == name:
        return args, kwargs
    if "name" in kwargs:
        kwargs = kwargs | {"name": stable}
    else:
        args = (stable, *args[1:])
    if kind == "load_inline":
        for key, index in (("cpp_sources", 1), ("cuda_sources", 2)):
            if key in kwargs:
                kwargs = kwargs | {key: _renamed(kwargs[key], name, stable)}
            elif len(args) > index:
                args = (*args[:index], _renamed(args[index], name, stable), *args[index + 1:])
    return args, kwargs


def _renamed(sources: Any, old: str, new: str) -> Any:
    if isinstance(sources, str):
        return sources.replace(old, new)
    if isinstance(sources, (list, tuple)):
        return type(sources)(s.replace(old, new) if isinstance(s, str) else s for s in sources)
    return sources


def _name(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The extension's name as ``load_inline`` and ``load`` take it: keyword or first argument."""
    return kwargs.get("name", args[0] if args else None)


def build_folder(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Path | None:
    """Where torch builds this call's extension: its ``build_directory``, else TORCH_EXTENSIONS_DIR/name."""
    if kwargs.get("build_directory"):
        return Path(kwargs["build_directory"])
    name, root = _name(args, kwargs), os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(root) / name if isinstance(name, str) and root else None


def _modules(folder: Path) -> dict[str, int]:
    """The built modules in a build folder, with their modification times (ns)."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")}


@dataclass
class CachedBuild:
    """A build folder that held a built module before the call: what ninja said it would redo (a dry run
    with ``-d explain``), and the module's and ``build.ninja``'s state, to see afterwards whether the call
    built again and whether torch changed the build's command lines."""

    folder: Path
    explained: str
    modules: dict[str, int]
    ninja_file: str
    locked: bool = False  # torch's lock file was there: the call waits until whoever holds it is done

    @classmethod
    def before(cls, folder: Path | None) -> CachedBuild | None:
        if folder is None or not (folder / "build.ninja").is_file():
            return None
        modules = _modules(folder)
        if not modules:
            return None
        try:
            dry = subprocess.run(["ninja", "-C", str(folder), "-n", "-d", "explain"], capture_output=True, text=True,
                                 timeout=10)
            # both streams: the workers' fail-fast ninja (toolchain.py) passes ninja's stderr on its stdout; its
            # warnings too ("build log version is too old; starting over": another ninja built it, and every
            # command is done again)
            explained = "" if "no work to do" in dry.stdout else "; ".join(
                line.removeprefix("ninja explain: ").replace(str(folder) + "/", "")
                for line in (dry.stdout + dry.stderr).splitlines()
                if line.startswith(("ninja explain:", "ninja: warning:")))[:600]
        except (OSError, subprocess.SubprocessError) as exc:
            explained = f"(ninja's dry run failed: {exc})"
        return cls(folder, explained, modules, (folder / "build.ninja").read_text(errors="replace"),
                   (folder / "lock").exists())

    def after(self, took_s: float) -> str:
        """Why the call wrote its module again, or '' where it loaded the cached one (in under
        ``SLOW_LOAD_S``: a cached module that took longer to load says so, and whether torch's lock was
        held before the call)."""
        try:
            if _modules(self.folder) == self.modules:
                if took_s < SLOW_LOAD_S:
                    return ""
                return (f"{self.folder.name}: nothing rebuilt, the cached module took {took_s:.1f} s to load"
                        + ("; torch's lock file was there before the call" if self.locked else ""))
        except OSError:
            return ""
        reason = self.explained
        ninja_file = self.folder / "build.ninja"
        new_file = ninja_file.read_text(errors="replace") if ninja_file.is_file() else ""
        if new_file != self.ninja_file:
            changed = [line for line in new_file.splitlines() if line not in self.ninja_file.splitlines()]
            reason = (reason + "; " if reason else "") + "torch wrote another build.ninja: " + " / ".join(changed)[:400]
        return f"{self.folder.name}: " + (reason or "rebuilt, ninja gave no reason")


def _wrap(original: Any, kind: str, log: BuildLog, folder: Path | None) -> Any:
    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        log.calls += 1
        args, kwargs = stable_name(kind, args, kwargs)
        marker = folder / build_key(kind, args, kwargs) if folder is not None else None
        if marker is not None and marker.is_file():
            message = marker.read_text(encoding="utf-8", errors="replace")
            log.cached.append(message)
            raise RuntimeError(message)
        where = build_folder(args, kwargs)
        if where is not None and (why := toolchain.heal(where)):
            log.healed.append(f"{where.name}: {why}")
        cached = CachedBuild.before(where)
        try:
            started = time.perf_counter()
            built = original(*args, **kwargs)
            took = time.perf_counter() - started
            if cached is not None and (why := cached.after(took)):
                log.rebuilt.append(why)
            elif cached is None and took >= SLOW_LOAD_S and where is not None:
                # in a timed worker every build should have been done by its prebuild
                log.rebuilt.append(f"{where.name}: built in {took:.1f} s, no module was cached there before")
            return built
        except BaseException as exc:
            if marker is not None and _is_compiler_failure(exc):
                log.failed.append(str(exc))
                try:
                    marker.parent.mkdir(exist_ok=True)
                    marker.write_text(str(exc)[:20000] + "\n(cudal1: remembered failure of this exact build; "
                                      "later workers raise it without compiling again)", encoding="utf-8")
                except OSError:
                    pass
            raise

    return build


def builder() -> Any:
    """``torch.utils.cpp_extension``, imported on first use (a worker whose program builds nothing never
    pays for it)."""
    import torch.utils.cpp_extension as cpp

    return cpp


def install(extensions_dir: str | None) -> BuildLog:
    """Wrap ``torch.utils.cpp_extension.load_inline`` and ``load`` (before the candidate imports them)."""
    cpp = builder()

    log = BuildLog()
    folder = Path(extensions_dir) / FAILED if extensions_dir else None
    for kind in ("load_inline", "load"):
        setattr(cpp, kind, _wrap(getattr(cpp, kind), kind, log, folder))
    return log
