"""The number check: every figure in an answer must match a figure in that turn's tool results,
allowing for rounding and unit conversion (µs/ms/s/ns, %, bytes, GB/s).

Numbers inside code spans (`num_workers=4`), glued to letters (V100, bf16, ResNet50), list
markers and small bare integers (counts like "2 ranks", "top 5") are not checked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_CODE = re.compile(r"`[^`]*`|```.*?```", re.DOTALL)
_NUMBER = re.compile(
    r"(?<![\w.#/])(?P<num>-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)"
    r"(?P<unit>\s?(?:µs|us|ms|ns|s\b|sec\b|seconds?\b|%|GB/s|GiB/s|MB/s|GB\b|GiB\b|MB\b|MiB\b|kB\b|KB\b|KiB\b|B\b|bytes\b|x\b|×))?"
    r"(?![\w.]*\()(?![A-Za-z_])")
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)

_TIME = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6, "sec": 1e6, "second": 1e6, "seconds": 1e6}
_BYTES = {"B": 1, "bytes": 1, "kB": 1e3, "KB": 1e3, "KiB": 1024, "MB": 1e6, "MiB": 2**20, "GB": 1e9, "GiB": 2**30}


@dataclass(frozen=True)
class Stated:
    """A number as the answer states it."""

    text: str
    value: float
    decimals: int
    unit: str


def stated_numbers(answer: str) -> list[Stated]:
    """The numbers an answer states that the check applies to."""
    text = _CODE.sub(" ", answer)
    text = _LIST_MARKER.sub(" ", text)
    found = []
    for m in _NUMBER.finditer(text):
        raw, unit = m.group("num"), (m.group("unit") or "").strip()
        value = float(raw.replace(",", ""))
        decimals = len(raw.split(".")[1]) if "." in raw else 0
        if not unit and decimals == 0 and abs(value) <= 10:
            continue  # small counts and enumerations
        found.append(Stated(m.group(0).strip(), value, decimals, unit))
    return found


def _leaves(value, key: str = ""):
    """(key, number) for every number in a tool result, and numbers written inside its strings."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        yield key, float(value)
    elif isinstance(value, str):
        for s in stated_numbers(value):
            yield f"{key}:{s.unit}", s.value
    elif isinstance(value, dict):
        for k, v in value.items():  # the path keeps a parent's unit: by_cause_us.dataloader
            yield from _leaves(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v, key)


def known_values(tool_results: list[str]) -> list[tuple[str, float]]:
    """Every number the tools returned this turn, with the key it came under."""
    values = []
    for text in tool_results:
        try:
            values.extend(_leaves(json.loads(text)))
        except (json.JSONDecodeError, TypeError):
            values.extend(("", s.value) for s in stated_numbers(text))
    return values


def _candidates(stated: Stated, key: str, value: float) -> list[float]:
    """What a tool value reads as in the unit the answer used: µs values (keys ending in _us, or
    durations written in tool strings) convert to ms/s/ns, byte counts to kB/MB/GB."""
    out, unit, key = [value], stated.unit, key.lower()
    if unit in _TIME:
        if re.search(r"_us(\.|$)", key):
            out.append(value / _TIME[unit])
        for suffix, scale in ((":us", 1.0), (":µs", 1.0), (":ms", 1e3), (":s", 1e6), (":ns", 1e-3)):
            if key.endswith(suffix):
                out.append(value * scale / _TIME[unit])
    if unit in _BYTES and "bytes" in key:
        out.append(value / _BYTES[unit])
    return out


def _matches(stated: Stated, candidate: float) -> bool:
    # a stated number matches what rounds to it, or anything within 1% (rounded speech)
    tolerance = max(0.5 * 10 ** -stated.decimals, 0.01 * abs(candidate))
    return abs(abs(candidate) - abs(stated.value)) <= tolerance + 1e-9


def unverified(answer: str, tool_results: list[str]) -> list[str]:
    """The numbers in `answer` that no tool result of this turn supports."""
    known = known_values(tool_results)
    missing = []
    for stated in stated_numbers(answer):
        if not any(_matches(stated, c) for key, value in known for c in _candidates(stated, key, value)):
            missing.append(stated.text)
    return missing
