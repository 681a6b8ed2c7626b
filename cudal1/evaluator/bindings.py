"""Why a program's ``load_inline`` extension cannot build, read from its source without running it.

torch's ``load_inline(name, cpp_sources, cuda_sources, functions=[...])`` writes ``main.cpp`` from the
C++ sources followed by a generated pybind module that binds each listed function by name; the CUDA
sources go to ``cuda.cu``. Two mistakes make that build fail under every torch release and compiler:

- a bound function that ``cpp_sources`` never declares (the kernel launcher lives only in the CUDA
  source): ``main.cpp`` does not compile (``'f' was not declared in this scope``);
- a source that defines its own ``PYBIND11_MODULE`` while ``functions=`` asks torch for another: two
  module definitions (``redefinition of PyInit_...`` in ``main.cpp``, or a duplicate symbol at link).

Released programs catch the failure and fall back to PyTorch, so what gets measured is the fallback.
Only literal sources are read (strings, lists of strings, names bound to them); anything computed is
left alone rather than guessed. Standard library only.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_MODULE = re.compile(r"PYBIND11_MODULE\s*\(\s*(\w+)")


def _strings(node: ast.AST | None, names: dict[str, list[ast.AST]]) -> list[str] | None:
    """The literal strings an argument stands for, or None when it is not literal."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        parts = [_strings(elt, names) for elt in node.elts]
        return None if any(p is None for p in parts) else [s for p in parts for s in p or []]
    if isinstance(node, ast.Name):
        bound = names.get(node.id, [])
        values = {tuple(v) for v in (_strings(b, {}) for b in bound) if v is not None}
        return list(values.pop()) if len(values) == 1 else None  # bound once, or always to the same
    return None


def _bindings(tree: ast.AST) -> list[ast.Call]:
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "load_inline":
                calls.append(node)
    return calls


@dataclass(frozen=True)
class LiteralBuild:
    """One ``load_inline`` call whose arguments are literal (None where an argument is not)."""

    name: str | None
    cpp_sources: list[str] | None
    cuda_sources: list[str] | None
    functions: list[str] | None
    extra_cuda_cflags: list[str] | None


def literal_builds(source: str) -> list[LiteralBuild]:
    """The program's ``load_inline`` calls, read without running anything.

    >>> literal_builds('cpp = "int f();"\\nload_inline("m", cpp, functions=["f"])')[0].cpp_sources
    ['int f();']
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, []).append(node.value)
    builds = []
    for call in _bindings(tree):
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        arg = {**dict(zip(("name", "cpp_sources", "cuda_sources", "functions"), call.args)), **kwargs}
        functions = _strings(arg.get("functions"), names)
        if isinstance(arg.get("functions"), ast.Dict):  # {name: docstring}
            keys = [_strings(k, names) for k in arg["functions"].keys]  # type: ignore[attr-defined]
            functions = None if any(k is None for k in keys) else [s for k in keys for s in k or []]
        label = _strings(arg.get("name"), names)
        builds.append(LiteralBuild(label[0] if label else None, _strings(arg.get("cpp_sources"), names),
                                   _strings(arg.get("cuda_sources"), names), functions,
                                   _strings(arg.get("extra_cuda_cflags"), names)))
    return builds


def binding_problems(source: str) -> list[str]:
    """Reasons the program's ``load_inline`` builds cannot succeed; empty when none is visible.

    >>> ok = 'load_inline("m", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=cu, functions=["f"])'
    >>> binding_problems(ok)
    []
    >>> binding_problems('cpp = ""\\nload_inline("m", cpp, cuda_sources=cu, functions=["forward"])')
    ["load_inline 'm' binds forward, which its cpp_sources never declare: main.cpp cannot compile"]
    >>> binding_problems('load_inline(name="m", cpp_sources="PYBIND11_MODULE(m, mod) {}", functions=["f", "g"])')[-1]
    "load_inline 'm' defines its own PYBIND11_MODULE and asks torch for another (functions=): two modules"
    """
    problems = []
    for build in literal_builds(source):
        if not build.functions or build.cpp_sources is None:
            continue
        shown = f"load_inline {build.name!r}" if build.name else "load_inline"
        declared = _COMMENTS.sub("", "\n".join(build.cpp_sources))
        missing = [f for f in build.functions if not re.search(rf"\b{re.escape(f)}\s*\(", declared)]
        if missing:
            problems.append(f"{shown} binds {', '.join(missing)}, which its cpp_sources never declare: "
                            "main.cpp cannot compile")
        # A module of the extension's own name (torch compiles with -DTORCH_EXTENSION_NAME=<name>) clashes
        # with the one torch generates: in main.cpp at compile time, from cuda.cu at link time.
        own = {"TORCH_EXTENSION_NAME", *([build.name] if build.name else [])}
        modules = _MODULE.findall(declared + "\n" + _COMMENTS.sub("", "\n".join(build.cuda_sources or [])))
        if own & set(modules):
            problems.append(f"{shown} defines its own PYBIND11_MODULE and asks torch for another (functions=): "
                            "two modules")
    return problems
