"""Verification contracts: what running a scenario before and after a rule's fix must show.

A rule declares its contract next to its code (``Rule.contract``); the harness only runs the
scenario both ways and hands the two observations to the contract. This module never imports
torch: expectations receive a :class:`Context` whose ``same`` compares observed values (the
harness supplies it: bitwise on CPU, ``torch.allclose`` with a stated tolerance on CUDA).

``Rule.contract`` may be:

* ``None`` (the default): derived from ``fix_safety``: a safe fix must leave every observable
  equal (:data:`EQUIVALENT`); an unsafe fix without a declared contract is reported as
  MISMATCH unless nothing changed (an unsafe fix must say what it changes);
* a :class:`Contract`;
* a ``dict`` from option value (``style``) to :class:`Contract`;
* a callable (e.g. a ``staticmethod``) returning one of the above, so rule modules can import
  this module lazily.

Observables are named by keys such as ``call 2 evaluate: returned[0]``, ``call 2 evaluate:
grad mode after``, ``call 2 evaluate: training model.drop``, ``call 2 evaluate: state
model.bn.running_mean``, ``call 2 evaluate: forwards``, ``grad model.fc.weight``,
``file ckpt.pt``, ``exception``. ``may_differ`` holds ``fnmatch`` patterns over these keys.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

EQUIVALENT_VERDICT = "equivalent"
INTENDED_VERDICT = "intended change confirmed"
DIAGNOSIS_VERDICT = "diagnosis confirmed"
MISMATCH = "MISMATCH"


# --------------------------------------------------------------------------------------------
# what an expectation sees
# --------------------------------------------------------------------------------------------
@dataclass
class Context:
    """Both runs of one scenario, as plain data, plus the value comparison in force."""

    before: Mapping[str, Any]  # raw observation of the original code
    after: Mapping[str, Any] | None  # raw observation of the rewritten code (None: no fix)
    roles: Mapping[str, Any]  # the scenario's GRADFIX_VERIFY["roles"]
    same: Callable[[Any, Any], bool]  # value equality (bitwise / tolerance)
    changed: bool = True  # some observable differs (``fixed`` checks apply only then)

    def role(self, name: str) -> Any:
        if name not in self.roles:
            raise ContractError(f"the scenario declares no role {name!r} (GRADFIX_VERIFY['roles'])")
        return self.roles[name]

    def role_list(self, name: str) -> list[str]:
        value = self.role(name)
        return [value] if isinstance(value, str) else list(value)


class ContractError(Exception):
    """The contract cannot be evaluated on this scenario (a scenario/contract mismatch)."""


def _calls(obs: Mapping[str, Any], names: Sequence[str]) -> list[dict]:
    return [c for c in obs["calls"] if c["name"] in names]


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _exc_matches(exc: Mapping[str, Any] | None, type_name: str, match: str) -> bool:
    return exc is not None and exc["type"] == type_name and re.search(match, exc["message"]) is not None


def _fmt_exc(exc: Mapping[str, Any] | None) -> str:
    return "no exception" if exc is None else f"{exc['type']}: {exc['message']}"


class Expectation:
    """One property the runs must have. ``check`` returns None when it holds, else why not."""

    def check(self, ctx: Context) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def __str__(self) -> str:
        return type(self).__name__


class FixedProperty(Expectation):
    """A property that must hold in the rewrite and, with ``fixed``, did not hold in the original
    (otherwise the rewrite changed nothing the scenario shows). Subclasses define
    ``problem(observation, ctx)`` (None when the property holds) and ``already``."""

    fixed: bool
    already: str = "the original already had this property: the rewrite changed nothing this scenario shows"

    def problem(self, obs, ctx) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def check(self, ctx):
        problem = self.problem(ctx.after, ctx)
        if problem:
            return f"after the rewrite, {problem}"
        if self.fixed and ctx.changed and self.problem(ctx.before, ctx) is None:
            return self.already.format(self=self)
        return None


@dataclass(frozen=True)
class ExceptionFixed(Expectation):
    """The original raises ``type`` (message matching ``match``); the rewrite raises nothing.

    With ``required=False``: *if* the original raises, it is that error, and the rewrite
    raises nothing; an original that runs must still run after the rewrite."""

    type: str
    match: str = ""
    required: bool = True

    def check(self, ctx):
        if not self.required and ctx.before["exception"] is None:
            if ctx.after is not None and ctx.after["exception"] is not None:
                return f"the rewrite raises {_fmt_exc(ctx.after['exception'])}"
            return None
        if not _exc_matches(ctx.before["exception"], self.type, self.match):
            return f"expected the original to raise {self.type} /{self.match}/, got {_fmt_exc(ctx.before['exception'])}"
        if ctx.after is not None and ctx.after["exception"] is not None:
            return f"the rewrite still raises {_fmt_exc(ctx.after['exception'])}"
        return None

    def __str__(self):
        return f"the {self.type} disappears"


@dataclass(frozen=True)
class Raises(Expectation):
    """The original code raises ``type`` (diagnostic-only rules: the diagnosis is real)."""

    type: str
    match: str = ""

    def check(self, ctx):
        if not _exc_matches(ctx.before["exception"], self.type, self.match):
            return f"expected the original to raise {self.type} /{self.match}/, got {_fmt_exc(ctx.before['exception'])}"
        return None

    def __str__(self):
        return f"the original raises {self.type}"


@dataclass(frozen=True)
class Grads(Expectation):
    """After the rewrite, parameters under role ``role`` get gradients (``present``) or none.

    "None" means ``.grad is None`` or all zeros; "present" means some nonzero gradient.
    """

    role: str
    present: bool

    def check(self, ctx):
        prefixes = ctx.role_list(self.role)
        grads = {k: v for k, v in ctx.after["grads"].items() if _under(k, prefixes)}
        if not grads:
            return f"no parameters under role {self.role!r} ({', '.join(prefixes)})"
        for name, grad in grads.items():
            has = grad is not None and bool(grad.abs().sum() > 0)
            if has != self.present:
                return f"after the rewrite, {name}.grad is {'empty' if not has else 'nonzero'}; expected {'a gradient' if self.present else 'no gradient'}"
        return None

    def __str__(self):
        return f"{self.role} stage {'gets' if self.present else 'gets no'} gradients"


@dataclass(frozen=True)
class Unchanged(Expectation):
    """After the rewrite, parameters under role ``role`` end where they started."""

    role: str

    def check(self, ctx):
        prefixes = ctx.role_list(self.role)
        first, last = ctx.after["initial_state"], ctx.after["final_state"]
        for name, value in first.items():
            if _under(name, prefixes) and not ctx.same(value, last[name]):
                return f"after the rewrite, {name} changed during the run (role {self.role!r} must stay frozen)"
        return None

    def __str__(self):
        return f"{self.role} stage unchanged"


@dataclass(frozen=True)
class RepeatableCalls(FixedProperty):
    """Calls named by role ``role`` (e.g. two evaluation passes): in the rewrite they all return
    the same values and leave parameters and buffers (batch-norm running stats) untouched; the
    original did not (``fixed=True``)."""

    role: str
    fixed: bool = True
    already = "the original was already repeatable: the rewrite changed nothing this scenario shows"

    def problem(self, obs, ctx) -> str | None:
        names = ctx.role_list(self.role)
        calls = obs["calls"]
        previous_state = obs["initial_state"]
        returns = []
        for call in calls:
            if call["name"] in names:
                for key, value in call["state"].items():
                    if key in previous_state and not ctx.same(value, previous_state[key]):
                        return f"call {call['index']} {call['name']} changed {key}"
                returns.append(call)
            previous_state = call["state"]
        if len(returns) < 2:
            return f"need two calls of {names} to compare, got {len(returns)}"
        for call in returns[1:]:
            if not ctx.same(call["returned"], returns[0]["returned"]):
                return f"call {call['index']} {call['name']} returned different values than call {returns[0]['index']}"
        return None

    def __str__(self):
        return f"{self.role} calls repeatable, state untouched"


@dataclass(frozen=True)
class ForwardMode(FixedProperty):
    """Every module forward during calls of role ``role`` runs with ``attr`` == ``value`` in the
    rewrite (attr: ``training``, ``grad``, ``inference``); with ``fixed``, some did not before."""

    role: str
    attr: str
    value: bool
    fixed: bool = True

    _INDEX = {"training": 1, "grad": 2, "inference": 3}

    already = "the original already ran every forward of {self.role!r} with {self.attr}={self.value}"

    def problem(self, obs, ctx):
        names = ctx.role_list(self.role)
        index = self._INDEX[self.attr]
        seen = 0
        for call in _calls(obs, names):
            for record in call["forwards"]:
                seen += 1
                if record[index] != self.value:
                    return f"call {call['index']} {call['name']}: {record[0]} ran with {self.attr}={record[index]}"
        if not seen:
            return f"no module forward was observed in {names}"
        return None

    def __str__(self):
        return f"{self.role} forwards run with {self.attr}={self.value}"


@dataclass(frozen=True)
class NoGraphReturned(FixedProperty):
    """Tensors returned by calls of role ``role`` carry no autograd graph after the rewrite
    (``requires_grad`` False); with ``fixed``, some did before."""

    role: str
    fixed: bool = True
    already = "the original already returned no graph from {self.role!r}"

    def problem(self, obs, ctx):
        for call in _calls(obs, ctx.role_list(self.role)):
            for key, flag in call["requires_grad"].items():
                if flag:
                    return f"call {call['index']} {call['name']} returned{key} requires grad"
        return None

    def __str__(self):
        return f"{self.role} returns no graph"


@dataclass(frozen=True)
class GradModeKept(FixedProperty):
    """After every call, grad mode is what the caller had (enabled); with ``fixed``, the
    original leaked a disabled mode out of some call."""

    fixed: bool = True
    already = "the original did not leak grad mode either: the rewrite changed nothing this scenario shows"

    def problem(self, obs, ctx):
        for call in obs["calls"]:
            if not call["grad_enabled"]:
                return f"call {call['index']} {call['name']} left grad mode disabled"
        return None

    def __str__(self):
        return "grad mode no longer leaks"


@dataclass(frozen=True)
class SameValues(Expectation):
    """Calls of role ``role`` return the same numbers (tensor or float) within ``rtol``."""

    role: str
    rtol: float = 1e-6

    def check(self, ctx):
        before = _calls(ctx.before, ctx.role_list(self.role))
        after = _calls(ctx.after, ctx.role_list(self.role))
        if len(before) != len(after):
            return f"{len(before)} calls of {self.role!r} before, {len(after)} after"
        for b, a in zip(before, after):
            for key in b["numbers"]:
                x, y = b["numbers"][key], a["numbers"].get(key)
                if y is None or abs(x - y) > self.rtol * max(abs(x), abs(y), 1e-12):
                    return f"call {b['index']} {b['name']} returned{key}: {x!r} before, {y!r} after"
        return None

    def __str__(self):
        return f"{self.role} values equal (rtol {self.rtol:g})"


@dataclass(frozen=True)
class NewErrorOnly(Expectation):
    """The rewrite may raise ``type`` (matching ``match``) where the original ran on silently
    (e.g. autograd's version check now sees an in-place write); no other new behaviour."""

    type: str
    match: str = ""

    def check(self, ctx):
        after = ctx.after["exception"]
        if after is None or after == ctx.before["exception"]:
            return None
        if not _exc_matches(after, self.type, self.match):
            return f"the rewrite raises {_fmt_exc(after)}; only {self.type} /{self.match}/ may appear"
        if ctx.before["exception"] is not None:
            return f"the original raised {_fmt_exc(ctx.before['exception'])} already"
        return None

    def __str__(self):
        return f"{self.type} now raised where the original went on silently"


# --------------------------------------------------------------------------------------------
# the contract
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contract:
    """What a rule's fix must do to a scenario's observables.

    Every observable must be equal before and after, except keys matching ``may_differ``
    (``fnmatch`` patterns). With ``downstream``, once an allowed difference appears, every
    observable of later calls and the final ones (parameters, grads, files) may differ too:
    they are consequences of the intended change (e.g. training that used to crash now runs);
    ``keep`` patterns are compared even then. Every expectation in ``expect`` must hold.
    """

    summary: str
    may_differ: tuple[str, ...] = ()
    expect: tuple[Expectation, ...] = ()
    downstream: bool = False
    keep: tuple[str, ...] = ()

    def allowed(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in self.may_differ)

    def kept(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, p) for p in self.keep)


EQUIVALENT = Contract("every observable equal (safe fix)")


@dataclass(frozen=True)
class Diagnosis:
    """Contract of a rule that reports without a fix: running the original shows the problem."""

    summary: str
    expect: tuple[Expectation, ...] = ()


def resolve(rule: Any, options: Mapping[str, str] | None = None) -> Contract | Diagnosis | None:
    """The contract ``rule`` declares for these options (None: an unsafe fix declared none)."""
    declared = getattr(rule, "contract", None)
    if callable(declared) and not isinstance(declared, (Contract, Diagnosis)):
        declared = declared()
    if isinstance(declared, Mapping):
        options = dict(options or {})
        for value in options.values():
            if value in declared:
                return declared[value]
        return declared.get("*") or declared.get(None)
    if declared is not None:
        return declared
    safety = getattr(getattr(rule, "fix_safety", None), "value", None)
    if safety == "safe":
        return EQUIVALENT
    if safety is None:
        return Diagnosis("the rule reports without a fix; the original must run as the diagnosis says")
    return None


@dataclass
class Verdict:
    verdict: str  # equivalent / intended change confirmed / diagnosis confirmed / MISMATCH / ...
    detail: str = ""
    changed: list[str] = field(default_factory=list)  # observables that differed (allowed)

    @property
    def ok(self) -> bool:
        return self.verdict in (EQUIVALENT_VERDICT, INTENDED_VERDICT, DIAGNOSIS_VERDICT)
