"""The events a conversation emits, the same for a model session and the offline analyst: the
TUI renders them, `traceagent ask` prints them, transcripts record them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Token:
    """A piece of the answer as it streams."""
    text: str


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    args: dict


@dataclass(frozen=True)
class ToolResult:
    id: str
    name: str
    content: str  # JSON
    ok: bool

    @property
    def summary(self) -> str:
        """A short line for a collapsed tool block."""
        try:
            data = json.loads(self.content)
        except json.JSONDecodeError:
            return self.content[:120]
        if not self.ok:
            return f"error: {data.get('error', '')}"[:160]
        keys = [k for k in data if not isinstance(data[k], (list, dict))][:4]
        return ", ".join(f"{k}={data[k]}" for k in keys)[:160] or f"{len(self.content)} characters"


@dataclass(frozen=True)
class Answer:
    """The final answer of a turn: the numbers in it no source supports, why it is incomplete
    (cut at the token limit or the deadline, a stream that ended early, an empty answer), and
    warnings about how it was produced (no tool called, tool-call markup in the text)."""
    text: str
    unverified: list[str] = field(default_factory=list)
    incomplete: str | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Failure:
    """Something went wrong; `kind` is one of: connection, timeout, rate_limit, auth, server,
    malformed_tool_call, unknown_tool, bad_arguments, deadline."""
    kind: str
    message: str


@dataclass(frozen=True)
class Notice:
    """What the session did about the model's reply that the user should know: calls written as
    text and run, calls capped or de-duplicated, results trimmed to fit, a fallback to the offline
    analyst (`replaced_because`). `progress` notices (tool calls still streaming) replace one another and are not
    kept in transcripts."""
    message: str
    progress: bool = False
    replaced_because: str | None = None  # the model's answer is the offline analyst's, for this reason


@dataclass(frozen=True)
class Cancelled:
    pass


Event = Token | ToolCall | ToolResult | Answer | Failure | Notice | Cancelled
