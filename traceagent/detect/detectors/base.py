"""What a registered detector is: its name (its key in `analyze --json`, in Findings.extra and in
`--set NAME.PARAM=VALUE`), its parameters, its result type, how it runs, and its hooks: the sentence
reports and the chat app's side panel say about it, the words of the questions the offline analyst
answers with it, and whether the agent gets a tool for it. Each analysis module defines one as
`DETECTOR`; the registry finds them (detect/registry.py), so adding one is its module and its test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...trace.model import Trace
from .breakdown import BreakdownResult
from .memcpy import MemcpyResult


@dataclass(frozen=True)
class Inputs:
    """What a registered detector may read of one rank: its events, its classified gaps (every
    device, idle.trace_gaps), its breakdown and its copies. Detectors never read files."""

    trace: Trace
    gaps: pd.DataFrame
    breakdown: BreakdownResult
    copies: MemcpyResult  # the data movement detector's result


@dataclass(frozen=True)
class Detector:
    name: str
    title: str  # the heading of its line in reports
    description: str  # what it finds, for the agent's tool and the docs
    params: Any  # its default parameters: a frozen dataclass
    result: type  # its result: a frozen dataclass (its JSON is its fields: core/encode.py); None when the trace cannot say
    run: Callable[[Inputs, Any], Any]  # (inputs, params) -> result or None
    sentence: Callable[[Any], str | None]  # the result in one sentence for reports, or None
    since: str  # the schema_version that added its key to `analyze --json` (a minor version: keys added)
    needs: tuple[str, str]  # where its result is None: (why the trace cannot say, how to profile so it can)
    tool: bool = True  # the agent gets a tool that returns the result's JSON for a rank
    # the words of the questions it answers (a regex, case-insensitive): the offline analyst answers
    # them with its sentence, before its own intents; "" for none
    asks: str = ""
