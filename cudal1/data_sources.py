"""The outside data files (KernelBench's problems, CUDA-L1's released kernels), declared once in
``data_sources.json``: each file's name in a data folder, the public repository and commit it comes from, the
path there, how it is made from that path (``packed``: ``copy``, the file byte for byte; ``kernelbench``, the
problem modules of the listed folders one JSON object a line, by level then number), its licence and its
sha256. JSON, not YAML: the GPU hosts that measure have torch and this package only.

:func:`fetch` writes them into a data folder (``../shared`` beside the checkout, where the params files and
tests look) from those repositories, from a local copy or from a mirror, and keeps a file only when its
checksum is the declared one. :func:`check_declared` is what the loaders call on use: a file at a declared
name (``.../cuda-l1/h100.jsonl``) whose checksum differs is refused, with its source and the command that
gets it. A file of your own under another name is read as it is.

>>> entry = declared()["cuda-l1/h100.jsonl"]
>>> entry.repository, entry.commit[:7], entry.path
('deepreinforce-ai/CUDA-L1', '51e8356', ('optimized_cuda_code/h100.json',))
>>> declared_name("../shared/cuda-l1/h100.jsonl"), declared_name("runs/h100.jsonl")
('cuda-l1/h100.jsonl', None)
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import tarfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MANIFEST = Path(__file__).with_name("data_sources.json")
DEFAULT_FOLDER = "../shared"  # beside the repository root: what reproduction.yaml and the tests name
GUIDE = "docs/data.md"


class DataFileError(ValueError):
    """A data file that is missing or is not the declared one; the message names its source and the fix."""


@dataclass(frozen=True)
class DataFile:
    """One declared file: ``name`` is its path inside a data folder (``cuda-l1/h100.jsonl``)."""

    name: str
    repository: str  # owner/name on GitHub
    commit: str
    path: tuple[str, ...]  # in the repository: the file (packed: copy) or the folders packed into it
    packed: str  # copy | kernelbench
    license: str
    sha256: str

    @property
    def origin(self) -> str:
        return f"{', '.join(self.path)} of github.com/{self.repository} at commit {self.commit}"


@functools.cache
def declared() -> dict[str, DataFile]:
    """The manifest, by name."""
    entries = json.loads(MANIFEST.read_text())
    return {name: DataFile(name=name, **{**fields, "path": tuple(fields["path"])}) for name, fields in entries.items()}


def declared_name(path: str | Path) -> str | None:
    """The declared name a path stands for (its folder and file name), or None."""
    name = "/".join(Path(path).parts[-2:])
    return name if name in declared() else None


def file_sha256(path: str | Path) -> str:
    stat = os.stat(path)
    return _digest(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    """A file's sha256, computed once per (path, size, modification time): loaders read the same file often."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_command(name: str, folder: str | Path) -> str:
    return f"cudal1 data fetch --to {folder} {name}"


def verify(path: str | Path, name: str) -> Path:
    """``path`` when it holds the declared ``name`` byte for byte; else DataFileError with the fix."""
    entry, path = declared()[name], Path(path)
    folder = Path(*path.parts[:-2]) if len(path.parts) > 2 else Path(".")
    if not path.is_file():
        raise DataFileError(f"{path}: no such file. It is {name}, {entry.origin}; get it with "
                            f"`{fetch_command(name, folder)}` ({GUIDE})")
    digest = file_sha256(path)
    if digest != entry.sha256:
        raise DataFileError(f"{path}: sha256 {digest[:16]}... is not the declared {entry.sha256[:16]}... of {name}, "
                            f"{entry.origin}. Replace it with `{fetch_command(name, folder)}` ({GUIDE}); a file "
                            "of your own belongs under another name")
    return path


def check_declared(path: str | Path) -> None:
    """Refuse a file at a declared name whose checksum differs (the loaders call this on every read)."""
    name = declared_name(path)
    if name is not None:
        verify(path, name)


def fetch(folder: str | Path = DEFAULT_FOLDER, source: str | None = None, names: Sequence[str] = ()) -> list[str]:
    """Write the declared files (all, or ``names``) into ``folder``, each checked before it is kept; returns
    one line per file. ``source``: None for the public repositories; a folder laid out like ``folder``
    (``kernelbench/problems.jsonl``, ``cuda-l1/h100.jsonl``...); or a URL of such a folder (a mirror,
    ``file://``). A file already there with the declared checksum is left as it is."""
    unknown = [n for n in names if n not in declared()]
    if unknown:
        raise DataFileError(f"{unknown[0]}: not a declared file; declared: {', '.join(declared())}")
    done = []
    for name in names or list(declared()):
        entry, target = declared()[name], Path(folder) / name
        if target.is_file() and file_sha256(target) == entry.sha256:
            done.append(f"{target}: already there, sha256 checked")
            continue
        content, where = _content(entry, source)
        digest = hashlib.sha256(content).hexdigest()
        if digest != entry.sha256:
            raise DataFileError(f"{where}: sha256 {digest[:16]}... is not the declared {entry.sha256[:16]}... of "
                                f"{name}, {entry.origin}; not written. Fetch it from another copy, or from "
                                f"that repository (`cudal1 data fetch` without --from)")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            partial.write_bytes(content)
            partial.replace(target)
        except OSError as exc:
            raise DataFileError(f"{target}: cannot be written ({exc}); give a data folder you can write, "
                                "--to DIR") from exc
        done.append(f"{target}: written from {where}, sha256 checked")
    return done


def _content(entry: DataFile, source: str | None) -> tuple[bytes, str]:
    """The file's bytes and where they were read from."""
    if source is None:
        if entry.packed == "copy":
            url = f"https://raw.githubusercontent.com/{entry.repository}/{entry.commit}/{entry.path[0]}"
            return _download(url), url
        url = f"https://codeload.github.com/{entry.repository}/tar.gz/{entry.commit}"
        return pack_kernelbench(_download(url), entry.path), f"{url} (packed)"
    if "://" in source:
        url = f"{source.rstrip('/')}/{entry.name}"
        return _download(url), url
    path = Path(source) / entry.name
    if not path.is_file():
        raise DataFileError(f"{path}: no such file; --from names a folder laid out like {DEFAULT_FOLDER} "
                            f"(it would hold {entry.name})")
    return path.read_bytes(), str(path)


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise DataFileError(f"{url}: {exc}; without a route to it, fetch from a copy: "
                            "`cudal1 data fetch --from DIR` (a folder, or a URL of one, laid out like ../shared)") from exc


_MODULE = re.compile(r"^(\d+)_(.+)\.py$")


def pack_kernelbench(archive: bytes, folders: Sequence[str]) -> bytes:
    """KernelBench's problem modules under ``folders`` (``KernelBench/level1``...) of a repository archive (a
    .tar.gz with the repository in one top folder, as GitHub serves it), one JSON object a line:
    ``{"level", "problem_id", "name", "code"}`` from ``<N>_<name>.py``, by level then number."""
    levels = {folder.rstrip("/"): int(re.sub(r"\D", "", folder.rsplit("/", 1)[-1]) or 0) for folder in folders}
    rows = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar.getmembers():
            inside = member.name.split("/", 1)[-1]
            folder, _, file = inside.rpartition("/")
            match = _MODULE.match(file)
            if member.isfile() and folder in levels and match:
                code = tar.extractfile(member).read().decode("utf-8")
                rows.append({"level": levels[folder], "problem_id": int(match.group(1)), "name": match.group(2),
                             "code": code})
    rows.sort(key=lambda r: (r["level"], r["problem_id"]))
    return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
