"""The files a run writes, written so that a kill at any instant leaves them readable, and read
tolerantly.

- Whole files (``config.yaml``, ``report.html``, trajectory records, counters) are written to
  a temporary name beside the target, synced and renamed (:func:`write_atomic`): a reader sees
  the old file or the new one, never half of one.
- Append-only JSONL files (``metrics.jsonl``, ``samples.jsonl``, ``episodes.jsonl``) get each
  batch of rows in one write (:func:`append_jsonl`): a kill mid-write can only leave a torn
  last line. :func:`read_jsonl` drops it with a warning naming the file; a bad line anywhere
  else is an error naming the file and the line.
- Compressed records (``*.jsonl.gz``) are written whole; a cut one (copied half, a disk that
  failed) is read up to where it was cut, with a warning (:func:`read_gz_jsonl`).

A write that fails (a full disk, a read-only file system, no permission) raises an
``OSError`` that names the file, leaves no temporary file behind, and keeps the previous
version of the file.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import shutil
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger("turnrl")

DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT)
PERMISSION_ERRORS = (errno.EACCES, errno.EPERM, errno.EROFS)


class NotWritable(OSError):
    """A directory a command was asked to create cannot be (no permission, read-only): bad
    input, raised before anything was written."""


def free_mib(path: Path) -> float | None:
    """Free space on ``path``'s file system (its nearest existing parent), in MiB."""
    for p in (Path(path), *Path(path).parents):
        if p.exists():
            try:
                return shutil.disk_usage(p).free / 2**20
            except OSError:
                return None
    return None


def named(e: OSError, path: Path | str) -> OSError:
    """``e`` naming ``path`` when it names no file (a write to an open file names none)."""
    if e.filename is not None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))


@contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """Within it, an ``OSError`` names ``path`` if it names no file."""
    try:
        yield
    except OSError as e:
        raise named(e, path) from None


def disk_full(path: Path | str, cause: BaseException) -> OSError | None:
    """``cause`` (a library's own error for a failed write) as the OSError it stands for when
    ``path``'s disk has no room left (safetensors, for one, reports ENOSPC as its own error);
    None when the disk has room."""
    if isinstance(cause, OSError):
        return named(cause, path)
    free = free_mib(Path(path))
    if free is not None and free < 1:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return None


def create_dir(path: Path) -> None:
    """``mkdir -p path``; a directory that cannot be created for want of permission raises
    :class:`NotWritable` (bad input: nothing was written)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if e.errno in PERMISSION_ERRORS:
            raise NotWritable(e.errno, e.strerror, str(path)) from None
        raise named(e, path) from None


def discard(path: Path) -> None:
    """Remove a temporary file if it is there (and can be: a read-only disk cannot)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write-then-rename: a kill leaves the old file or the new one, never a torn one; a
    failed write leaves the old file and no temporary one."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        discard(tmp)
        raise named(e, path) from None


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), default=str) + "\n"


def append_jsonl(path: Path | str, rows: Iterable[dict[str, Any]]) -> None:
    """Append ``rows`` in one write (a kill leaves at most a torn last line)."""
    text = "".join(_line(r) for r in rows)
    if not text:
        return
    with writing(path), open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()


def rewrite_jsonl(path: Path | str, rows: Iterable[dict[str, Any]]) -> None:
    """Replace the file with ``rows`` (atomically): what a resume keeps of it."""
    write_atomic(path, "".join(_line(r) for r in rows))


def read_jsonl(path: Path | str) -> list[dict]:
    """The rows of an append-only JSONL file; [] if it does not exist. A torn last line (a
    kill mid-write) is dropped with a warning naming the file; a bad line anywhere else raises
    ValueError naming the file and the line."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    numbered = [(i, ln) for i, ln in enumerate(lines) if ln.strip()]
    out = []
    for k, (i, ln) in enumerate(numbered):
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError as e:
            if k < len(numbered) - 1:
                raise ValueError(
                    f"{path}: line {i + 1} is not JSON ({e.msg}); only a torn last line is "
                    "expected after a crash: remove or fix that line"
                ) from None
            logger.warning(
                f"warning: {path}: dropped a torn last line ({len(ln)} characters, the run "
                "stopped mid-write)"
            )
    return out


def write_gz_jsonl(path: Path | str, rows: Iterable[dict[str, Any]]) -> None:
    """``rows`` as a gzip-compressed JSONL file, written whole (see :func:`write_atomic`)."""
    text = "".join(_line(r) for r in rows)
    write_atomic(path, gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0))


def read_gz_jsonl(path: Path | str) -> list[dict]:
    """The rows of a gzip-compressed JSONL file. One cut short is read up to the cut, its
    partial last row dropped, with a warning naming the file."""
    path = Path(path)
    raw = path.read_bytes()
    text, cut = _gunzip(raw)
    lines = [ln for ln in text.split("\n") if ln.strip()]
    out = []
    for k, ln in enumerate(lines):
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:
            if k < len(lines) - 1 or not cut:
                raise ValueError(f"{path}: record {k + 1} is not JSON") from None
    if cut:
        logger.warning(
            f"warning: {path}: the file is cut short (a kill or a failed copy); read the "
            f"{len(out)} complete records before the cut"
        )
    return out


def _gunzip(raw: bytes) -> tuple[str, bool]:
    """What decompresses of ``raw``, and whether it was cut short."""
    d = zlib.decompressobj(wbits=31)  # gzip header and trailer
    parts = []
    for i in range(0, len(raw), 1 << 16):
        try:
            parts.append(d.decompress(raw[i : i + (1 << 16)]))
        except zlib.error:  # damaged past here: keep what came before
            break
    return b"".join(parts).decode("utf-8", errors="replace"), not d.eof
