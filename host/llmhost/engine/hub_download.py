"""One file of a Hub repo downloaded into huggingface_hub's cache layout by llmhost itself. Not hf_hub_download: it
takes the blob's file name from the server's ETag unchecked (a hostile mirror wrote outside the cache), writes
whatever body the server sends, and never resumes across processes (each downloads to a file of its own).

The layout other tools read: models--OWNER--NAME/blobs/SHA256 (the bytes), snapshots/COMMIT/FILE -> the blob (a
relative symlink), refs/REVISION (the commit). Every name that becomes a path is checked before anything is
written. A partial download is blobs/SHA256.incomplete, locked while written; the next pull resumes it with a Range
request. The body stops at the announced size, and the whole download has a time bound of its own."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from llmhost.domain.errors import EngineError
from llmhost.engine.hub import repo_dir

DOWNLOAD_TIME_LIMIT_S = 6 * 3600.0  # one file, start to end: a server trickling bytes cannot hold `pull` forever
READ_TIMEOUT_S = 60.0  # connecting, and each read of the body
MAX_REDIRECTS = 5  # the Hub serves a file's bytes from its CDN: one redirect
MAX_NAME_BYTES = 255  # one component of a path (the usual file system limit)
PROGRESS_EVERY_S = 0.5

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_NOT_PLAIN = re.compile(r"[\x00-\x1f\x7f\\]")  # control characters, and Windows' separator
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class HubFile:
    """One file as the Hub announced it, checked (`hub_file`): each field is safe to build a cache path from."""

    repo: str
    name: str  # its path in the repo: plain components, '/'-separated
    commit: str
    sha256: str
    size: int


def plain_path(value: object, what: str) -> str:
    """`value` if it is a relative path of plain names (no `..`, no empty or control characters), else an error."""
    if not isinstance(value, str) or not value or value.startswith("/") or _NOT_PLAIN.search(value):
        raise EngineError(f"{what} {value!r} is not a plain name: refused, nothing written")
    for part in value.split("/"):
        if part in ("", ".", "..") or len(part.encode()) > MAX_NAME_BYTES:
            raise EngineError(f"{what} {value!r} is not a plain name: refused, nothing written")
    return value


def hub_file(repo: str, name: object, commit: object, sha256: object, size: object) -> HubFile:
    """What the Hub said of a file, checked before it names anything on disk."""
    if not _REPO.fullmatch(repo):
        raise EngineError(f"{repo!r} is not a Hub repo name (OWNER/NAME of letters, digits, '.', '_' and '-')")
    plain_path(name, f"the Hub's file name in {repo}")
    assert isinstance(name, str)
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise EngineError(f"the Hub answered {commit!r} as the commit of {repo}, not a commit hash: refused")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise EngineError(
            f"the Hub lists no sha256 for {repo}/{name} (got {sha256!r}): llmhost pulls only files it can check"
        )
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise EngineError(f"the Hub lists no size for {repo}/{name} (got {size!r}): refused")
    return HubFile(repo, name, commit, sha256, size)


def snapshot_link(file: HubFile) -> Path:
    return repo_dir(file.repo) / "snapshots" / file.commit / file.name


def blob_path(file: HubFile) -> Path:
    return repo_dir(file.repo) / "blobs" / file.sha256


def fetch(file: HubFile, revision: str, endpoint: str, token: str | None, progress: bool = False) -> Path:
    """The file's path in the cached snapshot: its blob checked if already there (removed if it fails), else
    downloaded or resumed and checked (size and sha256) before it takes the blob's name."""
    blob = blob_path(file)
    try:
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not _complete(blob, file):
            _Download(file, blob, endpoint, token, progress).run()
        link = _link(snapshot_link(file), blob)
        if revision != file.commit:
            _write_ref(repo_dir(file.repo) / "refs" / plain_path(revision, "the revision"), file.commit)
    except OSError as error:
        raise EngineError(f"cannot write the Hub cache ({repo_dir(file.repo)}): {error}") from None
    return link


def remove(file: HubFile) -> None:
    """Removes the file's cache entries: the snapshot's link and the blob (never what a symlink points to)."""
    blob = blob_path(file)
    for entry in (snapshot_link(file), blob, blob.with_name(blob.name + ".incomplete")):
        entry.unlink(missing_ok=True)  # unlink removes a symlink itself


def _sha256(file: BinaryIO, digest: Any, upto: int) -> int:
    """Feeds the first `upto` bytes of `file` to `digest`; how many there were."""
    done = 0
    while done < upto and (block := file.read(min(1 << 20, upto - done))):
        digest.update(block)
        done += len(block)
    return done


def _complete(blob: Path, file: HubFile) -> bool:
    """Whether the blob is there whole (a regular file of the Hub's size and sha256); a bad one is removed."""
    try:
        info = blob.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISREG(info.st_mode) and info.st_size == file.size:
        with os.fdopen(os.open(blob, os.O_RDONLY | _NO_FOLLOW), "rb") as opened:
            digest = hashlib.sha256()
            _sha256(opened, digest, file.size)
        if digest.hexdigest() == file.sha256:
            return True
    blob.unlink()  # not what the Hub lists (or not a plain file): the entry goes, and the file is downloaded
    return False


def _link(link: Path, blob: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return link
    if link.is_symlink() or link.exists():
        link.unlink()  # the entry only: a symlink's target is left alone
    link.symlink_to(target)
    return link


def _write_ref(ref: Path, commit: str) -> None:
    ref.parent.mkdir(parents=True, exist_ok=True)
    if ref.is_symlink():
        ref.unlink()
    with os.fdopen(os.open(ref, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NO_FOLLOW, 0o644), "w") as out:
        out.write(commit)


class _Stopped(Exception):
    pass


class _Download:
    """The bytes of one file into `blob`.incomplete (resumed from its size), then renamed to `blob` once checked."""

    def __init__(self, file: HubFile, blob: Path, endpoint: str, token: str | None, progress: bool) -> None:
        self.file, self.blob, self.endpoint, self.token = file, blob, endpoint, token
        self.partial = blob.with_name(blob.name + ".incomplete")
        self.digest = hashlib.sha256()
        self.have = 0
        self.show: Callable[[bool], None] = self._progress if progress else (lambda _end: None)
        self._shown = 0.0

    def run(self) -> None:
        where = f"{self.file.repo}/{self.file.name}"
        fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | _NO_FOLLOW, 0o644)
        with os.fdopen(fd, "r+b") as out:
            try:  # one writer: a second pull of the same file would interleave its bytes
                fcntl.flock(out.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise EngineError(f"another `llmhost pull` is downloading {where}: wait for it to end") from None
            self.have = _sha256(out, self.digest, self.file.size)
            out.truncate(self.have)  # a partial file longer than the Hub's size is cut to it
            try:
                if self.have < self.file.size:
                    self._receive(out)
            except _Stopped as stop:
                kept = f"{self.have} of {self.file.size} bytes kept" if self.have else "nothing kept"
                again = "resume from there" if self.have else "retry"
                raise EngineError(
                    f"download of {where} stopped: {stop} ({kept}): run the command again to {again}"
                ) from None
            finally:
                self.show(True)
            if self.digest.hexdigest() != self.file.sha256:
                self.partial.unlink()
                raise EngineError(
                    f"{self.file.name}: checksum mismatch (sha256 is not the Hub's {self.file.sha256}): removed; "
                    "run the command again"
                )
            out.flush()
            os.replace(self.partial, self.blob)

    def _receive(self, out: BinaryIO) -> None:
        import httpx

        url = f"{self.endpoint}/{self.file.repo}/resolve/{self.file.commit}/{quote(self.file.name)}"
        # Identity: the ranges and the announced size count the file's own bytes. httpx drops Authorization on a
        # redirect to another origin (the Hub's CDN).
        headers = {"Accept-Encoding": "identity", "User-Agent": "llmhost"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.have:
            headers["Range"] = f"bytes={self.have}-"
        limit = DOWNLOAD_TIME_LIMIT_S
        deadline = time.monotonic() + limit
        try:
            with (
                httpx.Client(follow_redirects=True, max_redirects=MAX_REDIRECTS, timeout=READ_TIMEOUT_S) as client,
                client.stream("GET", url, headers=headers) as response,
            ):
                self._start(out, response)
                for chunk in response.iter_raw():  # as the bytes come: the deadline is checked at each read
                    room = self.file.size - self.have
                    self._write(out, chunk[:room])
                    if len(chunk) >= room:
                        return  # the announced size: nothing past it is read or written
                    if time.monotonic() > deadline:
                        raise _Stopped(f"it took longer than {limit:g} s")
        except httpx.HTTPError as error:
            raise _Stopped(str(error) or type(error).__name__) from None
        finally:
            out.flush()
        raise _Stopped(f"the server ended the file at byte {self.have} of {self.file.size}")

    def _start(self, out: BinaryIO, response: Any) -> None:
        status = response.status_code
        if status == 206 and self.have and _range_start(response.headers.get("Content-Range")) == self.have:
            return  # the rest, from where the partial file ends
        if status in (200, 206) or (status == 416 and self.have):
            # The whole file (a server that ignores ranges): start over. Another range than asked: the partial file
            # is of no use.
            out.seek(0)
            out.truncate()
            self.have, self.digest = 0, hashlib.sha256()
            if status == 200:
                return
        raise _Stopped(f"HTTP {status} from {response.url.host}")

    def _write(self, out: BinaryIO, data: bytes) -> None:
        out.write(data)
        self.digest.update(data)
        self.have += len(data)
        self.show(False)

    def _progress(self, end: bool) -> None:
        now = time.monotonic()
        if not end and now - self._shown < PROGRESS_EVERY_S:
            return
        self._shown = now
        percent = 100 * self.have // max(self.file.size, 1)
        mb = f"{self.have / 1e6:.0f} of {self.file.size / 1e6:.0f} MB"
        sys.stderr.write(f"\r  {self.file.name}: {percent}% ({mb})" + ("\n" if end else ""))
        sys.stderr.flush()


def _range_start(content_range: str | None) -> int | None:
    found = re.fullmatch(r"bytes (\d+)-\d+/(?:\d+|\*)", (content_range or "").strip())
    return int(found.group(1)) if found else None
