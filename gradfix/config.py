"""``[tool.gradfix]`` in the project's pyproject.toml, merged with command-line options.

The project's pyproject.toml is the nearest one walking up from a file's folder, and the walk
stops at the project root (the first folder with a pyproject.toml or a ``.git``), as Ruff's
does: a pyproject.toml without ``[tool.gradfix]`` means defaults, never a file further up. A
config can only select rules and set their options: every key is validated, nothing in it is
imported or run, and a file that is not valid TOML (or nested too deeply to read) is one error.

```toml
[tool.gradfix]
select = ["GF1", "GF2"]          # codes or prefixes; off-by-default rules need their full code
ignore = ["GF104"]
extend-select = ["GF205"]
unsafe-fixes = false
exclude = ["legacy/**"]
per-file-ignores = { "tests/**" = ["GF1"] }

[tool.gradfix.rules.GF202]
style = "block"
```
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gradfix.files import path_spec
from gradfix.model import Settings
from gradfix.rules import rule_entries

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN_KEYS = {"select", "ignore", "extend-select", "per-file-ignores", "unsafe-fixes", "exclude", "rules"}


class ConfigError(ValueError):
    """A bad setting: in pyproject.toml, on the command line, or in ``Settings(...)``."""


@dataclass(frozen=True)
class Config:
    """One ``[tool.gradfix]`` table (empty when there is none)."""

    root: Path | None = None  # the folder of the pyproject.toml
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    unsafe_fixes: bool | None = None
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def validate_codes(codes: list[str] | tuple[str, ...], where: str) -> tuple[str, ...]:
    known = [r.code for r in rule_entries()]
    out = []
    for code in codes:
        if not isinstance(code, str):
            raise ConfigError(f"{where}: expected rule codes as strings, got {code!r}")
        c = code.strip().upper()
        if c != "ALL" and not any(k.startswith(c) for k in known):
            raise ConfigError(f"{where}: unknown rule code or prefix {code!r}")
        out.append(c)
    return tuple(out)


def validate_rule_options(options: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for code, values in options.items():
        rule = next((e.load() for e in rule_entries() if e.code == code.upper()), None)
        if rule is None:
            raise ConfigError(f"{where}: unknown rule {code!r}")
        if not isinstance(values, dict):
            raise ConfigError(f"{where}.{code}: expected a table of options")
        for name, value in values.items():
            option = rule.option(name)
            if option is None:
                names = ", ".join(o.name for o in rule.options) or "none"
                raise ConfigError(f"{where}.{code}: unknown option {name!r} (options: {names})")
            if value not in option.choices:
                raise ConfigError(
                    f"{where}.{code}.{name}: {value!r} is not one of {', '.join(map(repr, option.choices))}"
                )
        result[rule.code] = dict(values)
    return result


def _string_list(table: dict, key: str, where: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}.{key}: expected a list of strings")
    return value


def parse_config(table: dict[str, Any], root: Path | None, where: str = "[tool.gradfix]") -> Config:
    unknown = set(table) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(KNOWN_KEYS))})")
    unsafe = table.get("unsafe-fixes")
    if unsafe is not None and not isinstance(unsafe, bool):
        raise ConfigError(f"{where}.unsafe-fixes: expected true or false")
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}.per-file-ignores: expected a table of glob = [codes]")
    rules = table.get("rules", {})
    if not isinstance(rules, dict):
        raise ConfigError(f"{where}.rules: expected a table per rule code")
    return Config(
        root=root,
        select=validate_codes(_string_list(table, "select", where), f"{where}.select"),
        ignore=validate_codes(_string_list(table, "ignore", where), f"{where}.ignore"),
        extend_select=validate_codes(_string_list(table, "extend-select", where), f"{where}.extend-select"),
        unsafe_fixes=unsafe,
        exclude=tuple(_string_list(table, "exclude", where)),
        per_file_ignores=tuple(
            (glob, validate_codes(_string_list(pfi, glob, f"{where}.per-file-ignores"), f"{where}.per-file-ignores"))
            for glob in pfi
        ),
        rule_options=validate_rule_options(rules, f"{where}.rules"),
    )


@lru_cache(maxsize=None)
def load_pyproject(path: Path) -> Config | None:
    """The ``[tool.gradfix]`` table of one pyproject.toml (None if it has none)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply to read") from None
    tool = data.get("tool", {})
    table = tool.get("gradfix") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.gradfix] must be a table")
    return parse_config(table, path.parent, f"{path}: [tool.gradfix]")


@lru_cache(maxsize=None)
def config_for_dir(directory: Path) -> Config:
    """The ``[tool.gradfix]`` table of the project ``directory`` is in (defaults if none).

    Walking up, the first pyproject.toml decides, with or without the table; a ``.git`` (folder
    or file) marks the root of a repository without one. Nothing above the root is read.
    """
    for folder in [directory, *directory.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return load_pyproject(candidate) or Config()
        if os.path.lexists(folder / ".git"):
            break
    return Config()


def config_for_file(path: Path) -> Config:
    return config_for_dir(path.resolve().parent)


@dataclass(frozen=True)
class CliOverrides:
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    unsafe_fixes: bool | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def settings_for(path: Path, config: Config, cli: CliOverrides) -> Settings:
    """The settings one file is checked with: its config, then the command line on top."""
    ignore = list(config.ignore) + list(cli.ignore)
    if config.root is not None and config.per_file_ignores:
        try:
            rel = path.resolve().relative_to(config.root).as_posix()
        except ValueError:
            rel = None
        if rel is not None:
            for glob, codes in config.per_file_ignores:
                if path_spec([glob]).match_file(rel):
                    ignore.extend(codes)
    options = {code: dict(values) for code, values in config.rule_options.items()}
    for code, values in cli.rule_options.items():
        options.setdefault(code, {}).update(values)
    settings = Settings(
        select=cli.select if cli.select is not None else config.select,
        ignore=tuple(ignore),
        extend_select=config.extend_select + cli.extend_select,
        unsafe_fixes=cli.unsafe_fixes if cli.unsafe_fixes is not None else bool(config.unsafe_fixes),
        rule_options=options,
    )
    return _expand_all(settings)


def _expand_all(settings: Settings) -> Settings:
    """``ALL`` means every rule, off-by-default ones included, in select, ignore and extend-select."""
    if "ALL" not in (*settings.select, *settings.ignore, *settings.extend_select):
        return settings  # without importing every rule module (a warm cached run needs none)
    every = tuple(r.code for r in rule_entries())
    if "ALL" in settings.select:
        settings = replace(settings, select=every)
    if "ALL" in settings.ignore:
        settings = replace(settings, ignore=every)
    if "ALL" in settings.extend_select:
        settings = replace(settings, extend_select=every)
    return settings


def parse_option_flag(flag: str) -> tuple[str, str, str]:
    """``GF202.style=block`` -> (GF202, style, block), validated."""
    key, sep, value = flag.partition("=")
    code, dot, name = key.partition(".")
    if not sep or not dot:
        raise ConfigError(f"--option {flag!r}: expected CODE.OPTION=VALUE, e.g. GF202.style=block")
    validate_rule_options({code: {name: value}}, "--option")
    return code.upper(), name, value
