"""A test guest (`command` world) whose imports are all inside functions (tests/integration/test_guest_imports.py):
the standard library, the SDK and its own module, plus one name no scan can see.

    run                 {"ok": {...}}: what each import gave
    computed NAME       __import__(NAME) of a computed name: {"ok": NAME} or the error's message
"""

import wit_world


class WitWorld(wit_world.WitWorld):
    def run(self, args):
        import json

        if args[:1] == ["computed"]:
            name = "".join(reversed(args[1]))  # no scan can see it
            try:
                __import__(name)
            except ModuleNotFoundError as error:
                print(json.dumps({"err": str(error)}))
                return 0
            print(json.dumps({"ok": name}))
            return 0
        import importlib

        import helper
        from llmhost_guest import kv

        decimal = importlib.import_module("decimal")
        try:
            import not_a_real_module  # noqa: F401  (optional: its fallback below)
        except ImportError:
            fallback = "fallback"
        print(
            json.dumps(
                {
                    "ok": {
                        "kv": kv.__name__,
                        "helper": helper.shout("hi"),
                        "decimal": str(decimal.Decimal("1.5")),
                        "optional": fallback,
                    }
                }
            )
        )
        return 0
