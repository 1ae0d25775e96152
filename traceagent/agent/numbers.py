"""The number check: every figure an answer states must be one the detectors produced.

A stated number is read with its unit (µs, ms, s, %, GB/s, bytes, ×, or none: a count) and matched
only against source values of the same quantity, after unit conversion, to the precision the
answer shows: `28.6%` matches 28.57, `285 ms` matches 285,214 µs, integers are exact. "About"
and "~" allow 5%; "over"/"under" a bound hold when a source lies on the right side of it.

Sources (`Sources`) are the conversation's tool results, where a value's quantity comes from its
key (`_us`, `_pct`, `_gbps`, `_bytes`, `_x`; anything else is a count), numbers written in our own
prose fields (headline, sentence...), the system prompt's figures and `calc` results. Strings from
the trace (kernel names, frames) verify nothing, and are masked where our prose quotes them.

Identifiers are not claims: names of models and GPUs (`A100 80GB`, `Llama-2-13B`), dtypes,
versions (`NCCL 2.18`), flags (`--launch-count 20`), `key=value`, dates, shapes (`4096x4096`),
`file.py:42`, kernel names, list markers, and rank/GPU/step/stream numbers the trace has (a rank
it does not have is flagged). Fenced code is not read; an inline code span is checked only when
it is a bare quantity (`62.3 ms`).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..detect.core.vocabulary import GAP_CAUSES

# unit → (quantity, scales to the quantity's base unit: µs, %, GB/s, bytes, ×, FLOP/s, count)
_BYTE_SCALES = {"K": (1e3, 2**10), "M": (1e6, 2**20), "G": (1e9, 2**30), "T": (1e12, 2**40)}
UNITS: dict[str, tuple[str, tuple[float, ...]]] = {
    "ns": ("time", (1e-3,)), "µs": ("time", (1.0,)), "μs": ("time", (1.0,)), "us": ("time", (1.0,)),
    "ms": ("time", (1e3,)), "msec": ("time", (1e3,)), "s": ("time", (1e6,)), "sec": ("time", (1e6,)),
    "secs": ("time", (1e6,)), "second": ("time", (1e6,)), "seconds": ("time", (1e6,)),
    "min": ("time", (6e7,)), "minutes": ("time", (6e7,)),
    "%": ("percent", (1.0,)), "percent": ("percent", (1.0,)), "pct": ("percent", (1.0,)),
    "B": ("bytes", (1.0,)), "bytes": ("bytes", (1.0,)), "byte": ("bytes", (1.0,)),
    "×": ("ratio", (1.0,)), "x": ("ratio", (1.0,)),
    "FLOP/s": ("flops", (1.0,)), "FLOPS": ("flops", (1.0,)),
}
for _p, (_dec, _bin) in _BYTE_SCALES.items():
    # "GB" is written for both 10^9 and 2^30 bytes: either reading may match
    UNITS |= {f"{_p}B": ("bytes", (_dec, _bin)), f"{_p}iB": ("bytes", (_bin,)),
              f"{_p}B/s": ("bandwidth", (_dec / 1e9, _bin / 1e9)), f"{_p}iB/s": ("bandwidth", (_bin / 1e9,)),
              f"{_p}FLOP/s": ("flops", (_dec,)), f"{_p}FLOPS": ("flops", (_dec,))}
UNITS["kB"], UNITS["kB/s"] = UNITS["KB"], UNITS["KB/s"]

# a key's suffix → (quantity, scale to base); the first component of a value's path that has one wins
_KEY_UNITS = [(re.compile(p), q, s) for p, q, s in [
    (r"(^|_)us$", "time", 1.0), (r"(^|_)ns$", "time", 1e-3), (r"(^|_)ms$", "time", 1e3), (r"_s$", "time", 1e6),
    (r"(^|_)(pct|percent)$", "percent", 1.0), (r"(^|_)gbps$", "bandwidth", 1.0), (r"(^|_)bytes$", "bytes", 1.0),
    (r"(^|_)gbytes$", "bytes", 1e9),
    (r"(^|_)(x|ratio|speedup)$", "ratio", 1.0), (r"(^|_)tflops$", "flops", 1e12), (r"(^|_)flops$", "flops", 1.0),
]]
# keys that name a thing (rank 3, GPU 0, step 8, stream 7) rather than measure it
IDENTIFIER_KEYS = {"rank": "rank", "ranks": "rank", "straggler": "rank", "device": "device", "devices": "device",
                   "step": "step", "slowest": "step", "stream": "stream"}
# our own prose: numbers written here are the detectors' (trace strings inside are masked)
PROSE_KEYS = {"headline", "hypothesis", "next_step", "sentence", "reasoning", "other_losses", "also", "note",
              "ranks_note", "prediction", "summary", "why", "how", "assumptions", "limits_after"}

_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_NUMBER = re.compile(
    rf"(?P<num>{_NUM})(?:[eE](?P<e>[-+]?\d+)|\s?[×x]\s?10\^?(?P<e10>[-+]?\d+|[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+))?"
    rf"(?:(?P<range>\s?(?:-|–|—|to)\s?)(?P<num2>{_NUM}))?"
    rf"(?P<space>\s?)(?P<unit>{_UNIT})?")
_LEFT_OK = set(" \t\n([{\"'*~≈<>≤≥|+-−±") | {""}
_RIGHT_OK = set(" \t\n,;!?)]}\"'*|") | {""}
_APPROX = re.compile(r"(?:~|≈|\babout|\baround|\broughly|\bapproximately|\bnearly|\balmost|\bsome|\bclose to)\s*$", re.I)
_OVER = re.compile(r"(?:>|≥|\bover|\bmore than|\babove|\bat least|\bexceeds?|\bgreater than|\bupwards of)\s*$", re.I)
_UNDER = re.compile(r"(?:<|≤|\bunder|\bless than|\bbelow|\bfewer than)\s*$", re.I)

_CONNECT = r"(?:\s*(?:,|and|or|to|-|–|&)\s*\d+)*\s*(?:,|and|or|to|-|–|&)?\s*"
_HYPOTHETICAL = re.compile(r"\b(?:if|would|could|might|should|can|aim|target|goal|expect)\b", re.I)
_KNOWN_LABEL = re.compile(  # "rank 3", "GPU #1", "ranks 0, 3 and 5" (only a plural takes a list); on one line:
    # "…of a 47 ms step\n\n1 step" names no step 1
    rf"\b(?:(?P<label>rank|gpu|device|cuda:|step|iteration|iter|profilerstep\s*#|stream)[ \t]*[#:]?[ \t]*"
    rf"|(?P<labels>ranks|gpus|devices|steps|iterations|streams)\s*(?:\d+{_CONNECT})?)$", re.I)
_ASKED = re.compile(r"\b(?P<label>ranks?|gpus?|devices?|steps?|iterations?|streams?)\s*#?\s*"
                    r"(?P<numbers>\d+(?:\s*(?:,|and|or|to|-|–|&|vs\.?|versus)\s*\d+)*)", re.I)
_LABEL_KIND = {"rank": "rank", "gpu": "device", "device": "device", "cuda:": "device", "step": "step",
               "iteration": "step", "iter": "step", "profilerstep": "step", "stream": "stream"}
_IDENT_LABEL = re.compile(
    r"(?:\b(?:threads?|tid|pid|process(?:es)?|nodes?|layers?|epochs?|top|lines?|versions?|v|batch(?:[ _]size)?|"
    r"num_workers|workers?|prefetch_factor|seed|port|attempts?|sections?|figures?|tables?|options?|fix(?:es)?|phases?|"
    r"stages?|parts?|chapters?|sm|sm_|compute capability|cc|world[ _]size|micro-?batch(?:es)?|"
    r"seq(?:uence)?[ _]len(?:gth)?|hidden[ _]size|heads?|dim|rtx|gtx|cuda|nccl|rccl|cudnn|cublas|pytorch|"
    r"torch|python|rocm|hip|triton|tensorrt|vllm|jax|ubuntu|driver|gcc|opset|kineto|nsys|ncu|iso|rfc|pr|issue|"
    r"multiples?|aligned|divisible|power)(?:\s+(?:of|to|by))?"
    r"\s*(?:of|=|:|is|to|from|#|≥|>=|≤|<=)?\s*(?:\d+(?:\.\d+)*" + _CONNECT + r")?"
    r"|--?[A-Za-z][\w-]*[\s=]\s*|#\s*|\b[A-Z]{1,4}\d{2,4}[A-Za-z]*\s*)$",  # --flag 20, #3, A100 80GB
    re.I)
_MASKS = [re.compile(r"^ {0,3}(```|~~~).*?(^ {0,3}\1|\Z)", re.M | re.S)] + [re.compile(p, re.M | re.I) for p in [
    r"https?://\S+",
    r"\S+\.(?:py|pyx|cpp|cc|cu|cuh|h|hpp|c|rs|json|gz|sqlite|nsys-rep|md|txt|toml|yaml|yml)\b(?:[:(]\s*\d+\)?)?",
    r"\b(?:line|lines)\s+\d+",
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b",
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?\b"
    r"|\b\d{1,2}\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?(?:\s+\d{4})?\b"
    r"|\b(?:in|since|from|until|of)\s+(?:19|20)\d{2}\b(?!\s*(?:%|ms|us|µs|s\b))",
    r"\bv?\d+(?:\.\d+){2,}\b",  # versions 1.2.3
    r"\b\d+(?:\s*[x×]\s*\d+)+\b(?![\^⁰¹²³⁴⁵⁶⁷⁸⁹]|\s*(?:%|ms|us|µs|s\b))|[\[(]\s*\d+(?:\s*,\s*\d+)+\s*[\])]",  # shapes
    r"^\s*(?:[#>*+-]+\s*)*(?:\d+|[a-z])[.)]\s",  # list markers and numbered headings
    r"^\s*(?:[#>*+-]+\s*)*\**(?:step|option|fix|phase|stage|part|idea|hypothesis)\s+\d+\s*\**\s*[:.)]",  # "Step 1:"
]]
_CODE_SPAN = re.compile(r"`+([^`]*)`+")
_BARE_QUANTITY = re.compile(rf"^\s*[~≈]?\s*[-+−]?(?:{_NUM})(?:[eE][-+]?\d+)?\s?(?:{_UNIT})?\s*$")


# -- what a number is said to be ---------------------------------------------------------------
# A number right after "largest gap" (or a count right before "gaps of data loading") is a claim
# about that quantity: it is checked against the values of that quantity only, so total idle time
# quoted as the largest gap, or all gaps' count quoted as one cause's, is caught.

_LINK = r"(?:\s*(?:is|was|were|are|of|at|=|:|took|lasts?|lasted|lasting|being|reached|about|around|roughly|only|just|"
_LINK += r"~|≈|\(|,|-|—|–))*\s*$"
# how answers name the causes of idle gaps: a match's group is the cause
CAUSE_MENTION = re.compile("|".join(f"(?P<{w.name}>{w.said})" for w in GAP_CAUSES.values()), re.I)
_LARGEST_GAP = re.compile(r"\b(?:largest|longest|biggest|max(?:imum)?|worst|top)\s+(?:single\s+)?"
                          r"(?:(?:idle|idling|gpu)\s+){0,2}(?:gap|stall|bubble|idle\s+period)" + _LINK, re.I)
_LARGEST_GAP_AFTER = re.compile(r"^\s*\)?\s*(?:is|was)\s+the\s+(?:largest|longest|biggest|single\s+longest)\s+"
                                r"(?:idle\s+)?gap", re.I)
_TOTAL_IDLE = re.compile(r"\b(?:total\s+(?:gpu\s+)?idle(?:\s+time)?|(?:gpu\s+)?idle\s+time(?:\s+in\s+total)?|"
                         r"(?:gpu|device|it)\s+(?:is|was|sits?|sat|stays?|stayed)\s+idle(?:\s+for)?)" + _LINK, re.I)
# "39.4% idle": a share said before the word (of the time, of the span)
_TOTAL_IDLE_AFTER = re.compile(r"^\s*(?:of\s+the\s+(?:time|span|step)\s+)?idle\b"
                               r"(?!\s+(?:from|for|waiting|due|because|in|on|after))", re.I)
_GAPS_AFTER = re.compile(r"^\s*(?:[\w-]+\s+){0,3}?(?:idle\s+)?gaps?\b", re.I)
_LABEL_KEYS = [("largest gap", re.compile(r"(?:^|\.)top_gaps\.dur_us$|(?:largest|longest|max)_gap\w*$")),
               ("total idle", re.compile(r"(?:^|\.)(?:idle_us|idle_pct|matching_idle_us)$"))]


def key_labels(path: tuple[str, ...], cause: str | None) -> list[str]:
    """The labels a tool result's value carries, by its key path (and the cause its dict is about)."""
    dotted = ".".join(path)
    labels = [label for label, keys in _LABEL_KEYS if keys.search(dotted)]
    if len(path) >= 2 and path[-2] == "by_cause_count":
        labels.append(f"gaps of {path[-1]}")
    elif path and path[-1] in ("cause_gaps", "matching_gaps", "count") and cause:
        labels.append(f"gaps of {cause}")
    return labels


_GAPS_BEFORE = re.compile(r"\b(?:number|count)\s+of\s+(?:[\w-]+\s+){0,3}(?:gaps|stalls|bubbles)\b.{0,80}"
                          r"\b(?:is|are|was|were|=|:|totals?|comes? to)\s*$", re.I)


def _label(head: str, after: str, clause: str, quantity: str) -> str | None:
    """The quantity the words around a number name, if one we check: `head` ends where the number
    starts, `after` starts where it (and its unit) ends, `clause` is its clause."""
    if quantity == "count":  # "5 gaps of data loading", "5 data-loading gaps"; not "8285 gaps in all, 12 of them ..."
        # the words up to the clause's end: not the next sentence's cause ("13 gaps. The launch latency …")
        phrase = re.split(r"[,;:()\n]|[.!?](?:\s|$)|\b(?:in all|in total|overall|of them|of which)\b", after,
                          maxsplit=1)[0]
        if _GAPS_AFTER.match(phrase) and (cause := CAUSE_MENTION.search(phrase)):
            return f"gaps of {cause.lastgroup}"
        # "the number of idle gaps that come from data loading is 8285": the count named before it
        lead = re.split(r"[;:()]", head)[-1]
        if _GAPS_BEFORE.search(lead) and (cause := CAUSE_MENTION.search(lead)):
            return f"gaps of {cause.lastgroup}"
        return None
    if _LARGEST_GAP.search(head) or _LARGEST_GAP_AFTER.match(after):
        return "largest gap"
    if _TOTAL_IDLE.search(head) and not CAUSE_MENTION.search(head):  # "the data-loading idle time is": one cause's
        return "total idle"
    if quantity == "percent" and _TOTAL_IDLE_AFTER.match(after) and not CAUSE_MENTION.search(clause):
        return "total idle"
    return None


@dataclass(frozen=True)
class Stated:
    """A number as the answer states it: its text, its quantity, and the interval of base-unit
    values that would make it true (its precision, a hedge, or a bound)."""

    text: str
    quantity: str  # time, percent, bandwidth, bytes, ratio, flops, count
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    bare: float  # the number as written, for matching a value a tool wrote without conversion
    label: str | None = None  # the quantity the words next to it name ("largest gap"), checked against it only


@dataclass
class Sources:
    """What an answer's numbers may be checked against, gathered over a conversation."""

    by_quantity: dict[str, list[float]] = field(default_factory=dict)  # sorted |values| in base units
    written: list[float] = field(default_factory=list)  # sorted |values| exactly as tools wrote them
    trace_strings: set[str] = field(default_factory=set)
    known: dict[str, set[int]] = field(default_factory=lambda: {"rank": set(), "device": set(), "step": set(),
                                                                 "stream": set()})
    labelled: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (label, quantity) → sorted values

    def add_labelled(self, label: str, quantity: str, value: float) -> None:
        bisect.insort(self.labelled.setdefault((label, quantity), []), abs(value))

    def add(self, quantity: str, value: float, written: float | None = None) -> None:
        bisect.insort(self.by_quantity.setdefault(quantity, []), abs(value))
        if written is not None:
            bisect.insort(self.written, abs(written))

    def add_identifiers(self, kind: str, values: Iterable[int]) -> None:
        self.known[kind].update(int(v) for v in values)

    def add_asked(self, question: str) -> None:
        """The ranks, GPUs, steps and streams a question names: an answer that names them back is
        quoting the user, not claiming the trace has them ("why is rank 3 slow?")."""
        for m in _ASKED.finditer(question):
            kind = _LABEL_KIND[m.group("label").lower().rstrip("s")]
            self.add_identifiers(kind, (int(n) for n in re.findall(r"\d+", m.group("numbers"))))

    def add_result(self, text: str) -> None:
        """A tool result (JSON text): its numbers by the quantity their key names, our prose's
        numbers by their units; strings from the trace are kept only to mask them."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, TypeError):
            return self.add_prose(str(text))
        prose: list[str] = []
        self._walk(data, (), prose)
        self.trace_strings.difference_update(prose)  # ours, where another key holds it too (a change's assumption)
        for p in prose:  # after the walk, so every trace string of this result is known
            self.add_prose(p)

    def add_prose(self, text: str) -> None:
        """Text we wrote (the system prompt, a verdict's sentence): its figures become sources."""
        for s in stated_numbers(_mask_strings(text, self.trace_strings), None):
            # the figure as written too: a model may copy "1951.77" from "1951.77 µs" without its unit
            self.add(s.quantity, (s.lows[0] + s.highs[0]) / 2, s.bare)
            if s.label:
                self.add_labelled(s.label, s.quantity, (s.lows[0] + s.highs[0]) / 2)

    def _walk(self, value, path: tuple[str, ...], prose: list[str], cause: str | None = None) -> None:
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, (int, float)):
            quantity, scale = _key_quantity(path)
            self.add(quantity, value * scale, value)
            for label in key_labels(path, cause):
                self.add_labelled(label, quantity, value * scale)
            if path and (kind := IDENTIFIER_KEYS.get(path[-1])) and float(value).is_integer():
                self.known[kind].add(int(value))
        elif isinstance(value, str):
            if path and path[-1] in PROSE_KEYS:
                prose.append(value)
            elif len(value) >= 3:
                self.trace_strings.add(value)
        elif isinstance(value, dict):
            # a result about one cause ("cause": "dataloader" beside its counts) binds its counts to it
            here = next((value[k] for k in ("cause", "matching_cause") if isinstance(value.get(k), str)), None)
            for k, v in value.items():
                self._walk(v, (*path, str(k)), prose, here)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self._walk(v, path, prose)

    def returned(self, value: float) -> bool:
        """Whether a tool wrote exactly this number (for `calc`'s operands)."""
        return _within(self.written, abs(value), abs(value))

    def supports(self, stated: Stated) -> bool:
        if not math.isfinite(stated.bare):  # beyond a float: no tool wrote it
            return False
        if stated.label:  # "largest gap 392919 µs" holds only if a largest gap is that long
            values = self.labelled.get((stated.label, stated.quantity), [])
            return any(_within(values, lo, hi) for lo, hi in zip(stated.lows, stated.highs))
        values = self.by_quantity.get(stated.quantity, [])
        if any(_within(values, lo, hi) for lo, hi in zip(stated.lows, stated.highs)):
            return True
        # a bare number may be a value copied as the tool wrote it (62339 from dur_us)
        return stated.quantity == "count" and _within(self.written, stated.lows[0], stated.highs[0])


def _within(values: list[float], lo: float, hi: float) -> bool:
    i = bisect.bisect_left(values, lo - 1e-9 * max(1.0, abs(lo)))
    return i < len(values) and values[i] <= hi + 1e-9 * max(1.0, abs(hi))


def _key_quantity(path: tuple[str, ...]) -> tuple[str, float]:
    for key in reversed(path):
        for pattern, quantity, scale in _KEY_UNITS:
            if pattern.search(key.lower()):
                return quantity, scale
    return "count", 1.0


def _mask_strings(text: str, strings: set[str]) -> str:
    """Trace strings blanked out of text (longest first), so their digits are not read; a string
    with no digit stays (blanking `idle`, a tool's own value, hid the words a number's label is read from)."""
    for s in sorted((s for s in strings if s in text and any(c.isdigit() for c in s)), key=len, reverse=True):
        text = text.replace(s, " " * len(s))
    return text


def _blank(m: re.Match) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


_HEADER_UNIT = re.compile(rf"\((?P<unit>{_UNIT})\)\s*$|\[(?P<unit2>{_UNIT})\]\s*$|\b(?P<unit3>{_UNIT})\s*$")
_BARE_CELL = re.compile(rf"^\s*[-+−]?(?:{_NUM})\s*$")
_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def _table_units(text: str) -> str:
    """Markdown tables whose header names a column's unit ("time (ms)", "share %"): the unit is
    written after each bare number in that column, as the reader reads it."""
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if not (_RULE.match(lines[i]) and "|" in lines[i - 1]):
            continue
        units = []
        for cell in lines[i - 1].strip().strip("|").split("|"):
            m = _HEADER_UNIT.search(cell.strip())
            units.append((m.group("unit") or m.group("unit2") or m.group("unit3")) if m else None)
        j = i + 1
        while j < len(lines) and "|" in lines[j]:
            cells = lines[j].strip().strip("|").split("|")
            cells = [f"{c.rstrip()} {u} " if u and _BARE_CELL.match(c) else c
                     for c, u in zip(cells, units + [None] * len(cells))]
            lines[j] = "| " + "|".join(cells) + " |"
            j += 1
    return "\n".join(lines)


def _masked(answer: str, sources: Sources | None) -> str:
    """The answer with everything that is not a claim blanked (same length, so positions hold)."""
    text = _table_units(answer)
    for pattern in _MASKS:
        text = pattern.sub(_blank, text)

    def code(m: re.Match) -> str:  # a code span is read only when it is a bare quantity
        inner = m.group(1)
        return f" {inner}" + " " * (len(m.group(0)) - len(inner) - 1) if _BARE_QUANTITY.match(inner) else \
            " " * len(m.group(0))

    text = _CODE_SPAN.sub(code, text)
    return _mask_strings(text, sources.trace_strings) if sources else text


def stated_numbers(answer: str, sources: Sources | None = None, small_counts: bool = False) -> list[Stated]:
    """The claims among the numbers of an answer, each with the values that would make it true.
    With `sources`, rank/GPU/step/stream numbers the trace does not have come back as claims of
    quantity "identifier" (never supported). Counts up to 10 are enumerations ("2 ranks", "top
    5"), not claims, unless `small_counts` (our own text, whose every figure is one)."""
    text = _masked(answer, sources)
    found: list[Stated] = []
    for m in _NUMBER.finditer(text):
        start, end = m.start(), m.end()
        before, after = text[start - 1:start], text[end:end + 1]
        unit = m.group("unit")
        if unit and unit[-1].isalpha() and after[:1].isalnum():
            unit = None  # "5 steps": no unit
        if not unit:
            end = m.start("space")
            after = text[end:end + 1]
        if before not in _LEFT_OK or (before and before in "+-−" and text[start - 2:start - 1] not in _LEFT_OK):
            continue  # glued to a word on the left: A100, sm_80, x86, #3, key=4
        if after and after not in _RIGHT_OK and not (after in ".:" and not text[end + 1:end + 2].strip()):
            continue  # glued on the right: 1080p, 2080Ti, 8-GPU
        if (unit == "B" and not m.group("space")) or (unit in ("x", "×") and m.group("e10")):
            continue  # 13B, 7B: a model's size
        sentence = re.split(r"[.!?\n]\s", text[max(0, start - 200):start])[-1]
        if unit in ("x", "×") and "." not in m.group("num") and _HYPOTHETICAL.search(sentence):
            continue  # "if it ran 2× faster": a round what-if, not a measurement
        head = text[max(0, start - 60):start]
        if _IDENT_LABEL.search(head):
            continue
        numbers = [m.group("num")] + ([m.group("num2")] if m.group("num2") else [])
        if (known := _KNOWN_LABEL.search(head)) and not unit:  # "rank 3": a claim only that the trace has it
            label = (known.group("label") or known.group("labels")).strip()
            kind = "step" if label.lower().startswith("profilerstep") else _LABEL_KIND[label.lower().rstrip("s")]
            if sources is not None:
                found += [Stated(f"{label} {n}", "identifier", (1.0,), (0.0,), -1.0) for n in numbers
                          if "." not in n and int(n.replace(",", "")) not in sources.known.get(kind, set())]
            continue
        exponent = int((m.group("e") or m.group("e10") or "0").translate(_SUPERSCRIPT))
        quantity, scales = UNITS[unit] if unit else ("count", (1.0,))
        for n in numbers:
            value = float(n.replace(",", "")) * 10.0 ** exponent
            decimals = len(n.split(".")[1]) if "." in n else 0
            if quantity == "count" and decimals == 0 and exponent == 0 and value <= 10 and not small_counts:
                continue  # small counts and enumerations: "2 ranks", "top 5"
            half = 0.5 * 10.0 ** (exponent - decimals)
            lo, hi = value - half, value + half
            if _APPROX.search(head) and decimals == 0:  # "about 300 ms": rounded to its trailing zeros, ±10% at most
                digits = n.replace(",", "")
                coarse = 0.5 * 10.0 ** (len(digits) - len(digits.rstrip("0")) + exponent)
                lo, hi = max(value - coarse, value * 0.9), min(value + coarse, value * 1.1)
            elif _OVER.search(head):
                lo, hi = value - half, value * 2
            elif _UNDER.search(head):
                lo, hi = value / 4, value + half
            text_shown = (m.group(0).strip() if unit else m.group("num")) if len(numbers) == 1 \
                else f"{n}{m.group('space')}{unit or ''}".strip()
            clause_start = max(head.rfind(c) for c in ".;\n") + 1
            after = text[end:end + 80]
            clause = head[clause_start:] + " " + re.split(r"[.;\n]", after, maxsplit=1)[0]
            found.append(Stated(text_shown, quantity, tuple(lo * s for s in scales), tuple(hi * s for s in scales),
                                value, _label(head[clause_start:], after, clause, quantity)))
    return found


MAX_SHOWN = 32  # a stated number longer than this is shown cut (a model once wrote 2,000 digits)


def unverified(answer: str, sources: Sources) -> list[str]:
    """The numbers in `answer` that no source supports, each once, in the order stated; a number
    said to be a quantity ("largest gap 392919 µs") is shown with it."""
    missing: list[str] = []
    for stated in stated_numbers(answer, sources):
        if stated.quantity == "identifier" or not sources.supports(stated):
            text = stated.text if len(stated.text) <= MAX_SHOWN else \
                f"{stated.text[:MAX_SHOWN - 8]}… ({len(stated.text)} characters)"
            if stated.label and stated.label not in text:
                text += f" (as the {stated.label})" if not stated.label.startswith("gaps") else f" ({stated.label})"
            if text not in missing:
                missing.append(text)
    return missing
