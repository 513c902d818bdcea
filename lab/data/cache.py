"""Writing into the shared cache when several processes (DDP ranks, sweep jobs, job arrays) build the same entry
at once: each writes under a unique temporary name, then publishes it atomically; the first to publish wins,
and every later racer discards its own copy and uses the winner's, so all of them read identical data."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

# Every entry this process published (it won the race), in order: what a refused `lab.prepare` takes back
# (lab.runtime.rundir.journal.take_back_cache_entries), so that a refused command leaves nothing behind.
published: list[Path] = []


def write_once(path: Path, text: str) -> str:
    """Publish text at path unless another process already did; -> the text now at path (the winner's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        os.link(tmp, path)  # fails if path exists: never replaces a file another process may be reading
        published.append(path)
    except FileExistsError:
        text = path.read_text(encoding="utf-8")
    except OSError:  # a filesystem without hard links: an atomic replace (the content is the same by construction)
        os.replace(tmp, path)
        published.append(path)
        return text
    os.unlink(tmp)
    return text


def publish_dir(tmp: Path, target: Path, complete: str) -> bool:
    """Rename the finished directory tmp (which holds the marker file `complete`) to target. -> False when
    another process published target first (tmp is removed and the winner's copy stays); a stale target
    without the marker (an interrupted older build) is replaced."""
    for _ in range(2):
        try:
            tmp.rename(target)
            published.append(target)
            return True
        except OSError:  # EEXIST / ENOTEMPTY: target exists
            if (target / complete).exists():
                shutil.rmtree(tmp, ignore_errors=True)
                return False
            stale = Path(tempfile.mkdtemp(dir=target.parent, prefix=".stale-"))
            with contextlib.suppress(OSError):  # (gone already)
                target.rename(stale / "old")  # move aside atomically, then delete at leisure
            shutil.rmtree(stale, ignore_errors=True)
    if (target / complete).exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    tmp.rename(target)  # still refused: let the OSError speak
    published.append(target)
    return True
