"""The one error of guest building."""

from __future__ import annotations


class BuildError(Exception):
    """The guest could not be built; the message names the fix."""
