"""`models.NAME.backend-sampling`'s resolution (backend_greedy.use_backend_sampling): off by default on the CPU and
on a GPU (an H100 measured it no faster, issue 51), and the key still turns it on or off wherever it is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.config import ModelConfig, load_config
from llmhost.engine.local.backend_greedy import use_backend_sampling


@pytest.mark.parametrize("offloaded", [False, True])
def test_unset_is_off_on_the_cpu_and_on_a_gpu(offloaded: bool) -> None:
    assert ModelConfig().backend_sampling is None
    assert use_backend_sampling(None, offloaded) is False


@pytest.mark.parametrize("offloaded", [False, True])
def test_the_key_decides_where_it_is_set(offloaded: bool) -> None:
    assert use_backend_sampling(True, offloaded) is True
    assert use_backend_sampling(False, offloaded) is False


def test_a_gpu_config_without_the_key_leaves_it_unset(tmp_path: Path) -> None:
    path = tmp_path / "llmhost.toml"
    path.write_text(
        "[models.gemma-3-270m]\nn-gpu-layers = -1\nslots = 32\n\n[models.smollm2-135m]\nbackend-sampling = true\n"
    )
    models = load_config(path).models
    assert models["gemma-3-270m"].backend_sampling is None
    assert not use_backend_sampling(models["gemma-3-270m"].backend_sampling, offloaded=True)
    assert use_backend_sampling(models["smollm2-135m"].backend_sampling, offloaded=True)
