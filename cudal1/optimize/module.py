"""A user's module as a problem: find its model class and input builder, give them the names the evaluator
calls (``Model``, ``get_inputs``, ``get_init_inputs``), and check before any work that the module
imports, that the model builds and that its forward runs on the built inputs on the chosen device.

Each failure is a :class:`ModuleProblem` whose message names what is wrong and how to fix it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cudal1.evaluator.config import EvalConfig
from cudal1.evaluator.process import WorkerFailure
from cudal1.evaluator.references import ReferenceError, ReferenceSession
from cudal1.evaluator.workers import new_seed
from cudal1.problems import Problem

ADAPTER_HEADER = "\n\n# ---- cudal1 optimize: the names the evaluator calls ----\n"


class ModuleProblem(ValueError):
    """The module cannot be optimised as it is; the message says what to change."""


@dataclass(frozen=True)
class UserModule:
    """The module, the names it was found under, and the problem the evaluator runs."""

    path: Path
    model_class: str
    inputs: str
    init_inputs: str | None  # None: the class is built without arguments
    problem: Problem


def top_level_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """(classes, functions, other names) bound at the top of a module, including inside top-level
    ``if``/``try`` blocks (``try: import x`` fallbacks) and by imports."""
    classes: set[str] = set()
    functions: set[str] = set()
    other: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            other.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            other.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):
            todo += node.body + node.orelse + getattr(node, "finalbody", [])
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return classes, functions, other


def _listing(names: set[str], what: str) -> str:
    shown = sorted(n for n in names if not n.startswith("_"))
    return f"it defines {what} {', '.join(shown)}" if shown else f"it defines no {what}"


def read_module(path: str | Path, model_class: str | None = None, inputs: str | None = None) -> UserModule:
    """Read ``path`` (without running it) and build the problem the evaluator runs. Raises ModuleProblem."""
    path = Path(path)
    if not path.is_file():
        raise ModuleProblem(f"{path}: no such file; pass the Python file that defines your model")
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ModuleProblem(f"{path} does not import: SyntaxError at line {exc.lineno}: {exc.msg}. Fix the "
                            f"syntax (python {path} shows the same error)") from exc
    classes, functions, other = top_level_names(tree)
    known = classes | functions | other
    cls = model_class or "Model"
    if cls not in known:
        how = f"--model-class {model_class}: no top-level name {model_class!r}" if model_class else "no class Model"
        raise ModuleProblem(f"{path}: {how}; {_listing(classes, 'classes')}. Name your nn.Module subclass with "
                            "--model-class NAME (or call it Model, as in KernelBench)")
    builder = inputs or "get_inputs"
    if builder not in known:
        how = f"--inputs {inputs}: no top-level name {inputs!r}" if inputs else "no function get_inputs"
        raise ModuleProblem(f"{path}: {how}; {_listing(functions, 'functions')}. Add a function that returns the "
                            f"list of arguments {cls}.forward takes, at the sizes you want faster, and name it "
                            "with --inputs NAME (or call it get_inputs, as in KernelBench)")
    init = "get_init_inputs" if "get_init_inputs" in known else None
    adapter = []
    if cls != "Model":
        adapter.append(f"class Model({cls}):\n    pass\n")
    if builder != "get_inputs":
        adapter.append(f"def get_inputs():\n    return list({builder}())\n")
    if init is None:
        adapter.append("def get_init_inputs():\n    return []\n")
    full = source.rstrip("\n") + "\n" + (ADAPTER_HEADER + "\n\n".join(adapter) if adapter else "")
    pid = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "module"
    return UserModule(path, cls, builder, init, Problem(pid, 0, path.stem, full, suite="optimize"))


_IMPORT_CHECK = """
import runpy, sys, traceback
try:
    runpy.run_path(sys.argv[1], run_name="cudal1_user_module")
except BaseException:
    kind, exc, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if f.filename == sys.argv[1]]
    where = f" (line {frames[-1].lineno})" if frames else ""
    print("".join(traceback.format_exception_only(kind, exc)).strip() + where, file=sys.stderr)
    sys.exit(1)
"""


def check_import(module: UserModule, config: EvalConfig) -> None:
    """Run the module once as the evaluator will: a lone file in a fresh process (files beside it are not
    importable there), under the same memory limit on CPU. Raises ModuleProblem."""
    limit = config.memory_limit_mb if not config.is_cuda else 0

    def rlimit() -> None:
        import resource

        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit * 2**20, limit * 2**20))

    path = str(module.path.resolve())
    with tempfile.TemporaryDirectory(prefix="cudal1-import-") as cwd:
        env = os.environ | {"PYTHONPATH": ""}
        try:
            done = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, path], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=config.load_timeout_s,
                                  preexec_fn=rlimit)  # noqa: PLW1509 - sets a limit, starts no threads
        except subprocess.TimeoutExpired as exc:
            raise ModuleProblem(f"{module.path} does not import within {config.load_timeout_s:g} s: move work out "
                                "of the module's top level (into the class or the input builder)") from exc
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        hint = ""
        if "No module named" in error or "ImportError" in error:
            hint = (" It runs as a lone file in a fresh process: copy what it imports from files beside it "
                    "into it, or install the package")
        raise ModuleProblem(f"{module.path} does not import: {error}.{hint}".rstrip(".") + ".")


def _out_of_memory(text: str) -> bool:
    lowered = text.lower()
    return any(s in lowered for s in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                      "memoryerror", "killed by sigkill"))


def _reference_call(module: UserModule) -> str:
    args = "*get_init_inputs()" if module.init_inputs else ""
    return f"{module.model_class}({args})"


def check_module(module: UserModule, config: EvalConfig) -> float:
    """The whole path once through the evaluator's own reference worker: import, build the model, build
    inputs on the device, run forward. Returns the seconds that one forward (with its inputs) took.
    Raises ModuleProblem."""
    check_import(module, config)
    name, where = module.path, config.device
    try:
        session = ReferenceSession(module.problem, config)
    except ReferenceError as exc:
        error = str(exc).split("failed to load: ", 1)[-1].split("failed to start: ", 1)[-1]
        if _out_of_memory(error):
            raise ModuleProblem(f"{name}: {_reference_call(module)} does not fit on {where}: {error}. Build a "
                                "smaller model, or use a device with more memory") from exc
        fix = ("define get_init_inputs() returning the constructor's arguments" if module.init_inputs is None
               else "make get_init_inputs() return the arguments the constructor takes")
        raise ModuleProblem(f"{name}: building {_reference_call(module)} on {where} failed: {error}. Fix the "
                            f"class, or {fix}") from exc
    with session:
        started = time.perf_counter()
        try:
            session.records([new_seed()])
        except (ReferenceError, WorkerFailure) as exc:
            error = str(exc).split("failed to run: ", 1)[-1]
            builder = f"{module.inputs}()"
            if _out_of_memory(error):
                limit = f" (the evaluator allows {config.memory_limit_mb} MB per process on CPU)" \
                    if not config.is_cuda else ""
                raise ModuleProblem(
                    f"{name}: the inputs from {builder} do not fit on {where}{limit}: {error}. The evaluator holds "
                    "the inputs and outputs of two programs at once: make the inputs smaller in "
                    f"{builder}, or use a device with more memory") from exc
            if isinstance(exc, WorkerFailure) and exc.kind == "timeout":
                raise ModuleProblem(f"{name}: {module.model_class}.forward did not finish on the inputs from "
                                    f"{builder} within {config.run_timeout_s:g} s on {where}: make the inputs "
                                    "smaller") from exc
            raise ModuleProblem(f"{name}: {module.model_class}.forward failed on the inputs from {builder} on "
                                f"{where}: {error}. Make {builder} return the list of arguments forward takes, "
                                "in order") from exc
        return time.perf_counter() - started
