"""`llmhost serve`'s API keys and moving deadline, without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.config import ConfigError
from llmhost.serve.deadline import Deadline
from llmhost.shell.auth import API_KEYS_ENV, ApiKeys, load_api_keys


def test_keys_from_the_environment_and_a_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# team a\nsk-file-1\n\n  sk-file-2  \n")
    keys = load_api_keys(keys_file, {API_KEYS_ENV: "sk-env-1, sk-env-2"})
    for key in ("sk-file-1", "sk-file-2", "sk-env-1", "sk-env-2"):
        assert keys.allows([("authorization", f"Bearer {key}")])
        assert keys.allows([("authorization", f"bearer  {key} ")])
    assert not keys.allows([])
    assert not keys.allows([("authorization", "Bearer sk-other")])
    assert not keys.allows([("authorization", "Basic sk-file-1")])
    assert not keys.allows([("authorization", "Bearer ")])
    assert "sk-" not in repr(keys)  # only digests are kept


def test_no_keys_let_everything_through(tmp_path: Path) -> None:
    keys = load_api_keys(None, {})
    assert not keys and keys.allows([]) and ApiKeys().allows([("authorization", "Bearer x")])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="holds no key"):
        load_api_keys(empty, {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_api_keys(tmp_path / "missing.txt", {})


def test_the_deadline_moves_with_progress_up_to_the_cap() -> None:
    now = [100.0]
    deadline = Deadline(100.0, idle_s=5.0, max_duration_s=12.0, clock=lambda: now[0])
    assert deadline.left() == 5.0 and not deadline.capped()
    now[0] = 104.0
    deadline.progress()  # bytes reached the client: five more seconds from now
    assert deadline.at() == 109.0 and deadline.left() == 5.0
    now[0] = 110.0
    deadline.progress()
    assert deadline.at() == 112.0 and deadline.capped()  # the cap, not the idle time, is next
    now[0] = 113.0
    assert deadline.left() == 0.0
