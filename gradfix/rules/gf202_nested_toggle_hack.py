"""GF202 nested-toggle-hack.

:func:`toggle_pairs` is public: GF201 (bare global toggles) uses it to leave the pairs that
this rule claims alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradfix.lazy import cst

from gradfix.model import FixSafety
from gradfix.rule import Invalid, Option, Rule, Valid
from gradfix.rules.gf203_save_in_grad_context import trailing_saves
from gradfix.rules.gf204_empty_grad_context import grad_with_regions, is_neutral_statement

HELPER_NAME = "_with_grad"
# Calls that inspect or depend on the calling frame: moving them into a helper changes them.
_FRAME_CALLS = frozenset({"locals", "vars", "eval", "exec", "super", "dir", "globals", "breakpoint"})
_LOOPS = (ast.For, ast.While, ast.AsyncFor)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp)


@dataclass
class TogglePair:
    """``torch.set_grad_enabled(True)`` … ``torch.set_grad_enabled(False)`` in a disabled ``with``."""

    with_node: ast.With
    block: list[ast.stmt]  # the statement list holding both toggles
    start: int  # index of the enabling toggle in block
    end: int  # index of the disabling toggle

    @property
    def moved(self) -> list[ast.stmt]:
        return self.block[self.start + 1 : self.end]


# -- finding the pairs ------------------------------------------------------------------------
def _toggle_value(facts, stmt: ast.stmt):
    """True/False for a bare ``torch.set_grad_enabled(<literal>)`` statement, else None."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if facts.call_qualname(call) == "torch.set_grad_enabled" and len(call.args) + len(call.keywords) == 1:
            value = call.args[0] if call.args else (call.keywords[0].value if call.keywords[0].arg == "mode" else None)
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                return value.value
    return None


def _toggle_calls(facts, stmts: list[ast.stmt], region_exprs: set[int]) -> set[int]:
    """ids of every grad-mode toggle call in ``stmts`` that is not a with-item or decorator."""
    found = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and id(node) not in region_exprs:
                if facts.call_qualname(node) == "torch.set_grad_enabled" or (
                    isinstance(node.func, ast.Attribute) and node.func.attr == "_set_grad_enabled"
                ):
                    found.add(id(node))
    return found


def _disabled_with(facts, node: ast.AST) -> bool:
    if not isinstance(node, ast.With):
        return False
    regions = grad_with_regions(facts, node)
    return bool(regions) and regions[-1].called and regions[-1].api is not None and regions[-1].mode == "disabled"


def _blocks(body: list[ast.stmt]):
    """``body`` and the bodies of the ``for``/``while``/``if`` statements in it, recursively.

    Not through ``try`` or another ``with``: an exception they catch would keep running the
    block with the toggled mode, where the rewrite would not.
    """
    yield body
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.While, ast.If)):
            yield from _blocks(stmt.body)
            yield from _blocks(stmt.orelse)


def _escapes(stmts: list[ast.stmt]) -> bool:
    """Whether ``break``/``continue`` in ``stmts`` leave them (skipping a closing toggle)."""
    why = _unsafe_to_extract(stmts)
    return bool(why) and ("break" in why or "continue" in why)


def toggle_pairs(facts) -> list[TogglePair]:
    """Every toggle pair GF202 claims.

    In a grad-disabled ``with``: a bare ``torch.set_grad_enabled(True)`` and the next bare
    ``torch.set_grad_enabled(False)`` in the same statement list (the with's body or a
    ``for``/``while``/``if`` body inside it). A ``with`` is claimed only when every toggle in
    it belongs to such a pair: after any other toggle (a lone ``True``, a computed mode, a
    toggle in a ``try``) the mode at an enabling toggle is not known to be off. A nested pair
    must not ``break``/``continue`` past its closing toggle.
    """
    cache = facts.__dict__.get("_gf202_pairs")
    if cache is not None:
        return cache
    region_exprs = {id(r.expr) for r in facts.regions}
    pairs = []
    for node in facts.withs:
        if not _disabled_with(facts, node):
            continue
        toggles = _toggle_calls(facts, node.body, region_exprs)
        if not toggles:
            continue
        found, claimed, ok = [], set(), True
        for block in _blocks(node.body):
            start = None
            for index, stmt in enumerate(block):
                value = _toggle_value(facts, stmt)
                if value is True and start is None:
                    start = index
                elif value is False and start is not None:
                    pair = TogglePair(node, block, start, index)
                    if block is not node.body and _escapes(pair.moved):
                        ok = False
                    found.append(pair)
                    claimed |= {id(block[start].value), id(stmt.value)}
                    start = None
        if ok and found and claimed == toggles:
            pairs.extend(found)
    facts.__dict__["_gf202_pairs"] = pairs
    return pairs


# -- names read and bound by the moved statements ------------------------------------------------
class _Scan:
    """Names loaded and bound by some code, in source order; comprehension variables excluded."""

    def __init__(self):
        self.loads: list[tuple[str, int]] = []
        self.binds: list[tuple[str, int]] = []

    def visit(self, node: ast.AST, shadowed: frozenset[str] = frozenset()) -> None:
        if isinstance(node, _COMPREHENSIONS + (ast.GeneratorExp,)):
            inner = set(shadowed)
            for gen in node.generators:
                inner.update(_target_names(gen.target))
            for n, gen in enumerate(node.generators):
                self.visit(gen.iter, shadowed if n == 0 else frozenset(inner))
                for cond in gen.ifs:
                    self.visit(cond, frozenset(inner))
            for part in ("elt", "key", "value"):
                if getattr(node, part, None) is not None:
                    self.visit(getattr(node, part), frozenset(inner))
            return
        if isinstance(node, ast.Name):
            if node.id not in shadowed:
                (self.loads if isinstance(node.ctx, ast.Load) else self.binds).append((node.id, node.lineno))
            return
        if isinstance(node, ast.NamedExpr):
            self.binds.extend((n, node.lineno) for n in _target_names(node.target))
            self.visit(node.value, shadowed)
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.loads.append((node.target.id, node.lineno))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                if name != "*":
                    self.binds.append((name, node.lineno))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.binds.append((node.name, node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.binds.append((node.name, node.lineno))
            for dec in node.decorator_list:
                self.visit(dec, shadowed)
            return  # the body is another scope
        elif isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            self.visit(child, shadowed)


def _target_names(target: ast.AST) -> list[str]:
    """Names a target binds (``a.b`` / ``a[i]`` bind nothing: they mutate an object)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _target_names(e)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _scan(nodes) -> _Scan:
    scan = _Scan()
    for node in nodes:
        scan.visit(node)
    return scan


class _Flow:
    """Which names the statements may read before they surely assign them."""

    def __init__(self):
        self.free: list[str] = []

    def read(self, node: ast.AST | None, bound: set[str]) -> None:
        if node is None:
            return
        for name, _ in _scan([node]).loads:
            if name not in bound and name not in self.free:
                self.free.append(name)

    def block(self, stmts: list[ast.stmt], bound: set[str]) -> set[str]:
        bound = set(bound)
        for s in stmts:
            if isinstance(s, ast.If):
                self.read(s.test, bound)
                bound |= self.block(s.body, bound) & self.block(s.orelse, bound)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                self.read(s.iter, bound)
                self.block(s.body, bound | set(_target_names(s.target)))
                self.block(s.orelse, bound)
            elif isinstance(s, ast.While):
                self.read(s.test, bound)
                self.block(s.body, bound)
                self.block(s.orelse, bound)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    self.read(item.context_expr, bound)
                    if item.optional_vars is not None:
                        self.read(item.optional_vars, bound)
                        bound |= set(_target_names(item.optional_vars))
                bound = self.block(s.body, bound)
            elif isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                after_body = self.block(s.body, bound)
                for handler in s.handlers:
                    self.read(handler.type, bound)
                    self.block(handler.body, bound | ({handler.name} if handler.name else set()))
                self.block(s.orelse, after_body)
                bound = self.block(s.finalbody, bound)
            else:
                self.read(s, bound)
                bound |= _definite_binds(s)
        return bound


def _definite_binds(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Assign):
        return {n for t in stmt.targets for n in _target_names(t)}
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id} if not isinstance(stmt, ast.AnnAssign) or stmt.value is not None else set()
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in stmt.names}
    return set()


def _unsafe_to_extract(stmts: list[ast.stmt]) -> str | None:
    """Why moving ``stmts`` into a function would change them, or None."""

    def visit(node: ast.AST, in_loop: bool) -> str | None:
        if isinstance(node, ast.Return):
            return "they `return`"
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return "they `yield`"
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) or (
            isinstance(node, ast.comprehension) and node.is_async
        ):
            return "they `await`"
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return f"they `{'break' if isinstance(node, ast.Break) else 'continue'}` an outer loop"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return "they declare `global`/`nonlocal` names"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.GeneratorExp)):
            return "they define a function, class or generator that could capture the helper's variables"
        if isinstance(node, ast.Delete) and any(_target_names(t) for t in node.targets):
            return "they `del` a variable"
        if isinstance(node, ast.Match):
            return "they use `match`"
        if isinstance(node, ast.Name) and node.id == "__class__":
            return "they read `__class__`"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FRAME_CALLS:
            return f"they call `{node.func.id}()`, which depends on the calling frame"
        for field_name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            loop_body = isinstance(node, _LOOPS) and field_name == "body"
            for child in children:
                if isinstance(child, ast.AST):
                    why = visit(child, in_loop or loop_body)
                    if why:
                        return why
        return None

    for stmt in stmts:
        why = visit(stmt, False)
        if why:
            return why
    return None


@dataclass
class _Extraction:
    params: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()
    reason: str = ""  # why function style is not possible (empty when it is)


def _plan_extraction(facts, pair: TogglePair) -> _Extraction:
    func = facts.enclosing_function(pair.with_node)
    if func is None or isinstance(func, ast.Lambda):
        return _Extraction(reason="at module level every name it binds is a global that any code may read")
    parent = facts.parents.get(pair.with_node)
    while parent is not None and parent is not func:
        if isinstance(parent, ast.ClassDef):
            return _Extraction(reason="the block is in a class body")
        parent = facts.parents.get(parent)
    moved = pair.moved
    why = _unsafe_to_extract(moved)
    if why:
        return _Extraction(reason=why)
    first_line = pair.block[pair.start].end_lineno
    last_line = pair.block[pair.end].lineno

    def inside(line: int) -> bool:
        return first_line < line < last_line

    # Names the enclosing function binds, with the lines that bind them.
    func_scan = _scan(func.body)
    bound_at: dict[str, list[int]] = {}
    for name, line in func_scan.binds:
        bound_at.setdefault(name, []).append(line)
    args = func.args
    params_of_func = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
    declared = facts.scope_of_node[func].globals

    def bound_before(name: str) -> bool:
        return name in params_of_func or any(line < first_line for line in bound_at.get(name, ()))

    flow = _Flow()
    surely_bound = flow.block(moved, set())
    moved_binds = list(dict.fromkeys(n for n, _ in _scan(moved).binds))
    if set(moved_binds) & declared:
        return _Extraction(reason="they assign a name the function declares `global`/`nonlocal`")
    params = []
    for name in flow.free:
        if name in params_of_func or name in bound_at:
            if not bound_before(name):
                return _Extraction(reason=f"they may read `{name}` before it is assigned")
            params.append(name)
    # Every later read counts, in the whole function (loops run earlier code again, nested
    # functions read the variable when they are called).
    used_outside = {
        n.id
        for n in ast.walk(func)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store) and not inside(n.lineno)
    }
    returns = []
    for name in moved_binds:
        if name not in used_outside:
            continue
        if name not in surely_bound:
            if not bound_before(name):
                return _Extraction(reason=f"they assign `{name}` only on some paths")
            if name not in params:
                params.append(name)
        returns.append(name)
    return _Extraction(tuple(params), tuple(returns))


def _torch_alias_usable(facts, at: ast.AST) -> bool:
    """Whether the name ``ctx.torch_name()`` will write means the torch module at ``at``."""
    for stmt in facts.tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name == "torch":
                    return facts.resolve_name(alias.asname or "torch", at) == "torch"
    return all("torch" not in s.imports and "torch" not in s.locals for s in facts._scopes_for(at))


def _identifiers(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names


def _alone_on_its_line(facts, stmt: ast.stmt) -> bool:
    """``stmt`` fills its line, apart from indentation and a trailing comment."""
    if stmt.lineno != stmt.end_lineno:
        return False
    text = facts.line_text(stmt.lineno)
    before = text[: facts.char_col(stmt.lineno, stmt.col_offset)]
    after = text[facts.char_col(stmt.lineno, stmt.end_col_offset) :].strip()
    return not before.strip() and (not after or after.startswith("#"))


# -- comments of the removed toggles ---------------------------------------------------------------
def _comment_lines(stmt: cst.SimpleStatementLine, indent: str | None = None) -> list[cst.EmptyLine]:
    """``stmt``'s leading lines and trailing comment as own lines (at ``indent`` if given)."""
    lines = list(stmt.leading_lines)
    comment = stmt.trailing_whitespace.comment
    if comment is not None:
        lines.append(cst.EmptyLine(comment=comment))
    if indent is None:
        return lines
    out = []
    for line in lines:
        if line.indent and line.comment is not None:
            line = line.with_changes(indent=False, whitespace=cst.SimpleWhitespace(indent + line.whitespace.value))
        out.append(line)
    return out


class NestedToggleHack(Rule):
    """
    ## What it does
    Finds the "toggle hack" of the article's §3.2: inside a grad-disabled `with` block
    (`torch.no_grad()`, `torch.set_grad_enabled(False)`, `torch.inference_mode()`), a bare
    `torch.set_grad_enabled(True)` statement and the bare `torch.set_grad_enabled(False)` that
    ends it, to compute something with gradients in between.

    ## Why is this bad?
    It is built on a false claim (§3.1): an inner `with torch.enable_grad():` (or
    `set_grad_enabled(True)`) *does* record graphs inside `no_grad` (pinned in
    `tests/facts/test_gf202_facts.py`). The toggles flip a thread-global switch by hand; it
    works only because the outer `with` restores the mode on exit, and one forgotten or
    skipped `set_grad_enabled(False)` leaves the rest of the block recording graphs.

    ## Example
    ```python
    def refine(model, x):
        with torch.no_grad():
            feats = model.encoder(x)
            torch.set_grad_enabled(True)
            feats.requires_grad_(True)
            score = model.head(feats).sum()
            torch.set_grad_enabled(False)
            return score, feats
    ```

    ## Use instead
    ```python
    def refine(model, x):
        with torch.no_grad():
            feats = model.encoder(x)
            @torch.enable_grad()
            def _with_grad(feats, model):
                feats.requires_grad_(True)
                score = model.head(feats).sum()
                return score
            score = _with_grad(feats, model)
            return score, feats
    ```
    With `style = "block"` (option of GF202), or where a helper cannot be extracted:
    ```python
            with torch.enable_grad():
                feats.requires_grad_(True)
                score = model.head(feats).sum()
    ```

    ## Fix safety
    Safe: both forms enable grad for exactly those statements and end with the mode off,
    as the toggles did; an exception leaves the outer `with` either way, which restores the
    caller's mode. The default `function` style moves the statements into a helper decorated
    with `@torch.enable_grad()`, defined in place; it takes the variables they read that the
    function assigned before (or its parameters) and returns the variables they assign that
    are read anywhere else in the function. It falls back to `block` style when the
    statements `return`, `yield`, `await`, `break`/`continue` an outer loop, use
    `global`/`nonlocal`, `del` a variable, define a function, class or generator expression
    (a closure would capture the helper's variables), call `locals()`/`super()`…, may read a
    variable before it is assigned, or assign a returned variable only on some paths; and at
    module level or in a class body (every name bound there is an attribute any code may
    read). When the statements between the toggles do no tensor work (GF204's statements),
    the toggles are simply removed; trailing `torch.save` calls go after the new block
    (GF203). Only the pair is claimed: a lone `torch.set_grad_enabled(True)` in the block, or a
    pair after another toggle, is left to GF201. Comments of the removed toggles are kept.
    """

    code = "GF202"
    name = "nested-toggle-hack"
    summary = "`set_grad_enabled(True)` … `set_grad_enabled(False)` toggles inside a grad-disabled `with`"
    fix_safety = FixSafety.SAFE
    triggers = ("set_grad_enabled",)
    options = (
        Option(
            "style",
            ("function", "block"),
            "`function`: move the statements into a helper decorated with `@torch.enable_grad()`; "
            "`block`: wrap them in `with torch.enable_grad():`",
        ),
    )

    VALID = [
        # A pair outside any grad-disabled `with` is GF201's.
        Valid("import torch\ndef f(x):\n    torch.set_grad_enabled(True)\n    y = x * 2\n    torch.set_grad_enabled(False)\n"),
        Valid("import torch\nwith torch.no_grad():\n    with torch.set_grad_enabled(True):\n        y = x * 2\n"),
        Valid("import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    y = x * 2\n"),
        Valid("import torch\nwith torch.enable_grad():\n    torch.set_grad_enabled(True)\n    y = x * 2\n    torch.set_grad_enabled(False)\n"),
        Valid("import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(mode)\n    y = x * 2\n    torch.set_grad_enabled(False)\n"),
        Valid("import torch\nwith torch.no_grad() if frozen else contextlib.nullcontext():\n"
              "    torch.set_grad_enabled(True)\n    y = x * 2\n    torch.set_grad_enabled(False)\n"),
        Valid("def f(torch, x):\n    with torch.no_grad():\n        torch.set_grad_enabled(True)\n"
              "        y = x * 2\n        torch.set_grad_enabled(False)\n"),
        # Under a `try` the handler would run with grad on: not claimed (GF201's).
        Valid("import torch\nwith torch.no_grad():\n    try:\n        torch.set_grad_enabled(True)\n"
              "        y = x * 2\n        torch.set_grad_enabled(False)\n    except RuntimeError:\n        y = None\n"),
        # A nested pair that can `continue` past its closing toggle leaks into the next step.
        Valid("import torch\nwith torch.no_grad():\n    for x in xs:\n        torch.set_grad_enabled(True)\n"
              "        if x is None:\n            continue\n        y = x * 2\n        torch.set_grad_enabled(False)\n"),
        Valid("import torch\nwith torch.no_grad():  # noqa: GF202\n    torch.set_grad_enabled(True)\n"
              "    y = x * 2\n    torch.set_grad_enabled(False)\n"),
        # After a lone True the mode at the next True is not off: not claimed.
        Valid("import torch\nwith torch.no_grad():\n    torch.set_grad_enabled(True)\n    a = 1\n"
              "    torch.set_grad_enabled(True)\n    y = x * 2\n    torch.set_grad_enabled(False)\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\n"
            "def refine(model, x):\n"
            "    with torch.no_grad():\n"
            "        feats = model.encoder(x)\n"
            "        torch.set_grad_enabled(True)  # need grads here\n"
            "        feats.requires_grad_(True)\n"
            "        score = model.head(feats).sum()\n"
            "        torch.set_grad_enabled(False)\n"
            "        return score, feats\n",
            "import torch\n"
            "def refine(model, x):\n"
            "    with torch.no_grad():\n"
            "        feats = model.encoder(x)\n"
            "        @torch.enable_grad()  # need grads here\n"
            "        def _with_grad(feats, model):\n"
            "            feats.requires_grad_(True)\n"
            "            score = model.head(feats).sum()\n"
            "            return score\n"
            "        score = _with_grad(feats, model)\n"
            "        return score, feats\n",
        ),
        Invalid(
            "import torch\n"
            "def refine(model, x):\n"
            "    with torch.no_grad():\n"
            "        feats = model.encoder(x)\n"
            "        torch.set_grad_enabled(True)\n"
            "        score = model.head(feats).sum()\n"
            "        # back off\n"
            "        torch.set_grad_enabled(False)  # restore\n"
            "        return score\n",
            "import torch\n"
            "def refine(model, x):\n"
            "    with torch.no_grad():\n"
            "        feats = model.encoder(x)\n"
            "        with torch.enable_grad():\n"
            "            score = model.head(feats).sum()\n"
            "        # back off\n"
            "        # restore\n"
            "        return score\n",
            options={"style": "block"},
        ),
        Invalid(
            "from torch import no_grad, set_grad_enabled\n"
            "def loop(xs, w):\n"
            "    total = 0\n"
            "    with no_grad():\n"
            "        for x in xs:\n"
            "            pass\n"
            "        set_grad_enabled(True)\n"
            "        for x in xs:\n"
            "            if x is None:\n"
            "                break\n"
            "            total += (x * w).sum()\n"
            "        set_grad_enabled(False)\n"
            "    return total\n",
            "from torch import no_grad, set_grad_enabled\n"
            "import torch\n\n"
            "def loop(xs, w):\n"
            "    total = 0\n"
            "    with no_grad():\n"
            "        for x in xs:\n"
            "            pass\n"
            "        @torch.enable_grad()\n"
            "        def _with_grad(xs, total, w):\n"
            "            for x in xs:\n"
            "                if x is None:\n"
            "                    break\n"
            "                total += (x * w).sum()\n"
            "            return total\n"
            "        total = _with_grad(xs, total, w)\n"
            "    return total\n",
        ),
        Invalid(  # `return` between the toggles: block style
            "import torch as T\n"
            "def f(x):\n"
            "    with T.inference_mode():\n"
            "        T.set_grad_enabled(True)\n"
            "        if x is None:\n"
            "            return None\n"
            "        y = x * 2\n"
            "        T.set_grad_enabled(False)\n"
            "    return y\n",
            "import torch as T\n"
            "def f(x):\n"
            "    with T.inference_mode():\n"
            "        with T.enable_grad():\n"
            "            if x is None:\n"
            "                return None\n"
            "            y = x * 2\n"
            "    return y\n",
        ),
        Invalid(  # nothing grad-dependent between the toggles: they just go
            "import torch\n"
            "with torch.set_grad_enabled(False):\n"
            "    torch.set_grad_enabled(True)  # on\n"
            "    print('hello')\n"
            "    torch.set_grad_enabled(False)  # off\n"
            "    y = x * 2\n",
            "import torch\n"
            "with torch.set_grad_enabled(False):\n"
            "    # on\n"
            "    print('hello')\n"
            "    # off\n"
            "    y = x * 2\n",
        ),
        Invalid(  # toggle line shared with another statement: reported, not fixed
            "import torch\n"
            "with torch.no_grad():\n"
            "    a = 1; torch.set_grad_enabled(True)\n"
            "    y = x * 2\n"
            "    torch.set_grad_enabled(False)\n",
            None,
        ),
    ]

    def check(self, facts):
        taken = _identifiers(facts.tree)
        for pair in toggle_pairs(facts):
            node = pair.with_node
            enable, disable = pair.block[pair.start], pair.block[pair.end]
            what = facts.segment(grad_with_regions(facts, node)[-1].expr)
            message = (
                f"toggle hack inside `with {what}:`: `set_grad_enabled(True)` … `set_grad_enabled(False)` flips "
                "the global grad mode by hand, but a scoped `torch.enable_grad()` records graphs here too; "
            )
            fixable = (
                _alone_on_its_line(facts, enable)
                and _alone_on_its_line(facts, disable)
                and _torch_alias_usable(facts, node)
            )
            moved = pair.moved
            hoisted = trailing_saves(facts, moved)
            if all(is_neutral_statement(facts, s) for s in moved[: len(moved) - hoisted]):
                style, extraction = "remove", _Extraction()
                message += "the statements between the toggles do no tensor work: remove the toggles"
            elif self.opts.get("style") == "block":
                style, extraction = "block", _Extraction()
                message += "use `with torch.enable_grad():` instead of the toggles"
            else:
                extraction = _plan_extraction(facts, pair)
                if extraction.reason:
                    style = "block"
                    message += (
                        "use `with torch.enable_grad():` instead of the toggles "
                        f"(no helper function: {extraction.reason})"
                    )
                else:
                    style = "function"
                    message += "move the statements into a helper decorated with `@torch.enable_grad()`"
            helper = ""
            if style == "function":
                helper, n = HELPER_NAME, 1
                while helper in taken:
                    n += 1
                    helper = f"{HELPER_NAME}_{n}"
                taken.add(helper)
            if fixable and style == "remove" and disable is pair.block[-1]:
                # The closing toggle's comments would have no statement to stay with.
                if moved:
                    first = moved[-1].end_lineno + 1
                else:
                    first = pair.block[pair.start - 1].end_lineno + 1 if pair.start else enable.lineno
                fixable = not any("#" in facts.line_text(n) for n in range(first, disable.lineno + 1))
            if not fixable:
                message += (
                    " (not fixed automatically: the toggles share a line with other code, `torch` is shadowed, "
                    "or their comments would have no place to go)"
                )
            line = facts.line_text(enable.lineno)
            indent = line[: len(line) - len(line.lstrip())]
            data = (
                facts.span(enable),
                enable.lineno,
                disable.lineno,
                style,
                helper,
                extraction.params,
                extraction.returns,
                hoisted if style == "block" else 0,
                indent,
            )
            yield self.report(facts, enable, message, fix=fixable, anchors=[node, disable], data=data)

    def fix(self, finding, ctx):
        from gradfix.fixer import Edit, FixError

        enable_span, enable_line, disable_line, style, helper, params, returns, hoisted, indent = finding.data
        block = ctx.parent(ctx.node_at(enable_span, cst.SimpleStatementLine))
        if not isinstance(block, cst.IndentedBlock):
            raise FixError("one-line block")
        lines = [ctx.span_of(s).line for s in block.body]
        try:
            start, end = lines.index(enable_line), lines.index(disable_line)
        except ValueError:
            raise FixError("the toggles moved") from None
        enable, disable = block.body[start], block.body[end]
        moved = list(block.body[start + 1 : end])
        edits = [Edit(s, cst.RemoveFromParent()) for s in moved]

        if style == "remove":
            edits = []
            if moved:
                first = moved[0]
                edits.append(Edit(first, first.with_changes(leading_lines=[*_comment_lines(enable), *first.leading_lines])))
                pending = _comment_lines(disable)
            else:
                pending = [*_comment_lines(enable), *_comment_lines(disable)]
            edits += [Edit(enable, cst.RemoveFromParent()), Edit(disable, cst.RemoveFromParent())]
            if pending:
                if end + 1 >= len(block.body):
                    if any(line.comment is not None for line in pending):
                        raise FixError("the toggles' comments have no place to go")
                else:
                    after = block.body[end + 1]
                    edits.append(Edit(after, after.with_changes(leading_lines=[*pending, *after.leading_lines])))
            return edits

        torch_name = ctx.torch_name()
        if style == "block":
            inside, after = moved[: len(moved) - hoisted], moved[len(moved) - hoisted :]
            new_block = cst.IndentedBlock(body=inside, header=enable.trailing_whitespace, indent=block.indent)
            if after:
                # Hoisted saves stay in place, right after the new block; the closing
                # toggle's comments go before them.
                edits = [Edit(s, cst.RemoveFromParent()) for s in inside]
                first = after[0]
                edits.append(Edit(first, first.with_changes(leading_lines=[*_comment_lines(disable), *first.leading_lines])))
            else:
                # The closing toggle's comments stay where they were, at the outer indentation.
                new_block = new_block.with_changes(footer=_comment_lines(disable, indent))
            with_stmt = ctx.statement(f"with {torch_name}.enable_grad():\n    pass\n")
            with_stmt = with_stmt.with_changes(leading_lines=enable.leading_lines, body=new_block)
            edits += [Edit(enable, with_stmt), Edit(disable, cst.RemoveFromParent())]
            return edits

        # function style
        signature = ", ".join(params)
        helper_def = ctx.statement(f"@{torch_name}.enable_grad()\ndef {helper}({signature}):\n    pass\n")
        body = list(moved)
        if returns:
            body.append(ctx.statement(f"return {', '.join(returns)}\n"))
        decorator = helper_def.decorators[0].with_changes(trailing_whitespace=enable.trailing_whitespace)
        helper_def = helper_def.with_changes(
            leading_lines=enable.leading_lines,
            decorators=[decorator],
            body=cst.IndentedBlock(body=body, indent=block.indent),
        )
        call = f"{helper}({signature})"
        if returns:
            call = f"{', '.join(returns)} = {call}"
        call_stmt = ctx.statement(call + "\n").with_changes(
            leading_lines=disable.leading_lines, trailing_whitespace=disable.trailing_whitespace
        )
        edits.append(Edit(enable, helper_def))
        edits.append(Edit(disable, call_stmt))
        return edits
