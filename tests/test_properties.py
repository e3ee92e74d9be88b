"""Property-based tests: on any program gradfix never crashes, never writes code that does not
compile, is idempotent, and touches nothing outside the nodes it edits.

Two sources of programs:
- hypothesmith: arbitrary programs from Python's grammar (rules rarely fire; this is about the
  engine surviving odd syntax, and a file with no findings coming back byte-identical);
- ``grad_programs``: programs composed from the PyTorch snippets the rules look for (grad
  contexts called or not, every import alias, Variable, .data[0], toggles, saves, eval loops),
  with random comments, blank lines, indentation style, CRLF and BOM, so rules actually fire.

Each example goes through ``check_source`` of scripts/corpus_check.py: every rule selected,
unsafe fixes on; output compiles; a second run changes nothing (overlaps aside); every changed
byte lies inside an edited node; BOM and encoding kept. Examples are bounded (CI-friendly).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gradfix import Settings, SourceError, check, fix
from gradfix.rules import all_rules

ALL = Settings(select=tuple(r.code for r in all_rules()), unsafe_fixes=True)
BOUNDED = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _load_corpus_check():
    path = Path(__file__).resolve().parents[1] / "scripts" / "corpus_check.py"
    spec = importlib.util.spec_from_file_location("corpus_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("corpus_check", module)
    spec.loader.exec_module(module)
    return module


corpus_check = _load_corpus_check()


def assert_safe(source: bytes) -> "corpus_check.FileReport":
    report = corpus_check.check_source(source, "gen.py")
    assert report.status != "failed", f"{report.detail}\n--- source ---\n{source.decode('utf-8', 'replace')}"
    return report


# -- arbitrary programs (hypothesmith) ------------------------------------------------------------

try:
    import hypothesmith
except ImportError:  # the composed-snippet tests below still run
    hypothesmith = None
needs_hypothesmith = pytest.mark.skipif(hypothesmith is None, reason="hypothesmith is not installed")
programs = hypothesmith.from_grammar() if hypothesmith else st.just("")
cst_programs = hypothesmith.from_node() if hypothesmith else st.just("")


@needs_hypothesmith
@BOUNDED
@given(programs)
def test_arbitrary_programs(source: str):
    data = source.encode("utf-8", "surrogatepass")
    try:
        findings = check(data, "gen.py", ALL)
    except SourceError:
        return  # reported as a syntax error by the CLI; nothing else to prove
    except RecursionError:
        return  # reported as "nested too deeply"
    new = fix(data, "gen.py", ALL)
    if not findings:
        assert new == data, "a file without findings must come back byte-identical"
    assert_safe(data)


@needs_hypothesmith
@BOUNDED
@given(cst_programs)
def test_arbitrary_programs_from_libcst_nodes(source: str):
    data = source.encode("utf-8", "surrogatepass")
    try:
        findings = check(data, "gen.py", ALL)
    except (SourceError, RecursionError):
        return
    if not findings:
        assert fix(data, "gen.py", ALL) == data
    assert_safe(data)


# -- programs the rules fire on ------------------------------------------------------------------

IMPORTS = {
    "torch": ("import torch\n", "torch.", "torch."),
    "T": ("import torch as T\n", "T.", "T."),
    "from": ("import torch\nfrom torch import no_grad, enable_grad, set_grad_enabled, inference_mode\n", "", "torch."),
    "grad_mode": ("import torch\nfrom torch.autograd import grad_mode\n", "grad_mode.", "torch."),
    "autograd": ("import torch\nimport torch.autograd as ag\n", "ag.", "torch."),
}
CONTEXTS = ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled"]
COMMENTS = st.sampled_from(["", "  # eval", "  # noqa", "  # gradfix: ignore", "\t# tab comment", "  # é ünïcode"])


@st.composite
def with_block(draw, grad: str, torch_: str, indent: str, depth: int):
    name = draw(st.sampled_from(CONTEXTS))
    if name == "set_grad_enabled":
        call = draw(st.sampled_from(["", "(False)", "(True)", "(mode)"]))
    else:
        call = draw(st.sampled_from(["", "()", "()"]))
    item = f"{grad}{name}{call}"
    if draw(st.booleans()):
        item += ", open(path) as fh"
    body = draw(st.lists(statement(grad, torch_, indent, depth + 1), min_size=1, max_size=4))
    pad = indent * depth
    return f"{pad}with {item}:{draw(COMMENTS)}\n" + "".join(body)


SIMPLE = [
    "y = model(x)",
    "loss = criterion(model(x), t)",
    "loss.backward()",
    "optimizer.step()",
    "model.eval()",
    "model.train()",
    "{torch}save(model.state_dict(), path)",
    "total += loss",
    "total += loss.data[0]",
    "x = Variable(x)",
    "x = Variable(x, volatile=True)",
    "x = Variable(x, requires_grad=True)",
    "p.data.copy_(q)",
    "{torch}set_grad_enabled(False)",
    "{torch}set_grad_enabled(True)",
    "del y",
    "pass",
    "print(y)",
    "{torch}cuda.empty_cache()",
]


@st.composite
def statement(draw, grad: str, torch_: str, indent: str, depth: int):
    pad = indent * depth
    if depth < 3 and draw(st.integers(0, 3)) == 0:
        return draw(with_block(grad, torch_, indent, depth))
    if depth < 3 and draw(st.integers(0, 7)) == 0:
        inner = draw(st.lists(statement(grad, torch_, indent, depth + 1), min_size=1, max_size=3))
        head = draw(st.sampled_from(["for x, t in loader:", "if flag:", "try:"]))
        tail = f"{pad}except Exception:\n{pad}{indent}raise\n" if head == "try:" else ""
        return f"{pad}{head}\n" + "".join(inner) + tail
    text = draw(st.sampled_from(SIMPLE)).format(torch=torch_)
    blank = "\n" if draw(st.integers(0, 5)) == 0 else ""
    return f"{blank}{pad}{text}{draw(COMMENTS)}\n"


@st.composite
def grad_programs(draw) -> bytes:
    style = draw(st.sampled_from(sorted(IMPORTS)))
    imports, grad, torch_ = IMPORTS[style]
    if draw(st.booleans()):
        imports += "from torch.autograd import Variable\n"
    indent = draw(st.sampled_from(["    ", "  ", "\t"]))
    parts = [imports, "\n"]
    for _ in range(draw(st.integers(1, 3))):
        decorator = draw(st.sampled_from(["", f"@{torch_}no_grad()\n", f"@{torch_}no_grad\n", f"@{torch_}inference_mode()\n"]))
        name = draw(st.sampled_from(["train", "evaluate", "step", "forward", "predict"]))
        body = draw(st.lists(statement(grad, torch_, indent, 1), min_size=1, max_size=6))
        if draw(st.booleans()):
            body.append(f"{indent}return y\n")
        parts.append(f"\n\n{decorator}def {name}(model, x, t, loader, optimizer, criterion, path, mode, flag, p, q):\n")
        parts += body
    if draw(st.booleans()):
        parts.append("\n" + draw(with_block(grad, torch_, indent, 0)))
    text = "".join(parts)
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    data = text.encode("utf-8")
    if draw(st.integers(0, 4)) == 0:
        data = b"\xef\xbb\xbf" + data
    return data


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(grad_programs())
def test_grad_programs_are_fixed_safely(data: bytes):
    try:
        compile(data, "gen.py", "exec", dont_inherit=True)
    except SyntaxError:
        assume(False)  # e.g. `return` in an odd place: not what this test is about
    report = assert_safe(data)
    if report.new_source is not None:
        new = report.new_source
        if b"\r\n" in data:
            # New lines follow the file's own convention: no bare "\n" appears.
            assert new.count(b"\n") == new.count(b"\r\n"), new
        assert new.startswith(b"\xef\xbb\xbf") == data.startswith(b"\xef\xbb\xbf")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(grad_programs())
def test_gf101_leaves_no_fixable_uncalled_context(data: bytes):
    gf101 = Settings(select=("GF101",))
    new = fix(data, "gen.py", gf101)
    left = check(new, "gen.py", gf101)
    # Only `set_grad_enabled` without a mode (no fix) and suppressed lines may remain.
    assert all(f.fix is None for f in left), left
    assert fix(new, "gen.py", gf101) == new


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(grad_programs(), st.sampled_from(["GF1", "GF2", "GF3", "GF4"]))
def test_select_is_a_filter(data: bytes, prefix: str):
    everything = {(f.code, f.span) for f in check(data, "gen.py", ALL)}
    chosen = [r.code for r in all_rules() if r.code.startswith(prefix)]
    if not chosen:
        return
    some = {(f.code, f.span) for f in check(data, "gen.py", Settings(select=tuple(chosen)))}
    assert some == {f for f in everything if f[0].startswith(prefix)}
