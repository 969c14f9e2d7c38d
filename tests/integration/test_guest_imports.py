"""Imports anywhere in a Python guest (issue 56, part 1), through real builds (componentize-py) and `llmhost run`:
imports inside functions work; an undeclared package of the build machine's Python never leaks into a guest; a
name no scan can see fails at run time naming `[tool.llmhost] include`, and works once included."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost import FakeEngineConfig, Host, HostConfig, build_component
from llmhost.toolchains.errors import BuildError

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "guests" / "imports_probe"
LLMHOST = str(Path(sys.executable).with_name("llmhost"))


@pytest.fixture(scope="module")
def probe(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_component(PROBE, tmp_path_factory.mktemp("imports") / "probe.wasm", cache_dir=llmhost_cache_dir)


def run(wasm: Path, cache_dir: Path, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [LLMHOST, "run", str(wasm), "--", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "LLMHOST_CACHE_DIR": str(cache_dir), "HOME": str(Path.home())},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_imports_inside_functions_work(probe: Path, llmhost_cache_dir: Path) -> None:
    got = run(probe, llmhost_cache_dir, "run")
    assert got == {"ok": {"kv": "llmhost_guest.kv", "helper": "HI!", "decimal": "1.5", "optional": "fallback"}}


def test_a_computed_name_fails_at_run_time_naming_the_include_key_and_works_once_included(
    probe: Path, llmhost_cache_dir: Path
) -> None:
    included = run(probe, llmhost_cache_dir, "computed", "sysroloc")  # colorsys: in [tool.llmhost] include
    assert included == {"ok": "colorsys"}
    missing = run(probe, llmhost_cache_dir, "computed", "nozama")  # amazon: no such module anywhere
    assert "amazon" in str(missing["err"]) and "[tool.llmhost] include" in str(missing["err"])
    unseen = run(probe, llmhost_cache_dir, "computed", "cfiqtrap")  # partial (stdlib) was never imported
    assert "[tool.llmhost] include" in str(unseen["err"])


def test_a_package_of_the_build_machine_never_leaks_into_a_guest(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    # jinja2 is importable by the Python that runs the build (a dependency of the host's dev tools), and by the
    # first `python3` on PATH here: the guest did not declare it, so the build fails, naming it and where.
    pytest.importorskip("jinja2")
    guest = tmp_path / "leaky"
    guest.mkdir()
    (guest / "app.py").write_text(
        "import wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def run(self, args):\n"
        "        import jinja2\n\n        return 0\n"
    )
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "leaky.wasm", cache_dir=llmhost_cache_dir)
    assert "jinja2 (app.py:6): not installed in the guest" in str(refused.value)


def test_a_module_that_fails_on_import_fails_the_build_naming_why(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "broken"
    shutil.copytree(PROBE, guest)
    (guest / "helper.py").write_text("raise RuntimeError('no config at import time')\n")
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "broken.wasm", cache_dir=llmhost_cache_dir)
    message = str(refused.value)
    assert "helper (app.py:" in message and "RuntimeError: no config at import time" in message


def test_the_probe_runs_through_the_python_api_too(probe: Path, llmhost_cache_dir: Path) -> None:
    with Host(HostConfig(engine=FakeEngineConfig(), cache_dir=llmhost_cache_dir)) as host:
        done = host.load(probe).run_captured(["run"])
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["ok"]["helper"] == "HI!"
