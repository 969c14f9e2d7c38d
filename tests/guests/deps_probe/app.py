"""A test guest (`command` world) that depends on PyPI packages (tests/integration/test_guest_deps.py): jinja2 (its
markupsafe without the compiled speedups), python-dateutil and pyyaml imported inside a function, humanize, and a
local package (`shared-text @ file:../deps_shared`). Prints one JSON line of what each gave."""

import importlib.util
import json

import humanize
import jinja2
import markupsafe
import wit_world


class WitWorld(wit_world.WitWorld):
    def run(self, args):
        import yaml
        from dateutil import parser
        from shared_text import shout

        template = jinja2.Template("{% for x in items %}<{{ x }}>{% endfor %}", autoescape=True)
        print(
            json.dumps(
                {
                    "jinja2": template.render(items=["a&b", 2]),
                    "speedups": importlib.util.find_spec("markupsafe._speedups") is not None,
                    "escaped": str(markupsafe.escape("<&>")),
                    "yaml": yaml.safe_load("a: [1, 2]\nb: {c: d}"),
                    "dateutil": parser.isoparse("2026-11-27T10:00:00+01:00").utcoffset().seconds,
                    "humanize": humanize.intcomma(1234567),
                    "shared": shout("hi"),
                }
            )
        )
        return 0
