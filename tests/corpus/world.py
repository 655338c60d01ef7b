"""Notebooks nobody here wrote: every ``.ipynb`` in the sdists of nbformat, nbclient, nbconvert
and jupytext at pinned versions.

The sdists are downloaded with pip (``--require-hashes``: the sha256 of each is pinned here)
into ``.corpus/`` at the repository's top, once; only their ``.ipynb`` files are unpacked. They
are not committed: pinned hashes make the download exactly reproducible, the repository does not
carry 7 MB of other projects' files and their licences, and moving to newer versions is a change
of two lines. ``scripts/test`` runs ``python -m tests.corpus.world`` before the suite, so the
download (about a minute: pip prepares each sdist's metadata) is not part of a test.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# (name, version, sha256 of the sdist)
SDISTS = (
    ("nbformat", "5.11.1", "32d4521c68c6e7d5b29c76defaeed9f42ea733142b9b19f88277ce10390b9c4d"),
    ("nbclient", "0.11.0", "04a134a5b087f2c5887f228aca155db50169b8cd9334dee6942c8e927e56081a"),
    ("nbconvert", "7.17.2", "344a218e8595117ce37396ed025d994f146d076226ebac59255a2fa085ab24d8"),
    ("jupytext", "1.19.6", "ba1d143bb3751e054d3164376b148ee8fa74e1a860fc9411e1da93ff588b8a17"),
)

TOP = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("NBRELAY_CORPUS", TOP / ".corpus"))


def folder(name: str, version: str) -> Path:
    return HOME / f"{name}-{version}"


def present() -> bool:
    return all((folder(n, v) / ".complete").exists() for n, v, _ in SDISTS)


def fetch() -> None:
    """Download the pinned sdists (checked against their hashes) and unpack their notebooks."""
    missing = [(n, v, h) for n, v, h in SDISTS if not (folder(n, v) / ".complete").exists()]
    if not missing:
        return
    HOME.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=HOME) as tmp:
        wanted = Path(tmp) / "requirements.txt"
        wanted.write_text(
            "".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in missing), encoding="utf-8"
        )
        names = ",".join(n for n, _, _ in missing)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes",
             f"--no-binary={names}", "--dest", tmp, "-r", str(wanted)],
            check=True,
        )  # fmt: skip
        for name, version, digest in missing:
            sdist = Path(tmp) / f"{name}-{version}.tar.gz"
            if hashlib.sha256(sdist.read_bytes()).hexdigest() != digest:
                raise RuntimeError(f"{sdist.name} does not have the pinned sha256")
            _unpack(sdist, folder(name, version))


def _unpack(sdist: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith(".ipynb")):
                continue
            inner = Path(*Path(member.name).parts[1:])  # without the sdist's top folder
            if ".." in inner.parts:
                continue
            source = tar.extractfile(member)
            assert source is not None
            target = into / inner
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
    (into / ".complete").write_text("", encoding="utf-8")


def notebooks() -> list[Path]:
    """Every notebook of the pinned sdists (fetched first if needed), in a stable order."""
    fetch()
    return sorted(p for n, v, _ in SDISTS for p in folder(n, v).rglob("*.ipynb"))


def name_of(path: Path) -> str:
    """A notebook's name in the corpus: its sdist and its path inside it."""
    return path.relative_to(HOME).as_posix()


if __name__ == "__main__":
    print(f"{len(notebooks())} notebooks in {HOME}")  # noqa: T201
