"""watch_tools: a tool guest for `mcp --watch` (tests/e2e/test_serve_watch.py; its world: wit/world.wit)."""

from wit_world import WitWorld

VERSION = "v1"


class WitWorld(WitWorld):
    def version(self) -> str:
        return VERSION
