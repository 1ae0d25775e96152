"""What a detector is: its name (its key in `analyze --json`, in Findings and in `--set
NAME.PARAM=VALUE`), what it reads (the rank's events and other detectors' results, by name), its
parameters, its result type, how it runs, and its optional hooks: the sentence reports and the chat
app say about it, a report section, a side-panel finding, the words of the questions the offline
analyst answers with it and what its answer leads with, and whether the agent gets a tool for it.
Each analysis module defines its detectors as module-level `Detector`s; the registry finds them and
runs them in the order their reads ask for (detect/registry.py), so adding one is its module and its test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...trace.model import Trace


@dataclass(frozen=True)
class Inputs:
    """What a detector may read of one rank: its events, and the results of the detectors it names
    in `Detector.reads` (`inputs["gaps"]`: the one gap table; `inputs["breakdown"]`, ...), and only
    those, so the order the runner chose cannot hide a read nobody declared. Detectors never read files."""

    trace: Trace
    results: Mapping[str, Any]
    reader: str = ""  # the detector these are for

    def __getitem__(self, name: str) -> Any:
        try:
            return self.results[name]
        except KeyError:
            raise KeyError(f"detector {self.reader!r} reads {name!r}: name it in its Detector's reads") from None


@dataclass(frozen=True)
class Key:
    """One key a detector's result gives a rank in `analyze --json`: its name, its type (the JSON
    Schema's), and the value taken from the result."""

    name: str
    type: Any
    value: Callable[[Any], Any] = lambda result: result


def _no_sentence(result: Any, params: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Detector:
    name: str
    title: str  # the heading of its line in reports
    description: str  # what it finds, for the agent's tool and the docs
    params: Any  # its default parameters: a frozen dataclass (None: it takes none)
    result: type  # its result: a frozen dataclass (its JSON is its fields: core/encode.py); None when the trace cannot say
    run: Callable[[Inputs, Any], Any]  # (inputs, params) -> result or None
    sentence: Callable[[Any, Any], str | None] = _no_sentence  # (result, params): one sentence for reports, or None
    since: str = "1.0"  # the schema_version that added its key to `analyze --json` (a minor version: keys added)
    # where its result is None: (why the trace cannot say, how to profile so it can)
    needs: tuple[str, str] = ("the trace cannot say", "")
    tool: bool = True  # the agent gets a tool that returns the result's JSON for a rank
    # the words of the questions it answers (a regex, case-insensitive): the offline analyst answers
    # them with its sentence, before its own intents; "" for none
    asks: str = ""
    # (result, question) -> the first line of the offline analyst's answer where the question asks
    # something in particular of the result ("how many layers?": the count), else None; its sentence follows
    lead: Callable[[Any, str], str | None] | None = None
    reads: tuple[str, ...] = ()  # the detectors whose results it reads (Inputs[name]); the runner runs those first
    # its keys in a rank of `analyze --json`; None: one key, its name, holding the result or null
    keys: tuple[Key, ...] | None = None
    place: int = 50  # where its keys sit among a rank's (lower first; then by `since` and name)
    # the AnalysisParams field its parameters come from when they are shared (the gap table's and the
    # idle detector's are `idle`); "" for its own, set as `--set NAME.PARAM=VALUE`
    settings: str = ""
    frees: bool = False  # its work frees about as much as the trace holds: pages go back to the system after it
    # (result, params) -> Markdown lines of its part of the report, under the core section it names
    # in `report_under` ("" for a section of its own, headed by its title)
    section: Callable[[Any, Any], list[str]] | None = None
    report_under: str = ""
    # (result, on) -> the chat app's side-panel findings: (label, the question choosing it asks), `on`
    # naming the rank (" on rank 3") where the job has several; None: its title, asking about it,
    # where the offline analyst answers its questions (`asks`) and it has a result
    findings: Callable[[Any, str], list[tuple[str, str]]] | None = None

    def json_keys(self) -> tuple[Key, ...]:
        """Its keys in a rank of `analyze --json` (the result, or null where the trace cannot say)."""
        return self.keys if self.keys is not None else (Key(self.name, self.result | None),)

    @property
    def own_params(self) -> bool:
        """Whether it has parameters of its own, under its name in the analysis' `detectors`."""
        return not self.settings and self.params is not None

    def panel(self, result: Any, on: str) -> list[tuple[str, str]]:
        """Its side-panel findings for a result (none without one)."""
        if result is None:
            return []
        if self.findings is not None:
            return self.findings(result, on)
        return [(self.title.lower(), f"Tell me about the {self.title.lower()}{on}.")] if self.asks and self.tool else []

    def lead_for(self, result: Any, question: str) -> str | None:
        """What its answer to a question leads with (its `lead` hook), or None."""
        return None if result is None or self.lead is None else self.lead(result, question)

    def say(self, result: Any, params: Any) -> str | None:
        """Its sentence for a result, or None where it has nothing to say."""
        return None if result is None else self.sentence(result, params)
