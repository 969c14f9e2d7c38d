"""The cases of the libs_probe guest, each a function of no arguments returning a JSON value: the guest runs one
inside `run()`, and tests/integration/test_guest_libraries.py runs the same function in the host's Python (where it
has the package) for the expected value. Everything is imported and compiled here, at run time, never at import
time: the lazy paths (a dependency's function-level imports, codecs looked up by name) are what is tested."""

import datetime


def jinja():
    import jinja2

    # A template compiled at run time, with string literals: jinja2's lexer decodes each with "unicode-escape".
    env = jinja2.Environment(autoescape=True)
    template = env.from_string("{{ when.strftime('%d %b') }}|{{ 'caf\\u00e9' | upper }}|{{ items | join(', ') }}")
    return template.render(when=datetime.date(2026, 11, 28), items=["a&b", "c"])


def jinja_errors():
    import jinja2

    # Rendering an error imports jinja2.debug (inside a function) to rewrite the traceback.
    env = jinja2.Environment()
    found = []
    try:
        env.from_string("{{ lookup('x') }}").render(lookup=_fail)
    except KeyError as error:
        found.append(f"{type(error).__name__}: {error}")
    try:
        env.from_string("line one\n{% if %}")
    except jinja2.TemplateSyntaxError as error:
        found.append(f"{type(error).__name__}: {error.message} (line {error.lineno})")
    try:
        env.from_string("{{ missing.attr }}").render()
    except jinja2.UndefinedError as error:
        found.append(f"{type(error).__name__}: {error}")
    return found


def _fail(name):
    raise KeyError(name)


def markdown():
    import markdown

    text = "# Title\n\nSome *emphasis*, `code` & a [link](https://example.com).\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    return markdown.markdown(text, extensions=["markdown.extensions.tables", "markdown.extensions.toc"])


def yaml():
    import yaml

    document = "name: probe\nitems: [1, 2.5, true, null]\nwhen: 2026-11-28\nnested: {a: 'x: y'}\nraw: !!binary aGk=\n"
    loaded = yaml.load(document, Loader=yaml.SafeLoader)  # the pure-Python loader
    return {"loaded": repr(loaded), "dumped": yaml.dump({"b": [1, {"c": "d"}], "a": "é"}, allow_unicode=True)}


def dateutil():
    from dateutil import parser, relativedelta, rrule

    when = parser.parse("Sat, 28 Nov 2026 22:05:00 +0100")
    fuzzy = parser.parse("the meeting is on 3 March 2027 at 10am", fuzzy=True)
    last_friday = when + relativedelta.relativedelta(months=+1, day=31, weekday=relativedelta.FR(-1))
    weekly = rrule.rrule(rrule.WEEKLY, count=3, dtstart=datetime.datetime(2026, 1, 1))
    return [when.isoformat(), fuzzy.isoformat(), last_friday.isoformat(), [d.isoformat() for d in weekly]]


def humanize():
    import humanize

    return [
        humanize.intcomma(1234567),
        humanize.naturalsize(3_000_000),
        humanize.naturaldelta(datetime.timedelta(hours=2, minutes=5)),
        humanize.ordinal(22),
        humanize.apnumber(7),
        humanize.intword(1_200_000_000),
        humanize.precisedelta(datetime.timedelta(seconds=3725)),
    ]


CASES = {"jinja": jinja, "jinja-errors": jinja_errors, "markdown": markdown, "yaml": yaml, "dateutil": dateutil}
CASES["humanize"] = humanize
