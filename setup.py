"""Package layout (metadata is in pyproject.toml).

The sources live in `host/`; the WIT files live at the repository root in `wit/` and ship inside the package as
`llmhost/wit/*.wit` by mapping a data-only package `llmhost.wit` onto that directory. In a checkout (editable
install included) the host reads `<repo>/wit` directly.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("host", include=["llmhost", "llmhost.*"]), "llmhost.wit", "llmhost.examples"],
    package_dir={"": "host", "llmhost.wit": "wit", "llmhost.examples": "guest-examples"},
    package_data={
        # The guest SDKs: Python (llmhost_guest) and JavaScript (its modules, index.d.ts and package.json).
        "llmhost": ["py.typed", "guest_sdk/llmhost_guest/*.py", "guest_sdk_js/llmhost/*"],
        # Every WIT version wit/ holds (tests/unit/test_wheel_wit.py compares the two): today's at the top, each
        # earlier one in its own folder, the standard WIT of the proposals in deps/ beside either.
        "llmhost.wit": ["*.wit", "*/*.wit", "deps/*/*.wit", "*/deps/*/*.wit"],
        # The guest examples are also `llmhost new`'s templates (llmhost/templates).
        # app.py and its modules; app.js and package.json (the JavaScript examples)
        "llmhost.examples": [
            "*/*.py",
            "*/README.md",
            "*/pyproject.toml",
            "*/llmhost.toml",  # an example's grants (agent, rag, counter, chat, rag-http and the JavaScript apps)
            "*/*.js",
            "*/package.json",
            "*/wit/*.wit",
        ],
    },
    include_package_data=False,
)
