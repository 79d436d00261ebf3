"""The escapers every untrusted string passes through on its way out: one for a terminal, one for
Markdown (HTML has jinja2's autoescape, after safe_text). Untrusted: a fact's value or provenance,
a label or an error text a Prometheus server sent, a file name, a pack's text with the values it
fills in. No imports beyond `re`: the CLI prints its messages through here without loading a
renderer.
"""
from __future__ import annotations

import re

# What an input string must not carry into a report or onto a terminal: C0 controls (ESC starts a
# terminal's screen clears, title changes and OSC 8 links, CR overwrites a line, BEL), DEL and C1
# controls (0x9B is a one-byte CSI), bidirectional controls (which make a line read backwards) and
# the line and paragraph separators. Each is shown as a visible `<U+001B>` instead.
_BIDI = "\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
_UNSAFE_BUT_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
# Markdown would act on these in an input string: `[`/`]` make links and, after `!`, images that
# load when the page is shown; backticks open code spans, `*` and `~` emphasis, `\\` escapes the
# next one; `|` splits a table row. `_` is left alone: within a word (`max_num_seqs`) it does nothing.
_ACTIVE = re.compile(r"([\\`*\[\]|~])")
# The start of a line kbopt itself writes on standard error ("kbopt: error: ...").
_OWN_LINE = re.compile(r"^(?=kbopt)", re.MULTILINE)


def _visible(match: re.Match[str]) -> str:
    return f"<U+{ord(match.group()):04X}>"


def safe_text(text: str) -> str:
    """An input string for a format that lays out newlines and tabs itself (HTML, Markdown):
    every other control character, and every bidirectional control, made visible. A string without
    any is returned as it is, so that markup the HTML renderer made (a str subclass) stays markup."""
    return _UNSAFE_BUT_LAYOUT.sub(_visible, text) if _UNSAFE_BUT_LAYOUT.search(text) else text


def terminal_text(line: object) -> str:
    """One line for a terminal: every control character made visible, newline and tab included
    (a line of a report, or a label in a summary line, holds none of its own)."""
    return _UNSAFE.sub(_visible, str(line))


def terminal_message(text: str) -> str:
    """A message of kbopt's own for standard error, which may quote input: every control
    character but the newline made visible, and every line after the first that would begin as
    kbopt's own lines do (`kbopt:`) indented, so that a quoted newline cannot forge one."""
    text = _UNSAFE_BUT_NEWLINE.sub(_visible, text)
    head, newline, rest = text.partition("\n")
    return head + newline + _OWN_LINE.sub("  ", rest) if newline else head


def markdown_text(text: object) -> str:
    """An input string for a Markdown table cell or line: inert Markdown, no raw HTML, no table
    breaks."""
    # With every `<` an entity no tag or autolink can open, and a `>` starts a block quote only at
    # the start of a line (newlines become spaces), so `a -> b` stays as written.
    escaped = safe_text(str(text)).replace("&", "&amp;").replace("<", "&lt;")
    escaped = _ACTIVE.sub(r"\\\1", escaped).replace("\n", " ")
    return "\\" + escaped if escaped.startswith(("#", "+", "-", "=", ">")) else escaped   # not a heading, list or quote


def markdown_code(text: object) -> str:
    """An input string as a Markdown code span: Markdown is inert in it, but a backtick would
    close it (and `|` split a table)."""
    return "`" + safe_text(str(text)).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"
