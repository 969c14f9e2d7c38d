"""guest-examples/prompt-templates: a guest with a PyPI dependency (jinja2) and key-value state, run as its README
says through `llmhost run DIR` (which builds it, installing jinja2 for the guest). The rendered prompt is exact
(no model); the model's label is compared with the same request through the Python API on this machine."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import readme_output as readme
from llmhost import Host, InferencingParams

pytestmark = [pytest.mark.model, pytest.mark.wasm]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "guest-examples" / "prompt-templates"
LLMHOST = str(Path(sys.executable).with_name("llmhost"))


def test_prompt_templates_readme(tmp_path: Path, llmhost_cache_dir: Path, real_host: Host) -> None:
    commands, expected = readme.readme_blocks(EXAMPLE / "README.md")
    env = {k: v for k, v in os.environ.items() if k != "LLMHOST_CONFIG"}
    env.update(LLMHOST_DATA_DIR=str(tmp_path / "data"), LLMHOST_CACHE_DIR=str(llmhost_cache_dir))
    outputs = []
    for line in commands:
        argv = shlex.split(line)
        argv[0] = LLMHOST
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (line, done.stderr)
        outputs.append(done.stdout)
    output = "".join(outputs)
    exact, model_line = expected.rstrip("\n").rsplit("\n", 1)
    assert output.startswith(exact + "\n")  # the counts and the rendered prompt, as the README shows them
    got = json.loads(output.rstrip("\n").rsplit("\n", 1)[1])
    assert set(json.loads(model_line)) == set(got) and got["text"] == "Works as described, very happy."
    prompt = exact.split("\n", 2)[2]  # the rendered prompt: what follows the two counts
    params = InferencingParams(max_tokens=4, temperature=0.0, repeat_penalty=1.0, stop=["\n"])
    assert got["label"] == real_host.infer("gemma-3-270m", prompt, params).text.strip()
