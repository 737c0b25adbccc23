"""The help format of anydev's commands: every option's help says its default.

An option with a default of its own (not None) shows it as ``(default: VALUE)`` unless its help
already says ``(default...``; an option whose default is None says in its own words, in that form,
what leaving it out means. On/off flags need neither.
"""
from __future__ import annotations

import argparse


class ShownDefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """``RawDescriptionHelpFormatter`` (descriptions keep their lines) that ends each option's help
    with its default, as ``ArgumentDefaultsHelpFormatter`` does, but shows no ``None`` and no
    default twice."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "(default" in text or action.nargs == 0:
            return text
        if action.default is None or action.default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"
