# Golden files are inputs and expected outputs, not test modules (some are named test_*.py).
collect_ignore_glob = ["golden/*"]
