"""What `from <torch module> import *` binds, checked on real torch: the names gradfix resolves
through such an import (gradfix/analysis/project.py, _TORCH_STAR) are in the module's `__all__`."""

from __future__ import annotations

import importlib

import pytest

from gradfix.analysis.project import _TORCH_STAR, torch_star_exports


@pytest.mark.parametrize("module", sorted(_TORCH_STAR))
def test_a_torch_star_import_binds_the_names_gradfix_resolves(module):
    exported = importlib.import_module(module).__all__
    for name, target in torch_star_exports(module).items():
        assert name in exported, f"`from {module} import *` does not bind {name}"
        assert target == f"{module}.{name}"


def test_set_grad_enabled_is_not_in_torch_star():
    # `from torch import *` leaves set_grad_enabled out (it is not in torch.__all__).
    import torch

    assert "set_grad_enabled" not in torch.__all__ and "set_grad_enabled" not in torch_star_exports("torch")
