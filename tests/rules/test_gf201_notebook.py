"""GF201 on notebooks (held-out review 3): a notebook's top level is the script itself."""

from gradfix import Settings, check

SETTINGS = Settings(select=("GF201",), unsafe_fixes=True)
# The cells define a helper, so the same text as a .py file is a module others can import.
CELLS = (
    "import torch\ntorch.set_grad_enabled(False)  # demo cell\nprint(torch.ones(1, requires_grad=True) * 2)\n"
    "def double(x):\n    return x * 2\n"
)


def test_module_level_toggle_in_a_notebook_is_silent():
    assert check(CELLS, "demo.ipynb", SETTINGS) == []


def test_the_same_toggle_in_a_python_module_is_reported():
    findings = check(CELLS, "demo.py", SETTINGS)
    assert [f.code for f in findings] == ["GF201"] and findings[0].fix is None
