"""What in a guest directory is never a source, in one place: the build keys (python.py) skip it, and so does the
`--watch` watcher (serve/watch.py, which skips more: outputs of its own), so a change the watcher ignores can never
be one a build would see."""

from __future__ import annotations

# Tool caches and version control: never build inputs, and they change between identical builds.
CACHE_DIRS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".git"})
# Byte code and built components.
BUILT_SUFFIXES = (".pyc", ".pyo", ".wasm")
