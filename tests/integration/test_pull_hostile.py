"""`llmhost pull` against a hostile server speaking the Hub's protocol (tests/hub_server.py's, with faults added
here; a real HTTP server on 127.0.0.1): names that are not plain names are refused before anything is written,
nothing outside the cache is written or removed, the body stops at the announced size and within a time bound, an
interrupted download (a cut, a time-out, SIGINT, kill -9) resumes with a Range request, a hostile GGUF header is
removed, and `--config` never pastes a name TOML could not hold."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hub_server import COMMIT, Hub, _handler, hub_server
from llmhost.cli import cli
from llmhost.config import load_config
from llmhost.engine import hub_download

REPO = "test/Tiny-GGUF"
FILE = "tiny-Q4_0.gguf"
LLMHOST = Path(sys.executable).parent / "llmhost"


@dataclass
class Hostile(Hub):
    """Hub with faults: what its file listing says, the ETag it sends, bytes past the file, a slow body."""

    listing: dict[str, dict[str, Any]] = field(default_factory=dict)  # file name -> fields replacing its entry's
    commit: str = COMMIT
    etag: str | None = None  # the file's ETag (huggingface_hub names the blob after it); default: its sha256
    trailing: int = 0  # bytes sent after the file, inside the announced Content-Length
    delay_s: float = 0.0  # between chunks of the body
    chunk: int = 1 << 16
    sent: dict[str, int] = field(default_factory=dict)  # bytes of each file's bodies sent, all requests together


@contextmanager
def hostile_server(hub: Hostile) -> Iterator[Hostile]:
    base = _handler(hub)

    class Handler(base):  # type: ignore[misc,valid-type]
        def _info(self, repo: str) -> None:
            siblings = []
            for name, path in hub.repos[repo].items():
                sha, size = hub.sha256(path), path.stat().st_size
                entry = {"rfilename": name, "size": size, "lfs": {"sha256": sha, "size": size, "pointerSize": 134}}
                siblings.append(_merge(entry, hub.listing.get(name, {})))
            self._json({"id": repo, "modelId": repo, "sha": hub.commit, "siblings": siblings})

        def _file(self, path: Path, name: str, body: bool) -> None:
            data = path.read_bytes()
            ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            start = int(ranged.group(1)) if ranged else 0
            self.send_response(206 if ranged else 200)
            etag = hub.etag or hub.sha256(path)
            for header, value in [("X-Repo-Commit", hub.commit), ("ETag", f'"{etag}"'), ("X-Linked-Etag", f'"{etag}"')]:
                self.send_header(header, value)
            self.send_header("X-Linked-Size", str(len(data) + hub.trailing))
            self.send_header("Content-Length", str(len(data) - start + hub.trailing))
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not body:
                return
            payload = memoryview(data[start:] + b"\xff" * hub.trailing)
            try:
                for at in range(0, len(payload), hub.chunk):
                    self.wfile.write(payload[at : at + hub.chunk])
                    hub.sent[name] = hub.sent.get(name, 0) + len(payload[at : at + hub.chunk])
                    time.sleep(hub.delay_s)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client stopped reading

    with hub_server(hub, Handler) as served:
        yield served


def _merge(entry: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = {**entry, **{k: v for k, v in changes.items() if k != "lfs"}}
    if "lfs" in changes:
        merged["lfs"] = None if changes["lfs"] is None else {**entry["lfs"], **changes["lfs"]}
    return merged


def text(s: str) -> bytes:
    return struct.pack("<Q", len(s.encode())) + s.encode()


def tiny_gguf(path: Path, size: int = 4096, extra: bytes = b"") -> Path:
    """A GGUF with a header llmhost reads (an architecture and a chat template), padded to `size` bytes."""
    meta = [("general.architecture", text("llama")), ("tokenizer.chat_template", text("{{ x }}"))]
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, len(meta) + (1 if extra else 0))
    for key, value in meta:
        data += text(key) + struct.pack("<I", 8) + value
    data += extra
    path.write_bytes(data + b"\0" * max(0, size - len(data)))
    return path


def nested_gguf(path: Path) -> Path:
    """5,000 arrays nested in one another (60 KB): a RecursionError in a recursive reader."""
    nested = struct.pack("<IQ", 9, 1) * 4_999 + struct.pack("<IQ", 4, 0)
    return tiny_gguf(path, 0, text("deep") + struct.pack("<I", 9) + nested)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def served(tmp_path: Path) -> Path:
    return tiny_gguf(tmp_path / "served.gguf")


@pytest.fixture
def hub(served: Path) -> Iterator[Hostile]:
    with hostile_server(Hostile({REPO: {FILE: served}})) as running:
        yield running


def env(hub: Hub, tmp_path: Path) -> dict[str, str | None]:
    return {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": None,
        "HF_TOKEN": None,
        "HF_HUB_OFFLINE": None,
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def pull(hub: Hub, tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["pull", *args], env=env(hub, tmp_path), catch_exceptions=False)


def cache_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "hf").rglob("*") if p.is_file() or p.is_symlink()]


def snapshot(tmp_path: Path, name: str = FILE, commit: str = COMMIT) -> Path:
    return tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / commit / name


def file_gets(hub: Hub, name: str = FILE) -> list[str | None]:
    return [ranged for method, path, ranged in hub.requests if method == "GET" and path.endswith(name)]


# -- names from the server -----------------------------------------------------------------------------------


@pytest.mark.parametrize("victim_exists", [False, True], ids=["new-file", "existing-file"])
def test_an_etag_naming_a_path_outside_the_cache_writes_and_removes_nothing_there(
    hub: Hostile, served: Path, tmp_path: Path, victim_exists: bool
) -> None:
    victim = tmp_path / "outside" / "x.gguf"
    victim.parent.mkdir()
    if victim_exists:
        victim.write_bytes(b"the user's own file")
    # Relative to the cache's blobs folder (HF_HOME/hub/models--test--Tiny-GGUF/blobs): up four, into outside/.
    hub.etag = "../../../../outside/x.gguf"
    result = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert result.exit_code == 0, result.stderr
    assert sha256(snapshot(tmp_path)) == sha256(served)  # the blob is named by the listed sha256, in the cache
    if victim_exists:
        assert victim.read_bytes() == b"the user's own file"
    else:
        assert not victim.exists()
    assert all(p.resolve().is_relative_to((tmp_path / "hf").resolve()) for p in cache_files(tmp_path))


@pytest.mark.parametrize(
    ("name", "listing", "says"),
    [
        (FILE, {"lfs": {"sha256": "../../../../outside/x"}}, "no sha256"),
        (FILE, {"lfs": None}, "no sha256"),
        (FILE, {"size": "1e9"}, "no size"),
        ("../../../../outside/x.gguf", {}, "not a plain name"),
        ("sub/../../x.gguf", {}, "not a plain name"),
        ("/abs/x.gguf", {}, "not a plain name"),
        ("a\\..\\x.gguf", {}, "not a plain name"),
    ],
)
def test_names_from_the_hub_that_are_not_plain_are_refused_before_anything_is_written(
    served: Path, tmp_path: Path, name: str, listing: dict[str, Any], says: str
) -> None:
    with hostile_server(Hostile({REPO: {name: served}}, listing={name: listing})) as hub:
        result = pull(hub, tmp_path, f"{REPO}:{name}")
        assert not file_gets(hub, Path(name).name)  # refused before downloading
    assert result.exit_code == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not cache_files(tmp_path) and not (tmp_path / "outside").exists()


def test_a_commit_that_is_not_a_hash_is_refused(served: Path, tmp_path: Path) -> None:
    with hostile_server(Hostile({REPO: {FILE: served}}, commit="../../../../outside")) as hub:
        result = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert result.exit_code == 2 and "not a commit hash" in result.stderr, result.stderr
    assert not cache_files(tmp_path) and not (tmp_path / "outside").exists()


def test_a_revision_that_is_not_a_plain_name_is_refused(hub: Hostile, tmp_path: Path) -> None:
    result = pull(hub, tmp_path, f"{REPO}:{FILE}", "--revision", "../../../../outside")
    assert result.exit_code == 2 and "not a plain name" in result.stderr, result.stderr
    assert not cache_files(tmp_path)


def test_a_blob_that_is_a_symlink_out_of_the_cache_is_replaced_and_its_target_left_alone(
    hub: Hostile, served: Path, tmp_path: Path
) -> None:
    """The old cleanup resolved a failing file's symlink and deleted its target, wherever it was."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    blob = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs" / sha256(served)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(victim)
    result = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert result.exit_code == 0, result.stderr
    assert victim.read_bytes() == b"keep me"
    assert not blob.is_symlink() and sha256(snapshot(tmp_path)) == sha256(served)


# -- the body: its size, its time, resuming ------------------------------------------------------------------


def test_the_body_stops_at_the_announced_size(hub: Hostile, served: Path, tmp_path: Path) -> None:
    hub.trailing = 64 << 20  # 64 MiB past a 4 KB file
    result = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert result.exit_code == 0, result.stderr
    assert snapshot(tmp_path).stat().st_size == served.stat().st_size
    assert max(p.stat().st_size for p in cache_files(tmp_path)) == served.stat().st_size
    assert hub.sent[FILE] < 32 << 20  # the client stopped reading (what was sent sat in socket buffers)


@pytest.mark.timeout(60)
def test_a_trickling_server_meets_the_time_bound_and_the_next_pull_resumes(
    hub: Hostile, served: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub_download, "DOWNLOAD_TIME_LIMIT_S", 1.0)
    hub.chunk, hub.delay_s = 64, 0.1  # 4 KB at 0.64 KB/s: 6.4 s (margin for a loaded machine's slow start)
    started = time.monotonic()
    first = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert time.monotonic() - started < 4.5 and first.exit_code == 2, first.stderr
    kept = re.search(
        r"took longer than 1 s \((\d+) of 4096 bytes kept\): run the command again to resume", first.stderr
    )
    assert kept and 0 < int(kept.group(1)) < 4096, first.stderr
    hub.delay_s = 0
    second = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert second.exit_code == 0, second.stderr
    assert file_gets(hub) == [None, f"bytes={kept.group(1)}-"]
    assert sha256(snapshot(tmp_path)) == sha256(served)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "kill-9"])
def test_an_interrupted_pull_process_resumes_with_a_range_request(tmp_path: Path, sig: signal.Signals) -> None:
    served = tiny_gguf(tmp_path / "served.gguf", size=4 << 20)
    blobs = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "blobs"
    with hostile_server(Hostile({REPO: {FILE: served}}, chunk=16 << 10, delay_s=0.02)) as hub:  # 4 MB in ~5 s
        environment = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        environment |= {k: v for k, v in env(hub, tmp_path).items() if v is not None}
        process = subprocess.Popen(
            [str(LLMHOST), "pull", f"{REPO}:{FILE}"], env=environment, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while not [p for p in blobs.glob("*.incomplete") if p.stat().st_size >= 64 << 10]:
                assert process.poll() is None and time.monotonic() < deadline, "no partial download appeared"
                time.sleep(0.05)
            process.send_signal(sig)
            _, stderr = process.communicate(timeout=30)
        finally:
            process.kill()
        assert process.returncode != 0 and "Traceback" not in stderr, stderr
        [partial] = blobs.glob("*.incomplete")
        have = partial.stat().st_size
        assert 0 < have < served.stat().st_size
        hub.delay_s = 0
        result = pull(hub, tmp_path, f"{REPO}:{FILE}")
        assert result.exit_code == 0, result.stderr
        assert file_gets(hub)[-1] == f"bytes={have}-"  # only the rest
    assert sha256(snapshot(tmp_path)) == sha256(served) and not list(blobs.glob("*.incomplete"))


# -- the header, the config table ----------------------------------------------------------------------------


def test_a_gguf_with_5000_nested_arrays_is_a_one_line_error_and_removed(tmp_path: Path) -> None:
    served = nested_gguf(tmp_path / "deep.gguf")
    with hostile_server(Hostile({REPO: {FILE: served}})) as hub:
        result = pull(hub, tmp_path, f"{REPO}:{FILE}")
    assert result.exit_code == 2, result.stderr
    [line] = result.stderr.strip().splitlines()[-1:]
    assert "is no usable GGUF file" in line and "nested deeper" in line and "removed" in line
    assert "Traceback" not in result.stderr
    assert not [p for p in cache_files(tmp_path) if p.parent.name in ("blobs", COMMIT)]


CRAFTED = 'x"]\n[sandbox]\nread-only-dir = "/"\n[models."y'  # valid TOML once pasted between the quotes


@pytest.mark.parametrize(
    ("name", "file", "says"),
    [
        (CRAFTED, FILE, "config table cannot hold"),
        (None, 'evil".gguf', "config table cannot hold"),  # a quote alone leaves a file TOML cannot parse
        (None, CRAFTED + ".gguf", "not a plain name"),
    ],
    ids=["--name", "quote-in-file-name", "newlines-in-file-name"],
)
def test_pull_config_never_writes_a_crafted_name_into_the_config(
    served: Path, tmp_path: Path, name: str | None, file: str, says: str
) -> None:
    config = tmp_path / "llmhost.toml"
    config.write_text("[sandbox]\ntimeout-s = 5\n")
    with hostile_server(Hostile({REPO: {file: served}})) as hub:
        # The repo's only GGUF (a selector with `[` would be a glob)
        result = pull(hub, tmp_path, REPO, *(["--name", name] if name else []), "--config", str(config))
        assert not file_gets(hub, file)  # refused before downloading
    assert result.exit_code == 2 and says in result.stderr, result.stderr
    loaded = load_config(config)  # still the user's config, and it loads
    assert loaded.sandbox.read_only_dir is None and loaded.sandbox.timeout_s == 5
    assert config.read_text() == "[sandbox]\ntimeout-s = 5\n"


def test_pull_config_writes_a_table_the_loader_reads_back(hub: Hostile, tmp_path: Path) -> None:
    config = tmp_path / "llmhost.toml"
    result = pull(hub, tmp_path, f"{REPO}:{FILE}", "--name", "tiny.v1", "--config", str(config))
    assert result.exit_code == 0, result.stderr
    model = load_config(config).models["tiny.v1"]
    assert (model.hf_repo, model.hf_file) == (REPO, FILE)
