"""The forward data flow under module-mode state and GF303's question (gradfix/analysis/flow.py)."""

from __future__ import annotations

import ast

from gradfix.analysis.flow import ForwardFlow, always_ran_before
from gradfix.facts import build_facts


def _marks(source: str, **options):
    """Run the flow over ``source``: a statement `mark = 'x'` sets the state to {'x'}; returns
    the state on entry to each `probe(...)` statement, by its argument, and the exit state."""
    tree = ast.parse(source)

    def effect(stmt, state):
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "mark":
            return frozenset({stmt.value.value})
        return state

    flow = ForwardFlow(tree.body, frozenset({"in"}), effect, **options)
    probes = {
        s.value.args[0].value: flow.at.get(id(s), frozenset())
        for s in ast.walk(tree)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and getattr(s.value.func, "id", "") == "probe"
    }
    return probes, flow.exit


def test_branches_join_and_return_raise_end_their_path():
    probes, exit_ = _marks("if c:\n    mark = 'a'\nelse:\n    mark = 'b'\nprobe(1)\nif d:\n    raise E\nmark = 'c'\n")
    assert probes[1] == {"a", "b"} and exit_ == {"c"}
    probes, exit_ = _marks("def f():\n    pass\nif c:\n    mark = 'a'\n    return\nprobe(1)\n")
    assert probes[1] == {"in"} and exit_ == {"in", "a"}


def test_loops_carry_the_body_end_to_the_next_iteration_and_may_be_left_by_break():
    probes, exit_ = _marks("for x in xs:\n    probe(1)\n    mark = 'a'\nprobe(2)\n")
    assert probes[1] == {"in", "a"} and probes[2] == {"a"}  # taken to run at least once
    probes, _ = _marks("for x in xs:\n    probe(1)\n    mark = 'a'\nprobe(2)\n", loops_may_skip=True)
    assert probes[2] == {"in", "a"}
    probes, _ = _marks("while True:\n    if c:\n        break\n    mark = 'a'\nprobe(1)\n")
    assert probes[1] == {"in", "a"}
    probes, _ = _marks("for x in xs:\n    if c:\n        mark = 'a'\n        continue\n    mark = 'b'\nprobe(1)\n")
    assert probes[1] == {"a", "b"}


def test_try_handlers_start_anywhere_in_the_body_and_finally_runs_for_returns():
    probes, _ = _marks("try:\n    mark = 'a'\n    work()\n    mark = 'b'\nexcept E:\n    probe(1)\nprobe(2)\n")
    assert probes[1] == {"in", "a", "b"} and probes[2] == {"in", "a", "b"}
    _, exit_ = _marks("try:\n    mark = 'a'\n    if c:\n        return\nfinally:\n    mark = 'f'\n")
    assert exit_ == {"f"}


def test_always_ran_before_is_per_pass_through_the_body():
    source = (
        "for x in xs:\n    if c:\n        loss.backward()\n    acc += loss\n    loss.backward()\n    acc += loss\n"
        "    ok = c and loss.backward()\n    acc += loss\n"
    )
    facts = build_facts(source)
    loop = facts.tree.body[0]
    first, second, bool_op = [c for c in facts.calls if isinstance(c.func, ast.Attribute)]
    acc1, acc2, acc3 = [s for s in loop.body if isinstance(s, ast.AugAssign)]
    assert not always_ran_before(facts.parents, loop.body, first, acc1)  # only under `if c`
    assert always_ran_before(facts.parents, loop.body, second, acc2)
    assert not always_ran_before(facts.parents, loop.body, bool_op, acc3)  # `c and ...` may skip it
