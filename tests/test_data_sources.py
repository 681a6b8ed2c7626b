"""The outside data files: declared once (cudal1/data_sources.json), fetched by `cudal1 data fetch` (here from
the local copy in ../shared, as the command fetches from any folder or mirror), and refused on use where a
file at a declared name is not the declared one."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from cudal1.data_sources import declared, pack_kernelbench
from cudal1.problems import ProblemLoadError, load_cudal1_release, load_kernelbench_jsonl, load_starter_suite

SHARED = Path(__file__).resolve().parents[2] / "shared"


def cudal1(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudal1.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def _release_row(problem, program: str | None) -> str:
    level, number = (int(x) for x in problem.problem_id.removeprefix("starter-L").split("-"))
    return json.dumps({"level_id": level, "task_id": number, "ref_code": problem.source, "custom_code": program,
                       "score_default": 1.5}) + "\n"


def test_the_manifest_declares_the_checksums_the_shared_copy_documents() -> None:
    readme = SHARED / "README.md"
    if not readme.is_file():
        pytest.skip("../shared is not here")
    listed = dict(reversed(line.split()) for line in re.findall(r"^[0-9a-f]{64}  \S+$", readme.read_text(), re.M))
    assert {name: entry.sha256 for name, entry in declared().items()} == listed
    for entry in declared().values():
        assert re.fullmatch(r"[0-9a-f]{40}", entry.commit) and entry.repository.count("/") == 1 and entry.path


def test_fetch_from_a_local_copy_writes_every_file_checked_then_leaves_them(tmp_path: Path) -> None:
    if not all((SHARED / name).is_file() for name in declared()):
        pytest.skip("../shared does not hold every declared file")
    target = tmp_path / "data"
    fetched = cudal1("data", "fetch", "--from", str(SHARED), "--to", str(target), cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    for name in declared():
        assert (target / name).read_bytes() == (SHARED / name).read_bytes()
        assert f"{target / name}: written from {SHARED / name}, sha256 checked" in fetched.stderr
    again = cudal1("data", "fetch", "cuda-l1/h100.jsonl", "--from", str(SHARED), "--to", str(target), cwd=tmp_path)
    assert again.returncode == 0 and "already there, sha256 checked" in again.stderr
    checked = cudal1("data", "check", "--in", str(target), cwd=tmp_path)
    assert checked.returncode == 0
    assert sum(line.startswith("ok ") for line in checked.stderr.splitlines()) == len(declared())
    assert len(load_cudal1_release(target / "cuda-l1" / "h100.jsonl")) == 250  # the loaders take it


def test_a_source_whose_checksum_differs_is_not_fetched(tmp_path: Path) -> None:
    """A copy (a folder, or a URL of one) that is not the declared file: refused, the source named, nothing
    written."""
    source = tmp_path / "copy" / "cuda-l1" / "h100.jsonl"
    source.parent.mkdir(parents=True)
    source.write_text(_release_row(load_starter_suite()[0], None))
    for origin in (str(tmp_path / "copy"), (tmp_path / "copy").as_uri()):
        refused = cudal1("data", "fetch", "cuda-l1/h100.jsonl", "--from", origin, "--to", str(tmp_path / "data"),
                         cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert "is not the declared bb3c6f83ca3502d4" in refused.stderr and "deepreinforce-ai/CUDA-L1" in refused.stderr
        assert "not written" in refused.stderr and not (tmp_path / "data" / "cuda-l1" / "h100.jsonl").exists()
    unknown = cudal1("data", "fetch", "cuda-l1/v100.jsonl", "--to", str(tmp_path / "data"), cwd=tmp_path)
    assert unknown.returncode == 2 and "not a declared file" in unknown.stderr


def test_a_changed_input_file_is_refused_on_use_with_its_source_and_the_fix(tmp_path: Path) -> None:
    """The loaders check a file at a declared name; the same rows under a name of one's own are read as they are."""
    problem = load_starter_suite()[0]
    changed = tmp_path / "data" / "cuda-l1" / "h100.jsonl"
    changed.parent.mkdir(parents=True)
    changed.write_text(_release_row(problem, "print('not the release')\n"))
    with pytest.raises(ProblemLoadError) as refused:
        load_cudal1_release(changed)
    message = str(refused.value)
    assert str(changed) in message and "is not the declared bb3c6f83ca3502d4" in message
    assert "optimized_cuda_code/h100.json of github.com/deepreinforce-ai/CUDA-L1 at commit 51e8356b" in message
    assert f"cudal1 data fetch --to {tmp_path / 'data'} cuda-l1/h100.jsonl" in message
    problems = tmp_path / "data" / "kernelbench" / "problems.jsonl"
    problems.parent.mkdir(parents=True)
    problems.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "x", "code": problem.source}) + "\n")
    with pytest.raises(ProblemLoadError, match="ScalingIntelligence/KernelBench at commit 423217d9"):
        load_kernelbench_jsonl(problems)
    mine = tmp_path / "mine" / "h100.jsonl"
    mine.parent.mkdir()
    mine.write_bytes(changed.read_bytes())
    assert [r.problem.source for r in load_cudal1_release(mine)] == [problem.source]


def _archive(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"KernelBench-423217d/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_kernelbench_file_is_packed_from_the_repository_archive() -> None:
    """What `cudal1 data fetch` does with KernelBench's archive: the modules of the declared level folders,
    by level then number (10 after 2), one JSON object a line; other folders and files left out."""
    archive = _archive({"KernelBench/level2/1_Conv_ReLU.py": "c = 3\n", "KernelBench/level1/10_Matmul.py": "b = 2\n",
                        "KernelBench/level1/2_ReLU.py": "a = 1\n", "KernelBench/level4/1_Big.py": "d = 4\n",
                        "KernelBench/level1/README.md": "no\n", "src/level1/3_Other.py": "e = 5\n"})
    packed = pack_kernelbench(archive, declared()["kernelbench/problems.jsonl"].path).decode()
    assert packed.splitlines() == [
        '{"level": 1, "problem_id": 2, "name": "ReLU", "code": "a = 1\\n"}',
        '{"level": 1, "problem_id": 10, "name": "Matmul", "code": "b = 2\\n"}',
        '{"level": 2, "problem_id": 1, "name": "Conv_ReLU", "code": "c = 3\\n"}']


def test_the_data_page_names_every_declared_source() -> None:
    """docs/data.md says in one place where each file comes from: the manifest's repositories and commits."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "data.md").read_text()
    for entry in declared().values():
        assert f"github.com/{entry.repository}" in page and entry.commit in page, entry.name
        assert entry.name.split("/")[0] in page
    assert "cudal1 data fetch --from" in page and "cudal1/data_sources.json" in page
