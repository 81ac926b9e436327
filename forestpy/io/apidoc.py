"""The API reference (``docs/api.md``), generated from the docstrings.

    python -m forestpy.io.apidoc docs/api.md      # write it
    python -m forestpy.io.apidoc --check docs/api.md   # exit 1 when it is out of date

For every public module of :data:`MODULES` (named as strings and imported here, so
this driver module names no plugin in an import statement): its docstring's first
paragraph, then each public class and function (``__all__``, else the names not
starting with ``_`` defined in the module) with its signature and docstring; a class's
public methods and properties follow it.  Plain Markdown, no dependency.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

__all__ = ["MODULES", "render", "main"]

# the public surface, in reading order: the layers of docs/architecture.md
MODULES = (
    "forestpy",
    "forestpy.simulation",
    "forestpy.subcycling",
    "forestpy.hooks",
    "forestpy.vtable",
    "forestpy.options",
    "forestpy.indicators",
    "forestpy.callbacks",
    "forestpy.errors",
    "forestpy.backend",
    "forestpy.forest",
    "forestpy.patches",
    "forestpy.patches.time_sync",
    "forestpy.patches.launch",
    "forestpy.io.checkpoint",
    "forestpy.io.codecs",
    "forestpy.io.bitround",
    "forestpy.io.vtk",
    "forestpy.io.plot",
    "forestpy.parallel",
    "forestpy.solvers.clawpack",
    "forestpy.extensions.riemann",
    "forestpy.extensions.reference",
    "forestpy.extensions.geoclaw.model",
    "forestpy.extensions.geoclaw.topography",
    "forestpy.extensions.geoclaw.dtopo",
    "forestpy.extensions.geoclaw.refinement",
    "forestpy.extensions.geoclaw.sources",
    "forestpy.extensions.geoclaw.fgmax",
    "forestpy.extensions.geoclaw.config",
)


def _public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_")
                 and (inspect.isclass(v) or inspect.isfunction(v))
                 and getattr(v, "__module__", None) == module.__name__]
    return sorted(names, key=str.lower)


def _signature(obj) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    # a module as a default value: its name, not its path on this machine
    return re.sub(r"<module '([^']+)' from '[^']*'>", r"\1", text)


def _doc(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip()


def _first_paragraph(doc: str) -> str:
    return doc.split("\n\n")[0].strip() if doc else ""


def _members(cls) -> list[tuple[str, object]]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        if isinstance(value, property) or inspect.isfunction(value) or isinstance(
                value, (classmethod, staticmethod)):
            out.append((name, value))
    return out


def render() -> str:
    """The Markdown text of the API reference."""
    lines = ["# API reference", "",
             "Generated from the docstrings by `python -m forestpy.io.apidoc docs/api.md`; "
             "do not edit by hand.", ""]
    for name in MODULES:
        module = importlib.import_module(name)
        lines += [f"## `{name}`", ""]
        head = _first_paragraph(_doc(module))
        if head:
            lines += [head, ""]
        for attr in _public_names(module):
            obj = getattr(module, attr, None)
            if obj is None or not (inspect.isclass(obj) or callable(obj)):
                continue
            kind = "class" if inspect.isclass(obj) else "function"
            lines += [f"### `{name}.{attr}{_signature(obj)}` ({kind})", ""]
            doc = _doc(obj)
            if doc:
                lines += [doc, ""]
            if inspect.isclass(obj):
                for member, value in _members(obj):
                    if isinstance(value, property):
                        mdoc = _first_paragraph(_doc(value.fget)) if value.fget else ""
                        lines += [f"- `{member}` (property)" + (f": {mdoc}" if mdoc else "")]
                    else:
                        func = value.__func__ if isinstance(value, (classmethod,
                                                                    staticmethod)) else value
                        mdoc = _first_paragraph(_doc(func))
                        lines += [f"- `{member}{_signature(func)}`"
                                  + (f": {mdoc}" if mdoc else "")]
                lines += [""] if lines[-1] != "" else []
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    if len(paths) != 1:
        print("usage: python -m forestpy.io.apidoc [--check] docs/api.md", file=sys.stderr)
        return 2
    path = Path(paths[0])
    text = render()
    if check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is out of date: python -m forestpy.io.apidoc {path}",
                  file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
