# Sourced first on a GPU machine that has torch but not this package's other dependencies, from the
# repository root:
#
#   [WHEELS=dir] source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
#
#  - installs the wheels in $WHEELS (e.g. trl and datasets for learning_gpu.py) into /tmp/site, no network;
#  - byte-compiles torch, those wheels and cudal1 once into a bytecode prefix (PYTHONPYCACHEPREFIX), so
#    neither the parent nor the evaluator's workers (sandboxed uids that cannot write torch's __pycache__)
#    compile ~1000 modules on every start (`import torch` takes about half as long after it);
#  - lets the sandboxed workers traverse to the interpreter and the code.
# DRY_RUN=1 says what it would do and changes nothing.
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "pip install --target /tmp/site ${WHEELS:-(no WHEELS)}/*.whl; compileall torch, cudal1 and what they import" \
    "into PYTHONPYCACHEPREFIX=/tmp/pyc; chmod o+x up to the interpreter and $(pwd)"
  return 0 2>/dev/null || exit 0
fi
export PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || return 1
fi
export PYTHONPATH=.:/tmp/site
export PYTHONPYCACHEPREFIX=/tmp/pyc
mkdir -p /tmp/site /tmp/pyc
t0=$(date +%s.%N)
# With a prefix set, Python reads bytecode only from the prefix, so every package the CLI and the workers
# import is compiled into it: the standard library and each top-level package they load, not torch alone.
dirs=$(python3 - <<'PY'
import importlib, os, pkgutil, sys, sysconfig
import torch  # noqa: F401
import cudal1
# every module of the package, as the parent and the workers import them
for module in pkgutil.walk_packages(cudal1.__path__, "cudal1."):
    try:
        importlib.import_module(module.name)
    except Exception:  # noqa: BLE001 - a module that needs what this machine lacks (polars, prefect)
        pass
try:  # torch.compile's machinery and Triton, which the workers' fork server imports
    from cudal1.evaluator import zygote
    zygote.warm()
except Exception:  # noqa: BLE001
    pass
# What a worker imports for the programs themselves, outside torch's own folder: torch.utils.cpp_extension
# brings setuptools (a load_inline program's every load), a torch.compile program's compile brings networkx,
# jinja2 and markupsafe. Imported here, in this process only: in the fork server they would probe CUDA.
for name in ("torch.utils.cpp_extension", "networkx", "jinja2", "markupsafe", "functorch"):
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - not installed here: nothing of it to compile
        pass
roots = {sysconfig.get_paths()["stdlib"], "cudal1"}
bases = [b.rstrip("/") for b in sys.path[1:] if "site-packages" in b or b.startswith("/tmp/site")]
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None) or ""
    for base in bases:
        if f.startswith(base + "/"):
            roots.add(os.path.join(base, f[len(base) + 1:].split("/")[0]))
print(" ".join(sorted(r for r in roots if os.path.exists(r))))
PY
)
python3 -m compileall -q -j 0 -x '/tests?/' $dirs >/dev/null 2>&1
echo "compileall s: $(python3 -c "print(round($(date +%s.%N)-$t0,1))")"
for p in $(python3 -c "import sys,os;print(os.path.realpath(sys.executable), sys.base_prefix, os.getcwd())"); do
  d=$p; while [ "$d" != / ]; do [ -d "$d" ] && chmod o+x "$d"; d=$(dirname "$d"); done
done
chmod -R o+rX /tmp/pyc /tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
# Sourced on the left of a pipe (`source benchmarks/gpu_setup.sh | tail`), it runs in a subshell and none of
# the exports above reach the calling shell: runs after it then have no bytecode prefix. Said last, where a
# `tail` shows it.
if [ "${BASH_SUBSHELL:-0}" -gt 0 ]; then
  echo "gpu_setup.sh: sourced in a subshell (a pipe?): nothing it set reaches your shell; redirect its output to a file instead" >&2
fi
