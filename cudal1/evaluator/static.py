"""Static checks on a candidate's source: the cheapest line of defence, run before any code executes.

Each finding is ``reject`` (a pattern that only serves to cheat or to escape the sandbox) or ``flag``
(legal, but worth recording beside the measurement). The dynamic checks in the worker and the parent
back every rule here up: an obfuscated pattern that slips past this module is still caught at run time.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field

BANNED_MODULES = {
    "threading": "starts threads (work could escape the timed region)",
    "_thread": "starts threads",
    "multiprocessing": "starts processes",
    "concurrent": "starts threads or processes",
    "subprocess": "starts processes",
    "asyncio": "runs work outside the call",
    "signal": "installs signal handlers",
    "socket": "does network I/O",
    "ssl": "does network I/O",
    "urllib": "does network I/O",
    "http": "does network I/O",
    "requests": "does network I/O",
    "httpx": "does network I/O",
    "ctypes": "calls native code outside the build",
    "cffi": "calls native code outside the build",
    "gc": "walks the interpreter's objects (could find the harness's tensors)",
    "inspect": "inspects frames (could read the harness's state)",
    "traceback": "inspects frames",
    "pickle": "deserialises data (file replay)",
    "marshal": "deserialises code",
    "shelve": "does file I/O",
    "tempfile": "does file I/O",
    "shutil": "does file I/O",
    "pathlib": "does file I/O",
    "glob": "does file I/O",
    "importlib": "imports modules by computed name",
    "builtins": "can patch builtins",
    "timeit": "times code itself",
    "atexit": "runs code after the evaluation",
    "sysconfig": "probes the environment",
    "mmap": "maps memory shared with other processes",
    "resource": "changes process limits",
}

BANNED_CALLS = {
    "open": "does file I/O",
    "exec": "executes generated code",
    "eval": "evaluates generated code",
    "compile": "compiles generated code",
    "__import__": "imports modules by computed name",
    "globals": "reads the module namespace dynamically",
    "vars": "reads namespaces dynamically",
    "input": "reads standard input",
    "breakpoint": "enters a debugger",
}

BANNED_ATTRS = {
    "_getframe": "inspects frames",
    "f_back": "inspects frames",
    "f_locals": "inspects frames",
    "f_globals": "inspects frames",
    "tb_frame": "inspects frames",
    "gi_frame": "inspects frames",
    "__globals__": "reaches another function's globals",
    "__builtins__": "reaches the builtins",
    "__subclasses__": "walks the class hierarchy",
    "__code__": "rewrites code objects",
    "settrace": "installs a tracer",
    "setprofile": "installs a profiler hook",
    "modules": None,  # only as sys.modules, checked below
    "_make_subclass": "builds a tensor subclass",
    "_make_wrapper_subclass": "builds a tensor subclass",
    "as_subclass": "builds a tensor subclass",
    "register_forward_hook": None,
}

OS_BANNED = {"system", "popen", "fork", "forkpty", "vfork", "kill", "killpg", "_exit", "abort", "setsid",
             "setpgid", "remove", "unlink", "rename", "replace", "open", "write", "read", "dup", "dup2", "pipe",
             "execv", "execve", "execvp", "execl", "execlp", "spawnv", "spawnl", "posix_spawn", "listdir",
             "scandir", "walk", "chdir", "sched_setaffinity", "nice", "setpriority"}

TENSOR_BASES = {"Tensor", "Parameter", "_TensorBase", "TensorBase"}

# Flags of a program that picks its own algorithms by timing them at its first calls (cuDNN's benchmark
# mode, or its own clock): what it picks depends on what else runs on the GPU then, so its first call is
# made alone on its device (core._first_call_alone).
SELF_TUNING = frozenset({"cudnn_benchmark", "reads_clock"})


def _a_timer(name: str) -> bool:
    """A clock of ``time`` (its sleep aside) or torch's benchmark timer, by its full dotted name."""
    return name.startswith("torch.utils.benchmark") or (name.startswith("time.") and name != "time.sleep")


def tunes_itself(flags: tuple[str, ...] | set[str]) -> bool:
    """Whether static flags say the program times its own choices (:data:`SELF_TUNING`)."""
    return bool(SELF_TUNING.intersection(flags))


# Assignments to these torch settings are legitimate choices, recorded as flags; they cannot reach the
# reference, which runs in another process. Any other assignment into an imported module is a patch.
ALLOWED_SETTINGS = {
    "torch.backends.cudnn.benchmark": "cudnn_benchmark",
    "torch.backends.cudnn.enabled": "cudnn_enabled",
    "torch.backends.cudnn.deterministic": "cudnn_deterministic",
    "torch.backends.cudnn.allow_tf32": "precision_flags",
    "torch.backends.cuda.matmul.allow_tf32": "precision_flags",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": "precision_flags",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": "precision_flags",
}
ALLOWED_PREFIXES = ("torch._dynamo.config.", "torch._inductor.config.", "os.environ", "torch.backends.cudnn.")

# Text patterns inside the source, including C++/CUDA strings handed to load_inline.
TEXT_REJECT = {
    r"accessPolicyWindow|cudaLimitPersistingL2CacheSize|cudaAccessPropertyPersisting|hitProp\b":
        "sets a persisting-L2 access policy (survives the cache flush between timed calls)",
    r"\bfopen\s*\(|std::[io]?fstream|\bifstream\b|\bofstream\b|\bfreopen\s*\(":
        "does file I/O in native code",
    r"std::thread|pthread_create|std::async\b": "starts threads in native code",
    r"\bfork\s*\(|\bpopen\s*\(|\bsystem\s*\(|\bexecv[pe]?\s*\(": "starts processes in native code",
    r"\bdlopen\s*\(|\bdlsym\s*\(": "loads native code at run time",
    r"\bsocket\s*\(|\bconnect\s*\(": "does network I/O in native code",
    r"cudaEventElapsedTime|cuEventElapsedTime": "reads the timing events",
}
STREAM_CREATE = re.compile(r"torch\.cuda\.Stream\s*\(|\bStream\s*\(|cudaStreamCreate|getStreamFromPool|cuStreamCreate")
STREAM_JOIN = re.compile(r"wait_stream|synchronize\s*\(|cudaStreamSynchronize|cudaDeviceSynchronize|"
                         r"cudaStreamWaitEvent|wait_event|cuStreamSynchronize|cuCtxSynchronize")


@dataclass(frozen=True)
class Finding:
    severity: str  # "reject" or "flag"
    code: str
    message: str
    line: int = 0


@dataclass
class StaticReport:
    syntax_error: str = ""
    findings: list[Finding] = field(default_factory=list)

    @property
    def rejected(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "reject"]

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(sorted({f.code for f in self.findings if f.severity == "flag"}))

    @property
    def reason(self) -> str:
        if self.syntax_error:
            return self.syntax_error
        return "; ".join(f"line {f.line}: {f.message}" if f.line else f.message for f in self.rejected)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, report: StaticReport) -> None:
        self.report = report
        self.aliases: dict[str, str] = {}  # local name -> module path ("F" -> "torch.nn.functional")
        self.has_model_new = False

    def reject(self, node: ast.AST, code: str, message: str) -> None:
        self.report.findings.append(Finding("reject", code, message, getattr(node, "lineno", 0)))

    def flag(self, node: ast.AST, code: str, message: str) -> None:
        self.report.findings.append(Finding("flag", code, message, getattr(node, "lineno", 0)))

    def _resolve(self, node: ast.AST) -> str | None:
        dotted = _dotted(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return None  # not rooted at an imported module

    def _check_module(self, node: ast.AST, name: str) -> None:
        root = name.split(".")[0]
        if root in BANNED_MODULES:
            self.reject(node, "banned_import", f"imports {name}: {BANNED_MODULES[root]}")

    def _self_timing(self, node: ast.AST, name: str) -> None:
        """An import of a timer (torch's benchmark timer, or a clock of ``time`` by name, which the attribute
        check below never sees): the program times its variants itself."""
        if _a_timer(name):
            self.flag(node, "reads_clock", f"imports {name} (self-timing for autotuning)")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            self._self_timing(node, alias.name)
            local = alias.asname or alias.name.split(".")[0]
            self.aliases[local] = alias.name if alias.asname else alias.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            if full.split(".")[0] in BANNED_MODULES or alias.name in BANNED_MODULES:
                self.reject(node, "banned_import", f"imports {full}")
            if module == "os" and alias.name in OS_BANNED:
                self.reject(node, "banned_call", f"imports os.{alias.name}")
            if full == "time.sleep":  # called by its own name, the attribute check below never sees it
                self.reject(node, "banned_call", "imports time.sleep")
            self.aliases[alias.asname or alias.name] = full
            self._self_timing(node, full)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.has_model_new = True
        for base in node.bases:
            dotted = _dotted(base) or ""
            if dotted.split(".")[-1] in TENSOR_BASES:
                self.reject(node, "tensor_subclass", f"class {node.name} subclasses {dotted} (lazy or fake outputs)")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__torch_function__", "__torch_dispatch__"):
                self.reject(item, "tensor_subclass", f"defines {item.name} (intercepts tensor operations)")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt)
            return
        if isinstance(target, ast.Subscript):
            target = target.value
        if not isinstance(target, ast.Attribute):
            return
        full = self._resolve(target)
        if full is None:
            return
        if full in ALLOWED_SETTINGS:
            self.flag(target, ALLOWED_SETTINGS[full], f"sets {full}")
        elif full.startswith("torch.backends.cudnn."):
            self.flag(target, "cudnn_settings", f"sets {full}")
        elif not full.startswith(ALLOWED_PREFIXES):
            self.reject(target, "monkeypatch", f"assigns {full} (patches a module the harness relies on)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        reason = BANNED_ATTRS.get(node.attr)
        full = self._resolve(node) or ""
        if node.attr == "modules" and full == "sys.modules":
            self.reject(node, "introspection", "reads sys.modules (could patch or find harness modules)")
        elif node.attr in ("stdin", "stdout", "__stdout__", "stderr") and full.startswith("sys."):
            self.reject(node, "io", f"uses {full}")
        elif reason:
            code = "tensor_subclass" if "subclass" in reason else "introspection"
            self.reject(node, code, f"uses .{node.attr}: {reason}")
        if full.startswith("os.") and full.split(".")[1] in OS_BANNED:
            self.reject(node, "banned_call", f"uses {full}")
        if full in ("torch.save", "torch.load", "numpy.save", "numpy.load", "numpy.fromfile", "numpy.memmap"):
            self.reject(node, "file_io", f"uses {full} (file replay)")
        if full in ("torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed",
                    "torch.set_rng_state", "torch.get_rng_state"):
            self.flag(node, "seeds_rng", f"uses {full} (could regenerate the harness's inputs)")
        if full in ("torch.set_num_threads", "torch.set_num_interop_threads", "torch.set_default_dtype",
                    "torch.set_flush_denormal", "torch.use_deterministic_algorithms"):
            self.reject(node, "global_state", f"calls {full} (changes global state the measurement relies on)")
        if full == "torch.set_float32_matmul_precision":
            self.flag(node, "precision_flags", f"calls {full}")
        if _a_timer(full) or (full.startswith("datetime.") and node.attr in ("now", "utcnow", "today")):
            self.flag(node, "reads_clock", f"uses {full} (self-timing for autotuning; clocks are guarded)")
        if node.attr == "elapsed_time" and not full:
            # A program that times its own variants picks one by the host's pace of the moment: L1-70 read
            # 2.89x, 3.35x and 0.98x in three warm runs of one host
            self.flag(node, "reads_clock", "reads .elapsed_time() of CUDA events (self-timing for autotuning)")
        if full == "time.sleep":
            self.reject(node, "banned_call", "calls time.sleep")
        if node.attr == "data_ptr" and not full:
            self.flag(node, "data_ptr", "reads data_ptr() (caches keyed on addresses are caught at run time)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            name = node.func.id
            if name == "type" and len(node.args) == 3:
                self.reject(node, "tensor_subclass", "creates a class at run time with type(name, bases, dict)")
            if name in BANNED_CALLS and name not in self.aliases:
                self.reject(node, "banned_call", f"calls {name}(): {BANNED_CALLS[name]}")
            if name in ("setattr", "delattr", "getattr") and node.args:
                target = self._resolve(node.args[0]) or (_dotted(node.args[0]) or "")
                computed = len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
                if self._resolve(node.args[0]) is not None and (name != "getattr" or computed):
                    self.reject(node, "monkeypatch", f"{name}() on module {target} (dynamic patch or lookup)")
        full = self._resolve(node.func) or ""
        if full == "torch.utils.cpp_extension.load":
            self.flag(node, "extension_from_files", "builds an extension from files (load, not load_inline)")
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        if isinstance(node.test, ast.Constant) and node.test.value is True:
            self.flag(node, "while_true", "has a `while True` loop (bounded by the run timeout)")
        self.generic_visit(node)


# Evaluation.extra key of a verdict the static checks gave before any device loop (core.static_verdict).
STATIC_KEY = "settled_statically"


def check_source(source: str, filename: str = "<candidate>") -> StaticReport:
    """Static findings for a candidate's source."""
    report = StaticReport()
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        report.syntax_error = f"SyntaxError at line {exc.lineno}: {exc.msg}"
        return report
    visitor = _Visitor(report)
    visitor.visit(tree)
    if not visitor.has_model_new:
        report.findings.append(Finding("reject", "no_model_new", "defines no class ModelNew"))
    if re.search(r"__torch_(function|dispatch)__", source):
        report.findings.append(Finding("reject", "tensor_subclass", "mentions __torch_function__/__torch_dispatch__ "
                                       "(intercepting tensor operations)"))
    for pattern, message in TEXT_REJECT.items():
        match = re.search(pattern, source)
        if match:
            line = source.count("\n", 0, match.start()) + 1
            report.findings.append(Finding("reject", "native_code", message, line))
    if STREAM_CREATE.search(source):
        if STREAM_JOIN.search(source):
            report.findings.append(Finding("flag", "side_streams", "creates CUDA streams (joined; timed device-wide)"))
        else:
            report.findings.append(Finding("reject", "unjoined_stream",
                                           "creates CUDA streams but never joins them to the caller's stream"))
    return report


@functools.lru_cache(maxsize=512)
def summary(source: str) -> tuple[str, bool, str, tuple[str, ...]]:
    """:func:`check_source`'s syntax error, whether it rejects ``source``, its reason and its flags; cached by
    source. A batch asks this of every candidate before its device loops start (core.static_verdict), and
    its device loop of every coming candidate at every row (about 3 ms a parse on a release program); the
    report itself is mutable, so only these are kept."""
    report = check_source(source)
    return report.syntax_error, bool(report.rejected), report.reason, report.flags


def screen(source: str) -> tuple[bool, tuple[str, ...]]:
    """Whether :func:`check_source` finds a reason to reject ``source`` (a syntax error is the compile
    step's verdict, not one of these), and its flags (:func:`summary`, cached)."""
    _, rejected, _, flags = summary(source)
    return rejected, flags
