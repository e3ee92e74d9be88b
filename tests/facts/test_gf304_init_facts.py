"""PyTorch facts behind GF304's ``torch.nn.init`` form of a lone initialiser write
(``w.data.normal_(0, 0.02)`` -> ``nn.init.normal_(w, 0, 0.02)``), checked on real torch."""

import pytest

torch = pytest.importorskip("torch")
init = torch.nn.init

# (the `.data` write, the torch.nn.init call GF304 writes instead)
CASES = [
    (lambda w: w.data.normal_(0, 0.02), lambda w: init.normal_(w, 0, 0.02)),
    (lambda w: w.data.normal_(mean=1.0, std=3.0), lambda w: init.normal_(w, mean=1.0, std=3.0)),
    (lambda w: w.data.normal_(), lambda w: init.normal_(w)),
    (lambda w: w.data.uniform_(-0.1, 0.1), lambda w: init.uniform_(w, -0.1, 0.1)),
    (lambda w: w.data.uniform_(), lambda w: init.uniform_(w)),
    (lambda w: w.data.fill_(1), lambda w: init.constant_(w, 1)),
    (lambda w: w.data.zero_(), lambda w: init.zeros_(w)),
]


@pytest.mark.parametrize("through_data, through_init", CASES)
def test_the_init_function_draws_the_same_values_and_keeps_the_parameter(through_data, through_init):
    results = []
    for write in (through_data, through_init):
        torch.manual_seed(0)
        layer = torch.nn.Linear(5, 4)
        torch.manual_seed(1)
        write(layer.weight)
        results.append(layer.weight.detach().clone())
        assert layer.weight.is_leaf and layer.weight.requires_grad and layer.weight.grad_fn is None
    assert torch.equal(*results)


def test_the_init_function_runs_under_no_grad_so_the_version_counter_applies():
    """As the `with torch.no_grad():` form: a pending backward that saved the weight raises."""
    w = torch.nn.Parameter(torch.ones(3))
    y = (w * w).sum()
    init.normal_(w, 0, 0.02)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    assert torch.is_grad_enabled()
