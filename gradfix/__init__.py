"""gradfix: find and fix PyTorch gradient-control mistakes.

Library API::

    import gradfix
    findings = gradfix.check(source)          # list[Finding]
    new_source = gradfix.fix(source, settings=gradfix.Settings(unsafe_fixes=True))
"""

__version__ = "0.1.0"

from gradfix.engine import SourceError, check, fix  # noqa: E402
from gradfix.model import Finding, FixSafety, Settings, Span  # noqa: E402

__all__ = ["check", "fix", "Finding", "FixSafety", "Settings", "Span", "SourceError", "__version__"]
