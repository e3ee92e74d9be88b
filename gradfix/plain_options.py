"""Option values coerced without pydantic: typer 0.29 imports pydantic (~0.1 s CPU) to coerce
every non-flag option of every run, even one left at its default.

gradfix's options are strings, paths, small integers, enums and lists of those. For the plain
values a command line gives them, :class:`PlainCoercion` does what typer's pydantic adapters
do, with typer's own pydantic-free helpers where typer has them (``coerce_cli_choice``,
``coerce_cli_path``). Anything else, and every value it would reject, goes to typer's own
coercion, so the result and every error message stay typer's. When typer's internals are not
the ones this was written against, nothing is installed and typer works as it always does.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:
    from typer._coercion import build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path
    from typer.core import _TyperParameter
except ImportError:  # another typer: keep its coercion
    _TyperParameter = None

_DIGITS = re.compile(r"[0-9]+")


class _Unplain(Exception):
    """The value is not one this module coerces: typer's own coercion handles it."""


class PlainCoercion:
    """Stands in for typer's runtime coercion of one parameter (see the module docstring)."""

    def __init__(self, param):
        self.param = param
        self.descriptor = param.type_descriptor
        self._typer = None

    def coerce(self, value: Any, param, ctx) -> Any:
        multiple = param.multiple or param.nargs == -1
        if value is None:
            return () if multiple else None
        try:
            annotation = self.descriptor.annotation
            if get_origin(annotation) is list:
                if not isinstance(value, (list, tuple)):
                    raise _Unplain
                (item,) = get_args(annotation)
                return [self._leaf(item, v, param, ctx) for v in value]
            if multiple:
                raise _Unplain
            return self._leaf(annotation, value, param, ctx)
        except _Unplain:
            pass
        if self._typer is None:
            self._typer = build_runtime_param(self.descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)

    def _leaf(self, annotation: Any, value: Any, param, ctx) -> Any:
        info = self.descriptor.parameter_info
        if info.parser is not None:
            raise _Unplain
        if annotation is str and type(value) is str:
            return value
        if isinstance(annotation, type) and issubclass(annotation, Enum):
            try:
                return coerce_cli_choice(value, choices=list(annotation), case_sensitive=info.case_sensitive, ctx=ctx)
            except ValueError:
                raise _Unplain from None
        if annotation is int and not getattr(info, "clamp", False):
            if type(value) is str and _DIGITS.fullmatch(value):
                number = int(value)
            elif type(value) is int:
                number = value
            else:
                raise _Unplain
            if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
                raise _Unplain  # typer says what is wrong
            return number
        if annotation is Path and info.path_type is None and type(value) is str and value:
            # typer converts with pydantic's Path(value), then checks its path flags itself.
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        if annotation is Path and isinstance(value, Path):
            return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)
        raise _Unplain


def install(command) -> None:
    """Give every typer parameter of ``command`` (and its subcommands) plain coercion, the
    help option too (click makes it when a command first parses its arguments)."""
    if _TyperParameter is None:
        return
    for param in getattr(command, "params", ()):
        _install_one(param)
    help_option = getattr(command, "get_help_option", None)
    if help_option is not None:

        def get_help_option(ctx):
            option = help_option(ctx)
            _install_one(option)
            return option

        command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        install(sub)


def _install_one(param) -> None:
    if isinstance(param, _TyperParameter) and getattr(param, "_runtime_param", "missing") is None:
        param._runtime_param = PlainCoercion(param)
