"""Hostile inputs: gradfix must never corrupt a file, hang, or answer with a traceback.

Each case runs the real CLI (in-process through CliRunner, or as a subprocess where signals or
privileges are involved) and checks the bytes on disk afterwards. Errors must be one line a
person understands, starting ``gradfix: `` (or ``path:line:col: ``), never a traceback.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradfix.runner as runner
from gradfix import Settings, SourceError, check
from gradfix.cli import app

BUGGY = "import torch\n\n\ndef f(x):\n    with torch.no_grad:\n        y = x * 2\n    return y\n"
FIXED = BUGGY.replace("no_grad:", "no_grad():")
GF101 = Settings(select=("GF101",))


def run(*args: str):
    return CliRunner().invoke(app, ["check", "--select", "GF101", *args])


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def no_traceback(result) -> None:
    assert "Traceback" not in result.output, result.output
    for line in result.stderr.splitlines():
        assert line.startswith("gradfix: "), line


# -- encodings -------------------------------------------------------------------------------


def test_not_utf8_without_coding_line_is_reported_and_left_alone(tree):
    data = b"import torch\ns = '\xe9t\xe9'\nwith torch.no_grad:\n    y = 1\n"
    (tree / "latin.py").write_bytes(data)
    (tree / "good.py").write_text(BUGGY)
    result = run("--apply", ".")
    assert result.exit_code == 2
    assert "latin.py:1:1: cannot decode" in result.stdout  # syntax-class error, in the report
    assert (tree / "latin.py").read_bytes() == data
    assert (tree / "good.py").read_text() == FIXED
    no_traceback(result)


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "iso-8859-15"])
def test_not_utf8_with_pep263_line_is_fixed_in_its_own_encoding(tree, encoding):
    text = f"# -*- coding: {encoding} -*-\nimport torch\nname = 'caf\u00e9'  # \u00e9t\u00e9\nwith torch.no_grad:\n    y = name\n"
    (tree / "enc.py").write_bytes(text.encode(encoding))
    result = run("--apply", "enc.py")
    assert result.exit_code == 0, result.output
    assert (tree / "enc.py").read_bytes() == text.replace("no_grad:", "no_grad():").encode(encoding)


def test_unknown_coding_line_is_reported(tree):
    data = b"# -*- coding: klingon -*-\nimport torch\nwith torch.no_grad:\n    y = 1\n"
    (tree / "k.py").write_bytes(data)
    result = run("--apply", "k.py")
    assert result.exit_code == 2 and "k.py:1:1: cannot decode" in result.stdout
    assert (tree / "k.py").read_bytes() == data
    no_traceback(result)


def test_utf8_bom_with_non_ascii_kept(tree):
    text = "import torch\n# \u00fcber \u2603\nwith torch.no_grad:  # \u00e9\n    y = '\u00e9'\n"
    (tree / "bom.py").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert run("--apply", "bom.py").exit_code == 0
    assert (tree / "bom.py").read_bytes() == b"\xef\xbb\xbf" + text.replace("no_grad:", "no_grad():").encode()


def test_null_byte_is_a_clean_error(tree):
    (tree / "nul.py").write_bytes(b"import torch\nx = 1\x00\n")
    result = run("nul.py")
    assert result.exit_code == 2 and "nul.py:" in result.stdout
    no_traceback(result)


# -- line endings, whitespace, empty ---------------------------------------------------------


def test_crlf_kept(tree):
    (tree / "c.py").write_bytes(BUGGY.replace("\n", "\r\n").encode())
    assert run("--apply", "c.py").exit_code == 0
    assert (tree / "c.py").read_bytes() == FIXED.replace("\n", "\r\n").encode()


def test_mixed_line_endings_kept_line_by_line(tree):
    data = b"import torch\r\n\ndef f(x):\r\n    with torch.no_grad:\n        y = x\r\n    return y\r\n"
    (tree / "m.py").write_bytes(data)
    assert run("--apply", "m.py").exit_code == 0
    assert (tree / "m.py").read_bytes() == data.replace(b"no_grad:", b"no_grad():")


def test_old_mac_cr_line_endings(tree):
    data = b"import torch\rwith torch.no_grad:\r    y = 1\r"
    (tree / "cr.py").write_bytes(data)
    result = run("--apply", "cr.py")
    # LibCST drops the final "\r" of such a file: the fixer notices and refuses to write it.
    assert (tree / "cr.py").read_bytes() == data
    assert result.exit_code == 1  # the finding is reported, not fixed
    assert "cr.py:2:6: GF101" in result.stdout
    assert "cr.py: cannot fix: LibCST does not reproduce this file byte for byte" in result.stderr
    no_traceback(result)


def test_tabs_kept(tree):
    data = b"import torch\n\ndef f(x):\n\twith torch.no_grad:\t# why\n\t\ty = x\n\treturn y\n"
    (tree / "t.py").write_bytes(data)
    assert run("--apply", "t.py").exit_code == 0
    assert (tree / "t.py").read_bytes() == data.replace(b"no_grad:", b"no_grad():")


@pytest.mark.parametrize("data", [b"", b"\xef\xbb\xbf", b"\n\n", b"# only a comment", b"\r\n"], ids=repr)
def test_empty_and_trivial_files(tree, data):
    (tree / "e.py").write_bytes(data)
    result = run("--apply", "e.py")
    assert result.exit_code == 0, result.output
    assert (tree / "e.py").read_bytes() == data


# -- size and depth --------------------------------------------------------------------------


def test_5mb_generated_file(tree):
    head = BUGGY + "\n\n" + "".join(f"def g{i}(x):\n    return x + {i}\n\n\n" for i in range(2000))
    blob = 'DATA = """\n' + ("0123456789abcdef" * 6 + "\n") * 60_000 + '"""\n'
    source = (head + blob + "\nwith torch.enable_grad:\n    z = 1\n").encode()
    assert len(source) >= 5_000_000
    (tree / "big.py").write_bytes(source)
    report = run("--format", "json", "big.py")
    assert report.exit_code == 1 and report.stdout.count('"GF101"') == 2
    result = run("--apply", "big.py")
    assert result.exit_code == 0, result.output
    expected = source.replace(b"no_grad:", b"no_grad():").replace(b"enable_grad:", b"enable_grad():")
    assert (tree / "big.py").read_bytes() == expected


@pytest.mark.parametrize(
    "body",
    [
        "x = " + "-" * 3000 + "1\n",  # the facts walk recurses: RecursionError
        "x = " + "-" * 100_000 + "1\n",  # CPython's parser gives up: MemoryError
        "x = " + "[" * 150 + "]" * 150 + "\n",
        "x = " + "(" * 250 + ")" * 250 + "\n",  # too many nested parentheses
    ],
    ids=["unary-3000", "unary-100000", "lists-150", "parens-250"],
)
def test_deep_nesting_is_a_clean_error(tree, body):
    data = ("import torch\nwith torch.no_grad:\n    y = 1\n" + body).encode()
    (tree / "deep.py").write_bytes(data)
    (tree / "good.py").write_text(BUGGY)
    result = run("--apply", ".")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert "deep.py:" in result.stdout
        assert (tree / "deep.py").read_bytes() == data
    else:  # it could be analysed after all: then it was fixed properly
        assert (tree / "deep.py").read_bytes() == data.replace(b"no_grad:", b"no_grad():")
    assert (tree / "good.py").read_text() == FIXED
    no_traceback(result)


def test_deep_nesting_in_the_library_raises_source_error_or_recursion_error():
    with pytest.raises((SourceError, RecursionError)):
        check("import torch\nx = " + "-" * 100_000 + "1\n", settings=GF101)


def test_deeply_nested_blocks_are_fixed(tree):
    lines = ["import torch"]
    for depth in range(90):
        lines.append(" " * depth + "if x:")
    lines.append(" " * 90 + "with torch.no_grad:")
    lines.append(" " * 91 + "y = 1")
    source = "\n".join(lines) + "\n"
    (tree / "nest.py").write_text(source)
    assert run("--apply", "nest.py").exit_code == 0
    assert (tree / "nest.py").read_text() == source.replace("no_grad:", "no_grad():")


# -- code that does not parse ----------------------------------------------------------------


@pytest.mark.parametrize(
    "source, where",
    [
        ("import torch\nprint 'hello'\nwith torch.no_grad:\n    pass\n", "2:1"),
        ("try:\n    import torch\nexcept ImportError, e:\n    raise\n", "3:8"),
        ("import torch\nx = 0777\n", "2:5"),
        ("import torch\nx = torch.ones(2).cuda(async=True)\n", "2:24"),
        ("import torch\ndef f(:\n", "2:7"),
    ],
    ids=["print-statement", "except-comma", "octal", "async-kwarg", "syntax-error"],
)
def test_python2_and_syntax_errors_reported_and_untouched(tree, source, where):
    (tree / "old.py").write_text(source)
    (tree / "good.py").write_text(BUGGY)
    result = run("--apply", ".")
    assert result.exit_code == 2
    line = next(l for l in result.stdout.splitlines() if l.startswith("old.py:"))
    assert line.startswith(f"old.py:{where}: syntax error"), line
    assert (tree / "old.py").read_text() == source
    assert (tree / "good.py").read_text() == FIXED
    no_traceback(result)


@pytest.mark.parametrize(
    "tail, codes", [("import torch\nwith torch.no_grad:\n    pass\n", ["GF101"]), ("import os\n", [])], ids=["rules-read-it", "no-rule-reads-it"]
)
@pytest.mark.parametrize(
    "head, error",
    [
        ("def f(:\n", (1, 7)),  # the parser rejects it: reported wherever it is
        ("x = 1\x00\n", (1, 1)),
        ("def f(a, a):\n    pass\n", None),  # only the compiler rejects these: not gradfix's to say
        ("def f():\n    x = 1\n    global x\n", None),
        ("def f(a):\n    return a\n", None),
    ],
    ids=["parser", "null-byte", "duplicate-argument", "global-after-use", "valid"],
)
def test_a_syntax_error_is_reported_whether_or_not_a_rule_reads_the_file(head, error, tail, codes):
    # A file no rule's trigger admits is only syntax-checked, more cheaply than parsed: it must
    # fail exactly where ast.parse does, as a file the rules read does.
    source = head + tail
    if error is None:
        assert [f.code for f in check(source, "f.py")] == codes
        return
    with pytest.raises(SourceError) as info:
        check(source, "f.py")
    assert info.value.message.startswith("syntax error")
    assert (info.value.line, info.value.col) == error


# -- files that cannot be written ------------------------------------------------------------


def _chattr(path: Path, flag: str) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


def test_immutable_file_under_apply(tree):
    locked = tree / "locked.py"
    locked.write_text(BUGGY)
    (tree / "other.py").write_text(BUGGY)
    if not _chattr(locked, "+i"):
        pytest.skip("chattr +i is not supported here")
    try:
        result = run("--apply", ".")
    finally:
        _chattr(locked, "-i")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["gradfix: cannot write locked.py: permission denied"]
    assert locked.read_text() == BUGGY
    assert (tree / "other.py").read_text() == FIXED
    assert not [p for p in tree.iterdir() if p.name.endswith(".tmp")], "temp file left behind"
    no_traceback(result)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to drop privileges")
def test_read_only_and_unreadable_files_as_an_ordinary_user():
    """Root may write a 0444 file, so the CLI runs in a subprocess that drops to `nobody` once its
    modules are loaded: there a 0444 file cannot be written and a 0000 file cannot be read."""
    base = Path(tempfile.mkdtemp(prefix="gradfix-ro-"))  # pytest's tmp_path is root-only (0700)
    try:
        tree = base / "tree"
        tree.mkdir()
        for name in ("ro.py", "secret.py", "ok.py"):
            (tree / name).write_text(BUGGY)
        (tree / "ro.py").chmod(0o444)
        (tree / "secret.py").chmod(0o000)
        for path in (base, tree, *tree.iterdir()):
            os.chown(path, 65534, 65534)
        base.chmod(0o755)
        tree.chmod(0o755)
        warm = base / "warm"  # a first run as root loads every module lazily imported later
        warm.mkdir()
        (warm / "w.py").write_text(BUGGY)
        script = (
            "import os, sys\n"
            "import gradfix.cli\n"
            f"try:\n    gradfix.cli.main(['--diff', {str(warm)!r}])\nexcept SystemExit:\n    pass\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "gradfix.cli.main(sys.argv[1:])\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, "--select", "GF101", "--apply", "--jobs", "1", "."],
            cwd=tree, capture_output=True, env={**os.environ, "NO_COLOR": "1"},
        )
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        lines = err.splitlines()
        assert "gradfix: cannot write ro.py: permission denied" in lines, err
        assert "gradfix: cannot read secret.py: permission denied" in lines, err
        assert "Traceback" not in err
        assert (tree / "ro.py").read_text() == BUGGY
        assert (tree / "ro.py").stat().st_mode & 0o777 == 0o444
        assert (tree / "ok.py").read_text() == FIXED
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_file_changed_on_disk_between_read_and_write_is_not_overwritten(tree, monkeypatch):
    (tree / "a.py").write_text(BUGGY)
    (tree / "b.py").write_text(BUGGY)
    theirs = BUGGY + "# edited by someone else meanwhile\n"
    real = runner.process_job

    def process_then_someone_edits(job, *args, **kwargs):
        result = real(job, *args, **kwargs)
        if job.display == "a.py":
            Path(job.path).write_text(theirs)
        return result

    monkeypatch.setattr(runner, "process_job", process_then_someone_edits)
    result = run("--apply", ".")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "gradfix: cannot write a.py: it changed on disk while gradfix ran; not overwritten"
    ]
    assert (tree / "a.py").read_text() == theirs
    assert (tree / "b.py").read_text() == FIXED
    no_traceback(result)


# -- paths -----------------------------------------------------------------------------------


def test_nonexistent_path(tree):
    result = run("nope.py")
    assert result.exit_code == 2
    assert result.stderr.strip() == "gradfix: nope.py: no such file or directory"


def test_symlink_loop_in_tree(tree):
    (tree / "pkg").mkdir()
    (tree / "pkg" / "m.py").write_text(BUGGY)
    os.symlink("..", tree / "pkg" / "up")  # a directory loop
    os.symlink("self.py", tree / "pkg" / "self.py")  # a link to itself
    result = run("--apply", ".")
    assert result.exit_code == 0, result.output
    assert (tree / "pkg" / "m.py").read_text() == FIXED
    no_traceback(result)


def test_symlink_loop_named_on_the_command_line(tree):
    os.symlink("loop.py", tree / "loop.py")
    result = run("loop.py")
    assert result.exit_code == 2
    assert result.stderr.strip() == "gradfix: loop.py: broken symbolic link (or a symlink loop)"
    no_traceback(result)


def test_symlink_out_of_the_tree_is_not_followed_for_writes(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.py").write_text(BUGGY)
    (outside / "sub").mkdir()
    (outside / "sub" / "deep.py").write_text(BUGGY)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "mine.py").write_text(BUGGY)
    os.symlink(outside / "theirs.py", tree / "link.py")
    os.symlink(outside / "sub", tree / "linkdir")
    monkeypatch.chdir(tree)
    result = run("--apply", ".")
    assert result.exit_code == 0, result.output
    assert (tree / "mine.py").read_text() == FIXED
    assert (outside / "theirs.py").read_text() == BUGGY
    assert (outside / "sub" / "deep.py").read_text() == BUGGY
    assert (tree / "link.py").is_symlink()


def test_fifo_is_skipped_in_a_tree_and_refused_by_name(tree):
    os.mkfifo(tree / "pipe.py")
    (tree / "a.py").write_text(BUGGY)
    result = run("--apply", ".")
    assert result.exit_code == 0
    assert (tree / "a.py").read_text() == FIXED
    named = run("pipe.py")  # open() on a FIFO would block forever
    assert named.exit_code == 2
    assert named.stderr.strip() == "gradfix: cannot read pipe.py: not a regular file"


# -- Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_during_apply_leaves_every_file_old_or_new(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    old, new = {}, {}
    for i in range(120):
        name = f"m{i:03}.py"
        old[name] = BUGGY.replace("def f(", f"def f{i}(")
        new[name] = old[name].replace("no_grad:", "no_grad():")
        (tree / name).write_text(old[name])
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradfix", "--select", "GF101", "--apply", "."],
        cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    first = tree / "m000.py"
    deadline = time.monotonic() + 60
    while proc.poll() is None and first.read_text() == old["m000.py"] and time.monotonic() < deadline:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    _, err = proc.communicate(timeout=60)
    states = []
    for name in sorted(old):
        text = (tree / name).read_text()
        assert text in (old[name], new[name]), f"{name} is neither the old nor the new version"
        states.append(text == new[name])
    assert not [p for p in tree.iterdir() if p.name.endswith(".tmp")], "temp file left behind"
    assert states[0], "the interrupt was sent only after the first write"
    if proc.returncode != 0:  # interrupted mid-way (not finished first)
        assert proc.returncode == 130
        assert b"gradfix: interrupted" in err
    assert b"Traceback" not in err


# -- one-line errors, tracebacks only with --debug ------------------------------------------------


def test_internal_error_is_one_line_and_debug_shows_the_traceback(tree, monkeypatch, capsys):
    from gradfix import cli

    (tree / "a.py").write_text(BUGGY)

    def explode(*args, **kwargs):
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(cli, "run_jobs", explode)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["a.py"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "gradfix: internal error: RuntimeError: the engine broke (run with --debug for details)"
    ]
    with pytest.raises(RuntimeError, match="the engine broke"):
        cli.main(["--debug", "a.py"])


def test_the_users_own_syntax_warnings_are_not_printed(tree):
    # The fixer compiles every rewrite; CPython's SyntaxWarnings about the user's code
    # ("'int' object is not callable") are not gradfix errors and must not reach stderr.
    (tree / "w.py").write_text("import torch\nwith torch.no_grad:\n    y = 1(2)\n    assert (y, 'msg')\n")
    result = run("--apply", "w.py")
    assert result.exit_code == 0
    assert result.stderr == ""


def test_nonexistent_path_next_to_a_good_one_still_checks_the_good_one(tree):
    # Issue 2: a bad path is an error (exit 2), but the other paths are still processed.
    (tree / "bug.py").write_text("import torch\nwith torch.no_grad:\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "gradfix", "nope.py", "bug.py"], cwd=tree, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "gradfix: nope.py: no such file or directory" in result.stderr
    assert "bug.py:2:6: GF101" in result.stdout


def test_debug_does_not_leak_into_the_callers_environment(tree, monkeypatch):
    # Issue 13: `main(["--debug", ...])` left GRADFIX_DEBUG set, so later tests saw tracebacks.
    from gradfix import cli

    (tree / "a.py").write_text(BUGGY)
    monkeypatch.delenv("GRADFIX_DEBUG", raising=False)
    with pytest.raises(SystemExit):
        cli.main(["--debug", "a.py"])
    assert "GRADFIX_DEBUG" not in os.environ
    monkeypatch.setenv("GRADFIX_DEBUG", "keep")
    with pytest.raises(SystemExit):
        cli.main(["--debug", "a.py"])
    assert os.environ["GRADFIX_DEBUG"] == "keep"
