"""Pipeline parameters: one frozen dataclass per ``params.yaml`` section, loaded and validated once.

``load_params(path, "augment")`` returns an :class:`AugmentParams`. Every mistake stops with a
:class:`ParamsError` that names the key (``augment.teachers[0].temperature``), what was expected and how
to fix it, before any stage has touched its outputs. Relative paths in a section are relative to the
directory of the params file (the repository root), so flows behave the same from any working directory.

A new stage adds its dataclass and one line to ``SECTIONS``; nothing else here needs to change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cudal1.evaluator.config import EvalConfig
from cudal1.gate import Margin
from cudal1.training.params import ContrastiveRLParams, PolicyParams, SelfSupervisedParams, SFTParams
from cudal1.training.settings import PromptSettings
from cudal1.typed_params import ParamsError, build

SuiteKind = Literal["starter", "kernelbench_jsonl", "folder", "cudal1_release"]


@dataclass(frozen=True)
class SuiteParams:
    """One source of problems. ``path`` is needed by every kind but ``starter``."""

    kind: SuiteKind = "starter"  # starter (the built-in suite), kernelbench_jsonl, folder or cudal1_release
    path: str | None = None  # the file or folder of problems (relative paths start at the params file)
    levels: tuple[int, ...] = ()  # empty: every level

    def __post_init__(self) -> None:
        if self.kind != "starter" and not self.path:
            raise ValueError(f"kind={self.kind!r} needs `path:` (a file or folder of problems)")


@dataclass(frozen=True)
class ProblemsParams:
    # The sources of problems, loaded into one table; duplicate ids are an error.
    suites: tuple[SuiteParams, ...] = (SuiteParams(),)
    ids: tuple[str, ...] = ()  # keep only these problem ids (empty: all)
    limit: int | None = None  # keep the first N problems after `ids` (quick runs)
    out: str = "data/problems/problems.parquet"  # output: the problems table


TemplateVariant = Literal["baseline", "no_grad", "inference_mode", "channels_last", "cuda_graph"]
CompileMode = Literal["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"]


@dataclass(frozen=True)
class TemplateParams:
    """The offline template teacher: generic rewrites of every reference (see cudal1.generation.teachers)."""

    enabled: bool = True  # false: no template rewrites (teachers only)
    # Which rewrites to write; cuda_graph only where a device is cuda:N.
    variants: tuple[TemplateVariant, ...] = ("baseline", "no_grad", "inference_mode", "channels_last", "cuda_graph")
    compile_modes: tuple[CompileMode, ...] = ()  # torch.compile is slow to build on CPU: opt in


@dataclass(frozen=True)
class TeacherParams:
    """An OpenAI-compatible endpoint (OpenAI, vLLM, `transformers serve`...)."""

    name: str  # a label: the candidates' origin is teacher:<name>
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str  # the model name the endpoint serves (GET /v1/models lists them)
    api_key_env: str | None = None  # name of the environment variable holding the key; None: no key
    # `chat` asks /v1/chat/completions; `completions` sends raw text (a model without a chat template).
    api: Literal["chat", "completions"] = "chat"
    samples_per_problem: int = 20  # CUDA-L1 stage 1: up to 20 attempts per problem...
    stop_after_successes: int = 2  # ...stopping after 2 correct ones
    temperature: float = 0.7  # sampling temperature of each request
    max_tokens: int = 4096  # longest answer, in tokens
    request_timeout_s: float = 600.0  # seconds per request before it counts as failed (and is retried)
    retries: int = 2  # on I/O errors only (connection, timeout, 429, 5xx)

    def __post_init__(self) -> None:
        if self.samples_per_problem < 1 or self.stop_after_successes < 1:
            raise ValueError("samples_per_problem and stop_after_successes must be at least 1")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url={self.base_url!r}: use http(s)://host:port/v1")


@dataclass(frozen=True)
class FileTeacherParams:
    """Programs read from a file as a teacher's answers (cudal1.generation.files): a CUDA-L1 release
    (.jsonl rows with level_id, task_id, custom_code) or a .jsonl/.parquet table with problem_id and program
    (or source) columns, and optionally analysis. Each program is evaluated like any candidate."""

    name: str  # a label: the candidates' origin is teacher:<name>
    path: str  # the file (relative paths start at the params file's folder)
    # The file's problem id -> this run's, for a suite that names the file's problems otherwise (the starter
    # suite's starter-L1-8 is KernelBench's L1-12); ids not listed are taken as they are.
    ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AugmentParams:
    problems: str = "data/problems/problems.parquet"  # input: the problems stage's output
    out_dir: str = "data/augment"  # candidates.parquet, evaluations.parquet, corpus.parquet
    template: TemplateParams = field(default_factory=TemplateParams)  # the offline template teacher
    # OpenAI-compatible endpoints asked for candidates; none by default (offline).
    teachers: tuple[TeacherParams, ...] = ()
    # Files of programs proposed as a teacher's (a CUDA-L1 release, an earlier run's table). None by default:
    # the release's plain-PyTorch programs do run on the starter problems they match (configs/cpu-cudal1-release.yaml
    # maps the ids), but the release is GPL data outside the repository that a fresh clone does not have.
    file_teachers: tuple[FileTeacherParams, ...] = ()
    # Where candidates are evaluated: cpu or cuda:N, one candidate timed per device at a time.
    devices: tuple[str, ...] = ("cpu",)
    # How candidates are checked and timed (EvalConfig fields; unlisted ones keep their defaults).
    protocol: EvalConfig = field(default_factory=EvalConfig)
    # The reference itself is a baseline, not a rewrite worth learning from.
    corpus_exclude_origins: tuple[str, ...] = ("template:baseline",)
    # Resumable state, outside DVC's outs on purpose (DVC deletes outs before a stage re-runs): every
    # measurement keyed by problem, candidate, protocol and hardware, and every teacher completion.
    measurements_cache: str = "data/cache/augment-measurements.parquet"
    # Every teacher answer, keyed by endpoint settings and prompt.
    completions_cache: str = "data/cache/completions.jsonl"

    def __post_init__(self) -> None:
        names = [t.name for t in self.teachers] + [t.name for t in self.file_teachers]
        if len(set(names)) != len(names):
            raise ValueError(f"teacher names must be unique across teachers and file_teachers, got {names}")


@dataclass(frozen=True)
class EvaluateParams:
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    candidates: str = "data/augment/candidates.parquet"  # any stage's candidate table
    # Evaluation tables whose rows (same problem, candidate, protocol hash and device) are reused as-is.
    reuse: tuple[str, ...] = ("data/augment/evaluations.parquet",)
    out: str = "data/evaluate/evaluations.parquet"  # output: one evaluation per candidate
    # Where candidates are evaluated: cpu or cuda:N, one candidate timed per device at a time.
    devices: tuple[str, ...] = ("cpu",)
    # The reported measurements' protocol (EvalConfig fields).
    protocol: EvalConfig = field(default_factory=EvalConfig)
    # Resumable state: every measurement, kept across runs.
    measurements_cache: str = "data/cache/evaluate-measurements.parquet"


@dataclass(frozen=True)
class ReportParams:
    problems: str = "data/problems/problems.parquet"  # input: the problems table
    candidates: str = "data/augment/candidates.parquet"  # for each candidate's origin
    evaluations: str = "data/evaluate/evaluations.parquet"  # input: the evaluations to report
    out_dir: str = "reports"  # report.md, metrics.json, plots/
    threshold: float = 1.01  # CUDA-L1 counts a problem as sped up above 1.01x
    title: str = "cudal1 report"  # the report's heading
    # The self_supervised stage's rounds table, shown in the report (each round's success and the corpus's
    # growth); null: no such section.
    learning_rounds: str | None = "reports/learning/self_supervised_rounds.csv"


@dataclass(frozen=True)
class PoolParams:
    """One GPU kind of the cross-GPU table: a Prefect work pool with the evaluate flow deployed on it
    (``evaluate/<name>`` in prefect.yaml) and workers on hosts that have that GPU."""

    name: str  # the work pool, e.g. gpu-h100
    gpu_kind: str  # the table's row label and the MLflow tag `gpu`, e.g. H100
    devices: tuple[str, ...] | str = ("cuda:0",)  # devices on the worker's host; "cuda:0,cuda:1" works too
    env: dict[str, str] = field(default_factory=dict)  # job_variables.env of the flow run (CUDA_VISIBLE_DEVICES...)
    deployment: str = ""  # default: evaluate/<name>

    def __post_init__(self) -> None:
        if isinstance(self.devices, str):
            object.__setattr__(self, "devices", tuple(d.strip() for d in self.devices.split(",") if d.strip()))
        if not self.devices:
            raise ValueError(f"pool {self.name!r}: devices is empty; give e.g. cuda:0")
        if not self.deployment:
            object.__setattr__(self, "deployment", f"evaluate/{self.name}")


def _default_pools() -> tuple[PoolParams, ...]:
    kinds = {"gpu-a100": "A100", "gpu-h100": "H100", "gpu-l40": "L40", "gpu-rtx3090": "RTX3090", "gpu-h20": "H20"}
    return tuple(PoolParams(name, kind) for name, kind in kinds.items())


@dataclass(frozen=True)
class CrossGpuParams:
    """The cross-GPU table: one candidate set evaluated on every pool (flows/cross_gpu.py)."""

    # One entry per GPU kind: a Prefect work pool with workers on hosts of that kind.
    pools: tuple[PoolParams, ...] = field(default_factory=_default_pools)
    problems: str = "data/problems/problems.parquet"  # input: the problems table (not read when release is set)
    candidates: str = "data/augment/candidates.parquet"  # the evaluate stage's input; or the augment corpus
    # A CUDA-L1 release file (../shared/cuda-l1/h100.jsonl): its rows are the problems, every one of them,
    # and its programs the candidates; problems and candidates above are then not read.
    release: str | None = None
    # Baseline columns measured beside the candidates (cudal1.reproduction.BASELINES): compile-default,
    # compile-reduce-overhead, cuda_graph. Each is the template rewrite of the problem's reference.
    baselines: tuple[str, ...] = ()
    # Inputs, per-pool params files and results: a folder every worker host reads and writes (NFS...).
    storage: str = "data/cross_gpu"
    # Pools' measurements kept in the repository (<kept>/<key>/<pool>/measurements.jsonl): a pool folder
    # without measurements starts from them, so --gather on a fresh clone makes the same table (with
    # --key <their key> once the protocol has changed: the key covers it).
    kept: str | None = None
    protocol: EvalConfig = field(default_factory=EvalConfig)  # the same on every GPU (EvalConfig fields)
    wait_timeout_s: float = 600.0  # how long a flow run may wait for a worker to pick it up
    run_timeout_s: float | None = None  # how long a picked-up run may take (None: no limit)
    poll_s: float = 5.0  # how often the flow polls the pools' runs, seconds
    out_dir: str = "reports/cross_gpu"  # where the report goes
    report_name: str = "cross_gpu"  # file stem under out_dir: <name>.md, .csv, .json, <name>-rows-<GPU>.csv
    threshold: float = 1.01  # the speedup counted as sped up

    def __post_init__(self) -> None:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        if self.wait_timeout_s <= 0 or self.poll_s <= 0:
            raise ValueError("wait_timeout_s and poll_s must be positive")
        if not self.report_name or not all(c.isalnum() or c in "-_." for c in self.report_name):
            raise ValueError(f"report_name {self.report_name!r}: a file stem (letters, digits, '-', '_', '.'); "
                             "the folder goes in out_dir")
        from cudal1.reproduction import BASELINES

        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown:
            raise ValueError(f"baselines: unknown {unknown[0]!r}; choose from {', '.join(BASELINES)}")


@dataclass(frozen=True)
class GateParams:
    """The promotion gate (flows/gate.py): the version contrastive_rl registered against the one holding
    ``alias``, each writing one program per problem for the same prompts, all measured under ``protocol``."""

    problems: str = "data/problems/problems.parquet"  # input: the problems table
    corpus: str = "data/augment/corpus.parquet"  # exemplars of the prompts (one fixed draw, shared by both)
    registration: str = "data/contrastive_rl/registered.json"  # which version contrastive_rl registered
    alias: str = "champion"  # the registry alias the new version must beat, and moves to when promoted
    prompts: PromptSettings = field(default_factory=PromptSettings)  # how the prompts' exemplars are drawn
    seed: int = 0  # the one exemplar draw both versions answer
    samples: int = 1  # programs per problem and version (temperature 0: greedy, one is enough)
    temperature: float = 0.0  # 0: greedy
    max_new_tokens: int = 160  # longest program, in tokens
    margin: Margin = field(default_factory=Margin)  # how much better the new version must be (cudal1/gate.py)
    devices: tuple[str, ...] = ("cpu",)  # where both versions' programs are measured: cpu or cuda:N
    # The protocol of the gate's figures (EvalConfig fields).
    protocol: EvalConfig = field(default_factory=EvalConfig)
    # Resumable state: the gate's measurements, kept across runs.
    measurements_cache: str = "data/cache/gate-measurements.parquet"
    out_dir: str = "data/gate"  # candidates.parquet, evaluations.parquet: both versions' programs
    metrics: str = "reports/gate.json"  # the decision and its figures (`dvc metrics show`)

    def __post_init__(self) -> None:
        if self.samples < 1 or self.max_new_tokens < 1:
            raise ValueError("samples and max_new_tokens must be at least 1")


SECTIONS: dict[str, type] = {
    "problems": ProblemsParams,
    "augment": AugmentParams,
    "evaluate": EvaluateParams,
    "report": ReportParams,
    "cross_gpu": CrossGpuParams,
    # The learning stages: their sections extend the core settings (cudal1/training/params.py).
    "policy": PolicyParams,
    "sft": SFTParams,
    "self_supervised": SelfSupervisedParams,
    "contrastive_rl": ContrastiveRLParams,
    "gate": GateParams,
}


Overlay = str | Path | Sequence[str | Path] | None


def read_document(path: str | Path, overlay: Overlay = None) -> dict[str, Any]:
    """The params file as data, with ``overlay`` (a YAML file of the same shape, e.g. configs/gpu-real-model.yaml,
    or several, merged in order) merged over it: a mapping merges key by key, anything else (a list, a value)
    replaces."""
    document = _read_yaml(Path(path), "run from the repository root or pass --params PATH")
    overlays = [overlay] if isinstance(overlay, str | Path) else list(overlay or [])
    for each in overlays:
        document = merge(document, _read_yaml(Path(each), "fix --params-overlay (or CUDAL1_PARAMS_OVERLAY)"))
    return document


def _read_yaml(path: Path, fix: str) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise ParamsError(f"{path}: no params file; {fix}")
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(document, Mapping):
        raise ParamsError(f"{path}: expected a mapping of sections at the top level")
    return dict(document)


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: mappings key by key, everything else replaced.

    >>> merge({"sft": {"lora": False, "epochs": 20}, "problems": {"ids": ["a"]}}, {"sft": {"lora": True}, "problems": {"ids": []}})
    {'sft': {'lora': True, 'epochs': 20}, 'problems': {'ids': []}}
    """
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
    return out


def load_params(path: str | Path, section: str, overlay: Overlay = None) -> Any:
    """Read ``section`` of the YAML file at ``path`` (with ``overlay`` merged over it, see
    :func:`read_document`) into its frozen dataclass, resolving relative paths against the params file's
    directory, the overlay's included. A missing section gives the defaults."""
    path = Path(path)
    if section not in SECTIONS:
        raise ParamsError(f"unknown params section {section!r}; known sections: {', '.join(SECTIONS)}")
    document = read_document(path, overlay)
    raw = document.get(section) or {}
    params = build(SECTIONS[section], raw, section)
    params = _resolve_paths(params, path.parent.resolve())
    _check_paths(params, section)
    return params


def params_dict(params: Any) -> dict[str, Any]:
    """A section as plain data (for MLflow params and logs)."""
    return dataclasses.asdict(params)


# Keys that hold file or folder paths, in any section: resolved against the params file's folder here, the
# one place a stage's paths are resolved (flows and tasks use them as they come).
_PATH_KEYS = ("problems", "out", "out_dir", "candidates", "release", "evaluations", "measurements_cache", "completions_cache",
              "storage", "corpus", "policy", "pool", "data_dir", "work_dir", "pool_cache", "plots", "metrics",
              "registration", "learning_rounds")


def _resolve_paths(params: Any, root: Path) -> Any:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if f.name in _PATH_KEYS and isinstance(value, str):
            changes[f.name] = str(root / value)
        elif f.name == "reuse":
            changes[f.name] = tuple(str(root / v) for v in value)
        elif f.name in ("suites", "file_teachers"):
            changes[f.name] = tuple(
                dataclasses.replace(s, path=str(root / s.path)) if s.path else s for s in value
            )
    return dataclasses.replace(params, **changes)


def _check_paths(params: Any, section: str) -> None:
    for i, teacher in enumerate(getattr(params, "file_teachers", ())):
        if not Path(teacher.path).is_file():
            raise ParamsError(
                f"{section}.file_teachers[{i}].path: {teacher.path} does not exist. Point it at a CUDA-L1 release "
                ".jsonl or a .jsonl/.parquet of problem_id and program (relative paths start at the params file's "
                "folder), or remove that teacher.")
    for i, suite in enumerate(getattr(params, "suites", ()) if isinstance(params, ProblemsParams) else ()):
        if suite.path and not Path(suite.path).exists():
            raise ParamsError(
                f"{section}.suites[{i}].path: {suite.path} does not exist. Point it at an existing "
                f"{'file' if suite.kind != 'folder' else 'folder'} for kind {suite.kind!r} "
                "(relative paths start at the params file's folder), or remove that suite."
            )
