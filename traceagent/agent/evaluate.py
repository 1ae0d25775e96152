"""`traceagent eval`: a fixed set of questions about the bundled trace asked of any
OpenAI-compatible server, each answer scored against the detectors' own figures.

Per question: the tools the model called, its rounds, the time, the numbers and claims the checks
flagged, and whether the answer agrees with the detectors (it states the expected fact, and
nothing in it was flagged). The expected facts are computed from the analysis when the eval runs,
never written down, so the eval holds for any trace it is pointed at.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial

from ..detect.analysis import Analysis
from ..detect.compare.diff import diff
from ..detect.core.vocabulary import GAP_ROOT, ROOT_CAUSES
from ..detect.detectors.kernels import short_name
from .claims import stated_conclusion
from .events import Answer, Failure, Notice, ToolCall
from .numbers import CAUSE_MENTION, stated_numbers
from .session import Session
from .tools import AnalysisContext


@dataclass(frozen=True)
class Question:
    """A question and how to tell a right answer: `expect(analysis, answer)` is (agrees, why)."""

    text: str
    expect: Callable[[Analysis, str], tuple[bool, str]]
    # what the trace is compared with: "" (nothing), "itself" (nothing changed), "after" (the other
    # trace eval was given), "before" (the two swapped: the change undone, so the other way round)
    compare: str = ""
    # why the question does not apply to a trace (it is then skipped, with the reason), or None
    applies: Callable[[Analysis], str | None] = lambda a: None


@dataclass
class Result:
    question: str
    tools: list[str] = field(default_factory=list)
    rounds: int = 0
    seconds: float = 0.0
    flagged: list[str] = field(default_factory=list)  # unverified numbers and claim warnings
    agrees: bool = False  # the answer the user got states the expected fact and nothing in it was flagged
    why: str = ""
    answer: str = ""
    answered_by: str = "nobody"  # model, detectors (a limit stopped the model: the offline analyst answered), skipped
    replaced_because: str | None = None  # why the detectors answered instead of the model (not a mark on the answer)


def _states(answer: str, value: float, quantity: str, tolerance: float) -> bool:
    """Whether `answer` states `value` (base units of `quantity`) within `tolerance` (relative)."""
    return any(s.quantity == quantity and any(lo <= value * (1 + tolerance) and hi >= value * (1 - tolerance)
                                              for lo, hi in zip(s.lows, s.highs))
               for s in stated_numbers(answer))


def _names_cause(answer: str, cause: str | None) -> bool:
    if not cause:
        return False
    # any gap cause that counts towards the root cause names it (launch latency names launch overhead),
    # as do the root cause's own label and words (vocabulary.Word.said)
    said = ROOT_CAUSES[cause].said
    return any(GAP_ROOT[m.lastgroup or ""] == cause for m in CAUSE_MENTION.finditer(answer)) or \
        ROOT_CAUSES[cause].label.lower() in answer.lower() or bool(said and re.search(said, answer, re.I))


def _why_idle(a: Analysis, answer: str) -> tuple[bool, str]:
    cause = a.verdict.root_cause
    return _names_cause(answer, cause), f"names the root cause ({cause})"


def _idle_share(a: Analysis, answer: str) -> tuple[bool, str]:
    pct = a.ranks[0].findings.idle.idle_pct
    return _states(answer, pct, "percent", 0.02), f"states idle {pct:.1f}% of the span"


def _largest_gap(a: Analysis, answer: str) -> tuple[bool, str]:
    us = float(a.ranks[0].gaps["dur"].max()) / 1000
    return _states(answer, us, "time", 0.02), f"states the largest gap, {us / 1000:.1f} ms"


def _cause_count(a: Analysis, answer: str) -> tuple[bool, str]:
    idle = a.ranks[0].findings.idle
    cause = a.verdict.root_cause or "dataloader"
    n = idle.by_cause_count.get(cause, 0)
    return _states(answer, n, "count", 0.0) or str(n) in answer.split(), f"states {n} gaps of {cause}"


def _top_kernel(a: Analysis, answer: str) -> tuple[bool, str]:
    top = a.ranks[0].findings.kernels.top[0]
    name = top.short_name or short_name(top.name)
    return name.lower() in answer.lower(), f"names the top kernel ({name})"


def _no_change(a: Analysis, answer: str) -> tuple[bool, str]:
    helped, not_helped = stated_conclusion(answer)
    return not_helped and not helped, "says nothing changed (same trace twice)"


def _conclusion_of(before: Analysis, after: Analysis, asked: Analysis, answer: str) -> tuple[bool, str]:
    """Whether the answer draws the comparison's conclusion (before → after): it helped, or it did not."""
    result = diff(before, after)
    says_helped, says_not = stated_conclusion(answer)
    right = (says_helped and not says_not) if result.helped else (says_not and not says_helped)
    return right, f"says it {'helped' if result.helped else 'did not help'} (step {result.slower_pct:+.1f}%)"


def _saving(a: Analysis, answer: str) -> tuple[bool, str]:
    saving = a.verdict.saving
    assert saving is not None  # applies() keeps the question for traces whose verdict has one
    said = [p for p in (saving.simulated_pct, saving.bound_pct) if p is not None]  # the prediction, or the bound
    return (any(_states(answer, p, "percent", 0.02) for p in said) and _names_cause(answer, a.verdict.root_cause),
            f"names {a.verdict.root_cause} and states its saving, {said[0]:.1f}%"
            + (f" (the bound: {saving.bound_pct:.1f}%)" if len(said) > 1 else ""))


def _profile_next(a: Analysis, answer: str) -> tuple[bool, str]:
    said = answer.lower()
    tools = ("nsys", "ncu", "nsight", "torch.profiler", "record_function", "with_stack", "traceagent profile")
    return any(t in said for t in tools), "names a profiler and what to record"


def _straggler(a: Analysis, answer: str) -> tuple[bool, str]:
    rank = a.comparison.straggler if a.comparison else None
    found = {int(n) for n in re.findall(r"\brank\s*#?(\d+)", answer, re.I)}
    return rank in found, f"names rank {rank}"


def _second_gpu_idle(a: Analysis, answer: str) -> tuple[bool, str]:
    rank = next(r for r in a.ranks if len(r.devices) > 1)
    device = rank.devices[1]
    pct = rank.findings.idle.devices[device].idle_pct
    return _states(answer, pct, "percent", 0.02), f"states GPU {device}'s idle, {pct:.1f}% of its span"


def _gap_root(a: Analysis) -> str | None:
    cause = a.verdict.root_cause
    return None if cause is None or cause in GAP_ROOT.values() else f"the root cause ({cause}) is not a cause of gaps"


def _no_saving(a: Analysis) -> str | None:
    return None if a.verdict.saving else "the verdict has no saving to state"


def _one_rank(a: Analysis) -> str | None:
    return None if a.comparison and a.comparison.straggler is not None else "no straggler: one rank, or none late"


def _one_gpu(a: Analysis) -> str | None:
    return None if any(len(r.devices) > 1 for r in a.ranks) else "no rank has a second GPU"


def _second_gpu_question(a: Analysis) -> str:
    rank = next((r for r in a.ranks if len(r.devices) > 1), None)
    return f"How idle is GPU {rank.devices[1]} of rank {rank.rank}?" if rank else "How idle is the second GPU?"


QUESTIONS = [
    Question("Why is my GPU idle?", _why_idle),
    Question("What share of the time is the GPU idle?", _idle_share),
    Question("How long is the largest idle gap?", _largest_gap),
    Question("How many idle gaps come from {cause}?", _cause_count, applies=_gap_root),
    Question("Which kernel takes the most GPU time?", _top_kernel),
    Question("Did my change make the step faster?", _no_change, compare="itself"),
    Question("Did my change make the step faster?", _no_change, compare="after"),  # each direction once: one of
    Question("Did my change make the step faster?", _no_change, compare="before"),  # them got slower
    Question("How much would fixing the top cause save?", _saving, applies=_no_saving),
    Question("What should I profile next?", _profile_next),
    Question("Which rank is the straggler?", _straggler, applies=_one_rank),
    Question("{second_gpu}", _second_gpu_idle, applies=_one_gpu),
]


async def run_eval(analysis: Analysis, make_session: Callable[[AnalysisContext], Session],
                   questions: list[Question] = QUESTIONS, on_result: Callable[[Result], None] | None = None,
                   other: Analysis | None = None) -> list[Result]:
    """Each question in a new conversation; the results in order. Once the server has sent nothing
    at all within a question's deadline, the questions after it go to the detectors alone (said
    in each result): a server that never answers costs one deadline, not one per question.
    `other`: a trace after a change, for the comparison questions in both directions (without it,
    they are skipped)."""
    results = []
    silent: str | None = None
    for q in questions:
        if q.compare in ("after", "before"):
            if other is None:
                continue  # not asked, and not listed: eval was given no second trace
            before, after = (analysis, other) if q.compare == "after" else (other, analysis)
            q = replace(q, expect=partial(_conclusion_of, before, after))
        cause = analysis.verdict.root_cause
        text = q.text.format(cause=ROOT_CAUSES[cause].label if cause in ROOT_CAUSES else "data loading",
                             second_gpu=_second_gpu_question(analysis))
        # the table tells the two directions apart; the model is asked the question alone
        shown = text + {"after": " (this trace → --compare)", "before": " (--compare → this trace)"}.get(q.compare, "")
        if (skip := q.applies(analysis)) is not None:
            results.append(Result(shown, answered_by="skipped", why=f"does not apply: {skip}"))
            if on_result:
                on_result(results[-1])
            continue
        ctx = {"": AnalysisContext(analysis), "itself": AnalysisContext(analysis, analysis),
               "after": AnalysisContext(analysis, other), "before": AnalysisContext(other or analysis, analysis)}[q.compare]
        session = make_session(ctx) if silent is None else Session(ctx, None, None)
        result = Result(shown)
        started = time.monotonic()
        unverified: list[str] = []
        async for event in session.ask(text):
            if isinstance(event, ToolCall) and not event.id.startswith(("offline", "draft")):
                result.tools.append(event.name)
            elif isinstance(event, Notice) and event.replaced_because:
                result.answered_by = "detectors"  # said apart: why is no mark on the answer shown
                result.replaced_because = event.replaced_because
            elif isinstance(event, Failure) and event.kind in ("connection", "timeout", "rate_limit", "auth", "server"):
                result.flagged.append(event.message)
                result.why = "the server failed"
                if event.kind in ("connection", "timeout") and silent is None:
                    silent = f"not asked: the server could not be reached or timed out on {shown!r}"
            elif isinstance(event, Answer):
                result.answer = event.text
                result.answered_by = "model" if result.answered_by == "nobody" else result.answered_by
                unverified = event.unverified
                result.flagged += [*unverified, *(w for w in event.warnings if not w.endswith("answered instead"))]
                if event.incomplete:
                    result.flagged.append(f"incomplete: {event.incomplete}")
        if session.model is None and silent is not None:
            result.answered_by = "detectors"
            result.replaced_because = silent
        elif session.silent_past_deadline:
            silent = f"not asked: the server sent nothing within the deadline on {shown!r}"
        result.seconds = round(time.monotonic() - started, 1)
        result.rounds = session.rounds
        if result.answer and not result.why:
            # the detectors' answer ends with why it was theirs (the model's marks quoted): not part of the answer
            ok, result.why = q.expect(analysis, result.answer.split("\n\n_The model did not answer:")[0])
            # the detectors' answer is ours: only its numbers are checked, not why the model was replaced
            result.agrees = ok and not (result.flagged if result.answered_by == "model" else unverified)
        results.append(result)
        if on_result:
            on_result(result)
    return results


def as_dicts(results: list[Result]) -> list[dict]:
    return [asdict(r) for r in results]
