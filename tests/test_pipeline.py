"""Unit tests of the pipeline's small decisions (engine, fixer, writer) that the end-to-end
tests let slip: each one was a mutant that survived scripts/mutate.py."""

from __future__ import annotations

import errno
import os

import pytest

import gradfix.writer as writer
from gradfix import Settings, SourceError, check
from gradfix.engine import selected_rules
from gradfix.fixer import Edit, apply_fixes
from gradfix.model import Finding, FixSafety, Span
from gradfix.rules import all_rules
from gradfix.writer import WriteError, read_file, write_atomic

# -- engine ------------------------------------------------------------------------------------


def test_selected_rules_select_extend_select_and_ignore():
    codes = lambda **kw: [r.code for r in selected_rules(Settings(**kw))]  # noqa: E731
    defaults = [r.code for r in all_rules() if r.default_enabled]
    off = [r.code for r in all_rules() if not r.default_enabled]
    assert codes() == defaults
    assert codes(select=("GF101",)) == ["GF101"]
    assert codes(select=("GF1",)) == [c for c in defaults if c.startswith("GF1")]
    assert codes(select=("GF101",), extend_select=("GF4",)) == ["GF101", *[c for c in defaults if c.startswith("GF4")]]
    assert codes(ignore=("GF1",)) == [c for c in defaults if not c.startswith("GF1")]
    if off:  # an off-by-default rule needs its full code, in select or extend-select
        prefix = off[0][:3]
        assert off[0] not in codes(select=(prefix,)) and off[0] not in codes(extend_select=(prefix,))
        assert off[0] in codes(select=(off[0],)) and off[0] in codes(extend_select=(off[0],))


def test_an_undecodable_file_is_a_source_error_at_1_1():
    with pytest.raises(SourceError) as info:
        check(b"# -*- coding: klingon -*-\nx = 1\n")
    assert (info.value.line, info.value.col) == (1, 1) and info.value.message.startswith("cannot decode")
    with pytest.raises(SourceError) as info:
        check(b"x = 1\nif x:\ny = 2\n")
    assert (info.value.line, info.value.col) == (3, 1) and info.value.message.startswith("syntax error")


# -- fixer -------------------------------------------------------------------------------------


def _finding(line: int, col: int, end_col: int) -> Finding:
    return Finding("GF101", "test", "test", Span(line, col, line, end_col), fix=FixSafety.SAFE)


def _rename(ctx_finding, ctx):
    import libcst as cst

    node = ctx.node_at(ctx_finding.span, cst.Name)
    return [Edit(node, node.with_changes(value=node.value.upper()))]


def test_two_fixes_on_different_lines_are_applied_in_one_pass():
    source = b"aa = 1\nbb = 2\n"
    run = apply_fixes(source, [_finding(2, 0, 2), _finding(1, 0, 2)], _rename)
    assert run.source == b"AA = 1\nBB = 2\n" and run.applied == {0, 1}


def test_overlapping_fixes_the_outer_wins_and_the_inner_waits():
    import libcst as cst

    def outer(finding, ctx):
        node = ctx.node_at(finding.span, cst.Call)
        return [Edit(node, cst.parse_expression("g()"))]

    source = b"x = f(aa)\n"
    run = apply_fixes(source, [_finding(1, 6, 8), Finding("GF101", "t", "t", Span(1, 4, 1, 9), FixSafety.SAFE)],
                      lambda f, ctx: _rename(f, ctx) if f.span.col == 6 else outer(f, ctx))
    assert run.source == b"x = g()\n" and run.applied == {1}


def test_a_file_libcst_cannot_parse_is_left_alone_with_the_reason():
    run = apply_fixes(b"x = (\n", [_finding(1, 0, 1)], _rename)
    assert run.source == b"x = (\n" and run.applied == set()
    (note,) = run.notes
    assert note.startswith("cannot fix: LibCST could not parse the file (") and note.endswith(")")


# -- writer ------------------------------------------------------------------------------------


def test_a_file_that_cannot_be_opened_for_append_counts_as_immutable(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    assert writer._immutable(path) is False
    real_open = open

    def no_append(file, mode="r", *args, **kwargs):
        if "a" in mode:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_append)
    assert writer._immutable(path) is True


def test_an_immutable_file_is_not_replaced(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text("old\n")
    data, read_as = read_file(path)
    monkeypatch.setattr(writer, "_immutable", lambda p: True)  # chattr +i: the rename would succeed
    with pytest.raises(WriteError, match="permission denied"):
        write_atomic(path, b"new\n", data, read_as)
    assert path.read_text() == "old\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".gradfix.tmp")]


def test_a_link_that_appears_after_the_link_check_is_not_followed(tmp_path, monkeypatch):
    # The race between "is it a link?" and opening it: O_NOFOLLOW refuses the link.
    outside = tmp_path / "theirs.py"
    outside.write_text("old\n")
    path = tmp_path / "m.py"
    os.symlink(outside, path)
    monkeypatch.setattr(writer.os.path, "islink", lambda p: False)
    monkeypatch.setattr(writer.os.path, "realpath", lambda p: str(p))
    with pytest.raises(WriteError, match="changed on disk"):
        write_atomic(path, b"new\n", b"old\n")
    assert outside.read_text() == "old\n"


def test_ctrl_c_and_sigterm_are_held_back_while_a_file_is_written(tmp_path, monkeypatch):
    import signal

    seen = []
    monkeypatch.setattr(writer, "_write_atomic", lambda *a: seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
    write_atomic(tmp_path / "m.py", b"", b"")
    (blocked,) = seen
    assert {signal.SIGINT, signal.SIGTERM} <= blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # and released after


def test_too_deep_nesting_is_a_source_error_not_a_crash():
    with pytest.raises(SourceError) as info:
        check("x = " + "-" * 100_000 + "1\n")  # the parser's own recursion limit
    assert info.value.message == "file is nested too deeply to analyse"
