"""Every public name of `llmhost` (its `__all__`) is documented in docs/python-api.md, and the usage-field table
names each spelling that the host API, the Python SDK and the JavaScript SDK use."""

from __future__ import annotations

import re
from pathlib import Path

import llmhost
from llmhost.domain.types import Usage
from llmhost.guest_sdk.llmhost_guest.params import Usage as SdkUsage

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")


def test_every_public_name_is_in_the_python_api_page() -> None:
    missing = [name for name in llmhost.__all__ if not re.search(rf"`{name}[`(.]", DOC)]
    assert missing == []


def test_the_usage_table_names_every_spelling() -> None:
    js = (REPO / "host" / "llmhost" / "guest_sdk_js" / "llmhost" / "index.d.ts").read_text(encoding="utf-8")
    interface = js.split("export interface Usage {", 1)[1].split("}", 1)[0]
    js_fields = re.findall(r"(\w+):", interface)
    table = DOC.split("## Usage fields", 1)[1]
    for field in [*Usage.model_fields, *SdkUsage.__dataclass_fields__, *js_fields]:
        assert f"`{field}`" in table, field
