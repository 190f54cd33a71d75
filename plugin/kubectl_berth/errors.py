"""The plugin's own user-facing error (API and pod errors are ``berth_operator.errors``)."""

from __future__ import annotations


class PluginError(Exception):
    """A user-facing failure: printed as ``error: <message>`` with exit code 1."""
