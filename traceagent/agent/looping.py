"""Where a model's reply began repeating itself: a small model at temperature 0 can say the same
paragraph until its token limit (Qwen2.5-Coder-1.5B: "The trace shows that the largest gap is
caused by …" eight times, then cut), so the stream is stopped there and the answer ends before it.
What may be the start of a repetition is not shown until it turns out not to be (`settled`)."""

from __future__ import annotations

import re

_PARAGRAPH = re.compile(r"[^\n]+(?:\n(?!\s*\n)[^\n]*)*")  # a block between blank lines
# a sentence ends at a stop before a space: "2.16 ms" and ".item()" stay inside theirs
_SENTENCE = re.compile(r"[^\s.!?](?:[^.!?\n]|[.!?](?=\S)){19,}?[.!?](?=\s|$)")
# a phrase with words said four times in a row at the end ("The answer is: The answer is: …")
_PHRASE = re.compile(r"(.{6,120}?)\1{3,}\s*$", re.S)
MIN_PARAGRAPH = 40  # a paragraph said twice this long is a loop, not an emphasis
TAIL = 600  # how far back a phrase loop is looked for


def _fold(text: str) -> str:
    return " ".join(text.split())


def _whole_paragraphs(text: str) -> list[tuple[int, str]]:
    """(start, text with whitespace folded) of each paragraph a blank line ends: not the one
    still streaming."""
    return [(m.start(), _fold(m.group(0))) for m in _PARAGRAPH.finditer(text) if re.match(r"\s*\n", text[m.end():])]


def _sentence_starts(text: str) -> dict[str, list[int]]:
    """Where each sentence (whitespace folded) starts, in order."""
    starts: dict[str, list[int]] = {}
    for m in _SENTENCE.finditer(text):
        starts.setdefault(_fold(m.group(0)), []).append(m.start())
    return starts


def repetition_start(text: str) -> int | None:
    """Where `text` (a reply so far) began repeating itself, or None: the second copy of a whole
    paragraph, the second of a sentence said three times, or the second of a phrase said four
    times in a row at the end. Whitespace is not told apart; a phrase must have words."""
    seen: set[str] = set()
    for at, paragraph in _whole_paragraphs(text):
        if len(paragraph) >= MIN_PARAGRAPH and paragraph in seen:
            return at
        seen.add(paragraph)
    # the sentence whose third saying comes first
    thrice = [(at[2], at[1]) for at in _sentence_starts(text).values() if len(at) >= 3]
    if thrice:
        return min(thrice)[1]
    start = max(0, len(text) - TAIL)
    if (phrase := _PHRASE.search(text, start)) and re.search(r"[^\W\d_]{2}", phrase.group(1)):
        return phrase.start() + len(phrase.group(1))
    return None


def settled(text: str) -> int:
    """How much of `text` (a reply so far) cannot turn out to be a repetition's start: all of it,
    or up to the paragraph or sentence now being written where it so far copies a paragraph said
    before, or a sentence said twice (held back until it differs, or is cut as a repetition)."""
    paragraphs = [p for _, p in _whole_paragraphs(text) if len(p) >= MIN_PARAGRAPH]
    sentences = [s for s, at in _sentence_starts(text).items() if len(at) >= 2]
    start = text.rfind("\n\n") + 2 if "\n\n" in text.rstrip() else 0
    begun = _fold(text[start:])
    if begun and any(p.startswith(begun) for p in paragraphs):
        return start
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s)", text, re.M)]
    sentence_start = max([start, *ends])
    begun = _fold(text[sentence_start:])
    if begun and any(s.startswith(begun) for s in sentences):
        return sentence_start
    return len(text)
