"""Unit tests of gradfix/facts.py's public API, on small sources (no rules, no CLI)."""

import ast
import textwrap

import pytest

from gradfix.facts import (
    FileFacts,
    build_facts,
    canonical,
    dotted_name,
    literal_bool,
    names_read,
    target_names,
)
from gradfix.model import Span


def facts(src: str) -> FileFacts:
    return build_facts(textwrap.dedent(src))


def calls_named(f: FileFacts, dotted: str) -> list[ast.Call]:
    return [c for c in f.calls if dotted_name(c.func) == dotted]


def only_call(f: FileFacts, dotted: str) -> ast.Call:
    (call,) = calls_named(f, dotted)
    return call


def func(f: FileFacts, name: str) -> ast.FunctionDef:
    (node,) = [n for n in f.functions if n.name == name]
    return node


# -- build_facts ---------------------------------------------------------------------------


def test_build_facts_parses_when_no_tree_and_keeps_the_given_tree_and_project():
    tree = ast.parse("x = 1\n")
    project = object()
    f = build_facts("x = 1\n", "a.py", tree, project)
    assert f.tree is tree and f.project is project and f.path == "a.py"
    g = build_facts("y = 2\n")
    assert isinstance(g.tree, ast.Module) and g.path == "<string>" and g.project is None
    assert isinstance(g.tree.body[0], ast.Assign)


def test_build_facts_reports_a_syntax_error_with_the_path():
    with pytest.raises(SyntaxError) as info:
        build_facts("def (:\n", "broken.py")
    assert info.value.filename == "broken.py"


# -- qualified names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, dotted, expected",
    [
        ("import torch\ntorch.no_grad()\n", "torch.no_grad", "torch.no_grad"),
        ("import torch as T\nT.no_grad()\n", "T.no_grad", "torch.no_grad"),
        ("from torch import no_grad\nno_grad()\n", "no_grad", "torch.no_grad"),
        ("from torch import no_grad as ng\nng()\n", "ng", "torch.no_grad"),
        ("import torch\ntorch.autograd.grad_mode.no_grad()\n", "torch.autograd.grad_mode.no_grad", "torch.no_grad"),
        ("import torch\ntorch.autograd.no_grad()\n", "torch.autograd.no_grad", "torch.no_grad"),
        ("from torch.autograd import grad_mode\ngrad_mode.enable_grad()\n", "grad_mode.enable_grad", "torch.enable_grad"),
        ("import torch.autograd\ntorch.autograd.set_grad_enabled(True)\n", "torch.autograd.set_grad_enabled", "torch.set_grad_enabled"),
        ("from torch.autograd.variable import Variable\nVariable(1)\n", "Variable", "torch.autograd.Variable"),
        ("import torch\ntorch.serialization.save(1, 'f')\n", "torch.serialization.save", "torch.save"),
        ("import torch\ntorch.nn.Linear(1, 2)\n", "torch.nn.Linear", "torch.nn.Linear"),
        ("import numpy as np\nnp.no_grad()\n", "np.no_grad", "numpy.no_grad"),
        # Not imported: no qualified name at all.
        ("no_grad()\n", "no_grad", None),
        ("torch.no_grad()\n", "torch.no_grad", None),
    ],
)
def test_call_qualname_resolves_imports_and_aliases(src, dotted, expected):
    f = facts(src)
    assert f.call_qualname(only_call(f, dotted)) == expected


@pytest.mark.parametrize(
    "src",
    [
        # A parameter named torch shadows the module import.
        """
        import torch
        def f(torch):
            torch.no_grad()
        """,
        # So does a local assignment.
        """
        import torch
        def f():
            torch = make()
            torch.no_grad()
        """,
        # And a local for-loop target.
        """
        from torch import no_grad
        def f(items):
            for no_grad in items:
                pass
            torch.no_grad()
        """,
    ],
)
def test_local_binding_shadows_a_module_import(src):
    f = facts(src)
    assert f.call_qualname(only_call(f, "torch.no_grad")) is None


def test_shadowing_is_per_function_and_global_declaration_reaches_the_module():
    f = facts(
        """
        import torch
        def shadowed(torch):
            torch.no_grad()
        def plain():
            torch.enable_grad()
        def declared():
            global torch
            torch = torch
            torch.inference_mode()
        """
    )
    assert f.call_qualname(only_call(f, "torch.no_grad")) is None
    assert f.call_qualname(only_call(f, "torch.enable_grad")) == "torch.enable_grad"
    assert f.call_qualname(only_call(f, "torch.inference_mode")) == "torch.inference_mode"


def test_function_local_import_resolves_inside_that_function_only():
    f = facts(
        """
        def inner():
            import torch as tt
            tt.no_grad()
        def other():
            tt.no_grad()
        """
    )
    first, second = calls_named(f, "tt.no_grad")
    by_func = {f.enclosing_function(c).name: c for c in (first, second)}
    assert f.call_qualname(by_func["inner"]) == "torch.no_grad"
    assert f.call_qualname(by_func["other"]) is None


def test_resolve_name_and_call_qualname_of_non_calls():
    f = facts("import torch as T\nfrom os import path\nx = T\n")
    assign = f.tree.body[2]
    assert f.resolve_name("T", assign.value) == "torch"
    assert f.resolve_name("path", assign.value) == "os.path"
    assert f.resolve_name("x", assign.value) is None  # a local, not an import
    assert f.resolve_name("nowhere", assign.value) is None
    assert f.call_qualname(assign.value) is None  # a Name, not a Call
    assert f.qualname(assign.value) == "torch"


def test_qualname_of_a_non_name_chain_is_none():
    f = facts("import torch\nget().no_grad()\n")
    (call,) = [c for c in f.calls if isinstance(c.func, ast.Attribute)]
    assert dotted_name(call.func) is None
    assert f.call_qualname(call) is None


def test_a_relative_import_binds_an_unknown_and_a_torch_star_import_what_torch_exports():
    f = facts("from . import no_grad\nfrom torch import *\nno_grad()\nenable_grad()\nset_grad_enabled(False)\n")
    assert f.scope_of_node[f.tree].imports == {}
    assert f.call_qualname(only_call(f, "no_grad")) is None  # the project's: not followed
    assert f.call_qualname(only_call(f, "enable_grad")) == "torch.enable_grad"  # in torch.__all__
    assert f.call_qualname(only_call(f, "set_grad_enabled")) is None  # not in torch.__all__


def test_dotted_import_binds_its_top_package():
    f = facts("import torch.nn.functional\nimport os.path as osp\n")
    assert f.scope_of_node[f.tree].imports == {"torch": "torch", "osp": "os.path"}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("torch.no_grad", "torch.no_grad"),
        ("torch.autograd.no_grad", "torch.no_grad"),
        ("torch.autograd.grad_mode.inference_mode", "torch.inference_mode"),
        ("torch.autograd.variable.Variable", "torch.autograd.Variable"),
        ("torch.serialization.save", "torch.save"),
        ("torch.nn.no_grad", "torch.nn.no_grad"),  # not an API module: left as is
        ("mylib.no_grad", "mylib.no_grad"),
        ("no_grad", "no_grad"),
    ],
)
def test_canonical(name, expected):
    assert canonical(name) == expected


def test_torch_module_names_and_writability():
    assert facts("import torch as T\nimport torch\n").torch_module_names() == {"T", "torch"}
    assert facts("from torch import nn\n").torch_module_names() == set()
    assert facts("import torch as T\n").torch_name_writable() is True
    assert facts("x = 1\n").torch_name_writable() is True  # `import torch` can be added
    assert facts("torch = 3\n").torch_name_writable() is False
    assert facts("from mylib import torch\n").torch_name_writable() is False
    # A function-local `torch` does not block writing at module level.
    assert facts("def f(torch):\n    pass\n").torch_name_writable() is True


def test_imported_from():
    f = facts(
        """
        from torch import no_grad
        from torch import enable_grad as eg
        import torch
        no_grad()
        eg()
        torch.no_grad()
        """
    )
    assert f.imported_from(only_call(f, "no_grad"), "no_grad") == "torch"
    assert f.imported_from(only_call(f, "eg"), "eg") is None  # aliased: target ends in enable_grad
    assert f.imported_from(only_call(f, "torch.no_grad"), "no_grad") is None  # not a bare name
    assert f.imported_from(only_call(f, "no_grad"), "enable_grad") is None  # other name


# -- grad regions ----------------------------------------------------------------------------


def region_summary(f: FileFacts):
    return [(r.kind, r.api, r.mode, r.called, r.owner.lineno) for r in f.regions]


def test_with_regions_modes_and_called():
    f = facts(
        """
        import torch
        with torch.no_grad():
            a = 1
        with torch.enable_grad():
            b = 1
        with torch.inference_mode():
            c = 1
        with torch.inference_mode(False):
            d = 1
        with torch.inference_mode(mode=True):
            e = 1
        with torch.no_grad:
            g = 1
        with open("x"):
            h = 1
        """
    )
    assert region_summary(f) == [
        ("with", "torch.no_grad", "disabled", True, 3),
        ("with", "torch.enable_grad", "enabled", True, 5),
        ("with", "torch.inference_mode", "disabled", True, 7),
        ("with", "torch.inference_mode", "conditional", True, 9),
        ("with", "torch.inference_mode", "disabled", True, 11),
        ("with", "torch.no_grad", "disabled", False, 13),
    ]
    assert [r.disables for r in f.regions] == [True, False, True, False, True, True]


@pytest.mark.parametrize(
    "arg, mode",
    [
        ("False", "disabled"),
        ("True", "enabled"),
        ("mode=False", "disabled"),
        ("mode=True", "enabled"),
        ("is_train", "conditional"),
        ("not is_train", "conditional"),
        ("0", "conditional"),  # an int literal is not a bool literal
    ],
)
def test_set_grad_enabled_literal_versus_variable(arg, mode):
    f = facts(f"import torch\nwith torch.set_grad_enabled({arg}):\n    x = 1\n")
    (region,) = f.regions
    assert (region.api, region.mode, region.called) == ("torch.set_grad_enabled", mode, True)


def test_uncalled_set_grad_enabled_is_conditional():
    f = facts("import torch\nwith torch.set_grad_enabled:\n    x = 1\n")
    (region,) = f.regions
    assert (region.mode, region.called) == ("conditional", False)


def test_if_expression_pick_is_a_conditional_region():
    f = facts(
        """
        import torch, contextlib
        with (torch.no_grad() if frozen else contextlib.nullcontext()):
            x = 1
        with (open("a") if frozen else open("b")):
            y = 1
        """
    )
    (region,) = f.regions
    assert (region.api, region.mode, region.called, region.owner.lineno) == (None, "conditional", True, 3)
    assert isinstance(region.expr, ast.IfExp)


def test_decorator_regions_called_and_bare():
    f = facts(
        """
        import torch
        from torch import inference_mode

        @torch.no_grad()
        def a():
            pass

        @torch.enable_grad
        def b():
            pass

        @inference_mode()
        async def c():
            pass

        @staticmethod
        def d():
            pass
        """
    )
    assert region_summary(f) == [
        ("decorator", "torch.no_grad", "disabled", True, 6),
        ("decorator", "torch.enable_grad", "enabled", False, 10),
        ("decorator", "torch.inference_mode", "disabled", True, 14),
    ]
    assert [r.owner.name for r in f.regions] == ["a", "b", "c"]
    assert f.regions[0].body is func(f, "a").body


def test_with_item_region_body_and_multiple_items():
    f = facts(
        """
        import torch
        with open("f") as fh, torch.no_grad(), torch.enable_grad():
            x = 1
        """
    )
    assert [(r.api, r.mode) for r in f.regions] == [("torch.no_grad", "disabled"), ("torch.enable_grad", "enabled")]
    assert f.regions[0].body is f.tree.body[1].body
    # The innermost (last) item decides the mode of the body.
    assign = f.tree.body[1].body[0]
    assert [r.api for r in f.regions_around(assign)] == ["torch.enable_grad", "torch.no_grad"]
    assert f.grad_mode_at(assign) == "enabled"


def test_local_wrapper_decorator_is_a_disabled_region():
    f = facts(
        """
        import torch

        def nograd(f):
            def new_f(*args, **kwargs):
                with torch.no_grad():
                    return f(*args, **kwargs)
            return new_f

        @nograd
        def predict(x):
            return x
        """
    )
    decorator = [r for r in f.regions if r.kind == "decorator"]
    assert [(r.owner.name, r.api, r.mode) for r in decorator] == [("predict", None, "disabled")]


def test_wrapper_that_does_not_call_the_wrapped_function_is_not_a_region():
    f = facts(
        """
        import torch

        def nograd(f):
            def new_f(*args):
                with torch.no_grad():
                    return other(*args)
            return new_f

        @nograd
        def predict(x):
            return x
        """
    )
    assert [r.kind for r in f.regions] == ["with"]


def test_grad_mode_at_nesting_and_function_boundaries():
    f = facts(
        """
        import torch
        outside = 0
        with torch.no_grad():
            a = 1
            with torch.enable_grad():
                b = 2
            c = 3
            def later():
                d = 4

        @torch.no_grad()
        def decorated():
            e = 5
            def nested():
                g = 6
        """
    )
    stmts = {s.targets[0].id: s for s in ast.walk(f.tree) if isinstance(s, ast.Assign)}
    assert f.grad_mode_at(stmts["outside"]) is None
    assert f.grad_mode_at(stmts["a"]) == "disabled"
    assert f.grad_mode_at(stmts["b"]) == "enabled"
    assert [r.mode for r in f.regions_around(stmts["b"])] == ["enabled", "disabled"]
    assert f.grad_mode_at(stmts["c"]) == "disabled"
    # A function body runs when called, in its caller's mode, not the definition site's.
    assert f.grad_mode_at(stmts["d"]) is None
    assert f.grad_mode_at(stmts["e"]) == "disabled"
    assert f.grad_mode_at(stmts["g"]) is None
    # An expression deep in a statement sees the same regions.
    assert f.grad_mode_at(stmts["b"].value) == "enabled"


def test_the_with_expression_itself_is_not_inside_its_region():
    f = facts("import torch\nwith torch.no_grad():\n    x = 1\n")
    (region,) = f.regions
    assert f.regions_around(region.expr) == []
    assert f.grad_mode_at(region.owner) is None


# -- calls by scope and receiver -------------------------------------------------------------


def test_method_calls_record_receiver_dotted_names():
    f = facts(
        """
        self.model.encoder.eval()
        model.train(False)
        get_model().eval()
        plain()
        """
    )
    assert [(m.method, m.receiver, m.call.lineno) for m in sorted(f.method_calls, key=lambda m: m.call.lineno)] == [
        ("eval", "self.model.encoder", 2),
        ("train", "model", 3),
        ("eval", None, 4),
    ]


def test_calls_and_method_calls_by_enclosing_function():
    f = facts(
        """
        top()
        model.eval()
        def outer():
            a()
            model.eval()
            def inner():
                b()
                other.eval()
            fn = lambda: c()
        """
    )
    outer, inner = func(f, "outer"), func(f, "inner")
    (lam,) = [n for n in ast.walk(f.tree) if isinstance(n, ast.Lambda)]

    def names(calls):
        return sorted(dotted_name(c.func) for c in calls)

    assert names(f.calls_in(None)) == ["model.eval", "top"]
    assert names(f.calls_in(outer)) == ["a", "model.eval"]
    assert names(f.calls_in(inner)) == ["b", "other.eval"]
    assert names(f.calls_in(lam)) == ["c"]
    assert [m.receiver for m in f.method_calls_in(None, "eval")] == ["model"]
    assert [m.receiver for m in f.method_calls_in(outer, "eval")] == ["model"]
    assert [m.receiver for m in f.method_calls_in(inner, "eval")] == ["other"]
    assert f.method_calls_in(inner, "train") == []
    # A copy: callers may not corrupt the index.
    f.calls_in(outer).clear()
    assert len(f.calls_in(outer)) == 2


def test_decorators_belong_to_the_enclosing_scope():
    f = facts(
        """
        def outer():
            @deco()
            def inner(x):
                body()
        """
    )
    outer, inner = func(f, "outer"), func(f, "inner")
    assert [dotted_name(c.func) for c in f.calls_in(outer)] == ["deco"]
    assert [dotted_name(c.func) for c in f.calls_in(inner)] == ["body"]
    assert f.enclosing_function(inner) is outer
    assert list(f.enclosing_functions(only_call(f, "body"))) == [inner, outer]
    assert f.enclosing_function(outer) is None


def test_defaults_belong_to_the_enclosing_scope():
    f = facts(
        """
        import torch
        def outer():
            def inner(torch, x=torch.no_grad()):
                pass
        """
    )
    outer = func(f, "outer")
    default = only_call(f, "torch.no_grad")
    assert f.enclosing_function(default) is outer
    assert f.call_qualname(default) == "torch.no_grad"


# -- memo -----------------------------------------------------------------------------------


def test_memo_computes_once_per_key():
    f = facts("x = 1\n")
    counter = {"a": 0, "b": 0}

    def compute(key):
        def run():
            counter[key] += 1
            return [key, counter[key]]

        return run

    first = f.memo(("analysis", "a"), compute("a"))
    second = f.memo(("analysis", "a"), compute("a"))
    other = f.memo(("analysis", "b"), compute("b"))
    assert first is second and first == ["a", 1]
    assert other == ["b", 1]
    assert counter == {"a": 1, "b": 1}
    # Another file's facts have their own memo.
    assert facts("x = 1\n").memo(("analysis", "a"), compute("a")) == ["a", 2]


def test_memo_caches_a_none_result():
    f = facts("x = 1\n")
    calls = []
    assert f.memo("k", lambda: calls.append(1)) is None
    assert f.memo("k", lambda: calls.append(1)) is None
    assert calls == [1]


def test_memo_does_not_cache_a_failing_computation():
    f = facts("x = 1\n")

    def boom():
        raise ValueError("no")

    with pytest.raises(ValueError):
        f.memo("k", boom)
    assert f.memo("k", lambda: 7) == 7


def test_name_dependencies_are_memoised():
    f = facts("a = b + c\n")
    assert f.name_dependencies(None) is f.name_dependencies(None)
    assert f.name_dependencies(None) == {"a": {"b", "c"}}


# -- positions ------------------------------------------------------------------------------


def test_span_and_segment_ascii_and_multiline():
    src = "x = foo(1,\n        2)\ny = bar\n"
    f = build_facts(src)
    call = f.tree.body[0].value
    assert f.span(call) == Span(1, 4, 2, 10)
    assert f.segment(call) == "foo(1,\n        2)"
    name = f.tree.body[1].value
    assert f.span(name) == Span(3, 4, 3, 7)
    assert f.segment(name) == "bar"


def test_span_counts_characters_and_segment_slices_bytes_on_non_ascii_lines():
    src = 'é = "ü" + résumé\n'
    f = build_facts(src)
    binop = f.tree.body[0].value
    right = binop.right
    assert right.col_offset == 12  # bytes: é and ü are 2 bytes each
    assert f.span(right) == Span(1, 10, 1, 16)
    assert f.segment(right) == "résumé"
    assert f.segment(binop) == '"ü" + résumé'
    assert src.splitlines()[0][10:16] == "résumé"


def test_lines_split_only_at_python_line_breaks():
    src = "a = 1  # form\x0cfeed\r\nb = '\u2028'\rc = 3\n"
    f = build_facts(src)
    assert f.lines == ["a = 1  # form\x0cfeed", "b = '\u2028'", "c = 3", ""]
    c = f.tree.body[2]
    assert c.lineno == 3 and f.segment(c) == "c = 3"
    assert f.line_text(2) == "b = '\u2028'"
    assert f.line_text(0) == "" and f.line_text(99) == ""


def test_char_col_out_of_range_line_returns_byte_col():
    f = build_facts("x = 1\n")
    assert f.char_col(50, 7) == 7


# -- parents and statements ------------------------------------------------------------------


def test_parents_map_every_node_to_its_parent():
    f = facts(
        """
        def f(a):
            with ctx():
                return a.b[0]
        """
    )
    fn = f.tree.body[0]
    with_stmt = fn.body[0]
    ret = with_stmt.body[0]
    sub = ret.value
    attr = sub.value
    assert f.parents[fn] is f.tree
    assert f.parents[with_stmt] is fn
    assert f.parents[ret] is with_stmt
    assert f.parents[sub] is ret
    assert f.parents[attr] is sub
    assert f.parents[attr.value] is attr
    assert f.tree not in f.parents
    # Every node but the module has a parent, and the parent really holds it.
    for node in ast.walk(f.tree):
        if node is f.tree or isinstance(node, (ast.expr_context,)):
            continue
        assert node in ast.iter_child_nodes(f.parents[node])


def test_statements_are_own_and_in_source_order():
    f = facts(
        """
        def f(x):
            a = 1
            if x:
                b = 2
            else:
                c = 3
            try:
                d = 4
            except E:
                e = 5
            finally:
                g = 6
            def inner():
                h = 7
            class K:
                i = 8
        """
    )
    fn = func(f, "f")
    kinds = [type(s).__name__ + ":" + (s.targets[0].id if isinstance(s, ast.Assign) else "") for s in f.statements(fn)]
    assert kinds == [
        "Assign:a",
        "If:",
        "Assign:b",
        "Assign:c",
        "Try:",
        "Assign:d",
        "Assign:g",
        "Assign:e",
        "FunctionDef:",
        "ClassDef:",
    ]


def test_statements_of_a_match_statement_cover_its_cases():
    f = facts(
        """
        match v:
            case 1:
                a = 1
            case _:
                b = 2
        """
    )
    assert [s.targets[0].id for s in f.statements(None) if isinstance(s, ast.Assign)] == ["a", "b"]


# -- data flow by name -----------------------------------------------------------------------


def test_name_dependencies_of_each_binding_form():
    f = facts(
        """
        def f(w, xs, opt):
            a = w * 2
            b: int = a + 1
            b += c
            for item in xs:
                pass
            with opt.ctx() as (m, n):
                pass
            out.append(b)
            s.t[0] = z
            if (q := a):
                pass
            r = (p := w) + 1
        """
    )
    deps = f.name_dependencies(func(f, "f"))
    assert deps["a"] == {"w"}
    # `b += c` reads c (the old b is a self-dependency flows_into never needs).
    assert deps["b"] == {"a", "c"}
    assert deps["item"] == {"xs"}
    assert deps["m"] == {"opt"} and deps["n"] == {"opt"}
    assert deps["out"] == {"out", "b"}
    assert deps["s"] == {"z"}
    assert deps["r"] == {"w"} and deps["p"] == {"w"}
    # A walrus in a compound statement's header is not collected from that statement.
    assert "q" not in deps


def test_flows_into_follows_assignment_chains_and_stops_at_cycles():
    f = facts(
        """
        def f(w, v):
            a = w
            b = a
            c = b + v
            x = y
            y = x
        """
    )
    fn = func(f, "f")
    assert f.flows_into(fn, {"w"}, "c") is True
    assert f.flows_into(fn, {"v"}, "c") is True
    assert f.flows_into(fn, {"w"}, "a") is True
    assert f.flows_into(fn, {"v"}, "a") is False
    assert f.flows_into(fn, {"w"}, "x") is False  # a cycle with no source terminates
    assert f.flows_into(fn, {"c"}, "c") is True  # a source is its own target


# -- helpers -------------------------------------------------------------------------------------


def expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


@pytest.mark.parametrize(
    "src, expected",
    [
        ("x", "x"),
        ("self.model.encoder", "self.model.encoder"),
        ("torch.autograd.grad_mode.no_grad", "torch.autograd.grad_mode.no_grad"),
        ("f().x", None),
        ("a[0].b", None),
        ("'s'.join", None),
        ("1", None),
    ],
)
def test_dotted_name(src, expected):
    assert dotted_name(expr(src)) == expected


@pytest.mark.parametrize(
    "src, expected",
    [("True", True), ("False", False), ("1", None), ("0", None), ("None", None), ("'True'", None), ("x", None), ("not True", None)],
)
def test_literal_bool(src, expected):
    assert literal_bool(expr(src)) is expected


def test_literal_bool_of_none():
    assert literal_bool(None) is None


@pytest.mark.parametrize(
    "src, expected",
    [
        ("a = 1", ["a"]),
        ("a, (b, *c) = v", ["a", "b", "c"]),
        ("[a, b] = v", ["a", "b"]),
        ("a.b.c = v", ["a"]),
        ("a[0][1] = v", ["a"]),
        ("a.b[0].c = v", ["a"]),
        ("f().x = v", []),
    ],
)
def test_target_names(src, expected):
    assert target_names(ast.parse(src).body[0].targets[0]) == expected


def test_names_read_counts_loads_only():
    assert names_read(ast.parse("a = b + c.d + e[f]").body[0]) == {"b", "c", "e", "f"}
