"""A test guest (`command` world) using popular pure-Python packages as a user would
(tests/integration/test_guest_libraries.py): `llmhost run libs_probe.wasm -- CASE` prints one JSON line, the value
of cases.CASES[CASE] (jinja, jinja-errors, markdown, yaml, dateutil, humanize), computed inside `run()`."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def run(self, args):
        import json

        from cases import CASES

        print(json.dumps(CASES[args[0]]()))
        return 0
