"""What runs as the program itself: code under ``if __name__ == "__main__":`` and the entry
point it calls. A mode that such code sets globally is the whole script's on purpose."""

from __future__ import annotations

import ast
import re

from gradfix.facts import FileFacts, main_guard

_ENTRY_NAME = re.compile(r"^(_?main(_\w+)?|\w+_main)$")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# torch calls that configure the process (grad mode, seeds, threads, backends), not run a program.
_CONFIGURATION = re.compile(r"^torch\.(backends\..*|(\w+\.)*(set_\w+|manual_seed\w*|seed|use_deterministic_algorithms))$")


def is_main_guard(facts: FileFacts, node: ast.AST) -> bool:
    return isinstance(node, ast.If) and main_guard(node.test)


def under_main_guard(facts: FileFacts, stmt: ast.stmt) -> bool:
    node = facts.parents.get(stmt)
    while node is not None:
        if is_main_guard(facts, node):
            return True
        node = facts.parents.get(node)
    return False


def standalone_script(facts: FileFacts) -> bool:
    """The file's top level runs its program (so nothing imports it and a grad toggle there is
    the program's own setting): a top-level loop or `with`, or a top-level call of a function or
    class the file defines; or, in a file that defines no function or class at all (nothing an
    importer could use but its variables), a top-level call made for its effect (`print(...)`,
    `benchmark()`), other than torch's own configuration (`torch.manual_seed(0)`,
    `torch.set_num_threads(4)`: what a settings module imported for its side effects does). A
    file with a `__main__` guard is written to be imported too, and is not a standalone script.
    (Top-level prints alone do not make a script of a file with definitions: a demo module can
    be imported for them.)"""
    body = facts.tree.body
    if any(is_main_guard(facts, s) for s in body):
        return False
    defined = {s.name for s in body if isinstance(s, _DEFINITIONS)}
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            return True
        if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined for n in ast.walk(stmt.value)):
                return True
    if any(isinstance(n, _DEFINITIONS) for n in facts.function_of):
        return False
    return any(
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and not _CONFIGURATION.match(facts.call_qualname(stmt.value) or "")
        for stmt in body
    )


def entry_point(facts: FileFacts, func) -> bool:
    """A module-level function that the file uses only under its `__main__` guard (`main(args)`,
    `fire.Fire(main)`, `mp.spawn(main_worker, ...)`): what it leaks, nothing runs after."""
    # The conventional name too: a `validate(model, loader)` smoke-tested under the guard is
    # still a library function other modules import.
    if not isinstance(facts.parents.get(func), ast.Module) or not _ENTRY_NAME.match(func.name):
        return False
    uses = [n for n in ast.walk(facts.tree) if isinstance(n, ast.Name) and n.id == func.name and isinstance(n.ctx, ast.Load)]
    if not uses:
        return False
    for n in uses:
        stmt = n
        while stmt is not None and not isinstance(stmt, ast.stmt):
            stmt = facts.parents.get(stmt)
        if stmt is None or not under_main_guard(facts, stmt) or facts.enclosing_function(stmt) is not None:
            return False
    return True


def generator_functions(facts: FileFacts) -> set[ast.AST]:
    """Functions that ``yield``: their body runs in pieces, between the caller's statements."""
    return facts.memo(
        ("scripts.generator_functions",),
        lambda: {
            f
            for kind in (ast.Yield, ast.YieldFrom)
            for f in map(facts.function_of.get, facts.nodes_of(kind))
            if f is not None
        },
    )
