"""gradfix: find and fix PyTorch gradient-control mistakes.

Library API::

    import gradfix
    findings = gradfix.check(source)          # list[Finding]
    new_source = gradfix.fix(source, settings=gradfix.Settings(unsafe_fixes=True))
"""

import sys as _sys

# `python -m gradfix` puts the current folder first on sys.path, so a user's tree holding its own
# `ast.py`, `typing.py` or `enum.py` would be imported in place of the standard library (user
# code run by a linter). While runpy imports this package for -m, sys.argv[0] is "-m": only
# then is that entry removed, before anything else is imported. A library user's sys.path is
# never touched.
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", __import__("os").getcwd()):
    del _sys.path[0]

__version__ = "0.1.0"

from gradfix.model import Finding, FixSafety, Settings, Span  # noqa: E402


def __getattr__(name: str):
    # The engine (and the analysis with it) is imported on first use: a warm cached run of the
    # command line reports from the cache without it.
    if name in ("SourceError", "check", "fix"):
        from gradfix import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'gradfix' has no attribute {name!r}")


__all__ = ["check", "fix", "Finding", "FixSafety", "Settings", "Span", "SourceError", "__version__"]
