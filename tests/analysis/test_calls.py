"""Which def of the file a call may run (gradfix/analysis/calls.py)."""

from __future__ import annotations

import ast
import textwrap

from gradfix.analysis.calls import callee, callees, callers, dead
from gradfix.facts import build_facts


def _facts(code: str):
    return build_facts(textwrap.dedent(code))


def _calls(facts, name: str) -> list[ast.Call]:
    """The calls of ``name`` (``f(...)`` or ``x.f(...)``), in source order."""
    out = [c for c in facts.calls if getattr(c.func, "id", getattr(c.func, "attr", None)) == name]
    return sorted(out, key=lambda c: (c.lineno, c.col_offset))


def _lines(binding) -> list[int]:
    return [d.lineno for d in binding.defs]


def test_a_module_level_call_runs_the_def_in_force_at_that_point():
    facts = _facts(
        """
        def step(x):          # line 2
            return x
        step(1)
        def step(x):          # line 5: a redefinition
            return -x
        step(2)
        """
    )
    first, second = _calls(facts, "step")
    assert _lines(callees(facts, first)) == [2] and not callees(facts, first).other
    assert _lines(callees(facts, second)) == [5]
    assert callee(facts, second).lineno == 5


def test_a_call_in_a_function_body_sees_what_the_module_leaves_bound():
    facts = _facts(
        """
        def helper(x):        # line 2
            return x
        def main():
            return helper(1)
        def helper(x):        # line 6: the one bound when main() runs
            return -x
        """
    )
    (call,) = _calls(facts, "helper")
    assert _lines(callees(facts, call)) == [6]
    first = next(f for f in facts.functions if f.name == "helper" and f.lineno == 2)
    assert dead(facts, first) and callers(facts, first) == []
    last = next(f for f in facts.functions if f.name == "helper" and f.lineno == 6)
    assert not dead(facts, last) and callers(facts, last) == [call]


def test_a_def_read_before_its_redefinition_is_not_dead():
    facts = _facts(
        """
        def hook(x):          # line 2
            return x
        register(hook)        # passed on while bound: it may run
        def hook(x):
            return -x
        """
    )
    first = next(f for f in facts.functions if f.lineno == 2)
    assert not dead(facts, first)


def test_both_defs_of_a_branch_may_run_and_neither_alone():
    facts = _facts(
        """
        import sys
        if sys.argv[1:]:
            def run(x):       # line 4
                return x
        else:
            def run(x):       # line 7
                return -x
        run(1)
        def main():
            run(2)
        """
    )
    at_module, in_main = _calls(facts, "run")
    for call in (at_module, in_main):
        assert _lines(callees(facts, call)) == [4, 7] and not callees(facts, call).other
        assert callee(facts, call) is None


def test_a_def_bound_on_one_path_only_may_also_be_something_else():
    facts = _facts(
        """
        from fast import run
        if cond():
            def run(x):       # line 4
                return x
        run(1)
        """
    )
    (call,) = _calls(facts, "run")
    found = callees(facts, call)
    assert _lines(found) == [4] and found.other and callee(facts, call) is None


def test_an_import_a_parameter_or_an_assignment_is_no_file_function():
    facts = _facts(
        """
        def evaluate(m):      # line 2
            return m
        def a(evaluate):
            return evaluate(1)        # the parameter
        def b():
            from tools import evaluate
            return evaluate(2)        # the local import
        def c():
            evaluate = make()
            return evaluate(3)        # the local assignment
        import tools as evaluate
        evaluate(4)                   # rebound at module level by an aliased import
        def d():
            return evaluate(5)        # ... which is what the module leaves bound
        """
    )
    calls = [c for c in _calls(facts, "evaluate")]
    assert [c.lineno for c in calls] == [5, 8, 11, 13, 15]
    for call in calls:
        assert callees(facts, call).defs == () and callee(facts, call) is None
    assert dead(facts, next(f for f in facts.functions if f.name == "evaluate"))


def test_the_enclosing_functions_own_nested_def_wins():
    facts = _facts(
        """
        def inner(x):         # line 2
            return x
        def outer(x):
            def inner(y):     # line 5
                return -y
            return inner(x)
        def other(x):
            def inner(y):     # line 9
                return y * 2
            def deeper():
                return inner(x)
            return deeper()
        def plain(x):
            return inner(x)
        """
    )
    in_outer, in_deeper, in_plain = _calls(facts, "inner")
    assert _lines(callees(facts, in_outer)) == [5]
    assert _lines(callees(facts, in_deeper)) == [9]  # a closure: the enclosing function's binding
    assert _lines(callees(facts, in_plain)) == [2]


def test_a_global_declaration_makes_the_binding_uncertain():
    facts = _facts(
        """
        def step(x):          # line 2
            return x
        def swap():
            global step
            step = other
        def run():
            return step(1)
        """
    )
    (call,) = _calls(facts, "step")
    found = callees(facts, call)
    assert _lines(found) == [2] and found.other and callee(facts, call) is None


def test_self_calls_run_the_method_of_the_callers_class():
    facts = _facts(
        """
        class A:
            def step(self):   # line 3
                return 1
            def run(self):
                return self.step()
        class B:
            def step(self):   # line 8
                return 2
            def step(self):   # line 10: the class body binds this one last
                return 3
            def run(self):
                return self.step()
        def step():           # line 14: not what `self.step()` runs
            return 4
        """
    )
    in_a, in_b = _calls(facts, "step")
    assert _lines(callees(facts, in_a)) == [3] and callee(facts, in_a).lineno == 3
    assert _lines(callees(facts, in_b)) == [10]


def test_a_method_call_on_another_object_may_run_any_class_method_of_that_name():
    facts = _facts(
        """
        import tools
        class Trainer:
            def evaluate(self, m):    # line 4
                return m
        def evaluate(m):              # line 6: a module function, never `obj.evaluate`
            return m
        def run(trainer, m):
            trainer.evaluate(m)
            tools.evaluate(m)         # an imported module's function
        """
    )
    on_trainer, on_module = _calls(facts, "evaluate")
    assert _lines(callees(facts, on_trainer)) == [4] and callees(facts, on_trainer).other
    assert callee(facts, on_trainer) is None
    assert callees(facts, on_module).defs == ()


def test_aliases_and_odd_formatting_follow_the_binding():
    code = "import torch as T\r\ndef f(x):\r\n    return x\r\ng = f\r\ndef h(x):  # comment\r\n    return (\r\n        f\r\n    )(x)\r\n"
    facts = build_facts(code)
    (call,) = [c for c in facts.calls]
    assert _lines(callees(facts, call)) == [2]
    g = build_facts("def f(x):\n    return x\ng = f\ng(1)\n")
    (alias_call,) = g.calls
    assert callees(g, alias_call).defs == ()  # an assignment: not followed to the def


def test_a_function_run_from_module_level_before_a_redefinition_sees_the_first_def():
    facts = _facts(
        """
        def step(x):          # line 2
            return x
        def run():
            return step(1)
        if __name__ == "__main__":
            run()             # run's code runs now, with the first `step`
        def step(x):          # line 8
            return -x
        """
    )
    (call,) = _calls(facts, "step")
    assert _lines(callees(facts, call)) == [2, 8] and callee(facts, call) is None
    first = next(f for f in facts.functions if f.name == "step" and f.lineno == 2)
    assert not dead(facts, first) and callers(facts, first) == [call]


def test_a_name_still_unbound_where_the_module_calls_a_def_adds_nothing():
    facts = _facts(
        """
        def run():
            return helper(1)
        run()                 # would raise NameError: no path runs `helper` from here
        def helper(x):        # line 5
            return x
        """
    )
    (call,) = _calls(facts, "helper")
    assert callee(facts, call).lineno == 5


def test_a_module_level_read_that_no_path_binds_is_unbound():
    from gradfix.analysis.calls import unbound

    facts = _facts(
        """
        import torch
        print(model)          # nothing bound it yet
        if torch.cuda.is_available():
            model = 1
        print(model)          # bound on one path
        print(len, other)     # a builtin; a name bound nowhere
        def f():
            return other      # in a function: read when it runs
        """
    )
    reads = {(n.lineno, n.id): n for n in facts.function_of if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert unbound(facts, reads[(3, "model")]) and not unbound(facts, reads[(6, "model")])
    assert not unbound(facts, reads[(7, "len")]) and unbound(facts, reads[(7, "other")])
    assert not unbound(facts, reads[(9, "other")])
    swapped = _facts("def g():\n    global other\n    other = 1\ng()\nprint(other)\n")
    (read,) = [n for n in swapped.function_of if isinstance(n, ast.Name) and n.id == "other" and isinstance(n.ctx, ast.Load)]
    assert not unbound(swapped, read)
