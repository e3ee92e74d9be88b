import pytest

# Golden files are inputs and expected outputs, not test modules (some are named test_*.py).
collect_ignore_glob = ["golden/*"]

# Linting never needs torch; the facts tests and the verification run real torch. Where the
# machine has no torch wheel for this Python (.ci/run's extra interpreter legs), they are left
# out and every other test runs.
try:
    import torch  # noqa: F401
except ImportError:
    collect_ignore_glob += ["facts/*"]


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory, monkeypatch):
    """Every test gets an empty result cache of its own (gradfix.cache), never the checkout's."""
    monkeypatch.setenv("GRADFIX_CACHE_DIR", str(tmp_path_factory.mktemp("gradfix_cache")))


# The fast inner loop is `pytest -m "not slow"` (under a minute); CI runs everything. These
# files run real models, generate thousands of programs or kill real processes (about 70 % of
# the suite's time); the single tests below take seconds each (a real subprocess, a 5 MB file,
# training loops). Listed here so that the files of other branches need no edit.
SLOW_FILES = {"test_verify.py", "test_properties.py", "test_workflow.py", "test_kill.py"}
SLOW_TESTS = {
    "test_real_subprocess",
    "test_module_level_toggle_hack_runs_the_same_after_the_fix",
    "test_5mb_generated_file",
    "test_training_after_eval_runs_in_eval_mode",
    "test_cli_apply_with_both_rules",
    "test_ctrl_c_during_apply_leaves_every_file_old_or_new",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or item.originalname in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
