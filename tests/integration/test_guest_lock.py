"""Python guest dependencies (issue 56, rest): pylock.toml written on the first resolve and then installed exactly,
re-resolved for `--upgrade` or changed requirements; a package with only an sdist built into a pure wheel; a guest
with PyPI dependencies served by `llmhost serve`.

The lock and sdist tests are offline: tiny packages made here, found through `[tool.llmhost] find-links` with no
index (the real pip each time, into a fresh cache). The served guest's packages come from the configured index once;
the test cache keeps them.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.toolchains import deps, pylock, wheels
from llmhost.toolchains.errors import BuildError
from serve_driver import Server, serving

pytestmark = pytest.mark.wasm
REPO = Path(__file__).resolve().parents[2]
DEPS_HTTP = REPO / "tests" / "guests" / "deps_http"

# An in-tree PEP 517 backend (no build requirements, so the sdist builds offline): a wheel of the package's one
# module, tagged TAG (pure, or a platform tag to stand for a package with compiled code).
BACKEND = """\
import base64, hashlib, zipfile

NAME, VERSION, TAG = {name!r}, {version!r}, {tag!r}


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = f"{{NAME}}-{{VERSION}}.dist-info"
    files = {{
        f"{{NAME}}/__init__.py": "VALUE = 'from the sdist'\\n",
        f"{{info}}/METADATA": f"Metadata-Version: 2.1\\nName: {{NAME}}\\nVersion: {{VERSION}}\\n",
        f"{{info}}/WHEEL": f"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: {{TAG}}\\n",
    }}
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{{path}},sha256={{digest}},{{len(text.encode())}}\\n"
    files[f"{{info}}/RECORD"] = record + f"{{info}}/RECORD,,\\n"
    name = f"{{NAME}}-{{VERSION}}-{{TAG}}.whl"
    with zipfile.ZipFile(f"{{wheel_directory}}/{{name}}", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
    return name
"""


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure wheel of one module, the same bytes every time."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": "",
    }
    path = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0)), text)
    return path


def make_sdist(folder: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """An sdist (tar.gz) whose in-tree backend builds a wheel tagged `tag`."""
    root = f"{name}-{version}"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n',
        "backend.py": BACKEND.format(name=name, version=version, tag=tag),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{member}")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{root}.tar.gz"
    with gzip.GzipFile(path, "wb", mtime=0) as packed:
        packed.write(raw.getvalue())
    return path


def guest(directory: Path, requirements: list[str]) -> deps.Dependencies:
    directory.mkdir(exist_ok=True)
    listed = ", ".join(json.dumps(r) for r in requirements)
    (directory / "pyproject.toml").write_text(
        f'[project]\nname = "g"\nversion = "0"\ndependencies = [{listed}]\n\n[tool.llmhost]\nfind-links = ["wheels"]\n'
    )
    found = deps.declared(directory)
    assert found is not None
    return found


def installed(site: Path) -> dict[str, str]:
    return dict(line.split(" ") for line in deps.bundled(site))


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No index and no find-links but the guest's own: pip sees only the packages a test made."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for name in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # (pip.conf's find-links and indexes too)


def test_the_lock_is_written_then_installed_exactly_kept_for_a_new_dependency_and_upgraded(
    tmp_path: Path, offline: None
) -> None:
    app, cache = tmp_path / "app", tmp_path / "cache"
    make_wheel(app / "wheels", "tinylib", "1.0")
    declared = guest(app, ["tinylib>=1"])
    notes: list[str] = []
    assert installed(deps.install(declared, cache, notes.append)) == {"tinylib": "1.0"}
    # Off a terminal, pip's progress lines come through the build's notes (on one, pip's own output shows).
    assert notes[0] == "installing the guest's dependencies (tinylib>=1) for CPython 3.14 …"
    assert any(n.startswith("  pip: Processing") and "tinylib-1.0-py3-none-any.whl" in n for n in notes), notes
    lock = pylock.read(app)
    assert lock is not None and lock.requirements == ("tinylib>=1",)
    assert [(p.name, p.version, p.kind, p.path) for p in lock.packages] == [
        ("tinylib", "1.0", "wheel", "wheels/tinylib-1.0-py3-none-any.whl")
    ]
    assert lock.packages[0].sha256 == wheels.sha256(app / "wheels" / "tinylib-1.0-py3-none-any.whl")

    make_wheel(app / "wheels", "tinylib", "1.1")  # a newer release: the lock still installs 1.0
    assert installed(deps.install(declared, cache)) == {"tinylib": "1.0"}
    assert pylock.read(app) == lock

    # A dependency added: resolved again automatically, keeping the locked version where it fits.
    make_wheel(app / "wheels", "extra", "2.0", requires=("tinylib",))
    declared = guest(app, ["tinylib>=1", "extra"])
    assert installed(deps.install(declared, cache)) == {"extra": "2.0", "tinylib": "1.0"}
    relocked = pylock.read(app)
    assert relocked is not None and relocked.requirements == ("tinylib>=1", "extra")

    # --upgrade resolves again and rewrites the lock.
    assert installed(deps.install(declared, cache, upgrade=True)) == {"extra": "2.0", "tinylib": "1.1"}
    upgraded = pylock.read(app)
    assert upgraded is not None and {p.name: p.version for p in upgraded.packages} == {"extra": "2.0", "tinylib": "1.1"}

    # A locked file that changed is refused, naming the way out.
    (app / "wheels" / "tinylib-1.1-py3-none-any.whl").unlink()
    make_wheel(app / "wheels", "tinylib", "1.1", requires=("extra",))
    with pytest.raises(BuildError, match=r"pylock\.toml failed .*llmhost build --upgrade"):
        deps.install(declared, tmp_path / "other-cache")


def test_a_package_with_only_an_sdist_is_built_into_a_pure_wheel_and_locked(tmp_path: Path, offline: None) -> None:
    app = tmp_path / "app"
    sdist = make_sdist(app / "wheels", "onlysdist", "0.3")
    declared = guest(app, ["onlysdist"])
    notes: list[str] = []
    site = deps.install(declared, tmp_path / "cache", notes.append)
    assert "onlysdist has no wheel for CPython 3.14: building one from its sdist …" in notes
    assert installed(site) == {"onlysdist": "0.3"}
    assert "from the sdist" in (site / "onlysdist" / "__init__.py").read_text()
    lock = pylock.read(app)
    assert lock is not None
    assert [(p.name, p.version, p.kind, p.file, p.path, p.sha256) for p in lock.packages] == [
        ("onlysdist", "0.3", "sdist", sdist.name, "wheels/onlysdist-0.3.tar.gz", wheels.sha256(sdist))
    ]
    # From the lock (a fresh cache): the same sdist, checked against its hash, built again.
    assert installed(deps.install(declared, tmp_path / "cache-2")) == {"onlysdist": "0.3"}


def test_an_sdist_that_builds_compiled_code_fails_the_build_naming_the_package(tmp_path: Path, offline: None) -> None:
    app = tmp_path / "app"
    make_sdist(app / "wheels", "nativesdist", "1.0", tag="cp311-cp311-linux_x86_64")
    with pytest.raises(BuildError) as refused:
        deps.install(guest(app, ["nativesdist"]), tmp_path / "cache")
    message = str(refused.value)
    assert "nativesdist has no wheel for CPython 3.14, and its sdist builds a wheel with compiled code" in message
    assert "nativesdist-1.0-cp311-cp311-linux_x86_64.whl" in message and not (app / pylock.LOCK_FILE).exists()


@pytest.fixture(scope="module")
def deps_server(llmhost_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = tmp_path_factory.mktemp("deps-serve") / "llmhost.toml"
    config.write_text('[engine]\nkind = "fake"\n')
    with serving([str(DEPS_HTTP), "-c", str(config)], llmhost_cache_dir) as running:
        yield running
        assert running.stop() == 0


def test_a_guest_with_pypi_dependencies_is_built_and_served(deps_server: Server) -> None:
    status, body = deps_server.request("POST", "/", b"n: 1234567\nitems: [a, b]\n")
    assert status == 200, body
    assert json.loads(body) == {"yaml": {"n": 1234567, "items": ["a", "b"]}, "n": "1,234,567", "libyaml": False}
    lock = pylock.read(DEPS_HTTP)  # the build wrote (or installed from) the guest's lock
    assert lock is not None and {p.name.lower() for p in lock.packages} == {"pyyaml", "humanize"}


def test_the_javascript_build_summary_names_the_bundled_packages_and_the_size(tmp_path: Path) -> None:
    from llmhost.toolchains import npm_deps

    app, cache = tmp_path / "app", tmp_path / "cache"
    app.mkdir()
    component = tmp_path / "app.wasm"
    component.write_bytes(b"\0" * (3 * 1024 * 1024 // 2))
    assert npm_deps.summary(app, component, cache) == "1.5 MB"
    (app / "package.json").write_text(json.dumps({"dependencies": {"mustache": "^4.2.0", "left-pad": "1.3.0"}}))
    modules = cache / "js-deps" / npm_deps.key(app, {"mustache": "^4.2.0", "left-pad": "1.3.0"}) / "node_modules"
    (modules / "mustache").mkdir(parents=True)
    (modules / "mustache" / "package.json").write_text(json.dumps({"name": "mustache", "version": "4.2.0"}))
    # (left-pad not where it should be: its declared range stands in)
    assert npm_deps.summary(app, component, cache) == "1.5 MB, with left-pad 1.3.0, mustache 4.2.0"


def test_a_broken_lock_fails_the_build_naming_the_fix(tmp_path: Path) -> None:
    (tmp_path / pylock.LOCK_FILE).write_text('lock-version = "1.0"\n[[packages]]\nname = "x"\n')
    with pytest.raises(BuildError, match=r"pylock\.toml: \[tool\.llmhost\] requirements must be a list.*--upgrade"):
        pylock.read(tmp_path)
    (tmp_path / pylock.LOCK_FILE).write_text('[tool.llmhost]\nrequirements = ["x"]\n[[packages]]\nname = "x"\n')
    with pytest.raises(BuildError, match=r"package 'x' needs a version and `wheels`, `sdist` or `directory`"):
        pylock.read(tmp_path)
