"""How Valid/Invalid read the examples a rule file writes as indented triple-quoted blocks."""

from __future__ import annotations

from gradfix.rule import Invalid, Valid


def test_block_reads_as_the_escaped_string():
    written = Valid(
        """
        import torch
        with torch.no_grad():  # eval

            y = f(x)
        """
    )
    assert written.code == "import torch\nwith torch.no_grad():  # eval\n\n    y = f(x)\n"


def test_invalid_reads_code_and_expected_alike():
    example = Invalid(
        """
        with torch.no_grad:
            pass
        """,
        """
        with torch.no_grad():
            pass
        """,
        count=2,
    )
    assert example.code == "with torch.no_grad:\n    pass\n"
    assert example.expected == "with torch.no_grad():\n    pass\n"
    assert Invalid("x = 1\n").expected is None


def test_escaped_strings_keep_their_bytes():
    crlf_tabs = "import torch\r\ndef f(m, x):\r\n\tm.eval()\r\n\t\treturn m(x)\r\n"
    assert Valid(crlf_tabs).code == crlf_tabs
    assert Invalid(crlf_tabs, crlf_tabs).expected == crlf_tabs


def test_only_one_leading_newline_is_dropped():
    assert Valid("\n\nx = 1\n").code == "\nx = 1\n"
