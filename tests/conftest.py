# Golden files are inputs and expected outputs, not test modules (some are named test_*.py).
collect_ignore_glob = ["golden/*"]

import pytest


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory, monkeypatch):
    """Every test gets an empty result cache of its own (gradfix.cache), never the checkout's."""
    monkeypatch.setenv("GRADFIX_CACHE_DIR", str(tmp_path_factory.mktemp("gradfix_cache")))
