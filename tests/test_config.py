"""config.py: where a file's config comes from, what a config may say, and hostile configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli import app
from gradfix.config import (
    CliOverrides,
    Config,
    ConfigError,
    config_for_dir,
    config_for_file,
    load_pyproject,
    parse_config,
    parse_option_flag,
    settings_for,
)
from gradfix.rules import all_rules, rule_by_code

UNSAFE_ANCESTOR = '[tool.gradfix]\nunsafe-fixes = true\nselect = ["ALL"]\n'


def _fresh(path: Path) -> Path:
    config_for_dir.cache_clear()
    load_pyproject.cache_clear()
    return path.resolve()


@pytest.mark.parametrize("root_marker", ["pyproject", "git-folder", "git-file"])
def test_the_walk_stops_at_the_project_root(tmp_path, root_marker):
    # Issue 13: an ancestor's `unsafe-fixes = true` applied to a repository without [tool.gradfix].
    (tmp_path / "pyproject.toml").write_text(UNSAFE_ANCESTOR)
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    if root_marker == "pyproject":
        (repo / "pyproject.toml").write_text('[project]\nname = "repo"\n')
    elif root_marker == "git-folder":
        (repo / ".git").mkdir()
    else:  # a worktree or submodule: .git is a file
        (repo / ".git").write_text("gitdir: /elsewhere\n")
    assert config_for_dir(_fresh(repo / "src" / "pkg")) == Config()
    assert config_for_dir(_fresh(tmp_path)).unsafe_fixes is True  # the ancestor is its own project


def test_nearest_table_below_the_root_wins(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF1"]\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF2"]\n')
    (tmp_path / "sub" / "m.py").write_text("")
    (tmp_path / "other").mkdir()
    assert config_for_file(_fresh(tmp_path / "sub" / "m.py")).ignore == ("GF2",)
    config = config_for_dir(_fresh(tmp_path / "other"))
    assert config.ignore == ("GF1",) and config.root == tmp_path.resolve()


def test_an_ancestor_config_cannot_turn_on_unsafe_fixes_end_to_end(tmp_path, monkeypatch):
    rule = rule_by_code("GF302")
    if rule is None:
        pytest.skip("GF302 not available")
    example = next(e for e in rule.INVALID if e.expected is not None and not e.options)
    (tmp_path / "pyproject.toml").write_text(UNSAFE_ANCESTOR)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text('[project]\nname = "repo"\n')
    (repo / "m.py").write_text(example.code)
    monkeypatch.chdir(repo)
    _fresh(repo)
    CliRunner().invoke(app, ["check", "--apply", "--select", "GF302", "m.py"])
    assert (repo / "m.py").read_text() == example.code
    CliRunner().invoke(app, ["check", "--apply", "--unsafe-fixes", "--select", "GF302", "m.py"])
    assert (repo / "m.py").read_text() == example.expected  # the test can tell the difference


@pytest.mark.parametrize(
    "text, message",
    [
        ("[tool.gradfix\nselect = 1\n", "invalid TOML"),
        ("[tool.gradfix]\nselect = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "nested too deeply"),
        (b"[tool.gradfix]\nselect = ['\xff']\n", "not UTF-8"),
        ("[tool.gradfix]\nplugins = ['os.system']\n", "unknown key(s) plugins"),
        ("[tool]\ngradfix = 3\n", "[tool.gradfix] must be a table"),
    ],
)
def test_a_hostile_config_is_one_clear_error(tmp_path, monkeypatch, text, message):
    path = tmp_path / "pyproject.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    (tmp_path / "m.py").write_text("import torch\n")
    monkeypatch.chdir(tmp_path)
    _fresh(tmp_path)
    result = CliRunner().invoke(app, ["check", "m.py"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"gradfix: {path.resolve()}: ") and message in line, line
    assert "internal error" not in line and "Traceback" not in result.output


@pytest.mark.parametrize(
    "table, message",
    [
        ({"unsafe-fixes": "yes"}, "unsafe-fixes: expected true or false"),
        ({"select": "GF1"}, "select: expected a list of strings"),
        ({"select": ["GF1", 2]}, "select: expected a list of strings"),
        ({"ignore": ["XX9"]}, "unknown rule code or prefix 'XX9'"),
        ({"per-file-ignores": ["a"]}, "per-file-ignores: expected a table"),
        ({"per-file-ignores": {"tests/**": "GF1"}}, "per-file-ignores.tests/**: expected a list of strings"),
        ({"rules": {"GF999": {}}}, "unknown rule 'GF999'"),
        ({"rules": {"GF202": 1}}, "expected a table of options"),
        ({"rules": {"GF202": {"colour": "red"}}}, "unknown option 'colour'"),
        ({"rules": {"GF202": {"style": "shout"}}}, "'shout' is not one of"),
        ({"rules": []}, "rules: expected a table per rule code"),
    ],
)
def test_parse_config_rejects_what_it_does_not_know(table, message):
    if "GF202" in str(table) and rule_by_code("GF202") is None:
        pytest.skip("GF202 not available")
    with pytest.raises(ConfigError, match=None) as info:
        parse_config(table, None)
    assert message in str(info.value), str(info.value)


def test_parse_config_reads_every_key(tmp_path):
    config = parse_config(
        {
            "select": ["gf1", "GF2"],
            "ignore": ["GF104"],
            "extend-select": ["GF205"],
            "unsafe-fixes": False,
            "exclude": ["legacy/**"],
            "per-file-ignores": {"tests/**": ["GF1"]},
            "rules": {"gf202": {"style": "block"}},
        },
        tmp_path,
    )
    assert config == Config(
        root=tmp_path,
        select=("GF1", "GF2"),
        ignore=("GF104",),
        extend_select=("GF205",),
        unsafe_fixes=False,
        exclude=("legacy/**",),
        per_file_ignores=(("tests/**", ("GF1",)),),
        rule_options={"GF202": {"style": "block"}},
    )


def test_settings_for_layers_the_command_line_over_the_config(tmp_path):
    config = parse_config(
        {"select": ["GF1"], "ignore": ["GF104"], "per-file-ignores": {"tests/**": ["GF102"]},
         "unsafe-fixes": True, "rules": {"GF202": {"style": "block"}}},
        tmp_path.resolve(),
    )
    (tmp_path / "tests").mkdir()
    in_tests, elsewhere = tmp_path / "tests" / "t.py", tmp_path / "m.py"
    plain = settings_for(elsewhere, config, CliOverrides())
    assert plain.select == ("GF1",) and plain.ignore == ("GF104",) and plain.unsafe_fixes is True
    assert settings_for(in_tests, config, CliOverrides()).ignore == ("GF104", "GF102")
    cli = CliOverrides(select=("GF2",), ignore=("GF201",), unsafe_fixes=False, rule_options={"GF202": {"style": "function"}})
    over = settings_for(elsewhere, config, cli)
    assert over.select == ("GF2",) and over.ignore == ("GF104", "GF201") and over.unsafe_fixes is False
    assert over.rule_options == {"GF202": {"style": "function"}}
    assert settings_for(elsewhere, Config(), CliOverrides()).unsafe_fixes is False
    every = tuple(r.code for r in all_rules())
    assert settings_for(elsewhere, Config(), CliOverrides(select=("ALL",))).select == every
    assert settings_for(elsewhere, Config(ignore=("ALL",)), CliOverrides()).ignore == every


def test_parse_option_flag():
    if rule_by_code("GF202") is None:
        pytest.skip("GF202 not available")
    assert parse_option_flag("gf202.style=block") == ("GF202", "style", "block")
    for bad, message in (("GF202.style", "expected CODE.OPTION=VALUE"), ("GF202=block", "expected CODE.OPTION=VALUE"),
                         ("GF202.style=loud", "is not one of")):
        with pytest.raises(ConfigError) as info:
            parse_option_flag(bad)
        assert message in str(info.value)


def test_a_walked_folder_gets_the_config_its_own_lookup_finds(tmp_path, monkeypatch):
    # The walk looks a folder's config up from its parent's (no resolve() per folder): a
    # pyproject.toml or a .git in the folder itself must still start over there.
    from gradfix import cli

    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nignore = ["GF1"]\n')
    layout = {
        "a.py": None,
        "pkg/b.py": None,
        "pkg/deep/c.py": None,
        "sub/pyproject.toml": '[tool.gradfix]\nignore = ["GF2"]\n',
        "sub/d.py": None,
        "sub/deeper/e.py": None,
        "vendored/.git": "gitdir: /elsewhere\n",
        "vendored/f.py": None,
        "vendored/inner/g.py": None,
    }
    for rel, text in layout.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text or "x = 1\n")
    monkeypatch.chdir(tmp_path)
    _fresh(tmp_path)
    jobs, errors = cli._jobs_for([Path(".")], CliOverrides(), [], False, print)
    assert errors == 0 and len(jobs) == 7
    ignores = {job.display: job.settings.ignore for job in jobs}
    assert ignores == {
        "a.py": ("GF1",), "pkg/b.py": ("GF1",), "pkg/deep/c.py": ("GF1",),
        "sub/d.py": ("GF2",), "sub/deeper/e.py": ("GF2",), "vendored/f.py": (), "vendored/inner/g.py": (),
    }
    for job in jobs:
        assert job.settings == settings_for(Path(job.path), config_for_file(Path(job.path)), CliOverrides())
