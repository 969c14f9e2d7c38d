"""PyPI dependencies of a Python guest (issue 56, part 2), through real builds and `llmhost run`: packages from the
guest's `[project] dependencies`, resolved for the guest's CPython 3.14 (pure wheels as they are, platform wheels
without their compiled parts), a local path dependency, a package that needs compiled code refused by name, the
dependencies' install cached (a rebuild runs no pip). The packages come from PyPI (the registry every machine here
reaches) once; the test cache keeps them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost import build_component
from llmhost.toolchains import deps
from llmhost.toolchains.errors import BuildError

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "guests" / "deps_probe"
LLMHOST = str(Path(sys.executable).with_name("llmhost"))


def run(wasm: Path, cache_dir: Path) -> dict[str, object]:
    done = subprocess.run(
        [LLMHOST, "run", str(wasm)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LLMHOST_CACHE_DIR": str(cache_dir)},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def probe(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_component(PROBE, tmp_path_factory.mktemp("deps") / "probe.wasm", cache_dir=llmhost_cache_dir)


def test_pypi_packages_and_a_local_one_build_and_run(probe: Path, llmhost_cache_dir: Path) -> None:
    assert run(probe, llmhost_cache_dir) == {
        "jinja2": "<a&amp;b><2>",
        "speedups": False,  # markupsafe's compiled speedups are not in the guest: its Python code runs
        "escaped": "&lt;&amp;&gt;",
        "yaml": {"a": [1, 2], "b": {"c": "d"}},
        "dateutil": 3600,
        "humanize": "1,234,567",
        "shared": "HI!",
    }
    declared = deps.declared(PROBE)
    assert declared is not None
    site = deps.location(declared, llmhost_cache_dir)
    stripped = deps.stripped_modules(site)
    assert stripped.get("markupsafe._speedups") == "markupsafe" and not list(site.rglob("*.so"))


def test_a_rebuild_with_unchanged_dependencies_runs_no_pip(
    probe: Path, tmp_path: Path, llmhost_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app changes (so the component is built again), its dependencies do not: with every index unreachable, the
    # build still succeeds from the cached install. The guest and its local package are copies elsewhere: the install
    # is keyed by the requirements as written and the local package's contents, not by where they are.
    guest = tmp_path / "deps_probe"
    shutil.copytree(PROBE, guest)
    shutil.copytree(REPO / "tests" / "guests" / "deps_shared", tmp_path / "deps_shared")
    (guest / "app.py").write_text((PROBE / "app.py").read_text().replace('"hi"', '"again"'))
    declared = deps.declared(guest)
    key = declared.key() if declared is not None else ""
    assert key == deps.declared(PROBE).key()  # type: ignore[union-attr]
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    wasm = build_component(guest, tmp_path / "again.wasm", cache_dir=llmhost_cache_dir)
    assert run(wasm, llmhost_cache_dir)["shared"] == "AGAIN!"
    # A change inside the local package is another install.
    module = tmp_path / "deps_shared" / "shared_text" / "__init__.py"
    module.write_text(module.read_text() + "\n# changed\n")
    assert deps.declared(guest).key() != key  # type: ignore[union-attr]


def test_a_package_that_needs_compiled_code_fails_the_build_naming_it(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "native"
    guest.mkdir()
    (guest / "app.py").write_text(
        "import pydantic\nimport wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def run(self, args):\n"
        "        return 0\n"
    )
    (guest / "pyproject.toml").write_text('[project]\nname = "native"\nversion = "0"\ndependencies = ["pydantic"]\n')
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "native.wasm", cache_dir=llmhost_cache_dir)
    message = str(refused.value)
    assert "pydantic (app.py:1)" in message and "pydantic-core" in message
    assert "pydantic_core._pydantic_core" in message and "compiled code" in message


def test_an_undeclared_package_names_the_dependency_to_add(tmp_path: Path, llmhost_cache_dir: Path) -> None:
    guest = tmp_path / "undeclared"
    guest.mkdir()
    (guest / "app.py").write_text(
        "import wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def run(self, args):\n"
        "        import humanize\n\n        return 0\n"
    )
    with pytest.raises(BuildError) as refused:
        build_component(guest, tmp_path / "undeclared.wasm", cache_dir=llmhost_cache_dir)
    assert "humanize (app.py:6): not installed in the guest (add its package to [project] dependencies" in str(
        refused.value
    )


def test_dependencies_are_read_from_pyproject_else_requirements_txt(tmp_path: Path) -> None:
    assert deps.declared(tmp_path) is None
    (tmp_path / "requirements.txt").write_text("# tools\njinja2>=3  # templates\n\nhumanize\n")
    declared = deps.declared(tmp_path)
    assert declared is not None and declared.requirements == ("jinja2>=3", "humanize")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\ndependencies = ["pyyaml"]\n')
    from_pyproject = deps.declared(tmp_path)
    assert from_pyproject is not None and from_pyproject.requirements == ("pyyaml",)
    assert from_pyproject.key() != declared.key()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0"\ndependencies = "pyyaml"\n')
    with pytest.raises(BuildError, match=r"dependencies must be a list"):
        deps.declared(tmp_path)
