"""benchmarks/ holds the few maintained tools a release or a user runs again; the GPU machine runs them from
a fresh working tree, with no chance to fix a typo there. Each is run here: on a small CPU input, with a
stand-in for what needs a GPU, or in its dry mode (DRY_RUN=1 for a shell script, --dry-run for a script)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scripts import BENCHMARKS, load_script

from cudal1.candidates import Status, load_evaluations
from cudal1.problems import load_starter_suite

ROOT = BENCHMARKS.parent
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*") if p.suffix in (".py", ".sh"))
# each script -> the tests below that run it
RUN_BY = {
    "evaluator_gpu.sh": "test_evaluator_gpu_says_each_step_and_refuses_an_unknown_one",
    "fresh_clone.py": "test_fresh_clone_times_each_target_of_a_clone_and_writes_the_result",
    "gpu_setup.sh": "test_gpu_setup_says_what_it_would_do",
    "learning_gpu.py": "test_learning_gpu_dry_run_shows_the_one_device_it_makes_visible",
    "regression.sh": "test_regression_interleaves_the_trees_with_the_options_both_understand",
    "release_bench.py": "tests/test_release_summary.py",
    "release_eval.py": "test_release_eval_measures_resumes_and_compares_on_the_cpu",
    "release_run.sh": "test_release_run_drives_a_pair_in_its_own_session_and_resumes",
    "reproduction_pool.sh": "test_reproduction_pool_says_its_runner",
    "timing_overhead.py": "test_timing_overhead_on_a_cpu_reference",
    "two_gpu.sh": "test_two_gpu_fills_the_cache_then_runs_two_gpus_before_one",
}


def test_benchmarks_holds_a_dozen_tools_at_most_each_run_here_and_showing_its_usage() -> None:
    assert len(SCRIPTS) <= 12, [s.name for s in SCRIPTS]
    assert {s.name for s in SCRIPTS} == set(RUN_BY), "a script with no test here, or a test of one gone"
    here = Path(__file__).read_text() + (ROOT / "tests" / "test_release_summary.py").read_text()
    assert all(f"def {name}(" in here for name in RUN_BY.values() if name.startswith("test_"))
    for script in SCRIPTS:  # the usage line: a command that runs it, in its header
        head = "\n".join(script.read_text().splitlines()[:40])
        assert f"benchmarks/{script.name}" in head, f"{script.name}: no usage line in its header"


def test_every_name_a_script_takes_from_the_package_is_there() -> None:
    """What the scripts import from cudal1, at their top, inside functions or in a shell script's inline
    Python: the GPU machine would find a renamed module or function only when it runs the script."""
    import importlib
    import importlib.util

    wanted: set[tuple[str, str]] = set()
    for script in SCRIPTS:
        text = script.read_text()
        if script.suffix == ".py":
            wanted |= {(node.module, a.name) for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ImportFrom)
                       and (node.module or "").startswith("cudal1") for a in node.names}
        else:
            wanted |= {(module, name.strip()) for module, names in re.findall(r"from (cudal1[\w.]*) import ([\w, ]+)", text)
                       for name in names.split(",")}
    assert ("cudal1.reports", "run_agreement") in wanted and ("cudal1.measured", "pytest_summary") in wanted
    def there(module: str, name: str) -> bool:  # a name in the module, or a submodule of a package
        found = importlib.import_module(module)
        return hasattr(found, name) or (hasattr(found, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None)

    missing = [f"{module}.{name}" for module, name in sorted(wanted) if not there(module, name)]
    assert missing == []


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.suffix == ".sh"], ids=lambda s: s.name)
def test_a_shell_script_parses(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def _bash(script: str, env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BENCHMARKS / script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=os.environ | env, check=False)


def test_gpu_setup_says_what_it_would_do() -> None:
    done = _bash("gpu_setup.sh", {"DRY_RUN": "1", "WHEELS": "carry/wheels"})
    assert done.returncode == 0 and "carry/wheels/*.whl" in done.stdout and "PYTHONPYCACHEPREFIX" in done.stdout


def test_evaluator_gpu_says_each_step_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    steps = {"DRY_RUN": "1", "OUT": str(tmp_path / "out"), "STEPS": "overhead evalone gpu-tests learning"}
    done = _bash("evaluator_gpu.sh", steps)
    assert done.returncode == 0, done.stderr
    for command in ("benchmarks/timing_overhead.py --release carry/h100.jsonl", "cudal1.cli evaluate-one",
                    "pytest -q -rA -m gpu", "benchmarks/learning_gpu.py --device cuda:0"):
        assert command in done.stdout, command
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    for name in ("ref.py", "cand.py"):  # the evaluate-one programs it names
        assert (ROOT / "tests" / "fixtures" / "evalone" / name).is_file()
    wrong = _bash("evaluator_gpu.sh", steps | {"STEPS": "noise"})
    assert wrong.returncode == 2 and "unknown step 'noise'" in wrong.stderr


def test_reproduction_pool_says_its_runner() -> None:
    """The pool's measuring stage of reproduction/dvc.yaml, with the release where it was carried."""
    done = _bash("reproduction_pool.sh", {"DRY_RUN": "1", "POOL": "gpu-h100", "DEVICES": "cuda:0",
                                          "RELEASE": "carry/h100.jsonl"})
    assert done.returncode == 0, done.stderr
    assert ("cudal1.reproduce measure reproduction/pools/gpu-h100 --release carry/h100.jsonl --devices cuda:0"
            in done.stdout)
    stage = yaml.safe_load((ROOT / "reproduction" / "dvc.yaml").read_text())["stages"]["measure-gpu-h100"]
    assert stage["cmd"] == "python -m cudal1.reproduce measure reproduction/pools/gpu-h100"


def test_two_gpu_fills_the_cache_then_runs_two_gpus_before_one(tmp_path: Path) -> None:
    env = {"DRY_RUN": "1", "WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out")}
    lines = [x for x in _bash("two_gpu.sh", env).stdout.splitlines() if "release_eval.py" in x]
    work = tmp_path / "work"
    assert [x.split("--devices ")[1].split(" >>")[0].split(" --costs-from")[0] for x in lines] == [
        f"cuda:0,cuda:1 --out {work}/fill/cold", f"cuda:0,cuda:1 --out {work}/two/warm", f"cuda:0 --out {work}/one/warm"]
    assert all(f"--costs-from {work}/fill/cold/results.jsonl" in x for x in lines[1:])
    cold = [x for x in _bash("two_gpu.sh", env | {"WARM": "0"}).stdout.splitlines() if "release_eval.py" in x]
    assert len(cold) == 2 and all("/cold " in x for x in cold)


def test_learning_gpu_dry_run_shows_the_one_device_it_makes_visible() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / "learning_gpu.py"), "--device", "cuda:1", "--dry-run"],
                          capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=True)
    shown = json.loads(done.stdout)
    assert shown["device"] == "cuda:0" and shown["CUDA_VISIBLE_DEVICES"] == "1" and "torch" not in done.stderr


LIGHT = {"correctness_trials": 1, "timing_trials": 2, "target_trial_ms": 5.0, "warmup_iters": 1, "remeasure": 0,
         "cpu_threads": 1}
# The recipe's params at a CPU test's size: two starter problems to learn on (one with a file teacher's
# program), the tiny policy, one round, one epoch.
TINY_RECIPE = {
    "problems": {"suites": [{"kind": "starter"}], "ids": ["starter-L1-2", "starter-L1-3"]},
    "augment": {"template": {"variants": ["no_grad", "inference_mode"]}, "protocol": LIGHT,
                "file_teachers": [{"name": "file", "path": "programs.jsonl", "ids": {"L1-19": "starter-L1-2"}}]},
    "policy": {"model": "tiny", "vocab_size": 1024, "hidden": 64, "layers": 1, "max_positions": 1024},
    "sft": {"epochs": 2, "learning_rate": 0.003, "batch_size": 4, "copies": 1, "prompts": {"exemplars": 1}},
    "self_supervised": {"rounds": 1, "copies": 1, "sampling": {"samples": 2, "max_new_tokens": 48, "batch_size": 4},
                        "finetune": {"epochs": 1, "batch_size": 2}, "prompts": {"exemplars": 1}, "protocol": LIGHT},
    "contrastive_rl": {"epochs": 1, "num_generations": 2, "prompts_per_step": 2, "max_new_tokens": 48,
                       "prompts": {"exemplars": 1}, "protocol": LIGHT},
}
RELU = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.clamp(min=0)\n"


@pytest.mark.slow
def test_learning_gpu_runs_the_recipe_on_the_cpu_and_records_it(tmp_path: Path) -> None:
    """The recipe mode end to end at a CPU test's size (the GPU run is the same code with the GPU overlay):
    every stage runs, each epoch has its time split and its held-out figures, a rerun resumes, and
    release_bench.py --recipe makes a results folder of it."""
    import yaml

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(TINY_RECIPE))
    (tmp_path / "programs.jsonl").write_text(json.dumps({"problem_id": "L1-19", "program": RELU}) + "\n")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "learning_gpu.py"), "--recipe", "--device", "cpu",
                           "--params", str(tmp_path / "params.yaml"), "--held-out", "starter-L1-5", "--out", str(out),
                           "--commit", "abc1234"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((out / "learning.json").read_text())
    assert run["problems"] == ["starter-L1-2", "starter-L1-3"] and run["held_out"] == ["starter-L1-5"]
    assert run["augment"]["correct_by_origin"]["teacher:file"] == 1  # the file's program, verified
    assert len(run["self_supervised"]) == 1 and "held_out_success_rate" in run["held_out_before_rl"]
    (epoch,) = run["rl_epochs"]
    for key in ("success_rate", "mean_reward", "held_out_success_rate", "held_out_mean_reward", "generation_s",
                "builds_s", "evaluation_s", "training_and_other_s", "held_out_s"):
        assert key in epoch, key
    assert epoch["held_out_completions"] == 2.0  # 1 problem x G=2, scored like the RL reward
    # the split is the epoch's own: the measurement before RL falls outside it (it did not: its generation was
    # counted twice), so the epoch lies within RL's seconds and no part is negative
    parts = ("generation_s", "evaluation_s", "held_out_s", "training_and_other_s")
    assert all(epoch[k] >= 0 for k in parts) and epoch["total_s"] <= run["rl_seconds"], (epoch, run["rl_seconds"])
    # a rerun with one more epoch resumes: no stage runs again, RL goes on from its last epoch's policy, and
    # that reloaded policy's generation is timed too (it was not: it fell into training_and_other_s)
    again = subprocess.run([*done.args, "--rl-epochs", "2"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads((out / "learning.json").read_text())
    assert resumed["augment"] == run["augment"] and resumed["sft"] == run["sft"]
    assert resumed["rl_epochs"][0] == epoch and len(resumed["rl_epochs"]) == 2
    assert resumed["rl_epochs"][1]["generation_s"] > 0 and resumed["rl_epochs"][1]["held_out_generation_s"] > 0
    run = resumed
    recorded = subprocess.run([sys.executable, str(BENCHMARKS / "release_bench.py"), "--recipe", str(out), "--out",
                               str(tmp_path / "learning-cpu"), "--commit", "abc1234", "--hardware", "2-core CPU",
                               "--command", run["command"]], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    from cudal1.measured import read_result

    result = read_result(tmp_path / "learning-cpu")
    assert result.commit == "abc1234" and result.figures["epochs"] == 2 and result.figures["held_out"] == 1
    assert [r[0] for r in result.table("epochs").rows] == [-1, 0, 1]  # before RL, then each epoch
    assert [r[0] for r in result.table("self_supervised").rows] == [0]
    assert (tmp_path / "learning-cpu" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "learning-cpu" / "epochs.csv").read_text().startswith("epoch,success_rate,")


# A stand-in for release_eval.py (release_run.sh's TREE): records its options and its session, writes a
# row a second, and finishes once it holds three.
STAND_IN = '''import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "args.txt"), "a") as f:
    f.write(" ".join(args) + f" sid={os.getsid(0)}\\n")
path = os.path.join(out, "results.jsonl")
rows = open(path).read().splitlines() if os.path.exists(path) else []
while len(rows) < 3:
    time.sleep(float(os.environ.get("STAND_IN_S", "0.3")))
    rows.append(json.dumps({"problem_id": f"L1-{len(rows) + 1}", "candidate_id": "c", "status": "ok", "speedup": 1.0}))
    open(path, "w").write("\\n".join(rows) + "\\n")
summary = {"evaluations": 3, "evaluated_here": 3}
if "--agree-with" in args:
    summary["agreement"] = {"rows": 3, "median": 0.0}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"))
'''


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "release_eval.py").write_text(STAND_IN)
    return tree


def test_release_run_drives_a_pair_in_its_own_session_and_resumes(tmp_path: Path) -> None:
    tree, run = _tree(tmp_path), tmp_path / "rel"
    # REAP=0: this machine's other processes are not this test's to end; TMPDIR: the build cache emptied is ours
    env = {"RUN": str(run), "TREE": str(tree), "LIMIT": "3", "REAP": "0", "TMPDIR": str(tmp_path),
           "RELEASE": "release.jsonl", "KEEP": str(tmp_path / "kept")}
    cache = tmp_path / "cudal1-extensions"
    cache.mkdir()
    early = _bash("release_run.sh", env | {"UNTIL_S": "0"})
    assert early.returncode == 3 and "still running" in early.stdout, early.stdout + early.stderr
    done = _bash("release_run.sh", env | {"UNTIL_S": "60"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cold: 3 evaluations, done" in done.stdout and "'median': 0.0" in done.stdout
    assert not cache.exists()  # the cold run started on an empty build cache
    cold, warm = ((run / step / "args.txt").read_text() for step in ("cold", "warm"))
    own_sid = str(os.getsid(0))
    assert f"sid={own_sid}" not in cold + warm  # the driver ran in a session of its own
    assert "--limit 3" in cold and "--agree-with" not in cold
    assert f"--costs-from {run}/cold/results.jsonl --agree-with {run}/cold/results.jsonl" in warm
    assert f"--release {ROOT}/release.jsonl" in cold  # paths made absolute: each run starts in its tree
    for step in ("cold", "warm"):
        (call,) = [json.loads(x) for x in (run / step / "calls.jsonl").read_text().splitlines()]
        assert (call["evaluations_before"], call["evaluations_after"], call["exit"]) == (0, 3, 0)
        assert (tmp_path / "kept" / "rel" / step / "results.jsonl").is_file()
    again = _bash("release_run.sh", env | {"UNTIL_S": "5"})  # all done: nothing runs again
    assert again.returncode == 0 and "started" not in again.stdout
    assert len((run / "cold" / "calls.jsonl").read_text().splitlines()) == 1


def test_release_run_resumes_a_run_its_machine_lost(tmp_path: Path) -> None:
    """A folder carried back with two rows and no record of the segment that wrote them (the machine went
    back): the cold step goes on from its rows on the build cache it has, and records its own segment."""
    tree, run = _tree(tmp_path), tmp_path / "rel"
    (run / "cold").mkdir(parents=True)
    (run / "cold" / "results.jsonl").write_text('{"problem_id": "L1-1"}\n{"problem_id": "L1-2"}\n')
    (tmp_path / "cudal1-extensions").mkdir()
    env = {"RUN": str(run), "TREE": str(tree), "STEPS": "cold", "REAP": "0", "TMPDIR": str(tmp_path), "UNTIL_S": "60"}
    done = _bash("release_run.sh", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "cudal1-extensions").exists()  # resumed: the cache kept
    (call,) = [json.loads(x) for x in (run / "cold" / "calls.jsonl").read_text().splitlines()]
    assert (call["evaluations_before"], call["evaluations_after"]) == (2, 3)
    with pytest.raises(SystemExit, match="do not follow one another"):  # its wall is not the run's
        load_script("release_bench").run_summary(run / "cold")


def test_release_run_dry_run_shows_each_step(tmp_path: Path) -> None:
    done = _bash("release_run.sh", {"DRY_RUN": "1", "RUN": str(tmp_path / "r"), "ROWS": "L1-1,L2-5", "COSTS": "0"})
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0].startswith("rm -rf") and len(lines) == 3
    assert "--rows L1-1,L2-5" in lines[2] and "--agree-with" in lines[2] and "--costs-from" not in lines[2]
    assert not (tmp_path / "r").exists()


def test_regression_interleaves_the_trees_with_the_options_both_understand(tmp_path: Path) -> None:
    before = tmp_path / "before"
    (before / "benchmarks").mkdir(parents=True)
    (before / "benchmarks" / "release_eval.py").write_text('ap.add_argument("--agree-with")\n')
    env = {"DRY_RUN": "1", "BEFORE": str(before), "N": "12", "WORK": str(tmp_path / "work")}
    runs = [x for x in _bash("regression.sh", env).stdout.splitlines() if "release_eval.py" in x]
    assert [x.split(" && ")[0] for x in runs] == [f"cd {before}", f"cd {ROOT}"] * 2
    assert [("/cold " in x, "--agree-with" in x) for x in runs] == [(True, False)] * 2 + [(False, True)] * 2
    assert all("--limit 12" in x and "--costs-from" not in x for x in runs)
    repeated = [x for x in _bash("regression.sh", env | {"REPEAT": "1"}).stdout.splitlines() if "release_eval.py" in x]
    assert repeated[:4] == runs and [x.split(" && ")[0] for x in repeated[4:]] == [f"cd {before}", f"cd {ROOT}"]
    assert all("/warm2 " in x and "--agree-with" in x and "/cold/results.jsonl" in x for x in repeated[4:])
    (before / "benchmarks" / "release_eval.py").write_text("# an older tree, with no option to compare two runs\n")
    older = [x for x in _bash("regression.sh", env).stdout.splitlines() if "release_eval.py" in x]
    assert not any("--agree-with" in x for x in older)
    missing = _bash("regression.sh", env | {"BEFORE": str(tmp_path / "nothing")})
    assert missing.returncode == 2 and "no benchmarks/release_eval.py" in missing.stderr


def test_release_eval_chooses_rows_and_baselines(tmp_path: Path) -> None:
    release_eval = load_script("release_eval")
    release = _release(tmp_path, 3)
    args = release_eval.parse_args(["--release", str(release), "--out", str(tmp_path), "--limit", "2",
                                    "--baselines", "cuda_graph"])
    problems, candidates = release_eval.inputs(args)
    assert [p.problem_id for p in problems] == ["L1-1", "L1-2"]
    assert [c.origin for c in candidates] == ["cudal1-release"] * 2 + ["template:cuda_graph"] * 2
    args = release_eval.parse_args(["--release", str(release), "--out", str(tmp_path), "--rows", "L1-3"])
    assert [p.problem_id for p in release_eval.inputs(args)[0]] == ["L1-3"]


def _release(tmp_path: Path, rows: int) -> Path:
    """A release file of the first starter problems, each its own program renamed (a row as CUDA-L1 writes it)."""
    release = tmp_path / "release.jsonl"
    release.write_text("".join(json.dumps({"level_id": 1, "task_id": i + 1, "ref_code": p.source, "score_default": 1.0,
                                           "custom_code": p.source.replace("class Model(", "class ModelNew(")}) + "\n"
                               for i, p in enumerate(load_starter_suite()[:rows])))
    return release


@pytest.mark.slow
def test_release_eval_measures_resumes_and_compares_on_the_cpu(tmp_path: Path) -> None:
    release_eval = load_script("release_eval")
    out = tmp_path / "cold"
    args = ["--release", str(_release(tmp_path, 1)), "--devices", "cpu", "--trials", "3", "--out", str(out)]
    first = release_eval.main(args)
    assert first["evaluations"] == first["evaluated_here"] == 1 and first["statuses"] == {"ok": 1}
    (evaluation,) = load_evaluations(out / "results.jsonl")
    assert evaluation.status is Status.OK and json.loads((out / "summary.json").read_text())["wall_s"] > 0
    again = release_eval.main([*args, "--agree-with", str(out / "results.jsonl")])  # resumed: nothing new
    assert again["evaluated_here"] == 0 and again["agreement"]["rows"] == 1 and again["agreement"]["median"] == 0.0


@pytest.mark.slow
def test_timing_overhead_on_a_cpu_reference(tmp_path: Path) -> None:
    report = load_script("timing_overhead").main(["--problems", "starter", "--rows", "starter-L1-1", "--device", "cpu",
                                                  "--json", str(tmp_path / "overhead.json")])
    row = report["starter-L1-1"]
    assert row["protocol_calls"] >= 1 and row["batch_per_call_ms"] > row["batch_forward_ms"] > 0
    assert json.loads((tmp_path / "overhead.json").read_text())["_summary"]["problems"] == 1


FIXTURE_LOG = ROOT / "tests" / "fixtures" / "fresh_clone" / "make-test.log"


def test_fresh_clone_reads_a_real_make_test_output() -> None:
    figures = load_script("fresh_clone").figures_from({"test": 812.4}, {"test": FIXTURE_LOG.read_text()})
    assert (figures["make_test_s"], figures["test_pytest_s"], figures["test_passed"]) == (812.4, 795.12, 910)
    assert figures["make_run_s"] is None and figures["check_passed"] is None


def test_fresh_clone_times_each_target_of_a_clone_and_writes_the_result(tmp_path: Path) -> None:
    make = tmp_path / "make"  # a stand-in: where it runs, and pytest's summary as `make test` prints it
    make.write_text(f'#!/bin/sh\npwd > "{tmp_path}/$1.cwd"\n[ "$1" = test ] && cat "{FIXTURE_LOG}"\nexit 0\n')
    make.chmod(0o755)
    fresh_clone = load_script("fresh_clone")
    assert fresh_clone.main(["--make", str(make), "--no-check", "--out", str(tmp_path / "fresh-clone")]) == 0
    result = json.loads((tmp_path / "fresh-clone" / "result.json").read_text())
    assert result["figures"]["test_passed"] == 910 and result["figures"]["make_check_s"] is None
    assert result["figures"]["make_run_s"] >= 0 and result["command"].endswith("--no-check")
    ran_in = Path((tmp_path / "run.cwd").read_text().strip())  # in the clone, removed after
    assert "cudal1-fresh-clone-" in str(ran_in) and ran_in.name == "cudal1" and not ran_in.exists()
    failing = tmp_path / "failing-make"
    failing.write_text("#!/bin/sh\necho broken\nexit 2\n")
    failing.chmod(0o755)
    assert fresh_clone.main(["--make", str(failing), "--out", str(tmp_path / "none")]) == 1
    assert not (tmp_path / "none").exists()


def test_fresh_clone_dry_run_writes_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "fresh_clone.py"), "--dry-run", "--no-run",
                           "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=60, check=True)
    assert "git clone" in done.stdout and "make check" in done.stdout and "make run" not in done.stdout
    assert not (tmp_path / "r").exists()
