"""engine.py's per-finding edits, tested directly (scripts/mutate.py found them reached by no
test of the engine's own list: a `return None`, a negated loop exit and a flipped bound survived).
tests/test_edits.py checks the same edits against each finding's fix alone on every example."""

from __future__ import annotations

from gradfix.engine import check, decode_source, finding_edits
from gradfix.model import Settings, TextEdit

GF101 = Settings(select=("GF101",))
SOURCE = b"import torch\nwith torch.no_grad:\n    y = f(x)\nwith torch.no_grad:\n    z = g(x)\n"


def test_each_finding_gets_the_edit_its_fix_alone_makes():
    findings = check(SOURCE, "e.py", GF101)
    assert [(f.code, f.span.line) for f in findings] == [("GF101", 2), ("GF101", 4)]
    edits = finding_edits(SOURCE, findings, GF101, "e.py")
    assert edits == {0: (TextEdit(31, 31, "()"),), 1: (TextEdit(64, 64, "()"),)}
    assert SOURCE.decode()[:31].endswith("with torch.no_grad")


def test_a_finding_without_a_fix_gets_no_edit():
    source = b"import torch\nwith torch.no_grad:\n    y = f(x)\n"
    findings = check(source, "e.py", GF101)
    assert finding_edits(source, findings, GF101, "e.py") == {0: (TextEdit(31, 31, "()"),)}
    assert finding_edits(source, [], GF101, "e.py") == {}


def test_an_unsafe_fix_gets_its_edit_even_when_unsafe_fixes_are_off():
    # The edits are what each fix would change (shown by --diff, SARIF, the LSP), whether or not
    # this run may apply it.
    source = b"import torch\n\n@torch.no_grad()  # eval only\ndef predict(model, x):\n    return model(x).argmax(1)\n"
    settings = Settings(select=("GF301",), unsafe_fixes=False)
    findings = check(source, "p.py", settings)
    assert [(f.code, f.fix.value) for f in findings] == [("GF301", "unsafe")]
    assert finding_edits(source, findings, settings, "p.py") == {0: (TextEdit(21, 28, "inference_mode"),)}


def test_a_fix_that_changes_the_last_character_of_the_file_is_cut_to_the_end():
    source = b"import torch\nv = loss.data[0]"  # no final newline: the fix changes the last character
    settings = Settings(select=("GF403",))
    old = decode_source(source)
    findings = check(source, "d.py", settings)
    assert finding_edits(source, findings, settings, "d.py") == {0: (TextEdit(22, 29, "item()"),)}
    assert len(old) == 29


def test_checking_a_file_leaves_no_reference_cycle_behind():
    # Report mode pauses the cyclic collector while a file is analysed and counts on reference
    # counting to free its tree: an analysis that ties the facts into a cycle (a memoised
    # object holding them, a closure that calls itself) keeps the whole tree alive for the
    # collector to traverse, file after file. Every rule runs on the fixtures here.
    import gc
    from pathlib import Path

    fixtures = sorted((Path(__file__).parents[1] / "fixtures").glob("*.py"))
    assert len(fixtures) > 20
    settings = Settings(select=("ALL",))
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for path in fixtures:
            check(path.read_bytes(), str(path), settings)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()
        if was_enabled:
            gc.enable()
    assert left == []
