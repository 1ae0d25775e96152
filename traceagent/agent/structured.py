"""The model's final answer as a structure, checked by what it means rather than how it is phrased:
the root cause it names, each quantity it states with its kind (largest gap, total idle, a cause's
gap count, a step's time, a saving...), whether a change helped, and the text the user reads.

Each claim is checked by value against the detectors, through the same tool answers the model
reads, for the scope it names (the rank and GPU in focus when it names none); the text is checked
to state nothing beyond its claims. A server that cannot return the structure answers in prose,
and the prose checks (numbers.py, claims.py) read it instead.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field, ValidationError

from ..detect.core.vocabulary import GAP_CAUSES, GAP_ROOT, ROOT_CAUSES, label
from ..format import duration
from .answers import IdleGapsAnswer
from .claims import ClaimCheck, blamed_causes
from .numbers import CAUSE_MENTION, UNITS, Sources, Stated, stated_numbers
from .tools import AnalysisContext, ToolInputError, idle_gaps, steps, verdict

FINAL_ANSWER = "final_answer"

#: What each kind of quantity is, and the quantities (numbers.UNITS) its value may be in.
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "idle_share": ("the GPU's idle time as a share of its span (%)", ("percent",)),
    "total_idle": ("the GPU's idle time in all", ("time",)),
    "largest_gap": ("the longest single idle gap", ("time",)),
    "gap_count": ("how many idle gaps: of one cause when `cause` is set, else all of them", ("count",)),
    "cause_idle": ("the idle time of one cause (`cause`)", ("time",)),
    "cause_share": ("the idle time of one cause (`cause`) as a share of the span (%)", ("percent",)),
    "step_time": ("a step's duration: the mean step, the median, or one step's", ("time",)),
    "saving": ("what fixing a finding (`cause`) would save at most: % of step time or span, or time",
               ("percent", "time")),
    "other": ("any other figure: checked against the tool results, not by kind", ()),
}


class Quantity(BaseModel):
    """One figure the answer states, and what it is."""

    kind: str = Field(description="one of: " + "; ".join(f"{k}: {what}" for k, (what, _) in KINDS.items()))
    value: float = Field(description="the number as the answer states it")
    unit: str = Field(default="", description="us, ms, s or %; empty for a count")
    cause: str | None = Field(default=None, description="for cause_idle, cause_share, gap_count and saving: the cause's "
                                                "name (dataloader, sync, launch_overhead, host_other...)")
    rank: int | None = Field(default=None, description="the rank it is about, when not the one in focus")
    device: int | None = Field(default=None, description="the GPU it is about, when one GPU's")


class FinalAnswer(BaseModel):
    """End the turn: the answer's text for the user, and each claim it makes, so the app can check
    them by value. Every figure in `text` must be one of `quantities`."""

    text: str = Field(description="the answer, in Markdown, for the user")
    root_cause: str | None = Field(default=None, description="the root cause the answer names, by its name in the "
                                                     "vocabulary (dataloader, sync, launch_overhead, host_other, "
                                                     "memcpy, communication, straggler, hot_kernel...), or null")
    quantities: list[Quantity] = Field(default_factory=list, description="each figure the text states")
    helped: bool | None = Field(default=None, description="for a before/after comparison: whether the change made the "
                                                  "program faster; else null")


def final_answer_tool() -> BaseTool:
    """The tool the model ends its turn with (the session answers it; it runs no detector)."""
    return StructuredTool.from_function(func=lambda **_: json.dumps({"ok": True}), name=FINAL_ANSWER,
                                        args_schema=FinalAnswer, description=" ".join((FinalAnswer.__doc__ or "").split()))


def parse_final(args: dict) -> FinalAnswer | None:
    """The structure of a final_answer call's arguments, or None when they do not have one (a
    missing text): kinds and causes are read leniently, a small model's wording of them is common."""
    try:
        return FinalAnswer.model_validate(args)
    except ValidationError:
        text = args.get("text") if isinstance(args, dict) else None
        return FinalAnswer(text=text) if isinstance(text, str) else None


_FENCED_JSON = re.compile(r"^\s*(?:```(?:json)?\s*)?(\{.*\})\s*(?:```)?\s*$", re.S)


def written_final(reply: str) -> FinalAnswer | None:
    """A reply whose whole text is the final answer as JSON (a server without tool calls)."""
    found = _FENCED_JSON.match(reply)
    if not found:
        return None
    try:
        data = json.loads(found.group(1))
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and data.get("name") == FINAL_ANSWER and isinstance(data.get("arguments"), dict):
        data = data["arguments"]
    return parse_final(data) if isinstance(data, dict) and "text" in data else None


def cause_name(said: str | None) -> str | None:
    """A cause as a model writes it ('dataloader', 'data loading', 'Host synchronizations') → its
    name in the vocabulary (a gap cause or a root cause), or None."""
    if not said:
        return None
    key = said.strip().lower().replace("-", "_").replace(" ", "_")
    if key in GAP_CAUSES or key in ROOT_CAUSES:
        return key
    if found := CAUSE_MENTION.search(said):
        return found.lastgroup
    for name, word in ROOT_CAUSES.items():
        if word.label.lower() == said.strip().lower() or (word.said and re.search(word.said, said, re.I)):
            return name
    return None


def _root(cause: str | None) -> str | None:
    return GAP_ROOT.get(cause or "", cause)


def _base(q: Quantity) -> tuple[str, float, float] | None:
    """(quantity, value in base units, how far off it may be) for a claim, or None for a unit we
    do not know. The tolerance is the claim's own precision (62.3 ms: ±0.05 ms) or 1%."""
    unit = q.unit.strip()
    if unit.lower() in ("", "count", "gaps", "none", "n"):
        quantity, scale = "count", 1.0
    elif unit in UNITS or unit.lower() in UNITS:
        quantity, scales = UNITS.get(unit) or UNITS[unit.lower()]
        scale = scales[0]
    else:
        return None
    if not math.isfinite(q.value):
        return None
    text = repr(float(q.value))
    decimals = len(text.split(".")[1].rstrip("0")) if "." in text and "e" not in text else 0
    half_digit = 0.5 * 10 ** -decimals * scale
    value = q.value * scale
    return quantity, value, max(half_digit, 0.01 * abs(value))


@dataclass(frozen=True)
class Truth:
    """What the detectors say one kind of quantity is, for one scope."""

    quantity: str
    values: list[float]  # base units; any of them makes the claim true
    said: str  # the first value as people read it, for the mark


class StructuredCheck:
    """Checks a final answer's claims by value, and its text against its claims."""

    def __init__(self, ctx: AnalysisContext, claims: ClaimCheck) -> None:
        self.ctx = ctx
        self.claims = claims
        self._truths: dict[tuple, Truth | None] = {}  # a draft checks dozens of claims against a few answers

    def warnings(self, answer: FinalAnswer, sources: Sources) -> list[str]:
        said = [w for q in answer.quantities if (w := self.quantity(q))]
        root = cause_name(answer.root_cause)
        if answer.root_cause and root is None:
            said.append(f"the answer names {answer.root_cause!r} as its root cause, which is no cause in the "
                        "vocabulary")
        elif root and (w := self.claims.cause_warning([_root(root) or root])):
            said.append(w)
        if answer.helped is not None and (w := self.claims.conclusion_warning(answer.helped, not answer.helped)):
            said.append(w)
        return said + self.beyond(answer, root, sources)

    def truth(self, q: Quantity) -> Truth | None:
        """The detectors' values for a claim's kind and scope; None for `other` and unknown kinds."""
        base = _base(q)
        key = (q.kind.strip().lower(), q.cause, q.rank, q.device, base[0] if base else None)
        if key not in self._truths:
            self._truths[key] = self._truth(q)
        return self._truths[key]

    def _truth(self, q: Quantity) -> Truth | None:
        kind = q.kind.strip().lower()
        if kind in ("idle_share", "total_idle", "largest_gap", "gap_count", "cause_idle", "cause_share"):
            return self._idle_truth(kind, q, idle_gaps(self.ctx, rank=q.rank, device=q.device, top=1))
        if kind == "step_time":
            answer = steps(self.ctx, rank=q.rank, device=q.device)
            s = answer.steps
            if s is None:
                return Truth("time", [], "no steps")
            rows = [v for row in s.steps for v in (row.host_us, row.device_us) if v]
            values = [s.mean_us, s.step_time_us, s.median_us, s.min_us, s.max_us, *rows]
            return Truth("time", values, f"mean step {duration(s.mean_us)}")
        if kind == "saving":
            savings = verdict(self.ctx, rank=q.rank, device=q.device).savings
            cause = _root(cause_name(q.cause))
            chosen = [s for s in savings if cause is None or s.root_cause == cause]
            if not chosen:
                return Truth("percent", [], f"no saving for {q.cause}")
            if _base(q) and _base(q)[0] == "time":  # type: ignore[index]
                return Truth("time", [v for s in chosen for v in (s.upper_bound_us, s.per_step_us) if v is not None],
                             f"up to {duration(chosen[0].upper_bound_us)}")
            values = [v for s in chosen for v in (s.step_pct, s.pct) if v is not None]
            return Truth("percent", values, f"up to {values[0]:.1f}%" if values else "none")
        return None

    def _idle_truth(self, kind: str, q: Quantity, idle: IdleGapsAnswer) -> Truth:
        t = idle.totals
        if kind == "idle_share":
            return Truth("percent", [t.idle_pct], f"{t.idle_pct:.1f}%")
        if kind == "total_idle":
            return Truth("time", [t.idle_us], duration(t.idle_us))
        if kind == "largest_gap":
            top = idle.top_gaps[0].dur_us if idle.top_gaps else 0.0
            return Truth("time", [top], duration(top))
        cause = cause_name(q.cause)
        # a gap cause's own figure, or its root cause's (launch overhead: launch-bound gaps and launch latency)
        group = [c for c in GAP_CAUSES if GAP_ROOT[c] == _root(cause)] if cause else []
        causes = [[cause], group] if cause in GAP_CAUSES else [group]

        def each(figures: dict) -> list[float]:
            return [sum(figures.get(c, 0) for c in cs) for cs in causes if cs]
        if kind == "gap_count":
            if not cause:
                return Truth("count", [t.gaps], f"{t.gaps} gaps in all")
            counts = each(t.by_cause_count)
            return Truth("count", counts, f"{counts[0]:g} gaps of {label(GAP_CAUSES, cause)}")
        times = each(t.by_cause_us) if cause else []
        if kind == "cause_idle":
            return Truth("time", times, duration(times[0]) if times else "no such cause")
        shares = [100 * us / t.whole_us for us in times] if t.whole_us else []
        return Truth("percent", shares, f"{shares[0]:.1f}%" if shares else "no such cause")

    def quantity(self, q: Quantity) -> str | None:
        """A mark when a claim's value is not what the detectors say for its kind and scope."""
        kind = q.kind.strip().lower()
        if kind not in KINDS:
            return None  # read as "other": the number check still reads the text
        base = _base(q)
        where = "".join(f" on {k} {v}" for k, v in (("rank", q.rank), ("GPU", q.device)) if v is not None)
        what = f"{kind.replace('_', ' ')}{f' ({q.cause})' if q.cause else ''}{where}"
        if base is None:
            return f"the answer gives {what} in {q.unit!r}, which is no unit the detectors use"
        try:
            truth = self.truth(q)
        except ToolInputError as exc:
            return f"the answer gives {what}, but {exc}"
        if truth is None:
            return None
        quantity, value, slack = base
        if quantity not in KINDS[kind][1] or (quantity != truth.quantity and kind != "saving"):
            return f"the answer gives {what} as {q.value:g} {q.unit}, which is not a {KINDS[kind][0]}"
        if any(abs(value - v) <= slack for v in truth.values):
            return None
        return f"the answer says {what} is {q.value:g} {q.unit}".rstrip() + f", but the detectors say {truth.said}"

    def beyond(self, answer: FinalAnswer, root: str | None, sources: Sources) -> list[str]:
        """Marks for what the text says beyond its claims: a figure that is none of them, a cause
        it blames that is not the one it names."""
        claimed = [b for q in answer.quantities if (b := _base(q))]
        said = []
        for stated in stated_numbers(answer.text, sources):
            if not any(_claims(stated, quantity, value, slack) for quantity, value, slack in claimed):
                said.append(f"the text states {stated.text}, which is none of the figures its answer claims")
        blamed = [c for c in blamed_causes(answer.text) if c != _root(root)]
        if blamed:
            names = " and ".join(ROOT_CAUSES[c].label if c in ROOT_CAUSES else c for c in blamed)
            said.append(f"the text blames {names}, but its answer names "
                        f"{label(ROOT_CAUSES, _root(root)) if root else 'no root cause'}")
        return said


def _claims(stated: Stated, quantity: str, value: float, slack: float) -> bool:
    return stated.quantity == quantity and any(lo - slack <= value <= hi + slack
                                               for lo, hi in zip(stated.lows, stated.highs))


def draft_claims(text: str, check: StructuredCheck, sources: Sources) -> list[dict]:
    """The quantities of a draft (the offline analyst's answer) as claims the model can copy: each
    figure it states, with the first kind whose value it is for the scope in focus."""
    found: list[dict] = []
    for stated in stated_numbers(text, sources, small_counts=True):
        if stated.quantity not in ("time", "percent", "count"):
            continue
        written = _WRITTEN_UNIT.match(stated.text)
        unit = written.group("unit") if written else ""
        claim = next((q for kind in _kinds_for(stated) for cause in _causes_for(kind)
                      if check.quantity(q := Quantity(kind=kind, value=stated.bare, unit=unit, cause=cause)) is None),
                     None)  # else a figure of no kind we check: the number check still reads it
        as_dict = (claim or Quantity(kind="other", value=stated.bare, unit=unit)).model_dump(exclude_none=True)
        if as_dict not in found:
            found.append(as_dict)
    return found


_WRITTEN_UNIT = re.compile(r"^\D*[\d,.]+\s*(?P<unit>[^\d\s]*)\s*$")


def _kinds_for(stated: Stated) -> list[str]:
    by_label = {"largest gap": ["largest_gap"], "total idle": ["total_idle", "idle_share"]}
    if stated.label in by_label:
        return by_label[stated.label]
    if stated.label and stated.label.startswith("gaps of "):
        return ["gap_count"]
    return [k for k, (_, quantities) in KINDS.items() if stated.quantity in quantities]


def _causes_for(kind: str) -> list[str | None]:
    if kind in ("cause_idle", "cause_share", "saving"):
        return [*GAP_CAUSES] if kind != "saving" else [*ROOT_CAUSES]
    if kind == "gap_count":
        return [None, *GAP_CAUSES]
    return [None]

