"""Text that goes into emitted files: one line, whatever it was given.

Names are validated where they are read (meshcore.checks.identifier); independently of that, every text
interpolated into a comment of an emitted script or config goes through `one_line`, so that no value, however it
reached a plan, can end a comment line and start a command. Values interpolated into shell words are quoted with
shlex.quote by the emitters themselves.
"""

from __future__ import annotations


def one_line(text: object) -> str:
    """`text` with every character that is not printable (newline, carriage return, tab, the Unicode line and
    paragraph separators, escape and other control characters) replaced by a space."""
    return "".join(c if c.isprintable() else " " for c in str(text))


def comment(text: object, prefix: str = "# ") -> str:
    """One comment line: `prefix` and `text` made single-line."""
    return prefix + one_line(text)
