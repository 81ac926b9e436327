"""Typed, documented options for demos and the CLI: unknown keys are errors.

A demo's ``OPTIONS`` maps names to plain defaults or to :class:`Option` records that
add a one-line doc, a type, a range or a list of choices::

    OPTIONS = dict(
        min_level=Option(2, "coarsest refinement level", min=0, max=18),
        max_level=Option(4, "finest refinement level", min=0, max=18, at_least="min_level"),
        cfl=Option(0.9, "Courant number of the steps", min=0.0, max=1.0, min_inclusive=False),
        solver=Option("roe", "Riemann solver", choices=("roe", "hlle")),
    )

:func:`merge_options` gives plain values, each checked; ``forestpy run --set k=v``
parses ``v`` to the option's type and checks it the same way; ``forestpy run
--help-options demo.py`` prints :func:`describe_options`.

Numbers are checked before anything runs: NaN is never a valid value, and infinity
only for a float option declared with ``allow_inf=True``; ``multiple_of`` constrains
integers and ``at_least`` names another option that this one may not be below
(:func:`check_relations`, called by :func:`merge_options` and by ``forestpy run``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forestpy.forest.quadrants import MAX_LEVEL

__all__ = [
    "Option",
    "OptionError",
    "merge_options",
    "check_relations",
    "option_defaults",
    "parse_value",
    "describe_options",
    "standard_options",
]


class OptionError(ValueError):
    """An option value of the wrong type or out of range (the message names both)."""


@dataclass(frozen=True)
class Option:
    """One option: default, one-line doc, and what values are valid.

    ``type`` defaults to the type of ``default`` (``float`` options accept integers);
    ``min``/``max`` bound numbers (inclusive unless ``min_inclusive``/``max_inclusive``
    is false); ``choices`` lists the valid values; ``none_ok`` lets the value be None
    (true by default when the default is None).  A number is never NaN, and never
    infinite unless ``allow_inf`` (also for the numbers in a tuple or list value);
    ``multiple_of`` asks an integer to be a multiple of it; ``at_least`` names another
    option of the same mapping that this one may not be below (checked by
    :func:`check_relations`, which sees both values).
    """

    default: Any
    doc: str = ""
    type: type | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    min_inclusive: bool = True
    max_inclusive: bool = True
    none_ok: bool | None = None
    allow_inf: bool = False
    multiple_of: int | None = None
    at_least: str | None = None

    def __post_init__(self):
        if self.type is None and self.default is not None:
            object.__setattr__(self, "type", type(self.default))
        if self.none_ok is None:
            object.__setattr__(self, "none_ok", self.default is None)
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        if self.default is not None or not self.none_ok:
            self.check("default", self.default)

    def check(self, name: str, value):
        """Return ``value`` (an int widened to float for a float option) or raise
        :class:`OptionError` naming the option, the value and what is valid."""
        if value is None:
            if self.none_ok:
                return None
            raise OptionError(f"option {name!r} may not be None")
        want = self.type
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if want is not None and not _is_instance(value, want):
            raise OptionError(
                f"option {name!r} expects {want.__name__}, got {value!r} "
                f"({type(value).__name__})"
            )
        for number in _numbers_in(value):
            if math.isnan(number):
                raise OptionError(f"option {name!r} may not be NaN, got {value!r}")
            if math.isinf(number) and not self.allow_inf:
                raise OptionError(f"option {name!r} must be finite, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise OptionError(
                f"option {name!r} must be one of {list(self.choices)}, got {value!r}"
            )
        if self.min is not None and (
            value < self.min or (value == self.min and not self.min_inclusive)
        ):
            raise OptionError(f"option {name!r} must be {self._range()}, got {value!r}")
        if self.max is not None and (
            value > self.max or (value == self.max and not self.max_inclusive)
        ):
            raise OptionError(f"option {name!r} must be {self._range()}, got {value!r}")
        if self.multiple_of is not None and value % self.multiple_of:
            raise OptionError(
                f"option {name!r} must be a multiple of {self.multiple_of}, got {value!r}"
            )
        return value

    def _range(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>=' if self.min_inclusive else '>'} {self.min}")
        if self.max is not None:
            parts.append(f"{'<=' if self.max_inclusive else '<'} {self.max}")
        if self.multiple_of is not None:
            parts.append(f"a multiple of {self.multiple_of}")
        if self.at_least is not None:
            parts.append(f">= {self.at_least}")
        return " and ".join(parts)

    def describe_valid(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        return self._range()


def _is_instance(value, want) -> bool:
    if want is bool:
        return isinstance(value, bool)
    if want in (int, float) and isinstance(value, bool):
        return False
    if want in (tuple, list):
        return isinstance(value, (tuple, list))
    return isinstance(value, want)


def _numbers_in(value):
    """The floats of ``value`` (itself, or the items of a tuple or list), for the NaN
    and infinity checks; ints cannot be either."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [v for v in items if isinstance(v, float)]


def _as_option(spec) -> Option:
    return spec if isinstance(spec, Option) else Option(spec)


def option_defaults(options: Mapping) -> dict:
    """Plain default values of an ``OPTIONS`` mapping (Options or plain defaults)."""
    return {k: (v.default if isinstance(v, Option) else v) for k, v in options.items()}


def merge_options(defaults: Mapping, overrides: Mapping, where: str = "options") -> dict:
    """Return the defaults updated by ``overrides``, as plain values.

    Unknown keys raise ``KeyError`` naming them and listing the valid ones; values of
    typed options (:class:`Option`) are checked and raise :class:`OptionError`.
    """
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise KeyError(f"unknown option(s) {unknown} for {where}; valid: {sorted(defaults)}")
    out = option_defaults(defaults)
    for key, value in overrides.items():
        spec = defaults[key]
        out[key] = spec.check(key, value) if isinstance(spec, Option) else value
    check_relations(defaults, out)
    return out


def check_relations(defaults: Mapping, values: Mapping) -> None:
    """Raise :class:`OptionError` where an option declared ``at_least=OTHER`` is below
    the value of ``OTHER`` in ``values`` (the options in effect); None skips."""
    for key, spec in defaults.items():
        if not isinstance(spec, Option) or spec.at_least is None:
            continue
        value, other = values.get(key), values.get(spec.at_least)
        if value is not None and other is not None and value < other:
            raise OptionError(
                f"option {key!r} must be >= {spec.at_least} ({other!r}), got {value!r}"
            )


def parse_value(text: str, default, name: str = "value"):
    """Convert the command-line string ``text`` to the type of ``default`` (a plain
    default or an :class:`Option`, whose type and range are then checked)."""
    if isinstance(default, Option):
        spec = default
        if spec.none_ok and text.strip().lower() == "none":
            return None
        if spec.type is not None and spec.type is not type(spec.default):
            sample = spec.type()  # e.g. float option with an integer default
        else:
            sample = spec.default
        return spec.check(name, parse_value(text, sample))
    if isinstance(default, bool):
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {text!r}")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
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


def describe_options(options: Mapping, title: str = "options") -> str:
    """A table of the options: name, type, default, valid values, doc."""
    rows = []
    for name, spec in options.items():
        opt = _as_option(spec)
        kind = opt.type.__name__ if opt.type is not None else "any"
        rows.append((name, kind, repr(opt.default), opt.describe_valid(), opt.doc))
    head = ("option", "type", "default", "valid", "description")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
    lines = [title]
    for r in [head] + rows:
        lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    return "\n".join(line.rstrip() for line in lines)


def standard_options(*, mx=16, min_level=2, max_level=4, refine_threshold=0.05,
                     regrid_interval=2, t_final=1.0, cfl=0.9, backend="cpu",
                     dtype="float64", subcycle=None, precision="float64") -> dict:
    """The options every adaptive demo shares, typed and documented, with the demo's
    own defaults; merge them into the demo's ``OPTIONS``.  The levels are bounded by
    the forest's coordinates (:data:`~forestpy.forest.quadrants.MAX_LEVEL`)."""
    top = MAX_LEVEL - 2  # Simulation: max_level < MAX_LEVEL - 1
    return dict(
        mx=Option(mx, "cells per patch side (a multiple of 4)", min=4, max=1024,
                  multiple_of=4),
        min_level=Option(min_level, "coarsest refinement level", min=0, max=top),
        max_level=Option(max_level, "finest refinement level (>= min_level)", min=0, max=top,
                         at_least="min_level"),
        refine_threshold=Option(float(refine_threshold),
                                "refine where the tagging indicator exceeds this", min=0.0),
        regrid_interval=Option(regrid_interval, "steps between regrids (0: never)", min=0),
        subcycle=Option(subcycle, "each level takes its own time step (local time "
                        "stepping); none: on for the CPU backend, off for the GPU",
                        type=bool, none_ok=True),
        t_final=Option(float(t_final), "end time of the run", min=0.0),
        cfl=Option(float(cfl), "desired Courant number of the steps", min=0.0, max=1.0,
                   min_inclusive=False),
        backend=Option(backend, "where the patches live", choices=("cpu", "gpu")),
        dtype=Option(dtype, "storage precision of the fields (float32: GPU only)",
                     choices=("float64", "float32")),
        precision=Option(precision, "arithmetic of the GPU step kernel (float32 implies "
                         "float32 storage; mixed: FP64 normal solve and update, FP32 "
                         "limiter and transverse terms)",
                         choices=("float64", "float32", "mixed")),
    )


def simulation_options(o) -> dict:
    """The :class:`~forestpy.simulation.Simulation` keywords of the parsed
    :func:`standard_options` ``o`` (all but ``refine_threshold``, which only demos that
    use the default criterion pass on); ``cfl_max`` is 1."""
    return dict(mx=o["mx"], min_level=o["min_level"], max_level=o["max_level"],
                regrid_interval=o["regrid_interval"], cfl_desired=o["cfl"], cfl_max=1.0,
                t_final=o["t_final"], backend=o["backend"],
                dtype="float32" if o.get("precision") == "float32" else o["dtype"],
                subcycle=o["subcycle"], precision=o.get("precision", "float64"))
