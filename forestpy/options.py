"""Strict option handling for demos and the CLI: unknown keys are errors."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["merge_options", "parse_value"]


def merge_options(defaults: Mapping, overrides: Mapping, where: str = "options") -> dict:
    """Return ``defaults`` updated by ``overrides``; unknown keys raise ``KeyError``
    naming them and listing the valid ones."""
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise KeyError(f"unknown option(s) {unknown} for {where}; valid: {sorted(defaults)}")
    return {**defaults, **overrides}


def parse_value(text: str, default):
    """Convert the command-line string ``text`` to the type of ``default``."""
    if isinstance(default, bool):
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {text!r}")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if default is None:
        for conv in (int, float):
            try:
                return conv(text)
            except ValueError:
                pass
        return None if text.lower() == "none" else text
    if isinstance(default, (tuple, list)):
        return type(default)(
            parse_value(t, default[0] if default else 0.0) for t in text.split(",")
        )
    return text
