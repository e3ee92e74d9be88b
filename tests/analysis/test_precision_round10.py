"""Wrong findings and awkward rewrites of the round-9 sample (bench/precision/verdicts9.tsv,
judged on 7782f5d), one fixture per shape, written for these tests."""

from __future__ import annotations

import textwrap

import pytest

from gradfix import Settings, check

DIFFERENTIATION = Settings(select=("GF102", "GF103"))


def _codes(source: str, settings: Settings) -> list[str]:
    return [f.code for f in check(textwrap.dedent(source), settings=settings)]


DEMONSTRATION = """\
import torch

x = torch.arange(1., 4)
w = torch.ones(3, requires_grad=True)
with torch.no_grad():
    z = w @ x
{backward}
"""


def _demonstration(handler: str) -> str:
    body = "    z.backward()\n" if handler else "z.backward()\n"
    if not handler:
        return DEMONSTRATION.format(backward=body)
    return DEMONSTRATION.format(backward=f"try:\n{body}{handler}:\n    print('no grad_fn, as expected')")


@pytest.mark.parametrize("handler", ["except RuntimeError as e", "except (ValueError, RuntimeError)", "except builtins.RuntimeError"])
def test_a_backward_whose_runtime_error_is_caught_is_expected_to_fail(handler):
    # A tutorial shows that a tensor computed under no_grad cannot be backpropagated.
    assert _codes(_demonstration(handler), DIFFERENTIATION) == []


@pytest.mark.parametrize("handler", ["", "except Exception", "except", "except ValueError"])
def test_general_error_handling_does_not_make_the_backward_expected_to_fail(handler):
    assert _codes(_demonstration(handler), DIFFERENTIATION) == ["GF103"]


def test_backward_under_no_grad_in_a_try_that_expects_the_error():
    source = """\
    import torch

    def probe(model, x):
        with torch.no_grad():
            try:
                model(x).sum().backward()
            except RuntimeError:
                return False
        return True
    """
    assert _codes(source, DIFFERENTIATION) == []
    assert _codes(source.replace("except RuntimeError", "except Exception"), DIFFERENTIATION) == ["GF103"]
