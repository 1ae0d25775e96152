"""Trace strings (kernel names, frames, NVTX ranges) and model text are untrusted: one place
makes them safe for terminals, Markdown and HTML.

`visible` and `bounded` run once at load, on every string a trace carries, so no output can hold
a raw escape byte or a string of unbounded length from a trace; the renderers then escape for their own syntax (Rich markup with
`rich.markup.escape`, Markdown with `md_literal`/`code`, HTML with `html.escape`)."""

from __future__ import annotations

import hashlib
import re

#: the longest string kept from a trace: real kernel names reach a few thousand characters; a
#: longer one is cut, with its length and a hash so that two long names stay two (`bounded`)
MAX_TEXT_CHARS = 8192

# C0 and C1 controls (ESC starts terminal sequences) and bidirectional overrides (text that
# displays in another order than it reads); newline and tab only where a caller keeps them
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_WITH_LINES = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, keep_lines: bool = False) -> str:
    """Control characters as visible escapes (`\\x1b`); newlines and tabs kept only if asked."""
    return (_CONTROL if keep_lines else _CONTROL_WITH_LINES).sub(_escape, text)


def bounded(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text`, or for a longer one its start, its length and a hash of the whole: every copy of a
    trace string (frames, cache, JSON, reports, tool results) stays small whatever the trace holds."""
    if len(text) <= limit:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    tail = f"…[{len(text):,} characters, blake2b {digest}]"
    return text[: limit - len(tail)] + tail


#: the most of a trace string that a question built from a finding carries
QUESTION_NAME_CHARS = 60

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>!&|#~{}])")


def md_literal(text: str) -> str:
    """Text that Markdown shows as written: no emphasis, link, image, HTML or table cell
    break can come out of it."""
    return _MD_SPECIAL.sub(r"\\\1", visible(text)).replace("\n", " ")


def md_prose(text: str) -> str:
    """One of our sentences, which may carry trace strings, as Markdown: its `code spans` stay code
    spans (nothing renders inside one) and the rest shows as written (md_literal). With an odd number
    of backticks (a trace string holding one) no span can be told apart: all of it is md_literal."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return md_literal(text)
    return "".join(md_literal(part) if i % 2 == 0 else code(part) for i, part in enumerate(parts))


def code(text: str) -> str:
    """A Markdown code span showing `text` literally, whatever backticks it holds."""
    text = visible(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; a cell's pipes are escaped and its line breaks become spaces (the cells
    are already made safe: md_literal, code)."""
    def cell(text: object) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
