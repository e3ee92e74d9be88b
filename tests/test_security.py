"""Security boundaries: gradfix reads user code, it never runs it, and never writes outside.

- report, ``--diff`` and ``--apply`` parse files; they never import or execute them;
- ``python -m gradfix`` in a tree that has its own ``ast.py`` does not import it;
- a config (even one from a parent folder) can only select rules and set rule options;
- notebook cell ids and metadata never choose a path (tests/test_notebooks.py), symlinks are
  never written through (tests/test_writer.py), and ``--verify-cmd`` runs exactly the user's
  command through the shell (documented in the README).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradfix.config import KNOWN_KEYS, ConfigError, parse_config

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"


def _side_effect(marker: Path) -> str:
    return f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"


def _env() -> dict[str, str]:
    root = Path(__file__).resolve().parents[1]
    return {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(root)}


@pytest.mark.parametrize("mode", [[], ["--diff"], ["--apply", "--unsafe-fixes"]])
def test_user_code_is_never_imported_or_run(tmp_path, mode):
    marker = tmp_path.parent / f"{tmp_path.name}-imported.txt"
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "train.py").write_text(_side_effect(marker) + BUGGY)
    (tree / "pkg" / "__init__.py").write_text(_side_effect(marker))
    (tree / "torch.py").write_text(_side_effect(marker))  # shadows the real torch if ever imported
    (tree / "conftest.py").write_text(_side_effect(marker))
    (tree / "setup.py").write_text(_side_effect(marker))
    proc = subprocess.run([sys.executable, "-m", "gradfix", "--select", "ALL", *mode, "."], cwd=tree,
                          capture_output=True, text=True, env=_env())
    assert proc.returncode in (0, 1), proc.stderr
    # The run did its work: the finding is reported (report mode) or its fix shown / written.
    assert "GF101" in proc.stdout + proc.stderr or "1 finding" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("shadow", ["ast.py", "typing.py", "enum.py", "tokenize.py"])
def test_python_m_gradfix_does_not_import_the_trees_own_stdlib_names(tmp_path, shadow):
    marker = tmp_path.parent / f"{tmp_path.name}-shadowed.txt"
    (tmp_path / shadow).write_text(_side_effect(marker) + "raise SystemExit('the tree\\'s own module ran')\n")
    (tmp_path / "train.py").write_text(BUGGY)
    proc = subprocess.run([sys.executable, "-m", "gradfix", "--select", "GF101", "train.py"], cwd=tmp_path,
                          capture_output=True, text=True, env=_env())
    assert not marker.exists(), proc.stderr
    assert proc.returncode == 1 and "train.py:5:10: GF101" in proc.stdout, proc.stderr


def test_importing_gradfix_as_a_library_leaves_sys_path_alone(tmp_path):
    code = "import sys; before = list(sys.path); import gradfix; assert sys.path == before, (before, sys.path)"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, env=_env())


def test_a_config_can_only_select_rules_and_set_options():
    # Every key a pyproject.toml may hold, and what each one can do: nothing runs, nothing is
    # imported, no path outside the project is named (exclude and per-file-ignores are globs
    # relative to the pyproject's folder).
    assert KNOWN_KEYS == {"select", "ignore", "extend-select", "per-file-ignores", "unsafe-fixes", "exclude", "rules"}
    for key, value in (("plugins", ["os.system"]), ("cache-dir", "/etc"), ("command", "rm -rf ~"),
                       ("verify-cmd", "curl evil"), ("output-file", "/etc/passwd"), ("extends", "../other.toml")):
        with pytest.raises(ConfigError, match="unknown key"):
            parse_config({key: value}, None)


def test_verify_cmd_runs_exactly_the_users_command_through_the_shell(tmp_path, monkeypatch):
    # --verify-cmd CMD is handed to /bin/sh -c as written, in the current folder, with the
    # user's environment: shell syntax (quotes, &&, redirections, $VARS) means what it means
    # in a terminal, and gradfix adds, quotes or drops nothing.
    from gradfix.migrate import run_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADFIX_TEST_VALUE", "from the environment")
    run = run_command('printf "%s|" one "two three" "$GRADFIX_TEST_VALUE" > args.txt && echo ok')
    assert run.ok and (tmp_path / "args.txt").read_text() == "one|two three|from the environment|"
    assert not run_command("exit 3").ok
