"""The documentation: the site under docs/ builds with `mkdocs build --strict` (any warning, a broken link or anchor
included, fails it), the README's links reach files and headings that exist, and the pages call the WIT version in
wit/llm.wit current and list every earlier version wit/ holds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 120  # the build takes ~3 s here
VERSION = r"\d+\.\d+\.\d+"
# A Markdown link's target, outside code spans (none of the README's links is in one).
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner, not a warning of ours
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=env,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, log
    assert "WARNING" not in log, log
    return out


def test_the_site_builds_strict_with_every_page_in_its_navigation(site: Path) -> None:
    pages = sorted(p.stem for p in (REPO / "docs").glob("*.md"))
    built = {p.stem for p in (REPO / "docs").glob("*.md") if _page(site, p.stem).is_file()}
    assert built == set(pages)
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert [p for p in pages if f"{p}.md" not in nav] == []


def test_the_readmes_links_reach_files_and_headings_that_exist(site: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(readme) if not t.startswith(("http://", "https://"))]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (REPO / path).exists(), f"README.md links to {target}: no such file"
        if anchor:
            assert path.startswith("docs/") and path.endswith(".md"), target
            html = _page(site, Path(path).stem).read_text(encoding="utf-8")
            assert f'id="{anchor}"' in html, f"README.md links to {target}: no such heading"


def test_the_docs_call_the_wit_version_current_and_list_every_earlier_one() -> None:
    current = re.search(rf"^package llmhost:llm@({VERSION});", (REPO / "wit" / "llm.wit").read_text(), re.M)
    assert current
    earlier = {p.name for p in (REPO / "wit").iterdir() if p.is_dir() and re.fullmatch(VERSION, p.name)}
    assert earlier and current.group(1) not in earlier
    page = " ".join((REPO / "docs" / "wit.md").read_text(encoding="utf-8").split())
    assert f"The current version is `llmhost:llm@{current.group(1)}`" in page
    policy = page.split("## Version policy", 1)[1].split(" ## ", 1)[0]
    assert set(re.findall(rf"`wit/({VERSION})/`", policy)) == earlier
    # No page (nor the README) calls another version current.
    texts = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    for text in (" ".join(p.read_text(encoding="utf-8").split()) for p in texts):
        for near in re.findall(rf"current[^.;]{{0,60}}?llmhost:llm@({VERSION})", text):
            assert near == current.group(1)


def _page(site: Path, stem: str) -> Path:
    """The built HTML of docs/STEM.md (mkdocs' directory URLs: docs/serve.md is serve/index.html)."""
    return site / "index.html" if stem == "index" else site / stem / "index.html"
