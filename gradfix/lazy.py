"""Modules that only fixes need, imported on first use.

Report mode never builds a fix, so it never pays for LibCST (~0.5-1 s of imports). Rule
modules write ``from gradfix.lazy import cst`` and use ``cst.X`` inside functions as usual;
the first attribute looked up imports ``libcst``. Nothing at a rule module's top level may
look up a ``cst`` attribute (a class base, a constant built from ``cst.X``): that would import
LibCST with the rule. A LibCST transformer is written as a plain class and combined with
``cst.CSTTransformer`` where it is used: ``transformer(MyEdits)(args)``.
"""

from __future__ import annotations

import importlib
import types
from functools import lru_cache


class LazyModule(types.ModuleType):
    """A stand-in for a module that imports it when one of its attributes is first read."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # copy/pickle/inspect probes must not import the module
        value = getattr(importlib.import_module(self.__dict__["_lazy_target"]), attr)
        self.__dict__[attr] = value  # later look-ups are plain attribute reads
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_target']!r}>"


cst = LazyModule("libcst")


@lru_cache(maxsize=None)
def transformer(mixin: type) -> type:
    """``mixin`` (a plain class with ``leave_X``/``on_leave`` methods) as a CSTTransformer."""
    return type(mixin.__name__, (mixin, cst.CSTTransformer), {"__module__": mixin.__module__})
