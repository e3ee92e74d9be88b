"""gradfix coerces its option values without pydantic (typer 0.29 imports it for every run,
~0.1 s): the values and every error must be the ones typer's own coercion gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.main
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from gradfix import cli, plain_options

SAMPLES = [None, "json", "JSON", "sarif", "auto", "never", "3", "1", "0", "-2", "007", " 3", "1_0", "x", "",
           "a/b.py", "-", ".", "GF101,GF2", [], (), ["a.py", "b"], ("GF101.x=1",), [Path("a.py")]]


def _params():
    command = typer.main.get_command(cli.app)
    for name, sub in command.commands.items():
        for param in sub.params:
            yield pytest.param(sub, param, id=f"{name}:{param.name}")


def _outcome(runtime, value, param, ctx):
    try:
        return ("value", runtime.coerce(value, param=param, ctx=ctx))
    except BadParameter as exc:
        return ("error", exc.format_message())


@pytest.mark.parametrize(("command", "param"), list(_params()))
def test_plain_coercion_agrees_with_typer(command, param):
    ctx = Context(command)
    plain, typer_own = plain_options.PlainCoercion(param), build_runtime_param(param.type_descriptor)
    for value in SAMPLES:
        if param.type_descriptor.annotation is bool and isinstance(value, str):
            continue  # flags take no value on the command line
        expected = _outcome(typer_own, value, param, ctx)
        got = _outcome(plain, value, param, ctx)
        assert got == expected and type(got[1]) is type(expected[1]), value


def test_the_help_option_is_covered_too(tmp_path):
    command = typer.main.get_command(cli.app)
    plain_options.install(command)
    check = command.commands["check"]
    option = check.get_help_option(Context(check, help_option_names=["-h", "--help"]))
    assert isinstance(option._runtime_param, plain_options.PlainCoercion)
