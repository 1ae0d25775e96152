"""The offline analyst: answers the questions engineers ask from the same tools when no LLM is
configured.

It reads the question (question.py: intent, and the rank, GPU, steps, kernel it names), calls that
intent's tools with those arguments (emitting the same events a model session does), and writes
the answer from a template that answers what was asked first (yes or no, or the name), then the
evidence, then the next step. Every number is a tool's, and the number check runs on it too.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from ..detect.analysis import Analysis, RankAnalysis
from ..detect.compare.diff import DiffResult, OpChange, Prediction, ShareMetric, TimeMetric, work_note
from ..detect.compare.scaling import PARTS
from ..detect.core.asked import SLOWEST, asks_yes_or_no
from ..detect.core.peaks import peak_for
from ..detect.core.vocabulary import BOUNDS, GAP_CAUSES, LIMITERS, ROOT_CAUSES, label
from ..detect.detectors.collectives import CollectivesResult, collectives_sentence
from ..detect.detectors.flops import roofline, uncounted_sentence
from ..detect.detectors.graphs import capture_sentence
from ..detect.detectors.host_ops import API_NAMED, COUNT_ASKED, SYNCS_COUNTED, api_time, sync_call_counts
from ..detect.detectors.interconnect import interconnect_sentence
from ..detect.detectors.kernel_profiles import profile_sentence, same_kernel
from ..detect.detectors.kernels import is_op_name, op_kernels, short_name
from ..detect.detectors.launch import NO_LAUNCHES, latency_note
from ..detect.detectors.libraries import library_named
from ..detect.detectors.memory import memory_peak
from ..detect.detectors.precision import precision_sentence
from ..detect.detectors.steps import StepRow
from ..detect.detectors.stragglers import RankCollectives, RankComparison
from ..detect.detectors.time_by_class import CLASSES, NATURES, TimeByClassResult, classes_named, memory_kernel_classes
from ..detect.detectors.workload import DETECTOR as WORKLOAD_DETECTOR
from ..detect.registry import DETECTORS, Detector
from ..detect.verdict.advice import kernel_profiler, profile_line, rocprof_line
from ..detect.verdict.critical_path import critical_path_sentence
from ..detect.verdict.diagnose import Verdict, replayed_little
from ..detect.verdict.whatif import ALL_KERNELS, whatif_sentence
from ..format import counted, duration, flop_rate, of_span, percent, rate, scope, shorten, size, upper_first
from ..sentences import device_lines, gpu_behind, slowest_step_sentence, straggler_sentence
from ..text import code, md_prose
from ..trace.model import GPU_METRICS
from .answers import (
    MAX_ITEMS,
    AnnotationsAnswer,
    CommAnswer,
    CompareAnswer,
    CopiesAnswer,
    DetectorAnswer,
    DeviceActivityAnswer,
    FlopsAnswer,
    GapRow,
    HostActivityAnswer,
    IdleGapsAnswer,
    InstancesAnswer,
    KernelProfilesAnswer,
    KernelsAnswer,
    LaunchesAnswer,
    MemoryAnswer,
    OverviewAnswer,
    ScalingAnswer,
    Scope,
    StepsAnswer,
    Unavailable,
    VerdictAnswer,
    WhatIfAnswer,
)
from .answers import Answer as ToolAnswer
from .events import Answer, Token, ToolCall, ToolResult
from .numbers import unverified
from .question import (
    BUSY_SAID,
    COLLECTIVES_SAID,
    FP8,
    GPUS_COUNTED,
    IDLE_WORDS,
    LINE_ASKED,
    MOST_CALLED_KERNELS,
    NOT_RECORDED,
    OP_NAME,
    PRECISION,
    RUN_LENGTH,
    TIME_OF_NAMED,
    Question,
    named_of,
    understand,
)
from .tools import NO_ANNOTATIONS, NO_MEMORY, NO_STEPS, AnalysisContext, ToolInputError, dumps, tool_functions

NO_LLM = ("_Offline analyst: no LLM is configured, so this answer comes from templates over the detectors. "
          "Set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server such as vLLM, Ollama or llama.cpp) "
          "to talk it through with a model._")

CANNED_QUESTIONS = ["Why is my GPU idle?", "What should I optimize first?", "Is it compute-bound?",
                    "What are the hot kernels?", "Which kernel is slowest per call?", "Which op takes the most GPU time?",
                    "Is attention the bottleneck?", "How much time goes to memcpy?",
                    "Is communication overlapped?", "Which rank is the straggler?", "Where does the sync come from?",
                    "What is the longest gap?", "Which GPU is most idle?", "How long is a step?",
                    "How does the slowest step differ from the median?",
                    "Should I use CUDA graphs?", "What if I removed the data loading?", "What is the MFU?",
                    "What should I profile next?", "How much time does attention take?",
                    "How long does the backward pass take?", "Which layer is the slowest?", "Should I use torch.compile?",
                    "Would mixed precision help?", "Are tensor cores used?", "Do my kernels fill the GPU?",
                    "Is the model compiled?", "Is this training or inference?", "What is the throughput?",
                    "Did it help?", "Summarize this trace."]


@dataclass(frozen=True)
class Plan:
    """How the analyst answers one intent: the tool calls (name, arguments) given the question and
    its scope arguments (rank, device), and the template that writes the answer from the
    question and those calls' answers, in the same order."""

    calls: Callable[[Question, dict], list[tuple[str, dict]]]
    write: Callable[..., str]


def _min(q: Question) -> dict:
    return {"min_us": q.min_us} if q.min_us else {}


class OfflineAnalyst:
    def __init__(self, ctx: AnalysisContext) -> None:
        self.ctx = ctx
        self.tools = tool_functions()

    def plans(self) -> dict[str, Plan]:
        """intent → its plan."""
        compare = self.ctx.other is not None
        return {
            # a rank named ("why is rank 3 slow?"): where it stands among the ranks too
            "idle": Plan(lambda q, at: [("verdict", at), ("idle_gaps", at | _min(q))]
                         + ([("communication", at)] if q.rank is not None and len(self.ctx.analysis.ranks) > 1 else [])
                         + ([("overview", {})] if BUSY_SAID.search(q.text) else []),
                         self._idle),
            "optimize_first": Plan(lambda q, at: [("verdict", at)], self._optimize_first),
            "not_recorded": Plan(lambda q, at: [("verdict", at)], self._not_recorded),
            # "what is happening at 500 ms?": the host's busiest events there, and the step it falls in
            "window": Plan(lambda q, at: [(tool, at | {"start_us": q.window[0], "end_us": q.window[1]})
                                          for tool in ("device_activity", "host_activity")] + [("steps", at)]
                           if q.window else [], self._window),
            "saving": Plan(lambda q, at: [("verdict", at)], self._saving),
            "whatif": Plan(lambda q, at: [("what_if", {"change": self._change(q)} | _rank(at))], self._what_if),
            "bound": Plan(lambda q, at: [("verdict", at), ("idle_gaps", at)]
                          + ([("time_by_class", at), ("flops", at)]
                             if {"compute", "memory_bound"} & set(q.limits) or classes_named(q.text)
                             or _ROOFLINE_ASKED.search(q.text) else [])
                          + [("what_if", {"change": f"class:{','.join(classes)}=x{BOTTLENECK_SPEEDUP:g}"} | _rank(at))
                             for classes in [self._classes_asked(q, at)] if classes and not q.limits],
                          lambda q, *answers: self._absent_phase(q) + self._bound(q, *answers)),
            # "is the MoE layer the bottleneck?": that op's kernels made faster, replayed
            "op_bound": Plan(lambda q, at: [("verdict", at), ("hot_kernels", at | {"op_filter": q.op, "top": 3})]
                             + [("what_if", {"change": change} | _rank(at)) for change in [self._op_change(q, at)] if change],
                             self._op_bound),
            "slow_kernel": Plan(lambda q, at: [("hot_kernels", at | {"order_by": _slow_order(q), "top": _how_many(q, 5)}),
                                               ("hot_kernels", at | {"top": 3}), ("kernel_profiles", {})],
                                self._slow_kernel),
            "kernel": Plan(lambda q, at: [("hot_kernels", at | {"name_filter": q.kernel, "top": 3}),
                                          ("kernel_instances", at | {"name": q.kernel, "top": 3}),
                                          ("kernel_profiles", {})], self._kernel),
            "module": Plan(lambda q, at: [("modules", _rank(at))], self._module),
            "op": Plan(lambda q, at: [("hot_kernels", at | {"op_filter": q.op, "top": 5}), ("host_ops", _rank(at)),
                                      ("op_time", _rank(at))], self._op),
            # more than the tool's 10 asked ("the top 20 kernels"): that many; "which rank runs the most kernels?": each
            # rank's (the first _RANKS_LISTED)
            "kernels": Plan(lambda q, at: [("hot_kernels", {"rank": r.rank, "top": 1})
                                           for r in self.ctx.analysis.ranks[:_RANKS_LISTED]] if self._every_rank(q) else
                            [("hot_kernels", at | ({"top": n} if (n := _how_many(q, 0)) > 10 else {})
                                            | ({"order_by": "count"} if re.search(MOST_CALLED_KERNELS, q.text, re.I) else {})),
                                           ("kernel_profiles", {})]
                            + ([("launches", at)] if _TYPICAL_KERNEL.search(q.text) else [])
                            + ([("verdict", at)] if _WHAT_TO_TUNE.search(q.text) else []), self._kernels),
            # a runtime API's time asked ("how much time is spent in cudaMemcpyAsync?"): led by its host time
            "copies": self._with_api_time(Plan(lambda q, at: [("data_movement", at), ("interconnect", at)], self._copies)),
            "memory": Plan(lambda q, at: [("memory", at)], self._memory),
            # "how long does the data loader take per step?": each step's wait for data too
            "dataloader": Plan(lambda q, at: [("verdict", at), ("idle_gaps", at | {"cause": "dataloader", "top": 3})]
                               + ([("steps", at)] if _PER_STEP.search(q.text) else []), self._dataloader),
            "sync": self._with_api_time(Plan(lambda q, at: [("idle_gaps", at | {"cause": "sync", "top": 3})], self._sync)),
            # "the communication time across all ranks": each rank's (the first _RANKS_LISTED)
            "communication": Plan(lambda q, at: [("communication", {"rank": r.rank})
                                                 for r in self.ctx.analysis.ranks[:_RANKS_LISTED]] if self._every_rank(q)
                                  else [("communication", at), ("collectives", at), ("interconnect", at)]
                                  + [("hot_kernels", at | kind.filters) for kind in _collective_named(q.text)]
                                  # "which collective is slowest?": the collective kernels by time per call
                                  + ([("hot_kernels", at | {"collectives": True, "order_by": _slow_order(q), "top": 3})]
                                     if SLOWEST.search(q.text) and not _collective_named(q.text) else []),
                                  self._communication_asked),
            "critical_path": Plan(lambda q, at: [("critical_path", at | ({"step": q.steps[0]} if q.steps else {}))],
                                  self._critical_path),
            "phases": Plan(lambda q, at: [("phases", at), ("verdict", at), ("workload", at)], self._phases),
            "interconnect": Plan(lambda q, at: [("communication", at), ("collectives", at), ("interconnect", at)],
                                 self._communication),
            # what fixing it would save: the verdict's saving too
            "straggler": Plan(lambda q, at: [("communication", at)]
                              + ([("verdict", {})] if re.search(r"\b(?:sav\w*|buy|gain|worth)\b", q.text, re.I) else []),
                              self._straggler),
            "scaling": Plan(lambda q, at: [("communication", at)] + ([("scaling", {})] if compare else []),
                            self._scaling),
            "step_vs_step": Plan(lambda q, at: [("steps", at)], self._step_vs_step),
            "rank_vs_rank": Plan(lambda q, at: [("overview", {"rank": r}) for r in q.ranks[:2]] + [("communication", {})],
                                 self._rank_vs_rank),
            # two GPUs of a rank side by side: their idle by cause, each over its own span
            "device_vs_device": Plan(lambda q, at: [("idle_gaps", _rank(at) | {"device": d}) for d in q.devices[:2]],
                                     self._device_vs_device),
            "one_step": Plan(lambda q, at: [("steps", at), ("idle_gaps", at | {"step": q.steps[0], "top": 3})],
                             self._one_step),
            # "the step time across ranks": each rank's (the first _RANKS_LISTED)
            "steps": Plan(lambda q, at: [("steps", {"rank": r.rank}) for r in self.ctx.analysis.ranks[:_RANKS_LISTED]]
                          if self._every_rank(q) else [("steps", at)], self._steps),
            "throughput": Plan(lambda q, at: [("phases", at), ("verdict", at)] if self._serving(at) else [("steps", at)],
                               self._throughput),
            "launch": self._with_api_time(Plan(lambda q, at: [("launches", at), ("verdict", at)]
                                               + ([("hot_kernels", at | {"top": 1})] if _KERNELS_COUNTED.search(q.text)
                                                  else []), self._launch)),
            "longest_gap": Plan(lambda q, at: [("idle_gaps", at | {"top": 1} | _min(q))], self._longest_gap),
            "gaps": Plan(lambda q, at: [("idle_gaps", at | {"top": 5} | _min(q))], self._gaps),
            "annotations": Plan(lambda q, at: [("annotations", at)], self._annotations),
            "named_range": Plan(lambda q, at: [("annotations", at | {"name_filter": q.range_name, "top": 5})],
                                self._named_range),
            # the memory a larger batch would need room in, too
            "batch_size": Plan(lambda q, at: [("verdict", at), ("launches", at), ("overview", {}), ("memory", at)],
                               self._batch_size),
            "compile": Plan(lambda q, at: [("verdict", at), ("launches", at), ("time_by_class", at), ("workload", at)],
                            self._compile),
            "mfu": Plan(lambda q, at: [("flops", at), ("overview", at), ("hot_kernels", at | {"top": 1}),
                                       ("precision", at)], self._mfu),
            "profile_next": Plan(lambda q, at: [("overview", {}), ("verdict", at), ("hot_kernels", at | {"top": 1})],
                                 self._profile_next),
            "compare": Plan(lambda q, at: [("compare_traces", {"op": q.op} if q.op else {})] if compare else [],
                            self._compare),
            "summary": Plan(lambda q, at: [("overview", {}), ("verdict", at)]
                            + ([("steps", at)] if re.search(RUN_LENGTH, q.text, re.I) else []), self._summary),
            "most_idle": Plan(lambda q, at: [("overview", {})], self._most_idle),
            "unknown": Plan(lambda q, at: [("overview", {}), ("verdict", {})], self._unknown),
            # each registered detector that names the questions it answers (Detector.asks)
            **{f"detector:{d.name}": Plan(partial(_own_tool, d.name), partial(self._registered, d))
               for d in DETECTORS if d.asks and d.tool},
            # "what is this program doing?": the kind of job, then the trace in short
            "detector:workload": Plan(lambda q, at: _own_tool("workload", q, at)
                                      + ([("overview", {}), ("verdict", at)] if _WHOLE_TRACE_ASKED.search(q.text) else []),
                                      self._workload),
        }

    async def answer(self, question: str, note: str = NO_LLM, lead: str = "") -> AsyncIterator:
        """The events of one answer; `note` ends it (why the offline analyst, not a model, answers),
        `lead` starts it."""
        q = understand(question, self.ctx)
        if self.ctx.other is not None and q.intent != "compare" and _ABOUT_AFTER.search(question):
            # "what limits it now?", "is the GPU still idle?": the second run's own answer (same sources)
            async for event in self._of_run(self.ctx.other).answer(question, note, _SECOND_RUN):
                yield event
            return
        if self.ctx.other is not None and q.intent not in ("compare", None) and _BOTH_RUNS.search(question):
            # "did the comm to compute ratio change?": the same answer of each run, one after the other
            texts, checked = [], []
            for n, (run, said) in enumerate(((self.ctx.analysis, _FIRST_RUN), (self.ctx.other, _SECOND_RUN))):
                async for event in self._of_run(run).answer(question, "", said):
                    if isinstance(event, Answer):
                        texts.append(event.text.strip())
                        checked += event.unverified
                    elif isinstance(event, ToolCall | ToolResult):  # each run's calls told apart
                        yield replace(event, id=f"{event.id}-run{n + 1}")
            for final in _streamed("\n\n".join(texts) + "\n\n" + note, checked):
                yield final
            return
        plans = self.plans()
        intent = q.intent if q.intent in plans and not q.foreign else "unknown"
        plan = plans[intent]
        at = {k: v for k, v in (("rank", q.rank), ("device", q.device)) if v is not None}
        answers: list[ToolAnswer] = []
        for i, (name, args) in enumerate(plan.calls(q, at if intent != "unknown" else {})):
            yield ToolCall(f"offline-{i}", name, args)
            try:
                answer = await asyncio.to_thread(self.tools[name], self.ctx, **args)
            except ToolInputError as exc:  # a rank, GPU or step the trace does not have
                yield ToolResult(f"offline-{i}", name, json.dumps({"error": str(exc)}), ok=False)
                text = f"I cannot answer that for this trace: {exc}."
                break
            content = dumps(answer)
            self.ctx.sources.add_result(content)
            answers.append(answer)
            yield ToolResult(f"offline-{i}", name, content, ok=True)
        else:
            text = lead + plan.write(q, *answers)
        checked = unverified(text, self.ctx.sources) if answers else []  # the note is ours, not a claim
        for final in _streamed(text + "\n\n" + note, checked):
            yield final

    def _named_in_trace(self, word: str) -> bool:
        """Whether a kernel, op or host event (module ranges among them) of any rank has the word in its name."""
        word = word.lower()
        return any(word in str(name).lower() for r in self.ctx.analysis.ranks
                   for column in (r.trace.gpu["name"], r.trace.gpu["op"], r.trace.cpu["name"])
                   for name in column.cat.categories)

    @property
    def _amd(self) -> bool:
        """Whether the focus rank's GPUs are AMD's (their kernels' profiler is ROCm's, not Nsight)."""
        return self.ctx.analysis.focus.trace.meta.amd

    def _of_run(self, run: Analysis) -> OfflineAnalyst:
        """The analyst of one of the two runs loaded, alone (the same sources: its numbers check)."""
        return OfflineAnalyst(replace(self.ctx, analysis=run, other=None))

    # -- templates: each takes the question and the answers of its plan's calls ----------------

    def _who(self, scope: Scope | None) -> str:
        """'Rank 7: ' before a rank's figures when the job has several ranks (tools default to the
        verdict's rank, so the reader must be told which one this is), or a GPU that was asked."""
        scope = scope or Scope()
        gpu = f", GPU {scope['device']}" if scope.get("device") not in (None, "all") else ""
        if (len(self.ctx.analysis.ranks) < 2 and not gpu) or "rank" not in scope:
            return ""
        return f"Rank {scope['rank']}{gpu}: "

    @staticmethod
    def _of(scope: Scope) -> str:
        """What a result's percentages are over: the span, or device time for several GPUs."""
        devices = scope.get("devices", [])
        return of_span(len(devices) if scope.get("device") == "all" and len(devices) > 1 else 1)

    def _idle(self, q: Question, verdict: VerdictAnswer, idle: IdleGapsAnswer,
              *more: CommAnswer | OverviewAnswer) -> str:
        v = verdict.verdict
        if not v.limiter:
            return v.headline + ". " + v.next_step
        comm = next((a for a in more if isinstance(a, CommAnswer)), None)
        overview = next((a for a in more if isinstance(a, OverviewAnswer)), None)
        # the verdict first: on a copy- or communication-bound trace the idle time is its symptom
        standing = _standing(q.rank, comm.comparison if comm is not None else None)
        lines = [*([f"{standing} Its own time:", ""] if standing else []),
                 *(self._busy_lines(q, overview) if overview is not None else []), f"**{v.headline}.** {v.hypothesis}", ""]
        t = idle.totals
        causes = sorted(t.by_cause_us.items(), key=lambda kv: -kv[1])
        of = self._of(idle.scope)
        lines.append(f"{self._who(idle.scope)}The GPU is idle **{percent(t.idle_pct)}** {of} "
                     f"({duration(t.idle_us)} of {duration(t.whole_us)}, in {counted(t.gaps, 'gap')}). By cause:")
        pcts = t.by_cause_pct or {}
        lines += [f"- {label(GAP_CAUSES, c)}: {duration(us)}" + (f" ({percent(pcts[c])} {of}" if c in pcts else " (")
                  + f"{', ' if c in pcts else ''}{counted(t.by_cause_count[c], 'gap')})" for c, us in causes[:5] if us > 0]
        lines += self._largest_gap(idle, 3 if _HOST_DURING_IDLE.search(q.text) else 1) + self._sync_line(idle)
        lines += ["", f"**Next step:** {v.next_step}", *_saving(v)]
        if re.search(LINE_ASKED, q.text, re.I):  # "which line of my code makes the GPU wait?": the lines first
            lines[:0] = [*self._idle_lines(idle), ""]
        return "\n".join(lines)

    def _idle_lines(self, idle: IdleGapsAnswer) -> list[str]:
        """The user's lines the GPU idles over most (the launching thread's line during each gap, a sync's at
        the line that waited), or why the trace cannot say."""
        if not idle.by_line:
            u = idle.unavailable
            return ["**The trace cannot tie the idle time to lines of code:** " + (
                f"{u['why']}. To get it: {u['how_to_get_it']}." if u else "no gap falls on a line of code it records.")]
        top = idle.by_line[0]
        return ([f"{self._who(idle.scope)}**`{top.python}` leaves the GPU idle the most: {duration(top.idle_us)} in "
                 f"{counted(top.gaps, 'gap')}**, mostly {label(GAP_CAUSES, top.cause)}. By line (launch latency aside):"]
                + [f"- `{r.python}`: {duration(r.idle_us)} in {counted(r.gaps, 'gap')}, mostly {label(GAP_CAUSES, r.cause)}"
                   for r in idle.by_line[:5]])

    def _busy_lines(self, q: Question, overview: OverviewAnswer) -> list[str]:
        """"How busy is GPU 1?": each GPU asked about (of the rank asked about), busy first, over its own span."""
        rank = q.rank if q.rank is not None else self.ctx.analysis.focus.rank
        gpus = [(r.rank, d, b) for r in overview.ranks if r.rank == rank for d, b in r.devices.items()
                if q.device in (None, d)]
        return [f"**{upper_first(scope(r, d))}: busy {percent(b.busy_pct)}** of its span ({duration(b.busy_us)} of "
                f"{duration(b.span_us)}), idle {percent(b.idle_pct)}." for r, d, b in gpus[:16]] + [""] if gpus else []

    def _largest_gap(self, idle: IdleGapsAnswer, count: int = 1) -> list[str]:
        """The largest gap and what the launching thread was doing in it; with `count` > 1, the largest
        gap of each cause among the largest gaps, that many, one a line ("what does the CPU do while the
        GPU is idle?")."""
        if not idle.top_gaps:
            return []
        if count > 1:
            by_cause = list({g.cause: g for g in reversed(idle.top_gaps)}.values())[::-1][:count]
            return ["\nThe largest gap of each cause, and what the launching thread was doing in it:"] + [
                f"- {label(GAP_CAUSES, g.cause)}: {duration(g.dur_us)} at {duration(g.start_us)} on GPU {g.device}"
                + self._host_in(g) for g in sorted(by_cause, key=lambda g: -g.dur_us)]
        g = idle.top_gaps[0]
        return [f"\nThe largest gap lasts {duration(g.dur_us)} at {duration(g.start_us)} on GPU {g.device} "
                f"({label(GAP_CAUSES, g.cause)})" + self._host_in(g, "; meanwhile the host was in") + "."]

    @staticmethod
    def _host_in(g: GapRow, said: str = ":") -> str:
        """What the launching thread was in over a gap ("; meanwhile the host was in `X`, from `line`"), or ""."""
        what = ", ".join(f"`{shorten(h.name, 60)}`" for h in (g.host.host if g.host else [])[:2])
        line = g.host.python if g.host else None
        return (f"{said} {what}" if what else "") + (f", from `{line}`" if line else "")

    @staticmethod
    def _sync_line(idle: IdleGapsAnswer) -> list[str]:
        if not idle.sync_sites:
            return []
        s = idle.sync_sites[0]
        return [f"Synchronizations: `{s.call}`" + (f" under `{s.op}`" if s.op else "")
                + (f" at `{s.python}`" if s.python else "") + f": {duration(s.idle_us)} of idle in the "
                f"{counted(s.count, 'gap')} after it."]

    def _optimize_first(self, q: Question, verdict: VerdictAnswer) -> str:
        v, savings = verdict.verdict, verdict.savings
        if not savings:
            return f"**{v.headline}.** {v.next_step}"
        # the verdict's own first (its why and next step follow; a job's: its straggler's cost), then the rest as the
        # verdict tool gives them, by what fixing each is expected to save (`by_expected`): a replay's prediction of
        # 0.1% does not come before one of 6%
        first = v.saving or savings[0]
        rest = [s for s in savings if not s.fixes_the_same(first)]
        lines = [f"Start with **{first.finding}**: {first.sentence}", "", f"Why: {v.hypothesis}",
                 "", f"**Next step:** {v.next_step}"]
        if first.root_cause == "sync" and replayed_little(first, self.ctx.analysis.focus.params.verdict):
            # a sync whose removal replays to little does not pace the step: the verdict then points at the host's
            # work first (diagnose's sync branch), and so does this answer
            lines = [f"Start where the verdict points: **{v.headline}**.", "", f"Why: {v.hypothesis}", "",
                     f"**Next step:** {v.next_step}", "", f"Its own fix alone: {first.sentence}"]
        if rest:
            lines += ["", "Then, by what fixing each would save (the replay's prediction where there is one, else "
                          "its upper bound):"]
            lines += [f"{i}. {s.sentence}" for i, s in enumerate(rest[:4], 2)]
        return "\n".join(lines)

    def _change(self, q: Question) -> str:
        """The change a what-if question names, in the words of the vocabulary (data loading, syncs,
        launches, a hot kernel made F times faster); else the one that fixes the verdict's root cause."""
        factor = float(m.group(1)) if (m := _FACTOR.search(q.text)) else 2.0
        if re.search(r"\bpin(?:ned|ning)?\b|pin_?memory|\bpageable\b|non[_ -]?blocking", q.text, re.I):
            return "copies=pinned"  # "what if I pinned memory?": the host copies from pinned memory, asynchronous
        if q.kernel:
            return f"kernel:{re.escape(q.kernel)}=x{factor:g}"
        if re.search(rf"\b(?:{FP8})\b", q.text, re.I):
            return "fp8"
        if re.search(rf"\b(?:{PRECISION})\b", q.text, re.I):
            return "amp"
        if re.search(r"\boverlap", q.text, re.I):
            return "comm=overlap"
        if re.search(r"checkpoint|recomput|rematerializ", q.text, re.I):
            return "recompute=0"  # "what if I turned activation checkpointing off?"
        named = [w for w in re.findall(r"[A-Za-z]+\d+\w*", q.text) if peak_for(w) is not None]
        if named:  # another GPU, by a name the peak table knows (H100, MI300X)
            return f"gpu={named[0]}"
        if q.op and "::" in q.op:  # an op the trace has, by its name: its kernels F times faster
            return f"op:{q.op}=x{factor:g}"
        library = library_named(q.text)
        if library:  # a library named ("what if cuDNN were 2x faster?"), before the class its name says (flash attention)
            return f"lib:{library}=x{factor:g}"
        classes = classes_named(q.text, natures=True)
        if classes:  # classes of work said in words ("a 2x faster conv", "attention and matmuls")
            return f"class:{','.join(classes)}=x{factor:g}"
        top = self.ctx.analysis.rank(q.rank).findings.kernels.top if q.rank is not None else \
            self.ctx.analysis.focus.findings.kernels.top
        if top and _ONE_TOP_KERNEL.search(q.text):  # "the slowest kernel twice as fast": the hottest, not every kernel
            return f"kernel:^{re.escape(top[0].name)}$=x{factor:g}"
        if (re.search(r"\b(?:kernels?|gpus?|device)\b", q.text, re.I) and not re.search(r"launch|graph", q.text, re.I)
                and re.search(r"faster|quicker|speed|twice|\d\s*(?:x|×|times)\b", q.text, re.I)):
            return f"kernel:{ALL_KERNELS}=x{factor:g}"  # "kernels 2x faster": every kernel, the device's work itself
        for root, word in ROOT_CAUSES.items():  # the causes a change fixes, by their words
            if word.change and (_names_cause(q.text, root) or (word.change == "launch=graphs"
                                                               and re.search(r"cuda ?graph|launch", q.text, re.I))):
                if word.change == "dataloader=0" and re.search(_SHORTER, q.text, re.I):
                    return f"dataloader=x{factor:g}"  # "halved the data loading": shorter, not gone
                return word.change
        verdict = self.ctx.analysis.rank(q.rank).verdict if q.rank is not None else self.ctx.analysis.verdict
        if verdict.root_cause in ROOT_CAUSES and ROOT_CAUSES[verdict.root_cause].change:
            return ROOT_CAUSES[verdict.root_cause].change
        return f"kernel:^{re.escape(top[0].name)}$=x{factor:g}" if top else "launch=graphs"

    def _what_if(self, q: Question, answer: WhatIfAnswer) -> str:
        r = answer.result
        lines = [f"{self._who(answer.scope)}**{whatif_sentence(r)}**", "",
                 f"Measured {r.basis}: {duration(r.measured_us)}; the unchanged graph replays it as "
                 f"{duration(r.replayed_us)}; with the change: {duration(r.predicted_us)}.", "", "Assumed:"]
        lines += [f"- {a}" for a in r.assumptions]
        lines += ["", "**Next step:** make the change, re-profile, and compare: `traceagent diff before.json after.json` "
                      "sets the measured saving beside this prediction."]
        return "\n".join(lines)

    def _saving(self, q: Question, verdict: VerdictAnswer) -> str:
        """What fixing a cause would save: the one the question names (by the vocabulary's words for
        each cause), else the verdict's root cause; the others after it, largest first."""
        v, savings = verdict.verdict, verdict.savings
        if not savings and not v.saving:
            return f"**{v.headline}.** No finding here has a saving to state: {v.next_step}"
        asked = next((s for s in savings if _names_cause(q.text, s.root_cause)), None)
        first = asked or v.saving or savings[0]  # the verdict's own (a job's: its straggler's cost)
        lines = [f"**{first.sentence}**"]
        if first.simulated_pct is not None:
            lines += ["", "That is a prediction: the trace's own dependency graph (each thread's calls, each stream's "
                          f"kernels, launches and waits) replayed with the change made. Try others with `traceagent "
                          f"whatif TRACE --change {first.change if first.root_cause != 'hot_kernel' else 'kernel:NAME=x2'}`."]
        elif first.per_step_us is not None:
            lines.append(f"That is at most {duration(first.per_step_us)} per step, "
                         f"{duration(first.upper_bound_us)} over the trace.")
        lines += ["", "Where no change could be simulated the figures are upper bounds: work that other work hides saves "
                      "nothing when removed. To measure the real saving, make the change, re-profile, and compare: "
                      "`traceagent diff before.json after.json` puts the measured change beside this estimate."]
        others = [s for s in savings if (s.finding, s.root_cause) != (first.finding, first.root_cause)][:4]
        if others:
            lines += ["", "The other findings, by what fixing each would save:"]
            lines += [f"- {s.sentence}" for s in others]
        return "\n".join(lines)

    def _result(self, at: dict, name: str) -> Any:
        """A registered detector's result on the rank asked about; None where it has none, or where
        the trace has no such rank (its tools then say so)."""
        rank = self._rank_at(at)
        return rank.results.get(name) if rank is not None else None

    def _rank_at(self, at: dict) -> RankAnalysis | None:
        """The rank a scope names (the focus where it names none); None where the trace has no such rank."""
        analysis = self.ctx.analysis
        return analysis.focus if at.get("rank") is None else next((r for r in analysis.ranks if r.rank == at["rank"]), None)

    def _op_change(self, q: Question, at: dict) -> str | None:
        """The what-if of the kernels of the op a question names BOTTLENECK_SPEEDUP× faster (the same
        kernels as the hot kernels' op filter: the op's own and those of the ops inside it); None where
        it launched none."""
        rank = self._rank_at(at)
        if rank is None or not q.op:
            return None
        return f"op:{q.op}=x{BOTTLENECK_SPEEDUP:g}" if op_kernels(rank.trace, q.op).any() else None

    def _op_bound(self, q: Question, verdict: VerdictAnswer, kernels: KernelsAnswer,
                  replay: WhatIfAnswer | None = None) -> str:
        """Whether an op the question names is what limits the job: its kernels' time, and what making
        them BOTTLENECK_SPEEDUP× faster would save, replayed (work others hide saves nothing)."""
        v, k = verdict.verdict, kernels.kernels
        what = code(q.op or "") if "::" in (q.op or "") else f"the ops whose name contains {code(q.op or '')}"
        if replay is None or not kernels.top:
            return f"No kernel in this scope was launched by {what}. It is limited by **{v.headline}**."
        lead = kernels.top[0].kernel
        yes, said = self._replayed_bottleneck(replay, f"the kernels of {what}")
        if not yes and (q.op or "").lower() in f"{v.hypothesis} {v.next_step}".lower():
            # "is the MoE layer the bottleneck?" where its launches are: its kernels are not, its host side is
            said += (f" **Its host side is, though:** the verdict below points at {what}, for the launches and host "
                     "work around its kernels, not their time on the GPU.")
        return "\n".join([
            said, "",
            f"They launched {k.kernels} kernels for {duration(k.total_us)} of device time, led by "
            f"{code(shorten(lead.label, 80))} ({duration(lead.total_us)}, {percent(lead.share_of_busy_pct)} of busy time).",
            "", f"{self._who(verdict.scope)}{v.headline}. {v.hypothesis}", "", f"**Next step:** {v.next_step}", *_saving(v)])

    def _replayed_bottleneck(self, replay: WhatIfAnswer, work: str) -> tuple[bool, str]:
        """Whether `work` (replayed BOTTLENECK_SPEEDUP× faster) sets the pace, and the sentence that says
        so with the replay's figures: it does where the saving is material (BOTTLENECK_SAVING_PCT)."""
        r = replay.result
        yes = r.saving_pct >= BOTTLENECK_SAVING_PCT
        return yes, (f"{self._who(replay.scope)}**{'Yes' if yes else 'No'}.** With {work} {BOTTLENECK_SPEEDUP:g}× faster, "
                     f"the {r.basis} would take {percent(max(r.saving_pct, 0.0))} less time ({duration(r.measured_us)} → "
                     f"{duration(r.predicted_us)}, simulated on the trace's dependency graph): "
                     + ("they set the pace." if yes else "other work sets the pace."))

    def _classes_asked(self, q: Question, at: dict) -> list[str]:
        """The classes of work a question names ("is attention the bottleneck?") that the rank ran."""
        result = self._result(at, "time_by_class")
        ran = {c.name for c in result.classes} if result is not None else set()
        return [name for name in classes_named(q.text) if name in ran]

    def _absent_phase(self, q: Question) -> str:
        """Where a question asks about a serving phase the rank lacks ("is decode memory-bound?" of a
        prefill-only trace): that first, since what follows is about the whole trace."""
        asked = [w for w, said in _PHASE_WORDS if re.search(said, q.text, re.I)]
        if not asked:
            return ""
        phases = self.ctx.rank(q.rank).results.get("phases")
        present = [p.phase for p in phases.phases] if phases is not None else []
        if set(asked) & set(present):
            return ""
        holds = f"it holds {' and '.join(present)} steps only" if present else "it has no inference server steps"
        return f"**This trace has no {' or '.join(asked)} steps** ({holds}): what follows is about the whole trace.\n\n"

    def _bound(self, q: Question, verdict: VerdictAnswer, idle: IdleGapsAnswer,
               classes: DetectorAnswer | None = None, flops: FlopsAnswer | None = None,
               replay: WhatIfAnswer | None = None) -> str:
        v = verdict.verdict
        limiter, root = v.limiter, v.root_cause
        if not limiter:
            return v.headline + "."
        by_class = classes.result if classes is not None else None
        named_limiter, cause = label(LIMITERS, limiter), label(ROOT_CAUSES, root) if root else ""
        # not "exposed copies (exposed copies)"
        what = named_limiter + (f" ({cause})" if cause and cause != named_limiter else "")
        if replay is not None and by_class is not None:
            return self._class_bound(q, verdict, what, by_class, replay)
        asked = [k for k in q.limits if k in BOUNDS]
        if not asked and by_class is not None and (named := classes_named(q.text)):  # work the rank never ran
            return "\n".join([f"**No.** This rank ran no {' or '.join(CLASSES[n].label for n in named)} kernels. "
                               f"It is limited by **{what}**.", "", f"{self._who(verdict.scope)}{v.headline}. "
                               f"{v.hypothesis}", "", f"**Next step:** {v.next_step}", *_saving(v)])

        # kernels mostly memory-bound by nature, on a busy device: "compute- or memory-bound?" is then memory
        memory = None if by_class is None else by_class.memory_kernels_pct > by_class.compute_pct

        def holds(kind: str) -> bool | None:
            if kind == "memory_bound":
                return None if memory is None else limiter == "compute" and memory
            busy = bool({limiter, root} & BOUNDS[kind].means)
            return busy and not memory if kind == "compute" and "memory_bound" in asked and memory is not None else busy

        said = {k: holds(k) for k in asked}
        yes = [k for k, held in said.items() if held]
        nature = next((n for k, n in (("memory_bound", "memory_bound"), ("compute", "compute_heavy")) if k in asked), None)
        if by_class is not None and nature and re.match(r"\s*(?:which|what)\b", q.text, re.I):
            # "which kernels are memory-bound?": those kernels, not a yes or a no
            kinds = [c for c in by_class.classes if c.nature == nature and c.name != "copy"]
            head = (f"**Kernels that are {NATURES[nature]}: " + ("; ".join(
                f"{c.label} {percent(c.share_pct)} of device time" + (f" (led by {code(shorten(c.top[0], 60))})"
                                                                       if c.top else "") for c in kinds)
                or "none in this trace") + f".** It is limited by {what}.")
        elif not asked or None in said.values():
            head = f"It is limited by **{what}**."
        elif asked == ["host"] and _HOST_OR_DEVICE.search(q.text):  # "is the host or the device the bottleneck?"
            head = (f"**The host (CPU).** It is limited by {what}." if yes else
                    f"**The GPU, not the host.** It is limited by {what}.")
        elif len(asked) == 1:
            head = (f"**Yes.** It is limited by {what}." if yes else
                    f"**No.** It is limited by {what}, not by {BOUNDS[asked[0]].label}.")
        elif yes:  # "compute- or memory-bound?": which of them
            others = [BOUNDS[k].label for k in asked if k not in yes]
            head = (f"**{', '.join(BOUNDS[k].label for k in yes).capitalize()}**" + (f", not {' or '.join(others)}"
                    if others else "") + f". It is limited by {what}.")
        else:
            head = f"**Neither.** It is limited by {what}, not by {' or '.join(BOUNDS[k].label for k in asked)}."
        lines = [head, "", f"{self._who(verdict.scope)}{v.headline}. {v.hypothesis}"]
        if by_class is not None:
            lines.append(f"By class of work: {percent(by_class.compute_pct)} of device time is in compute-heavy kernels "
                         f"(matmul, attention, convolution), {percent(by_class.memory_kernels_pct)} in kernels "
                         "memory-bound by nature (elementwise, normalization, reductions, indexing)"
                         + (f", {percent(copies.share_pct)} in copies and memsets" if (copies := next(
                             (c for c in by_class.classes if c.name == "copy"), None)) else "") + ".")
        if flops is not None and flops.flops is not None and (placed := roofline(flops.flops).strip()):
            lines.append(placed)
        if {"copies", "memory_bound"} & set(asked):
            lines.append("A kernel's own DRAM throughput is not in a timeline trace: profile the hot kernel with Nsight "
                         "Compute (`ncu --set full`) to measure it.")
        lines += ["", f"**Next step:** {v.next_step}", *_saving(v)]
        return "\n".join(lines)

    def _class_bound(self, q: Question, verdict: VerdictAnswer, what: str, by_class: TimeByClassResult,
                     replay: WhatIfAnswer) -> str:
        """Whether a class of work the question names is what limits the job: its share of device
        time, and what making it BOTTLENECK_SPEEDUP× faster would save, replayed (a class others
        hide saves nothing). It is the bottleneck where that saving is material."""
        v = verdict.verdict
        named = [c for c in by_class.classes if c.name in classes_named(q.text)]
        yes, replayed = self._replayed_bottleneck(replay, f"{' and '.join(c.label for c in named)} kernels")
        shares = "; ".join(f"{c.label} {percent(c.share_pct)} ({duration(c.time_us)} in {counted(c.ops, 'op')}"
                           + (f", led by {code(shorten(c.top[0], 60))}" if c.top else "") + ")" for c in named)
        lines = [replayed, "",
                 f"Of {duration(by_class.device_time_us)} of device time: {shares}."]
        if re.search(r"\bkv[- _]?cache", q.text, re.I):
            lines.append("The KV cache is read and written by the attention kernels (its writes, such as "
                         "`reshape_and_cache`, are classed with them): its cost is theirs.")
        if not yes and (lead := by_class.classes[0]).name not in {c.name for c in named}:
            lines.append(f"The most device time goes to {lead.label}, {percent(lead.share_pct)}.")
        lines += ["", f"It is limited by **{what}**: {v.headline}. {v.hypothesis}", "",
                  f"**Next step:** {v.next_step}", *_saving(v)]
        return "\n".join(lines)

    def _slow_kernel(self, q: Question, per_call: KernelsAnswer, by_total: KernelsAnswer,
                     profiled: KernelProfilesAnswer) -> str:
        if not per_call.top:
            return "There are no kernels in this scope."
        k, t = per_call.top[0].kernel, by_total.top[0].kernel
        if per_call.order_by == "max":  # "how long is the longest kernel?": the longest single run
            head = (f"The longest single kernel run is of **`{shorten(k.label, 80)}`**: {duration(k.max_us)} (mean "
                    f"{duration(k.mean_us)} over {counted(k.count, 'call')}).")
            listed, shown = "Longest single runs:", [f"longest {duration(r.kernel.max_us)}" for r in per_call.top]
        else:
            head = (f"Per call, the slowest kernel is **`{shorten(k.label, 80)}`**: mean {duration(k.mean_us)}, longest "
                    f"{duration(k.max_us)}, {counted(k.count, 'call')}.")
            listed, shown = "Slowest per call:", [f"mean {duration(r.kernel.mean_us)}" for r in per_call.top]
        lines = [f"{self._who(per_call.scope)}{head}",
                 f"By total time it is `{shorten(t.label, 80)}`: {duration(t.total_us)} over "
                 f"{counted(t.count, 'call')}, {percent(t.share_of_busy_pct)} of busy time.", "", listed]
        lines += [f"{i}. `{shorten(r.kernel.label, 80)}`: {said}, {counted(r.kernel.count, 'call')}"
                  for i, (r, said) in enumerate(zip(per_call.top, shown), 1)]
        lines += ["", _why_slow([t.name, k.name], profiled, self._amd)]
        return "\n".join(lines)

    def _kernel(self, q: Question, kernels: KernelsAnswer, instances: InstancesAnswer,
                profiled: KernelProfilesAnswer) -> str:
        if not kernels.top:
            return f"No kernel in this scope matches `{q.kernel}`."
        row = kernels.top[0]
        k = row.kernel
        lines = [f"{self._who(kernels.scope)}**`{shorten(k.label, 80)}`** ran {counted(k.count, 'time')} for "
                 f"{duration(k.total_us)}, {percent(k.share_of_busy_pct)} of busy time (mean "
                 f"{duration(k.mean_us)}, median {duration(k.median_us)}, longest {duration(k.max_us)})"
                 + (f", launched by `{shorten(k.op, 50)}`" if k.op else "")
                 + (f" from `{row.python}`" if row.python else "") + "."]
        inst = instances.instances[:3]
        if inst:
            lines.append("Its longest instances: " + "; ".join(
                f"{duration(i.dur_us)} at {duration(i.start_us)} (GPU {i.device}, stream {i.stream})"
                for i in inst) + ".")
        lines += ["", f"If it ran twice as fast it would save at most {duration(k.saving_2x_us)}.",
                  _why_slow([k.name], profiled, self._amd)]
        return "\n".join(lines)

    def _module(self, q: Question, modules: DetectorAnswer) -> str:
        """One module type's row of the modules detector: its calls, device time and share, per call, host time."""
        found = modules.result
        m = next((m for m in found.modules if m.name == q.op), None) if found is not None else None
        if m is None:  # the question named it on another rank
            return f"The module {code(q.op or '')} is not among this rank's modules with the most device time."
        return (f"{self._who(modules.scope)}**{code(m.name)}: {counted(m.calls, 'call')}, {duration(m.device_us)} of "
                f"device time** in the forward pass, where PyTorch records module ranges ({percent(m.share_pct)} of "
                f"the rank's device time, its child modules' included); {duration(m.mean_device_us)} a call (longest "
                f"{duration(m.max_device_us)}, {code(m.longest_call)}); {duration(m.host_us)} on the host.")

    def _op(self, q: Question, kernels: KernelsAnswer, host_ops: DetectorAnswer | None = None,
            op_time: DetectorAnswer | None = None) -> str:
        """Where the time inside one op goes: the kernels it launched, most time first; its calls and host
        time, and its self time where the host's top ops list it. An op that launched no kernel (copies only:
        aten::copy_) is told by its host time and the device ops op_time lists for it."""
        k = kernels.kernels
        rank = self._rank_at({"rank": kernels.scope.get("rank")})
        one = rank is not None and is_op_name(rank.trace, q.op or "")  # the op of that name, or ops holding it
        what = f"**{code(q.op or '')}**" if one else f"Ops whose name contains **{code(q.op or '')}**"
        host = kernels.op_host
        listed = host_ops.result.top if host_ops is not None and host_ops.result is not None else []
        own = next((o for o in listed if one and o.name.lower() == (q.op or "").lower()), None)
        calls = (f" {'Its' if one else 'Their'} {counted(host.calls, 'call')} took {duration(host.host_us)} on the "
                 "host (the time inside them, every thread of the rank)" if host is not None and host.calls else "")
        calls += (f", {duration(own.self_us)} of it its own (self time: less the events inside it)." if own else
                  "." if calls else "")
        if not kernels.top:
            by_op = op_time.result.top if op_time is not None and op_time.result is not None else []
            device = next((o for o in by_op if one and o.name.lower() == (q.op or "").lower()), None)
            return (f"No kernel in this scope was launched by {code(q.op or '')}." + calls
                    + (f" It launched {counted(device.device_ops, 'device op')} (copies or memsets) for "
                       f"{duration(device.time_us)} of device time ({percent(device.share_pct)} of the rank's)."
                       if device is not None else ""))
        lines = [f"{self._who(kernels.scope)}{what} launched {counted(k.kernels, 'kernel')} ({k.distinct} distinct), "
                 f"{'itself' if one else 'themselves'} or through the ops inside, for {duration(k.total_us)} of device "
                 f"time" + (f" ({percent(kernels.op_share_pct)} of {_device_time_of(kernels.scope)})"
                            if kernels.op_share_pct is not None else "") + f".{calls} Their kernels, most time first:"]
        lines += [f"{i}. {code(shorten(r.kernel.label, 80))}: {duration(r.kernel.total_us)} over "
                  f"{counted(r.kernel.count, 'call')} (mean {duration(r.kernel.mean_us)}), "
                  f"{percent(r.kernel.share_of_busy_pct)} of busy time"
                  + (f", from `{r.python}`" if r.python else "") for i, r in enumerate(kernels.top, 1)]
        return "\n".join(lines)

    def _kernels(self, q: Question, kernels: KernelsAnswer, *more: KernelProfilesAnswer | LaunchesAnswer | VerdictAnswer
                 | KernelsAnswer) -> str:
        if each := [a for a in more if isinstance(a, KernelsAnswer)]:
            return self._kernels_by_rank(q, [kernels, *each])
        profiled = next(a for a in more if isinstance(a, KernelProfilesAnswer))
        top = [row.kernel for row in kernels.top[:_how_many(q, 5)]]  # "what are the top 3 kernels?": three
        if not top:
            return "There are no kernels in this trace."
        k = kernels.kernels
        launches = next((a for a in more if isinstance(a, LaunchesAnswer)), None)
        verdict = next((a.verdict for a in more if isinstance(a, VerdictAnswer)), None)
        lines = []
        if verdict is not None and verdict.limiter not in (None, "compute"):
            # "which kernel should I tune first?" where kernels are not the limit: that first
            lines += [f"**Kernels are not what limits this trace first:** {verdict.headline}. Speeding a kernel up "
                      "shortens the busy time only; the hottest are below.", ""]
        if re.search(r"\b(?:average|mean)\b", q.text, re.I) and k.kernels:  # the mean asked, not the median
            lines += [f"{self._who(kernels.scope)}**A kernel runs {duration(k.mean_us)} on average** "
                      f"({k.kernels} kernels, {duration(k.total_us)} of kernel time).", ""]
        if launches is not None and launches.launch.kernels:  # "how long is a typical kernel?"
            n = launches.launch
            lines += [f"{'' if lines else self._who(launches.scope)}**A kernel runs {duration(n.median_kernel_us)} at "
                      f"the median** (of the {n.kernels} linked to their launch call), against "
                      f"{duration(n.median_launch_us)} for a launch call; {percent(n.short_kernel_pct)} of kernels are "
                      "shorter than their own launch.", ""]
        lines += [f"{'' if lines else self._who(kernels.scope)}{k.kernels} kernels ({k.distinct} distinct names) ran "
                  f"{duration(k.total_us)}. " + ("Launched most often:" if kernels.order_by == "count" else "The hottest:")]
        lines += [f"{i}. `{shorten(h.label, 80)}`: {duration(h.total_us)}, {percent(h.share_of_busy_pct)} of "
                  f"busy time, {counted(h.count, 'launch', 'launches')}, mean {duration(h.mean_us)}"
                  + (f", from `{shorten(h.op, 40)}`" if h.op else "") for i, h in enumerate(top, 1)]
        lines += ["", _why_slow([h.name for h in top], profiled, self._amd)]
        return "\n".join(lines)

    def _copies(self, q: Question, movement: CopiesAnswer, links: DetectorAnswer) -> str:
        m = movement.copies
        if not m.count:
            return "There are no memory copies in this scope: data movement is not what limits it."
        of = self._of(movement.scope)
        kinds = sorted(m.by_kind.items(), key=lambda kv: -kv[1].us)
        main_kind = kinds[0][0]
        lines = [f"{self._who(movement.scope)}Copies ran **{percent(m.share_pct)}** {of}, mostly {main_kind}; "
                 f"{percent(m.exposed_pct)} {of} had copies and no compute beside them ({duration(m.exposed_us)}). "
                 "By kind:"]
        if asked := [kind for kind, said in _COPY_KINDS_SAID if re.search(said, q.text, re.I)]:
            # "any host-to-device copies?": each kind asked about, there or not, first
            lines.insert(0, " ".join(
                f"**{kind} ({_COPY_KIND_WORDS[kind]}): {counted(m.by_kind[kind].count, 'copy', 'copies')}**, "
                f"{size(m.by_kind[kind].bytes)} in {duration(m.by_kind[kind].us)}." if kind in m.by_kind else
                f"**No {_COPY_KIND_WORDS[kind]} ({kind}) copies** in this scope." for kind in asked) + "\n")
        if _yes_no(q) and re.search(r"pin_?memory|\bpinn?(?:ed|ing)?\b|pageable", q.text, re.I):
            # "is pin_memory on?": whether the host copies come from pinned memory, first
            host = sum(c.count for kind, c in kinds if kind in ("HtoD", "DtoH"))
            copies = counted(host, "host copy", "host copies")
            if not host:
                lead = "**No host copies** in this scope: nothing to pin.\n"
            elif _asks_advice(q):  # "should I pin?": the other way round, and whether it would matter
                lead = (f"**Yes, for {m.pageable_count} of the {copies}:** they come from pageable memory"
                        + (f", though copies take only {percent(m.share_pct)} {of}: pinning them will save little.\n"
                           if m.share_pct < LITTLE_COPIES_PCT else ".\n")
                        if m.pageable_count else f"**No need:** the {copies} come from pinned memory already.\n")
            else:  # "is pin_memory on?" is yes where the copies are pinned; "are any pageable?" then no
                pageable_asked = bool(re.search(r"pageable", q.text, re.I))
                yes, no = ("**Yes:**", "**No:**") if pageable_asked else ("**No:**", "**Yes:**")
                lead = (f"{yes} {m.pageable_count} of the {copies} come from pageable memory.\n" if m.pageable_count
                        else f"{no} the {copies} come from pinned memory.\n")
            lines.insert(0, lead)
        lines += [f"- {kind}: {counted(c.count, 'copy', 'copies')}, {size(c.bytes)}, {duration(c.us)}, {rate(c.gbps)}, "
                  + (f"{c.pageable_count} from pageable memory" if c.pageable_count else "pinned or device memory")
                  for kind, c in kinds]
        if m.pageable_count:
            lines.append(f"\n{m.pageable_count} copies touch pageable memory ({size(m.pageable_bytes)}): they "
                         "are staged through a pinned buffer and block the host. Pin the memory "
                         "(`DataLoader(pin_memory=True)` or `tensor.pin_memory()`) and copy with `non_blocking=True`.")
        if links.result is not None and (said := interconnect_sentence(links.result)):
            lines.append(f"\nAgainst the links (the rank's copies): {said}")
        return "\n".join(lines)

    def _memory(self, q: Question, answer: MemoryAnswer) -> str:
        if answer.unavailable or answer.memory is None:
            return _unavailable(answer.unavailable or NO_MEMORY)
        memory, devices = answer.memory, answer.devices
        leaks = [d for d in devices if d.leak]
        stall = memory.allocator_idle_us
        if leaks:
            lead = "**Yes: memory grows in every step** on GPU " + ", ".join(str(d.device) for d in leaks) + " (a leak)."
        elif stall:
            lead = (f"**Allocator calls stall the GPU:** {memory.allocator_calls} synchronizing allocator calls, "
                    f"{duration(stall)} of idle device time during them.")
        else:
            lead = "**No sign of a memory problem:** no growth across steps and no synchronizing allocator calls."
        lines = [lead, ""]
        shares = [d for d in devices if d.peak_share_pct is not None and d.total_bytes is not None]
        if _OUT_OF_MEMORY_ASKED.search(q.text) and shares:
            # "am I running out of memory?": the peak against the GPU's memory, first
            fullest = max(shares, key=lambda d: d.peak_share_pct or 0.0)
            share, total = fullest.peak_share_pct or 0.0, fullest.total_bytes or 0
            # "running out?" is answered no where there is room, "is there enough?" yes
            room = "Yes" if re.search(r"\benough\b|\bfits?\b|\bheadroom\b", q.text, re.I) else "No"
            lines[:0] = [f"**{'Close' if share >= NEAR_FULL_PCT else room}: at its peak the allocator holds "
                         f"{share:.1f}% of GPU {fullest.device}'s {size(total)}**"
                         + (", and memory grows every step" if leaks else "") + ".", ""]
        if re.search(r"\b(?:peak|max(?:imum)?|how much|usage|footprint)\b", q.text, re.I) and not leaks and devices:
            # "what is the peak memory?": the figure first, then whether anything is wrong
            lines[:0] = ["**Peak memory:** " + "; ".join(f"{self._who(answer.scope)}GPU {d.device}: {memory_peak(d)}"
                                                          for d in devices) + ".", ""]
        if re.search(r"\breserved\b|\bcach(?:ed|ing) allocator\b", q.text, re.I) and devices:
            # "how much memory is reserved?": the allocator's own peak where the trace records it, and that it is not
            # the tensors' (the two peaks need not fall at one moment)
            lines[:0] = [" ".join(
                f"**{self._who(answer.scope)}GPU {d.device}: the caching allocator reserved at most "
                f"{size(d.peak_reserved_bytes)}**, its tensors at most {size(d.peak_allocated_bytes)} (two peaks, not "
                "necessarily at one moment)." if d.peak_reserved_bytes is not None and d.peak_allocated_bytes is not None
                else f"**{self._who(answer.scope)}GPU {d.device}: the trace records no allocator totals**, so what the "
                     "caching allocator reserves cannot be read here (PyTorch's newer profilers write them on each "
                     "[memory] event)." for d in devices), ""]
        if re.search(r"\ballocations?\b", q.text, re.I) and devices:  # "how many allocations per step?": the counts
            lines[:0] = ["**Allocations:** " + "; ".join(
                f"{self._who(answer.scope)}GPU {d.device}: " + (f"{d.allocations_per_step:g} a step, "
                                                               if d.allocations_per_step is not None else "")
                + f"{d.allocations} in all" for d in devices) + ".", ""]
        for d in devices:
            peak = memory_peak(d) + (" (the trace has no allocator totals)" if d.peak_allocated_bytes is None else "")
            lines.append(f"- {self._who(answer.scope)}GPU {d.device}: {peak}; {d.allocations} allocations"
                         + (f", {d.allocations_per_step:g} per step" if d.allocations_per_step is not None else ""))
        if memory.allocator_calls:
            lines.append(f"\n{memory.allocator_calls} allocator calls that synchronize "
                         f"({duration(memory.allocator_call_us)} on the host): reuse buffers, or let the caching "
                         "allocator keep memory "
                         "(avoid `torch.cuda.empty_cache()` in the loop).")
        if leaks:
            lines.append("\nFind what keeps references: tensors appended to a list across steps (losses kept with their "
                         "graph: use `loss.item()` or `.detach()`), caches that grow. `torch.cuda.memory._record_memory_"
                         "history()` shows who allocated each block.")
        return "\n".join(lines)

    def _dataloader(self, q: Question, verdict: VerdictAnswer, idle: IdleGapsAnswer, steps: StepsAnswer | None = None) -> str:
        v = verdict.verdict
        waited = idle.totals.by_cause_us.get("dataloader", 0.0)
        who = self._who(idle.scope)
        # "does it wait for data?" is yes where it waits; "is the loader fast enough?", "is it fixed?" are then no
        keeps_up = bool(re.search(r"\benough\b|\bkeep(?:s|ing)? up\b|\b(?:fine|ok|okay|good|fix(?:ed|es)?|solv\w*|resolv\w*|"
                                  r"gone)\b|\bdid\b.{0,40}\bhelp\b", q.text, re.I))
        said = ("**Yes:** ", "**No:** ") if keeps_up else ("**No:** ", "**Yes:** ")
        if idle.matching_gaps is None:  # no device work: nothing waited for data, and no yes or no to give
            return (f"{who}**There is no GPU work here to wait for data:** {v.headline}. {v.next_step}")
        if not waited:
            return (f"{who}{said[0] if _yes_no(q) else ''}" + ("the" if who or _yes_no(q) else "The")
                    + f" GPU never waits for data loading in this trace, so faster loading would not shorten a step. "
                    f"{v.headline}.")
        pct = (idle.totals.by_cause_pct or {}).get("dataloader")
        lines = [f"{who}{said[1] if _yes_no(q) else ''}" + ("the" if who or _yes_no(q) else "The")
                 + f" GPU waits for data loading {duration(waited)}"
                 + (f" ({percent(pct)} {self._of(idle.scope)})" if pct is not None else "")
                 + f", in {counted(idle.totals.by_cause_count['dataloader'], 'gap')}."]
        if steps is not None and steps.steps and steps.steps.count:
            lines += ["", self._idle_by_step(steps, "dataloader")]
        lines += self._largest_gap(idle)
        if v.root_cause == "dataloader":
            lines += ["", v.hypothesis, "", f"**Next step:** {v.next_step}", *_saving(v)]
        else:
            lines += ["", f"It is not the main limit, though: {v.headline}."]
        return "\n".join(lines)

    def _sync(self, q: Question, idle: IdleGapsAnswer) -> str:
        sites = idle.sync_sites
        who = self._who(idle.scope)
        if not sites:
            waited = idle.totals.by_cause_us.get("sync")
            return (f"{who}No host synchronization leaves the GPU idle in this trace"
                    + (f" (idle after syncs: {duration(waited)})." if waited else "."))
        s = sites[0]
        where = f"`{s.python}`" if s.python else None
        lines = [f"{who}" + (f"**{where}**: " if where else "") + f"`{s.call}`" + (f" under `{s.op}`" if s.op else "")
                 + f" blocks the host, and the GPU idles {duration(s.idle_us)} in the {counted(s.count, 'gap')} after it."]
        if not where:
            lines.append("The trace has no Python frames, so the line is unknown: profile with "
                         "`torch.profiler.profile(with_stack=True)` to get it.")
        lines += [f"- `{o.call}`" + (f" under `{o.op}`" if o.op else "") + (f" at `{o.python}`" if o.python else "")
                  + f": {duration(o.idle_us)} in {counted(o.count, 'gap')}" for o in sites[1:4]]
        lines += ["", "Common causes: `.item()`, `.cpu()`, `print(tensor)` or a `torch.cuda.synchronize()` in the loop. "
                      "Keep values on the GPU, or read them every N steps."]
        return "\n".join(lines)

    def _communication_asked(self, q: Question, answer: CommAnswer, *more: Answer) -> str:
        """Communication on one rank (its collectives, links and the kernels asked about), or on each
        rank where the plan asked every rank's ("across all ranks": a communication answer each)."""
        if more and all(isinstance(a, CommAnswer) for a in more):
            return self._comm_by_rank(q, [answer, *(a for a in more if isinstance(a, CommAnswer))])
        return self._communication(q, answer, *more)  # type: ignore[arg-type]  # the one-rank plan's answers

    def _communication(self, q: Question, answer: CommAnswer, bandwidth: DetectorAnswer, links: DetectorAnswer,
                       kind: KernelsAnswer | None = None) -> str:
        c = answer.comm
        if not c.kernels:
            return ("There are no collective (NCCL/RCCL) kernels in this scope, so communication is not a factor."
                    + (f" {_unavailable(answer.unavailable)}" if answer.unavailable else ""))
        of = self._of(answer.scope)
        lines = []
        if kind is not None and (named := _collective_named(q.text)):  # "how long do the all-reduces take?"
            # its figures as the communication detector counts that kind (an op filter also finds the copies
            # and permutations launched inside an all-to-all's ranges); the kernel query lists its collectives
            own = next((x for x in c.kinds if x.kind == named[0].kind and x.kernels), None)
            hidden = (f" {percent(own.exposed_pct)} of its time ({duration(own.exposed_us)}) no compute overlapped."
                      if own is not None else "")
            k = kind.kernels
            lines += [f"{self._who(kind.scope)}**{named[0].label}: "
                      + (f"{counted(own.kernels, 'kernel')}, {duration(own.time_us)}**." if own is not None else
                         f"{counted(k.kernels, 'kernel')}, {duration(k.total_us)}**." if k.kernels else
                         f"none** in this scope, among its {c.kernels} collective kernels.") + hidden]
            lines += [f"- {code(shorten(r.kernel.label, 80))}: {counted(r.kernel.count, 'call')}, mean "
                      f"{duration(r.kernel.mean_us)}, longest {duration(r.kernel.max_us)}"
                      + (f", from `{r.kernel.op}`" if r.kernel.op else "") for r in kind.top if r.kernel.is_comm or own is None]
            lines.append("")
        elif kind is not None and kind.top:  # the slowest collective, per call as the question ranks it
            first = kind.top[0].kernel
            by = "its longest single run" if kind.order_by == "max" else "time per call"
            lines += [f"{self._who(kind.scope)}**By {by}, the slowest collective is {code(shorten(first.label, 80))}**: "
                      f"mean {duration(first.mean_us)}, longest {duration(first.max_us)}, {counted(first.count, 'call')}"
                      + (f", from `{first.op}`" if first.op else "") + "."]
            lines += [f"- {code(shorten(r.kernel.label, 80))}: mean {duration(r.kernel.mean_us)}, longest "
                      f"{duration(r.kernel.max_us)}, {counted(r.kernel.count, 'call')}" for r in kind.top[1:]]
            lines.append("")
        if _RATIO_ASKED.search(q.text):  # communication weighed against computation, in the same scope
            lines += [f"{'' if lines else self._who(answer.scope)}" + (
                f"**Communication to computation: {c.comm_to_compute_x:g}×**: collectives ran {duration(c.comm_us)}, "
                f"compute kernels {duration(c.compute_us)} (each the time any of them ran, added up over the GPUs)."
                if c.comm_to_compute_x is not None else
                f"**No compute kernels ran** beside {duration(c.comm_us)} of collectives: the ratio has no denominator."), ""]
        lines += [f"{'' if lines else self._who(answer.scope)}{c.kernels} collective kernels ran {duration(c.comm_us)} "
                 f"({percent(c.share_pct)} {of}). **{percent(c.exposed_of_comm_pct)}** of that time no compute "
                 f"overlapped: {duration(c.exposed_us)}, {percent(c.exposed_pct)} {of}."]
        if c.top:
            top = c.top[0]
            lines.append(f"The largest: `{shorten(short_name(top['name']), 60)}` ({counted(top['count'], 'call')}, "
                         f"{duration(top['total_us'])}).")
        if bandwidth.result is not None:
            lines.append(_bandwidth_lines(bandwidth.result))
            lines[:0] = _collectives_asked(q, bandwidth.result)
        if _OVERLAP_ASKED.search(q.text):  # "is NCCL overlapping with compute?": the judgement first
            exposed = c.exposed_of_comm_pct
            said = "Mostly not" if exposed >= 50 else "Partly" if exposed >= 10 else "Yes"
            lines[:0] = [f"{self._who(answer.scope)}**{said}:** {percent(exposed)} of the collectives' time runs with no "
                         "compute beside it.", ""]
        elif q.intent == "interconnect" and bandwidth.unavailable:
            lines.append(_unavailable(bandwidth.unavailable, "the collectives' bandwidth"))
        measured = [w for w in links.result.windows if w.during == "collectives"] if links.result is not None else []
        lines += [f"During the collectives on GPU {w.device}, Nsight's GPU metrics read: "
                  + ", ".join(f"{GPU_METRICS[k]} {percent(v)} of peak" for k, v in w.values.items()) + "."
                  for w in measured]
        if answer.comparison and answer.comparison.matched:
            lines.append(straggler_sentence(answer.comparison))
        elif answer.unavailable:
            lines.append(_unavailable(answer.unavailable))
        return "\n".join(lines)

    def _kernels_by_rank(self, q: Question, answers: list[KernelsAnswer]) -> str:
        """Each rank's kernels: how many ran and their time, the most first (by count where the question
        counts launches, else by time), with each rank's hottest kernel."""
        by_count = bool(re.search(r"\b(?:launch\w*|how many|number of|count)\b|\b(?:most|fewest|more|fewer) kernels\b",
                                  q.text, re.I))
        rows = sorted(answers, key=lambda a: -(a.kernels.kernels if by_count else a.kernels.total_us))
        (most, least), rank = (rows[0], rows[-1]), (lambda a: (a.scope or {}).get("rank"))
        lines = [f"**Rank {rank(most)} runs the most kernels: {counted(most.kernels.kernels, 'kernel')}**; rank "
                 f"{rank(least)} the fewest, {counted(least.kernels.kernels, 'kernel')}." if by_count else
                 f"**Rank {rank(most)} spends the most time in kernels: {duration(most.kernels.total_us)}**; rank "
                 f"{rank(least)} the least, {duration(least.kernels.total_us)}.", "", "By rank (its kernels, their time, "
                 "its hottest):"]
        lines += [f"- rank {rank(a)}: {counted(a.kernels.kernels, 'kernel')}, "
                  f"{duration(a.kernels.total_us)}" + (f", led by `{shorten(a.top[0].kernel.label, 60)}`" if a.top else "")
                  for a in rows]
        return "\n".join(lines + self._more_ranks(len(answers)))

    def _comm_by_rank(self, q: Question, answers: list[CommAnswer]) -> str:
        """Each rank's collective time and its exposed part, most first; of the kind of collective the
        question names where it names one ("which rank spends the most time in all-reduce?")."""
        named = _collective_named(q.text)
        rows: list[tuple[Any, float, float, float | None]]  # rank, time, exposed, share of its device time
        if named:
            kinds = [(a.scope or {}, next((k for k in a.comm.kinds if k.kind == named[0].kind), None)) for a in answers]
            rows = sorted(((s.get("rank"), k.time_us, k.exposed_us, None) for s, k in kinds if k is not None),
                          key=lambda row: -row[1])
            subject = named[0].label.lower()
            if not rows:
                return f"**No rank ran {subject} kernels** among the {len(answers)} ranks read."
        else:
            rows = sorted((((a.scope or {}).get("rank"), a.comm.comm_us, a.comm.exposed_us, a.comm.share_pct)
                           for a in answers), key=lambda row: -row[1])
            subject = "communication"
        what = f"{'collective' if subject == 'communication' else subject} kernels' time"
        (most, most_us, _, most_pct), (least, least_us, _, _) = rows[0], rows[-1]
        lines = [f"**Rank {most} spends the most time in {subject}: {duration(most_us)}**"
                 + (f" ({percent(most_pct)} of its device time)" if most_pct is not None else "")
                 + (f"; rank {least} the least, {duration(least_us)}" if len(rows) > 1 else "")
                 + f". By rank ({what}; the part with no compute beside it):", ""]
        lines += [f"- rank {r}: {duration(t)}" + (f" ({percent(p)} of its device time)" if p is not None else "")
                  + f", {duration(e)} of it with no compute beside it" for r, t, e, p in rows]
        return "\n".join(lines + self._more_ranks(len(answers)))

    def _more_ranks(self, listed: int) -> list[str]:
        """The line after a list of the first `listed` ranks that says how many more the job has, if any."""
        more = len(self.ctx.analysis.ranks) - listed
        return [f"- and {more} more ranks (ask about one by number)"] if more > 0 else []

    def _critical_path(self, q: Question, answer: DetectorAnswer) -> str:
        if answer.result is None:
            return _unavailable(answer.unavailable, "the critical path") if answer.unavailable else "No critical path."
        path = answer.result
        window = (answer.scope or {}).get("window")
        lines = [f"{self._who(answer.scope)}{f'{window.capitalize()}: ' if window else ''}{critical_path_sentence(path)}"]
        if re.search(r"\b(?:not|never|off) (?:on )?the (?:critical )?path\b|\boff[- ]path\b", q.text, re.I):
            # "which kernels are not on the critical path?": the hot ones with no instance on it, first
            lines.insert(0, ("**Off the path:** " + ", ".join(code(shorten(k, 60)) for k in path.off_path)
                             + " (hot kernels with no instance on it: making them faster does not shorten the run)."
                             if path.off_path else "**Every hot kernel has time on the path.**") + "\n")
        elif re.search(r"\b(?:host|cpu)\b", q.text, re.I):  # "how much of the path is host time?": the host's parts
            lines.insert(0, f"**Host calls {percent(path.host_call_pct)} and host work between them "
                            f"{percent(path.host_work_pct)} of the path** ({duration(path.host_call_us)} and "
                            f"{duration(path.host_work_us)}).\n")
        lines += [f"- `{shorten(k.short_name, 50)}`: {duration(k.on_path_us)} on the path of its {duration(k.total_us)}; "
                  f"twice as fast, it saves at most {duration(k.saving_2x_us)}" for k in path.kernels[:5]]
        return "\n".join(lines)

    def _phases(self, q: Question, answer: DetectorAnswer, verdict: VerdictAnswer,
                workload: DetectorAnswer | None = None) -> str:
        if answer.result is None:
            said = (_unavailable(answer.unavailable, "prefill and decode phases") if answer.unavailable
                    else "This trace has no inference server steps.")
            # an inference trace's model passes, as they are: what a generate loop's prefill and decode steps run
            if (workload is not None and (w := workload.result) is not None and w.training is False and w.forward_calls
                    and w.forward_device_us is not None):
                said += (f"\n\n{self._who(workload.scope)}What the trace does hold: "
                         f"{counted(w.forward_calls, 'forward pass')} of {code(w.model or 'the model')}, "
                         f"{duration(w.forward_device_us)} of device time"
                         + (" each on average" if w.forward_calls > 1 else "")
                         + (f", in {counted(w.steps, 'profiler step')} of {duration(w.step_time_us)}"
                            if w.steps and w.step_time_us else "")
                         + ". In a generate loop the first pass is the prefill and each next one decodes a token for "
                           "the whole batch.")
            return said
        lines = [f"{self._who(answer.scope)}By phase (each over its steps' time on the GPUs):"]
        present = [p.phase for p in answer.result.phases]
        asked = [w for w, said in _PHASE_WORDS if re.search(said, q.text, re.I)]
        missing = [w for w in asked if w not in present]
        windows = "; ".join(_PHASE_WINDOWS[m] for m in missing)
        if missing and not set(asked) & set(present):
            lines.insert(0, f"**This trace has no {' or '.join(missing)} steps:** it holds {' and '.join(present)} "
                            f"steps only. To measure {' or '.join(missing)}, profile a window in which the server runs "
                            f"it ({windows}).\n")
        elif missing:  # "prefill or decode?" where one of them is all the trace holds: nothing to weigh it against
            lines.insert(0, f"**This trace has no {' or '.join(missing)} steps** to weigh against "
                            f"{' and '.join(w for w in asked if w in present)}: profile a window in which the server runs "
                            f"{' or '.join(missing)} ({windows}).\n")
        # "are CUDA graphs used for decode?": each phase asked (none named: every phase), yes or no first; a phase
        # the trace lacks is said above
        graphed = [p for p in answer.result.phases if p.phase in asked or not asked]
        if graphed and _yes_no(q) and re.search(r"\b(?:cuda |hip )?graphs?\b", q.text, re.I):
            shares = [p.graph_kernel_pct for p in graphed]
            head = "**Yes:**" if min(shares) >= 50 else "**Partly:**" if max(shares) > 0 else "**No:**"
            lines.insert(0, f"{head} " + "; ".join(f"{percent(p.graph_kernel_pct)} of {p.phase}'s kernel time is "
                                                    "replayed from CUDA graphs" for p in graphed) + ".\n")
        decode = next((p for p in answer.result.phases if p.phase == "decode" and p.tokens), None)
        if decode is not None and _REQUESTS_ASKED.search(q.text):  # a decode step makes one token for each request
            lines.insert(0, (f"**{decode.tokens} requests** in the decode step" if decode.steps == 1 else
                             f"**{decode.tokens} tokens over {decode.steps} decode steps**")
                         + ": a decode step makes one token for each request in the batch.\n")
        for p in answer.result.phases:
            line = (f"- **{p.phase}**: {counted(p.steps, 'step')}"
                    + (f", {p.tokens} tokens" if p.tokens is not None else "")
                    + (f" ({p.tokens_per_s:g} tokens/s over its steps)" if p.tokens_per_s else "")
                    + f", mean step {duration(p.mean_step_us)}; busy {percent(p.busy_pct)}, idle {percent(p.idle_pct)}, "
                    f"launch gaps {percent(p.launch_idle_pct)}; {percent(p.graph_kernel_pct)} of kernel time replayed "
                    "from CUDA graphs" + (f"; MFU {percent(p.mfu_pct)}" + (" (a lower bound)" if p.mfu_lower_bound else "")
                                       if p.mfu_pct is not None else ""))
            if p.top_kernels:
                k = p.top_kernels[0]
                line += f"; led by `{shorten(k.short_name, 50)}` ({percent(k.share_pct)} of its kernel time)"
            lines.append(line + ".")
            if p.next_step:
                lines.append(f"  {p.next_step}.")
        if re.search(r"\bttft\b|first token|\btpot\b|inter-?token|per output token|per[- ]token|token latency", q.text, re.I):
            lines.append("\nTime to first token and per output token are per request: they include queueing and "
                         "batching the trace does not show. A prefill step's time above is the first token's compute; "
                         "a decode step's, each next token's for the whole batch.")
        lines.append(f"\nOverall: {verdict.verdict.headline}.")
        return "\n".join(lines)

    def _registered(self, detector: Detector, q: Question, answer: DetectorAnswer) -> str:
        """A registered detector's answer: what the question asks of it (its lead) and its sentence (its own
        words), or why the trace cannot say."""
        if answer.result is None:
            return _unavailable(answer.unavailable, detector.title.lower()) if answer.unavailable else \
                f"This trace has nothing for {detector.title.lower()}."
        who = self._who(answer.scope)
        said = detector.say(answer.result, self.ctx.analysis.focus.params.params_for(detector))
        said = f"{who}**{detector.title}.** {said or ''}".rstrip()
        # what the question asks of the result first (the detector's lead), then its sentence
        first = detector.lead_for(answer.result, q.text)
        if first is None and q.host_only and (rank := self._rank_at(dict(answer.scope or {}))) is not None:
            first = f"{_NO_GPU_WORK} {rank.verdict.next_step}"
        # "how much time is attention in decode?" of a trace without decode steps: said first, the result is the trace's
        return self._absent_phase(q) + (f"{who}{first}\n\n{said}" if first else said)

    def _with_api_time(self, plan: Plan) -> Plan:
        """A plan whose answer leads with the calls and host time of each runtime API the question names, where it
        asks how long they take or how often they run ("how much time is spent in cudaLaunchKernel?" is the launch
        answer, led by that), or with the calls that wait for the GPU where it counts syncs."""
        def asked(q: Question) -> bool:
            named = API_NAMED.search(q.text) and (_TIME_ASKED.search(q.text) or re.search(COUNT_ASKED, q.text, re.I))
            return bool(named or re.search(SYNCS_COUNTED, q.text, re.I))

        def calls(q: Question, at: dict) -> list[tuple[str, dict]]:
            return plan.calls(q, at) + ([("host_ops", _rank(at))] if asked(q) else [])

        def write(q: Question, *answers: Any) -> str:
            if not asked(q):
                return plan.write(q, *answers)
            *own, host = answers
            said = (api_time(host.result, q.text) if API_NAMED.search(q.text) else [sync_call_counts(host.result)]
                    ) if host.result is not None else []
            lead = " ".join(said)
            return (f"{self._who(host.scope)}{lead}\n\n" if lead else "") + plan.write(q, *own)
        return Plan(calls, write)

    def _workload(self, q: Question, answer: DetectorAnswer, *summary: Any) -> str:
        """The kind of job; asked what the trace or program does, the trace in short after it."""
        said = self._registered(WORKLOAD_DETECTOR, q, answer)
        return f"{said}\n\n{self._summary(q, *summary)}" if summary else said

    def _scaling(self, q: Question, answer: CommAnswer, scaled: ScalingAnswer | None = None) -> str:
        """Two runs loaded: how the job scales between them; one: what in it grows with more GPUs,
        and the command that measures scaling."""
        if scaled is not None:
            r = scaled.result
            lines = [f"**{r.sentence}**", "", "Where the efficiency went, at each size (points, µs per step):"]
            for run in r.runs[1:]:
                lines.append(f"- {run.world_size} GPUs: " + "; ".join(
                    f"{PARTS[loss.part]} {loss.points:+.1f} ({duration(loss.per_step_us)})" for loss in run.losses[:3]))
            lines += [f"- the {f.kind} model ({f.link}): {duration(f.latency_us)} + bytes at {rate(f.busbw_gbps)}"
                      for f in r.fits]
            return "\n".join(lines)
        ranks = len(self.ctx.analysis.ranks)
        lines = ["**How a job scales is read across runs of different sizes**: record it at two or more (e.g. "
                 "`traceagent profile -- torchrun --nproc-per-node N train.py` for N = 2, 4, 8), then `traceagent scaling "
                 "RUN RUN … --project 16` gives the parallel efficiency of each, where the rest went (exposed transfer, "
                 "waiting for the slowest rank, host-side idle, compute per GPU) and what more GPUs would buy.", "",
                 f"What grows with more GPUs, in this run ({self._who(answer.scope) or ''}{ranks} rank(s)):",
                 f"- exposed communication: {percent(answer.comm.exposed_pct)} of device time "
                 f"({percent(answer.comm.exposed_of_comm_pct)} of the communication is not hidden behind compute)"]
        c = answer.comparison
        if c is not None and c.matched:
            who = f"rank {c.straggler} causes {percent(c.caused_waiting_pct)} of it" if c.straggler is not None else (
                "no single rank causes most of it")
            lines.append(f"- waiting for the slowest rank: {percent(c.others_exposed_waiting_pct)} of the other ranks' "
                         f"device time; {who}")
        return "\n".join(lines)

    def _straggler(self, q: Question, answer: CommAnswer, verdict: VerdictAnswer | None = None) -> str:
        ranks = answer.comparison
        if not ranks or not ranks.matched:
            if answer.unavailable:
                return _unavailable(answer.unavailable, "which rank is the straggler")
            return "The trace cannot say which rank is the straggler: no collective was matched across the ranks."
        rank = ranks.straggler
        balanced = _yes_no(q) and bool(re.search(r"\b(?:balanced|even(?:ly)?|equal(?:ly)?)\b", q.text, re.I))
        rows = sorted(ranks.ranks[:MAX_ITEMS], key=lambda r: -r.exposed_waiting_us)
        asked = next((r for r in rows if r.rank == q.rank), None)
        if asked is not None and asked.rank == rank:  # "what is rank 7 waiting for?" about the straggler itself
            lead = _standing(rank, ranks) or ""
        elif asked is not None:  # "what is rank 3 waiting for?": that rank first
            waits, share, caused = _waiting(asked, ranks)
            lead = (f"**Rank {q.rank} {waits}** {share}; it entered {asked.last_count} of the collectives last itself"
                    + (f"; {caused}." if caused else "."))
        elif rank is None:
            lead = (("**Yes:** " if balanced else "") + "**No rank is a straggler**: no rank enters most "
                    "collectives last.")
        elif re.search(r"\bhow (?:much|long)\b|\b(?:share|fraction|percent\w*) of\b", q.text, re.I):
            # "how much time is wasted waiting on other ranks?": the waiting first, then who causes it
            for_it = next((r.caused_waiting_us for r in ranks.ranks if r.rank == rank), 0.0)
            lead = (f"**The other ranks wait {duration(ranks.others_waiting_us)} in the matched collectives**, "
                    f"{duration(for_it)} of it for rank {rank}, the straggler.")
        else:
            lead = ("**No:** " if balanced else "") + f"**Rank {rank}** is the straggler."
        lines = [lead, straggler_sentence(ranks), "", "Waiting for the last rank, by rank (exposed: no compute beside it):"]
        lines += [f"- rank {r.rank}: {duration(r.exposed_waiting_us)} exposed waiting, "
                  f"{percent(r.exposed_waiting_pct)} of its device time; entered {counted(r.last_count, 'collective')} last"
                  for r in rows[:8]]
        if verdict is not None and verdict.verdict.root_cause == "straggler":  # "what would fixing it save?"
            lines += _saving(verdict.verdict)
        return "\n".join(lines)

    def _rank_vs_rank(self, q: Question, first: OverviewAnswer, second: OverviewAnswer, comm: CommAnswer) -> str:
        """Two ranks side by side: which holds the other back (in matched collectives, the one that
        makes the others wait; without them, the one with more device work), and each one's figures."""
        a, b = first.ranks[0], second.ranks[0]
        compared = comm.comparison if comm.comparison and comm.comparison.matched else None
        waits = {r.rank: r for r in compared.ranks} if compared else {}
        wa, wb = waits.get(a.rank if a.rank is not None else -1), waits.get(b.rank if b.rank is not None else -1)
        if compared and wa and wb:
            (slow, w_slow), (fast, w_fast) = sorted(((a, wa), (b, wb)), key=lambda p: -p[1].caused_waiting_us)
            head = (f"**Rank {slow.rank} holds the job back more than rank {fast.rank}:** it caused "
                    f"{duration(w_slow.caused_waiting_us)} of the other ranks' waiting in the {compared.matched} "
                    f"matched collectives, rank {fast.rank} {duration(w_fast.caused_waiting_us)}.")
        else:
            slow, fast = sorted((a, b), key=lambda r: -r.breakdown.total.busy_us)
            head = (f"**Rank {slow.rank} does more device work than rank {fast.rank}:** busy "
                    f"{duration(slow.breakdown.total.busy_us)} against {duration(fast.breakdown.total.busy_us)} "
                    "(no collective matched across the ranks to say who waits for whom).")
        lines = [head, ""]
        for r in (a, b):
            t = r.breakdown.total
            line = (f"- rank {r.rank}: span {duration(t.span_us)}, busy {percent(t.busy_pct)}, idle {percent(t.idle_pct)} "
                    f"of its device time, compute {duration(t.compute_us)}; limiter {r.limiter} ({r.root_cause})")
            if (w := wa if r is a else wb) is not None:
                line += (f"; waits {duration(w.exposed_waiting_us)} with no compute beside it "
                         f"({percent(w.exposed_waiting_pct)} of its device time), entered "
                         f"{counted(w.last_count, 'collective')} last")
            lines.append(line)
        return "\n".join(lines)

    def _device_vs_device(self, q: Question, a: IdleGapsAnswer, b: IdleGapsAnswer) -> str:
        """Two GPUs side by side: which idles more, the cause of idle that differs most between them,
        then each one's idle by cause (each over its own span)."""
        pair = [(d, x) for d, x in zip(q.devices, (a, b), strict=False)]
        (more, m), (less, n) = sorted(pair, key=lambda p: -p[1].totals.idle_pct)
        causes = sorted(set(m.totals.by_cause_us) | set(n.totals.by_cause_us))
        differs = max(causes, key=lambda c: abs(m.totals.by_cause_us.get(c, 0.0) - n.totals.by_cause_us.get(c, 0.0)),
                      default=None)
        who = self._who(Scope(rank=m.scope["rank"]) if "rank" in m.scope else None)  # the rank, where the job has several
        alike = percent(m.totals.idle_pct) == percent(n.totals.idle_pct)  # as shown: no "more" between equal figures
        lines = [f"{who}**GPU {more} is idle "
                 + (f"as much as GPU {less}:** {percent(m.totals.idle_pct)} of its span each" if alike else
                    f"more than GPU {less}:** {percent(m.totals.idle_pct)} of its span against "
                    f"{percent(n.totals.idle_pct)}")
                 + (f"; the cause of idle that differs most is {label(GAP_CAUSES, differs)}: "
                    f"{duration(m.totals.by_cause_us.get(differs, 0.0))} on GPU {more}, "
                    f"{duration(n.totals.by_cause_us.get(differs, 0.0))} on GPU {less}." if differs else "."), ""]
        for d, x in pair:
            t = x.totals
            by_cause = sorted(t.by_cause_us.items(), key=lambda kv: -kv[1])
            lines.append(f"- GPU {d}: idle {percent(t.idle_pct)} ({duration(t.idle_us)} of {duration(t.span_us)}, "
                         f"{counted(t.gaps, 'gap')})" + (": " + ", ".join(f"{label(GAP_CAUSES, c)} {duration(us)}"
                                                                         for c, us in by_cause) if by_cause else ""))
        return "\n".join(lines)

    def _every_rank(self, q: Question) -> bool:
        """Whether the question asks about every rank of a job that has several ("across ranks", "per rank")."""
        return len(self.ctx.analysis.ranks) > 1 and q.rank is None and bool(_EVERY_RANK.search(q.text))

    def _steps(self, q: Question, answer: StepsAnswer, *more: StepsAnswer) -> str:
        if more:
            return self._steps_by_rank([answer, *more])
        steps = answer.steps
        if not steps or not steps.count:
            return _unavailable(answer.unavailable or NO_STEPS)
        if IDLE_WORDS.search(q.text) or BUSY_SAID.search(q.text):  # "idle time per step?", "utilization per step?"
            return self._idle_by_step(answer) + "\n\n" + self._steps(replace(q, text=""), answer)
        if steps.count == 1:  # one step: no mean, median or slowest to speak of
            return (f"{self._who(answer.scope)}1 step (step {steps.slowest}): **{duration(steps.mean_us)}**."
                    + gpu_behind(steps) + (f" {_ONE_STEP}" if _COMPARED_STEPS.search(q.text) else ""))
        warm = ""
        if re.search(r"\bwarm-?up\b|\bfirst (?:profiled |training )?(?:step|iteration)s? (?:is |are )?slow", q.text, re.I):
            # "is the warm-up step slower?": whether the first step recorded is the slowest
            first = min(r.step for r in steps.steps)
            warm = (f"**Yes: the first profiled step, step {first}, is the slowest** ({duration(steps.max_us)}, against a "
                    f"median {duration(steps.median_us)})." if first == steps.slowest else
                    f"**No: the first profiled step, step {first}, is not the slowest**: step {steps.slowest} is "
                    f"({duration(steps.max_us)}, against a median {duration(steps.median_us)}).") + (
                    " The profiler's own warm-up steps are not in the trace: a schedule records after them.\n\n")
        if re.search(r"\bp(?:9[059]|50)\b|\bpercentile|\btail\b", q.text, re.I):
            # "what is the p90 step time?": the tail first (over few steps, close to the slowest step)
            warm = (f"{self._who(answer.scope)}**Step time p90 {duration(steps.p90_us)}, p99 {duration(steps.p99_us)}** "
                    f"over {steps.count} steps (median {duration(steps.median_us)}, slowest {duration(steps.max_us)})"
                    + (": with so few steps the tail is the slowest steps; profile more for a steadier tail" if
                       steps.count < 20 else "") + ".\n\n")
        return (f"{warm}{self._who(answer.scope)}{steps.count} steps: mean **{duration(steps.mean_us)}**, "
                f"median {duration(steps.median_us)}, "
                f"from {duration(steps.min_us)} to {duration(steps.max_us)} (slowest: step {steps.slowest})."
                + (f" {said}" if (said := slowest_step_sentence(steps)) else "") + gpu_behind(steps))

    def _idle_by_step(self, answer: StepsAnswer, cause: str | None = None) -> str:
        """Each step's idle (the gaps it owns, by the one rule every section uses) and its largest cause, or its
        idle of one cause."""
        said = f"{upper_first(label(GAP_CAUSES, cause))} by step" if cause else "Idle by step"
        lines = [f"{self._who(answer.scope)}**{said}** (the GPU's gaps each step owns, every GPU of the rank; a step "
                 "owns the gap before its first device work):"]
        for row in answer.rows:
            if cause:
                waited = row.idle_by_cause_us.get(cause, 0.0)
                lines.append(f"- step {row.step}: {duration(waited) if waited else 'none'} of a {duration(row.host_us)} step")
                continue
            most = max(row.idle_by_cause_us.items(), key=lambda kv: kv[1], default=None)
            lines.append(f"- step {row.step}: {duration(row.idle_us)} idle" + (
                f", mostly {label(GAP_CAUSES, most[0])} ({duration(most[1])})" if most and most[1] else "")
                + f", of a {duration(row.host_us)} step")
        if answer.steps is not None and answer.steps.count > len(answer.rows):
            lines.append(f"- and {answer.steps.count - len(answer.rows)} more steps (ask about one by number)")
        return "\n".join(lines)

    def _steps_by_rank(self, answers: list[StepsAnswer]) -> str:
        """Each rank's mean step time, slowest first, with the slowest and fastest named."""
        timed = sorted((((a.scope or {}).get("rank"), a.steps) for a in answers if a.steps and a.steps.count),
                       key=lambda rank_steps: -rank_steps[1].mean_us)
        if not timed:
            return _unavailable(answers[0].unavailable or NO_STEPS)
        (slow, s), (fast, f) = timed[0], timed[-1]
        lines = [f"**Step time by rank** (each rank's mean over its steps): from **{duration(f.mean_us)}** on rank "
                 f"{fast} to **{duration(s.mean_us)}** on rank {slow}.", ""]
        lines += [f"- rank {r}: {duration(x.mean_us)} (step {x.slowest})" if x.count == 1 else
                  f"- rank {r}: mean {duration(x.mean_us)} over {x.count} steps (slowest: step {x.slowest}, "
                  f"{duration(x.max_us)})" for r, x in timed]
        straggler = c.straggler if (c := self.ctx.analysis.comparison) is not None else None
        if straggler is not None and straggler != slow:
            # ranks in step with each other: the ones that wait for the straggler inside collectives take longer
            lines += ["", f"Rank {straggler} is the straggler (it enters most matched collectives last): the other "
                          "ranks' steps hold their wait for it, so a longer step here is a rank that waits, not a slower "
                          "one. Ask “which rank is the straggler?” for its cause."]
        return "\n".join(lines + self._more_ranks(len(answers)))

    def _serving(self, at: dict) -> bool:
        """Whether the rank asked about is an inference server's (its steps name phases)."""
        return self._result(at, "phases") is not None

    def _throughput(self, q: Question, answer: StepsAnswer | DetectorAnswer, verdict: VerdictAnswer | None = None) -> str:
        """The job's rate: an inference server's tokens per second by phase; a loop's steps per
        second, which its batch size turns into samples (a timeline does not record the batch)."""
        if isinstance(answer, DetectorAnswer) and verdict is not None:
            return self._phases(q, answer, verdict)
        assert isinstance(answer, StepsAnswer)
        steps = answer.steps
        if not steps or not steps.count:
            return _unavailable(answer.unavailable or NO_STEPS, "the throughput")
        return (f"{self._who(answer.scope)}**{steps.steps_per_s:g} steps per second**: a step takes "
                f"{duration(steps.step_time_us)} ({counted(steps.count, 'step')} in the trace)." + gpu_behind(steps)
                + "\n\nThe trace does not record the batch size: samples (images, sequences) per second are the "
                f"batch size × {steps.steps_per_s:g}, per rank (× the data-parallel ranks for the job). Tokens per "
                "second: × the tokens in a batch.")

    @staticmethod
    def _step_row(answer: StepsAnswer, number: int) -> StepRow:
        row = next((r for r in answer.rows if r.step == number), None)
        if row is None:
            raise LookupError(f"there is no step {number} in this trace; its steps are "
                              f"{', '.join(str(r.step) for r in answer.rows)}")
        return row

    @staticmethod
    def _step_line(answer: StepsAnswer, row: StepRow) -> str:
        causes = sorted(((c, v) for c, v in row.idle_by_cause_us.items() if v), key=lambda kv: -kv[1])
        vs_median = answer.vs_median_pct(row) if answer.steps and answer.steps.count > 1 else None
        return (f"step {row.step}: {duration(row.host_us)} on the host"
                + (f" ({vs_median:+.2f}% against the median step)" if vs_median is not None else "")
                + f", {duration(row.device_us)} of device work, idle {duration(row.idle_us)}"
                + (" (" + ", ".join(f"{label(GAP_CAUSES, c)} {duration(v)}" for c, v in causes[:3]) + ")" if causes else ""))

    def _step_vs_step(self, q: Question, answer: StepsAnswer) -> str:
        if not answer.steps or not answer.steps.count:
            return _unavailable(answer.unavailable or NO_STEPS)
        try:
            rows = [self._step_row(answer, n) for n in q.steps[:2]]
        except LookupError as exc:
            return f"I cannot compare those: {exc}."
        slower, faster = max(rows, key=lambda r: r.host_us), min(rows, key=lambda r: r.host_us)
        lines = [f"{self._who(answer.scope)}**Step {slower.step} is slower.**", "",
                 *[f"- {self._step_line(answer, r)}" for r in rows]]
        # where the difference is: its device work, or the cause of idle that grew most (both steps' figures)
        parts = {"the device work": (slower.device_us or 0.0, faster.device_us or 0.0)}
        parts |= {f"idle {label(GAP_CAUSES, c)}": (slower.idle_by_cause_us.get(c, 0.0), faster.idle_by_cause_us.get(c, 0.0))
                  for c in {*slower.idle_by_cause_us, *faster.idle_by_cause_us}}
        what, (mine, theirs) = max(parts.items(), key=lambda kv: (kv[1][0] - kv[1][1], kv[0]))
        if slower is not faster and mine > theirs:
            against = duration(theirs) if theirs else "none"
            lines += ["", f"Of its device work and idle by cause, {what} grew most: {duration(mine)} in step "
                          f"{slower.step} against {against} in step {faster.step}."]
        return "\n".join(lines)

    def _one_step(self, q: Question, answer: StepsAnswer, idle: IdleGapsAnswer) -> str:
        try:
            row = self._step_row(answer, q.steps[0])
        except LookupError as exc:
            return f"I cannot answer that: {exc}."
        lines = [f"{self._who(answer.scope)}{self._step_line(answer, row)}."]
        if answer.steps and answer.steps.count == 1:  # nothing to weigh it against
            lines.append(_ONE_STEP)
        elif answer.steps and row.step == answer.steps.slowest:
            lines.append("It is the slowest step.")
        elif answer.steps and re.search(r"\bslow", q.text, re.I):  # "why is the first step slower?"
            lines.append(f"It is not the slowest step: step {answer.steps.slowest} is.")
        lines += self._largest_gap(idle)
        return "\n".join(lines)

    def _launch(self, q: Question, answer: LaunchesAnswer, verdict: VerdictAnswer, kernels: KernelsAnswer | None = None) -> str:
        la, v = answer.launch, verdict.verdict
        counted_kernels = ""
        if kernels is not None:  # "how many kernels ran?": every kernel, linked to its launch call or not
            k = kernels.kernels
            counted_kernels = (f"{self._who(kernels.scope)}**{counted(k.kernels, 'kernel')} ran** "
                               f"({counted(k.distinct, 'distinct name')}, {duration(k.total_us)} in all).")
        if not la.kernels:
            return f"{counted_kernels}\n\n{NO_LAUNCHES}" if counted_kernels else NO_LAUNCHES
        bound = v.root_cause == "launch_overhead"
        share = answer.launch_overhead_idle_pct
        graphs = answer.graphs
        if graphs and graphs.captures and re.search(r"\bcaptur", q.text, re.I):  # "how long did graph capture take?"
            head = f"**{capture_sentence(graphs)}**"
        elif re.search(r"cuda ?graph|\bgraphs?\b", q.text, re.I):
            if graphs and graphs.used:
                head = (f"**It already uses them:** {graphs.launches} graph replays run {graphs.kernels} kernels "
                        f"({percent(graphs.share_of_kernel_time_pct)} of kernel time), saving "
                        f"{graphs.launch_calls_saved} launch calls." + (" More of the step could be captured: launch "
                                                                        "overhead still limits it." if bound else ""))
            elif re.search(r"\bdid\b|\bhas\b|\bhave\b", q.text, re.I):  # "did CUDA graphs help?" of a run without them
                head = ("**This trace replays no CUDA graphs**, so they did nothing in it: check that the capture ran "
                        "(torch.compile(mode='reduce-overhead') falls back to eager where it cannot capture). "
                        + ("Launch overhead does limit it: graphs would help." if bound else
                           "Launch overhead is not what limits it either."))
            elif _yes_no(q) and not _asks_advice(q):  # "are the kernels replayed from CUDA graphs?": how it is, first
                head = ("**No: this trace replays no CUDA graphs.** " + (
                    "Launch overhead does limit it: capturing the step in one would help." if bound else
                    "Launch overhead is not what limits it either, so capturing them is not the first fix."))
            else:
                head = ("**Yes:** the host cannot launch kernels fast enough, and a CUDA graph launches a whole step "
                        "at once." if bound else "**Not for speed here:** launch overhead is not what limits this trace.")
        elif answer.kernels_per_step and re.search(r"\bkernels?\b.{0,20}\b(?:per|a|each) (?:step|iteration)\b", q.text, re.I):
            head = f"**About {answer.kernels_per_step:g} kernels a step** ({_KERNELS_A_STEP})."
        elif calls := [(api, n) for api, n in la.by_call.items() if re.search(rf"\b{re.escape(api)}\b", q.text, re.I)]:
            # "how many cudaLaunchKernel calls?": that API's count, as the launch detector linked them
            head = " ".join(f"**{counted(n, f'`{api}` call')}** launched kernels the trace records." for api, n in calls)
        elif re.search(r"\b(?:how many|number of|count)\b.{0,30}\blaunch", q.text, re.I):
            head = (f"**{sum(la.by_call.values())} launch calls** ran kernels here: "
                    + ", ".join(f"`{api}` {n}" for api, n in sorted(la.by_call.items(), key=lambda kv: -kv[1])) + ".")
        elif re.search(r"\blatency\b|\baverage\b|\bmean\b|\btypical\b", q.text, re.I) and not _yes_no(q):
            # "what is the launch latency?": the figures first
            head = (f"**Launch-to-start latency: median {duration(la.median_latency_us)}, p90 "
                    f"{duration(la.p90_latency_us)}**; the launch call itself takes {duration(la.median_launch_us)} "
                    "(median). " + ("**Launch overhead limits this trace.**" if bound
                                    else "**Launch overhead is not the main limit.**"))
        elif _yes_no(q):  # "is it launch-bound?"
            head = ("**Yes, launch overhead limits it.**" if bound
                    else "**No:** launch overhead is not the main limit.")
        else:  # "how long do launches take?": the figures, and whether they limit the trace
            head = ("**Launch overhead limits this trace.**" if bound
                    else "**Launch overhead is not the main limit.**")
        lines = [*([counted_kernels] if counted_kernels else []), head, "",
                 f"{self._who(answer.scope)}{counted(la.kernels, 'kernel')} linked to their launch call: the call takes "
                 f"{duration(la.median_launch_us)} "
                 f"(median), a kernel runs {duration(la.median_kernel_us)} (median), and "
                 f"{percent(la.short_kernel_pct)} of kernels are shorter than their own launch call. Launch-to-start "
                 f"latency: median {duration(la.median_latency_us)}, p90 {duration(la.p90_latency_us)}."
                 + (f" About {answer.kernels_per_step:g} kernels a step ({_KERNELS_A_STEP})."
                    if answer.kernels_per_step else "") + (f" {md_prose(note)}" if (note := latency_note(la)) else ""),
                 f"Launch-bound gaps leave the GPU idle {duration(answer.launch_overhead_idle_us)}"
                 + (f" ({percent(share)} of the span)." if share is not None else "."),
                 "", f"{v.headline}.", f"**Next step:** {v.next_step}"]
        return "\n".join(lines)

    def _longest_gap(self, q: Question, idle: IdleGapsAnswer) -> str:
        if not idle.top_gaps:
            return "There is no idle gap in this scope."
        g = idle.top_gaps[0]
        lines = [f"{self._who(idle.scope)}The longest gap lasts **{duration(g.dur_us)}**, at {duration(g.start_us)} "
                 f"on GPU {g.device}: {label(GAP_CAUSES, g.cause)}."]
        hosts = g.host.host if g.host else []
        if hosts:
            lines.append("Meanwhile the launching thread was in " + ", ".join(
                f"`{shorten(h.name, 60)}` ({duration(h.overlap_us)})" for h in hosts[:3]) + ".")
        if g.host and g.host.python:
            lines.append(f"Python: `{g.host.python}`.")
        return "\n".join(lines)

    def _gaps(self, q: Question, idle: IdleGapsAnswer) -> str:
        which = f" of at least {duration(q.min_us)}" if q.min_us else ""
        who = self._who(idle.scope)
        if not idle.top_gaps:
            return f"{who}There are no idle gaps{which} in this scope."
        lines = [f"{who}{counted(idle.matching_gaps or 0, 'gap')}{which}, {duration(idle.matching_idle_us)} of idle "
                 "time in all. The largest:"]
        if _TYPICAL.search(q.text) and idle.mean_gap_us is not None:  # "what is the average gap between kernels?"
            lines[:0] = [f"{who}**A gap lasts {duration(idle.mean_gap_us)} on average, {duration(idle.median_gap_us)} at "
                         f"the median** ({counted(idle.matching_gaps or 0, 'gap')}{which}: every stretch a GPU "
                         "idles between its work, whatever the cause).", ""]
        for i, g in enumerate(idle.top_gaps, 1):
            host = ", ".join(f"`{shorten(h.name, 50)}`" for h in (g.host.host if g.host else [])[:2])
            lines.append(f"{i}. {duration(g.dur_us)} at {duration(g.start_us)} on GPU {g.device}: "
                         f"{label(GAP_CAUSES, g.cause)}" + (f"; the host was in {host}" if host else ""))
        return "\n".join(lines)

    def _annotations(self, q: Question, answer: AnnotationsAnswer) -> str:
        a = answer.annotations
        waiting = [r for r in a.idle_ranges if not r.gpu_us][:5] if a else []
        if a is None or (not a.ranges and not waiting):
            return _unavailable(answer.unavailable or NO_ANNOTATIONS)
        lines = []
        who = self._who(answer.scope)
        if a.ranges:
            lines += [f"{who}GPU time launched inside each annotated range (a nested range counts in its parent too):"]
            lines += [f"{i}. `{shorten(r.name, 60)}`: {duration(r.gpu_us)} of GPU time "
                      f"({percent(r.share_of_busy_pct)} of busy) from {r.kernels} kernels, {_times(r.count)}, "
                      f"{duration(r.host_us)} on the host, the GPU idle {percent(r.idle_pct)} of it"
                      for i, r in enumerate(a.ranges[:8], 1)]
        if waiting:  # ranges that launch nothing while the GPU waits: post-processing, logging, checkpoints
            lines += ["", f"{who if not lines else ''}Ranges that launched no GPU work while the GPU sat idle:"]
            lines += [f"- `{shorten(r.name, 60)}`: {duration(r.idle_us)} of idle GPU time "
                      f"({percent(r.share_of_idle_pct)} of the idle time), {_times(r.count)}" for r in waiting]
        return "\n".join(lines).strip()

    def _named_range(self, q: Question, answer: AnnotationsAnswer) -> str:
        """The host ranges whose name holds the word asked: each one's calls, host time, the GPU work launched
        inside it and how idle the GPU was while it ran."""
        ranges = answer.annotations.ranges if answer.annotations else []
        if not ranges:
            return f"Nothing on the host is named {code(q.range_name or '')} in this scope."
        r = ranges[0]
        lines = [f"{self._who(answer.scope)}**`{shorten(r.name, 80)}`: {duration(r.host_us)} on the host** over "
                 f"{counted(r.count, 'call')}, launching {duration(r.gpu_us)} of GPU work ({counted(r.kernels, 'kernel')}, "
                 f"{percent(r.share_of_busy_pct)} of busy time); the GPU was idle {percent(r.idle_pct)} of the time it ran."]
        lines += [f"- `{shorten(o.name, 60)}`: {duration(o.host_us)} on the host over {counted(o.count, 'call')}, "
                  f"{duration(o.gpu_us)} of GPU work launched inside it" for o in ranges[1:5]]
        return "\n".join(lines)

    def _mfu(self, q: Question, answer: FlopsAnswer, overview: OverviewAnswer, kernels: KernelsAnswer,
             precision: DetectorAnswer) -> str:
        flops = answer.flops
        if flops is not None and flops.mfu_pct is not None:
            uncounted = uncounted_sentence(flops)
            partial = ("not every shaped op could be counted" if flops.counted_ops < flops.shaped_ops else
                       "kernels outside the counted ops did work whose FLOPs are unknown" if uncounted else None)
            lines = [f"{self._who(answer.scope)}**MFU {percent(flops.mfu_pct)}**"
                     + (f" (a lower bound: {partial})" if partial else "")
                     + f" over the span: the {flops.dtype} FLOPs "
                     f"of the counted ops against the {flops.peak_family} {flops.dtype} peak of "
                     f"{flops.peak_tflops:g} TFLOP/s per GPU ({flops.peak_source}).",
                     f"Inside their own kernels those ops reach {flop_rate(flops.achieved_tflops)} "
                     f"({flops.counted_ops} of {flops.shaped_ops} shaped ops counted). By op:"]
            lines += [f"- `{o.name}` ({o.dtype}, {_times(o.count)}): {flop_rate(o.achieved_tflops)}"
                      + (f", {percent(o.mfu_pct)} of peak" if o.mfu_pct is not None else "")
                      for o in flops.by_op[:5] if o.achieved_tflops is not None]
            measured = [k for k in flops.by_kernel if k.achieved_tflops is not None][:3]
            if measured:
                lines.append("By kernel: " + "; ".join(
                    f"`{shorten(k.short_name, 50)}` {flop_rate(k.achieved_tflops)}"
                    + (f" ({percent(k.mfu_pct)} of peak)" if k.mfu_pct is not None else "") for k in measured) + ".")
            if uncounted:
                lines.append(f"\n{md_prose(uncounted)}")
            if flops.note:
                lines.append(f"\nNot counted: {flops.note}.")
            if precision.result is not None:
                lines += ["", f"**Tensor cores:** {md_prose(precision_sentence(precision.result))}"]
            return "\n".join(lines)
        busy = overview.ranks[0].source.breakdown.total.busy_pct
        top = kernels.top[0].kernel if kernels.top else None
        why = (flops.note if flops else None) or "the trace records no shapes"
        lines = [f"**The trace cannot say:** {why}. A timeline records when kernels ran, not how many "
                 "floating-point operations they did.", "",
                 f"What it does say: the GPU is busy {percent(busy)} of the time"
                 + (f", and the top kernel, `{shorten(top.label, 80)}`, takes "
                    f"{percent(top.share_of_busy_pct)} of busy time." if top else "."), "",
                 "To measure it: profile with `torch.profiler.profile(record_shapes=True)` (PyTorch ≥ 2.1 for "
                 "convolutions), or read the hot kernel's counters: "
                 + (f"`{rocprof_line('NAME')}` (ROCm Compute Profiler)."
                    if self._amd else "`ncu --metrics sm__throughput.avg.pct_of_peak_sustained_elapsed` (Nsight Compute).")]
        if precision.result is not None:  # the kernels' names still say their precision
            lines += ["", f"**Tensor cores:** {md_prose(precision_sentence(precision.result))}"]
        return "\n".join(lines)

    def _window(self, q: Question, gpus: DeviceActivityAnswer, host: HostActivityAnswer, steps: StepsAnswer) -> str:
        """A stretch of the trace: the step it falls in (by the steps' starts), what each GPU did there (busy,
        idle by cause, its top ops) and the host's busiest events."""
        lo, hi = gpus.start_us, gpus.end_us
        inside = [r for r in steps.rows if r.start_us <= hi and r.start_us + r.host_us >= lo]
        lines = [f"{self._who(gpus.scope)}**From {duration(lo)} to {duration(hi)}** (from the trace's first event)"
                 + (f", in step {inside[0].step}" if len(inside) == 1 else
                    f", across steps {inside[0].step} to {inside[-1].step}" if inside else ", outside the profiled steps")
                 + ":"]
        for d in gpus.devices:
            idle = sorted(d.idle_by_cause_us.items(), key=lambda kv: -kv[1])
            lines.append(f"- GPU {d.device}: busy {duration(d.busy_us)} ({percent(d.busy_pct)} of the window)"
                         + (f"; idle mostly {label(GAP_CAUSES, idle[0][0])} ({duration(idle[0][1])})" if idle else "")
                         + ("; " + ", ".join(f"{code(shorten(o.name, 60))} {duration(o.time_us)} ({counted(o.count, 'run')})"
                                             for o in d.top[:3]) if d.top else "; no device work there"))
        if host.events:
            lines += ["", "The host was busiest in:"]
            lines += [f"- {code(shorten(e.name, 80))} ({e.kind}): {duration(e.overlap_us)}" for e in host.events[:6]]
        else:
            lines += ["", f"The host: {host.note or 'no host events were recorded there'}."]
        return "\n".join(lines)

    def _not_recorded(self, q: Question, verdict: VerdictAnswer) -> str:
        """What the question asks that no profiler trace records, where to read it instead, and what the
        trace does say."""
        asked = [(what, where) for what, said, where in NOT_RECORDED if re.search(said, q.text, re.I)]
        lines = [f"**The trace does not record {what}**: see {where}." for what, where in asked]
        lines += ["", "A profiler trace records what the run did on the host and the GPUs (ops, kernels, copies, "
                  "collectives) and when, as far as its profiler was set to: not the model's settings or the training's "
                  "values.", "",
                  f"**What this trace does say:** {verdict.verdict.headline}.", f"**Next step:** {verdict.verdict.next_step}"]
        return "\n".join(lines)

    def _batch_size(self, q: Question, verdict: VerdictAnswer, launches: LaunchesAnswer, overview: OverviewAnswer,
                    memory: MemoryAnswer) -> str:
        """What the trace says of the batch size, which it does not record: a small batch shows as short
        kernels the host cannot launch fast enough and a GPU that is mostly idle."""
        v, la = verdict.verdict, launches.launch
        small = v.root_cause == "launch_overhead"
        lines = [("**Probably: the GPU waits on kernel launches, as it does with small batches.**" if small else
                  "**Not what limits this trace.**") + f" {v.headline}.", "",
                 "The trace does not record the batch size; what a too-small batch looks like in it:"]
        if la.kernels:
            lines.append(f"- short kernels: the median kernel runs {duration(la.median_kernel_us)} against a "
                         f"{duration(la.median_launch_us)} launch call, and {percent(la.short_kernel_pct)} of kernels "
                         "are shorter than their own launch"
                         + (f"; launch-bound gaps leave the GPU idle {percent(launches.launch_overhead_idle_pct)} of "
                            "device time" if launches.launch_overhead_idle_pct is not None else "") + ";")
        lines += [f"- busy and idle: {line}" for r in overview.ranks[:4] for line in device_lines(r.source)]
        # the room a larger batch needs: each GPU's peak against its memory, where the trace records both
        lines += [f"- memory: at its peak the allocator holds {d.peak_share_pct:.1f}% of GPU {d.device}'s "
                  f"{size(d.total_bytes)}" + (" (close to full: a larger batch may not fit)"
                                              if d.peak_share_pct >= NEAR_FULL_PCT else "")
                  for d in memory.devices if d.peak_share_pct is not None and d.total_bytes is not None]
        lines += ["", "A larger batch (or more tokens per step) makes each kernel longer at the same launch cost; where "
                  "memory allows it, try doubling it and compare: `traceagent diff before.json after.json`. CUDA "
                  "graphs or torch.compile(mode=\"reduce-overhead\") remove the launch cost at the same batch size.",
                  "", f"**Next step:** {v.next_step}"]
        return "\n".join(lines)

    def _compile(self, q: Question, verdict: VerdictAnswer, launches: LaunchesAnswer, classes: DetectorAnswer,
                 workload: DetectorAnswer) -> str:
        """Whether the job runs compiled now, and whether torch.compile answers what limits this trace: it
        fuses memory-bound kernels, and its reduce-overhead mode replays the step from CUDA graphs."""
        v, by_class, w = verdict.verdict, classes.result, workload.result
        helps = v.root_cause in ("memory_bound_kernels", "launch_overhead")
        now = ""
        if w is not None:
            now = (f"**It runs compiled now:** {percent(w.compiled_pct)} of kernel time is in the kernels torch.compile "
                   "generated (Inductor's `triton_…`)" + (f", and the host enters compiled regions "
                                                         f"{_times(w.compiled_regions)}" if w.compiled_regions else "")
                   + "." if w.compiled_pct or w.compiled_regions else
                   "**It does not run compiled now:** no kernel torch.compile generates (Inductor's `triton_…`) and no "
                   "compiled region on the host.")
        # "is it compiled?", "how much time is spent compiling?", "is there recompilation?": whether it is, first
        # "is torch.compile used?", "am I using torch.compile?" too, but not "would using it help?"
        asked_if_compiled = bool(now and (re.search(r"\bcompiled\b|\bcompiling\b|\bcompilation\b|\brecompil", q.text, re.I)
                                          or (re.search(r"\b(?:used|using|use|enabled|turned on|active|on)\b", q.text, re.I)
                                              and not re.search(r"\b(?:help|would|should|worth|faster|speed\w*|gain|save|"
                                                                r"buy)\b", q.text, re.I))))
        verdict_line = ({(True, False): "**Yes: it answers what limits this trace.**",
                         (False, False): "**Not for what limits this trace first.**",
                         (True, True): "**Compiling would answer what limits this trace.**",
                         (False, True): "**Compiling would not answer what limits this trace first.**"}
                        [helps, asked_if_compiled] + f" {v.headline}.")
        fused = memory_kernel_classes(by_class) if by_class is not None else []
        if fused and re.match(r"\s*(?:which|what)\b", q.text, re.I) and re.search(r"\bfus", q.text, re.I):
            # "which ops should I fuse?": what fusing shortens, the kernels memory-bound by nature, not a yes
            verdict_line = (f"{self._who(classes.scope)}**Fusing shortens the kernels memory-bound by nature:** "
                            + "; ".join(f"{c.label} {percent(c.share_pct)} of device time"
                                        + (f" (led by {code(shorten(c.top[0], 60))})" if c.top else "") for c in fused)
                            + f". {v.headline}.")
        lines = [now, "", verdict_line] if asked_if_compiled else [verdict_line, *(["", now] if now else [])]
        lines += ["", "torch.compile helps in two ways:"]
        if by_class is not None:
            lines.append(f"- it fuses kernels memory-bound by nature (elementwise, normalization, reductions) into fewer "
                         f"passes over memory: here they take {percent(by_class.memory_kernels_pct)} of device time "
                         f"({percent(by_class.compute_pct)} is in matmul, attention and convolution, which it leaves "
                         "to cuBLAS and cuDNN);")
        if launches.launch.kernels and (idle := launches.launch_overhead_idle_pct) is not None:
            lines.append(f"- with `mode=\"reduce-overhead\"` it replays the step from CUDA graphs, so launches cost the "
                         f"host nothing: here launch-bound gaps leave the GPU idle {percent(idle)} of device time.")
        lines += ["", f"**Next step:** {v.next_step}", *_saving(v)]
        return "\n".join(lines)

    def _profile_next(self, q: Question, overview: OverviewAnswer, verdict: VerdictAnswer,
                      kernels: KernelsAnswer) -> str:
        v = verdict.verdict
        lines = [f"**{v.headline}.**", ""]
        missing = [u for u in overview.unavailable if u["what"] not in ("GPU memory use",)]
        top = kernels.top[0].kernel.short_name if kernels.top else None
        profiler = kernel_profiler(top, self._amd) if top else None
        if v.limiter == "compute" and profiler:
            lines.append(f"1. The hot kernel, with {profiler[1]}: `{profiler[0]}`.")
        else:
            lines.append("1. The whole timeline with Nsight Systems, to see the host and the GPU together: "
                         f"`{profile_line('--nsys')}`." if not self._amd else
                         f"1. The whole timeline again, more steps of it: `{profile_line()}` (torch.profiler, on ROCm too).")
            if profiler:
                lines.append(f"2. The hot kernel, with {profiler[1]}: `{profiler[0]}`.")
        if missing:
            lines += ["", "What this trace lacks, and how to record it:"]
            lines += [f"- {u['what']}: {u['why']}; {u['how_to_get_it']}." for u in missing[:4]]
        lines += ["", f"The fix to try first: {v.next_step}"]
        return "\n".join(lines)

    def _compare(self, q: Question, answer: CompareAnswer | None = None) -> str:
        if answer is None:
            return ("Only one trace is loaded. To compare before and after, run `traceagent chat BEFORE --compare "
                    "AFTER` or `traceagent diff BEFORE AFTER`.")
        d = answer.diff
        lines: list[str] = []
        if answer.op is not None:  # "did aten::convolution get faster?": that op's kernels in both traces, then the run
            lines += [_op_in_both(answer.op, d), ""]
        # "was the prediction right?": that first; "what got slower?": what grew, even where the run got faster
        # (kernels asked: their rows below); each then not said again further down
        checked = bool(d.prediction) and bool(re.search(r"\bpredict(?:ion|ed)\b|\bestimate", q.text, re.I))
        grew = (not checked and not q.op and not re.search(r"\bkernels?\b", q.text, re.I)
                and bool(re.search(r"\b(?:slower|worse|regress\w*|grew|grown|increased|went up|new (?:problems?|"
                                   r"issues?|bottlenecks?|limiters?))\b", q.text, re.I)))
        # a fix of the before run's own root cause ("did the data loading fix work?") is the run's yes or no below,
        # which says that cause's change, the step's and the prediction's; another measure's row leads
        asked = None if checked or q.op or _names_root_cause(q.text, d) else _metric_asked(q.text, d)
        if checked and d.prediction:
            lines += _prediction_checked(d.prediction, d), ""
        elif asked is not None:  # "did the idle time go down?", "does it use less memory?": that row first
            lines += [asked, ""]
        elif grew:
            lines += _what_grew(d), ""
        elif _SPEEDUP_ASKED.search(q.text) and not q.op and d.metrics:  # "what is the speedup?": the step time first
            m = d.metrics[0]
            moved = ("about the same" if abs(d.slower_pct) < d.noise_pct else
                     f"{percent(abs(d.slower_pct))} {'faster' if d.slower_pct < 0 else 'slower'}")
            lines += [f"**{upper_first(moved)}:** {m.name} {m.shown(m.before)} → {m.shown(m.after)}. "
                      f"{upper_first(d.headline)}.", ""]
        elif _yes_no(q) and not q.op:  # "did it help?", "is it faster?": the answer first
            if d.helped:
                verdict = "**Yes:**"
            elif abs(d.slower_pct) < d.noise_pct:
                verdict = f"**No:** no measurable change (within the {d.noise_pct:g}% run-to-run noise):"
            else:
                verdict = "**No:** it is slower:"
            lines += [f"{verdict} {d.headline}.", ""]
        else:
            lines += [f"**{d.headline}.**" if not q.op else f"The run: {d.headline}.", ""]
        if re.search(r"\bkernels?\b", q.text, re.I) and d.kernels:  # "which kernels got slower?": the diff's rows
            # "which kernels got faster?": those whose time went down only (slower: up), most changed first
            way = (-1 if re.search(r"\b(?:faster|quicker|shorter|improv\w*|sped up)\b", q.text, re.I) else
                   1 if re.search(r"\b(?:slower|longer|worse|regress\w*)\b", q.text, re.I) else 0)
            by_change = [(k, (k["after_us"] or 0.0) - (k["before_us"] or 0.0)) for k in d.kernels]
            changed = [k for k, by in sorted(by_change, key=lambda kb: -abs(kb[1])) if not way or by * way > 0][:5]
            which = {-1: " that got faster", 1: " that got slower", 0: ""}[way]
            lines += [f"Kernels{which}, device time per {d.time_basis} (before → after), most changed first:"
                      if changed else f"**No kernel of the diff's rows{which}.**"]
            lines += [f"- {code(shorten(k['label'], 80))}: {_or_absent(k['before_us'])} → {_or_absent(k['after_us'])}"
                      for k in changed] + ["", "The run:"]
        lines += [f"- {m.name}: {m.shown(m.before)} → {m.shown(m.after)}" for m in d.metrics[:6]]
        if d.work:  # two captures holding different work: said, since the spans above are not the raw ones
            lines += ["", md_prose(work_note(d.work))]
        if d.prediction and not checked:
            lines.append(f"\nThe before verdict {d.prediction['sentence']}.")
        if d.collectives:
            lines.append(f"\n{d.collectives['sentence']}")
        if not grew:  # what grew lists the new problems already
            lines += [f"\nNew problem: {p}" for p in d.new_problems] or ["\nNo new problems."]
        return "\n".join(lines)

    def _most_idle(self, q: Question, overview: OverviewAnswer) -> str:
        gpus = [(r.rank, d, b) for r in overview.ranks for d, b in r.devices.items()]
        if not gpus:
            return "This trace has no GPU activity, so no GPU is idle or busy in it."
        least = bool(re.search(r"\bleast idle|\bmost (?:busy|utili)|\bbusier\b|\bbusiest\b|\bless idle|\bmore (?:busy|utili)",
                               q.text, re.I))
        if re.search(r"\b(?:slow|fast)(?:er|est)\b", q.text, re.I) and len(gpus) > 1:
            # "which GPU is slower?": the one with the most work sets the pace where they wait for each other
            gpus.sort(key=lambda g: g[2].idle_pct)
            (rank, device, b), (r2, d2, b2) = max(gpus, key=lambda g: g[2].busy_us), gpus[-1]
            lines = [f"**Rank {rank}, GPU {device} has the most device work**: busy {percent(b.busy_pct)} of its span "
                     f"({duration(b.busy_us)} of {duration(b.span_us)}); rank {r2}, GPU {d2} idles the most, "
                     f"{percent(b2.idle_pct)} of its span. Where the GPUs wait for each other (a collective, a copy "
                     "between them), the busiest sets the pace.", "", "Every GPU, least idle first:"]
            return "\n".join(lines + [f"- rank {r}, GPU {d}: idle {percent(x.idle_pct)}, busy {percent(x.busy_pct)}"
                                      for r, d, x in gpus[:16]])
        gpus.sort(key=lambda g: g[2].idle_pct, reverse=not least)
        rank, device, b = gpus[0]
        said = f"busy {percent(b.busy_pct)}" if least else f"idle {percent(b.idle_pct)}"  # what was asked, first
        lines = [f"**Rank {rank}, GPU {device}**: {said} of its span "
                 f"({duration(b.busy_us if least else b.idle_us)} of {duration(b.span_us)}).", "", "Every GPU, "
                 + ("least" if least else "most") + " idle first:"]
        if _BALANCE_ASKED.search(q.text) and len(gpus) > 1:
            # "are the two GPUs balanced?": their device work side by side, the judgement first
            (r1, d1, most), (r2, d2, fewest) = max(gpus, key=lambda g: g[2].busy_us), min(gpus, key=lambda g: g[2].busy_us)
            even = fewest.busy_us >= BALANCED_WORK * most.busy_us
            lines[0] = (f"**{'Yes, roughly' if even else 'No'}:** the GPUs' busy time ranges from {duration(fewest.busy_us)} "
                        f"(rank {r2}, GPU {d2}) to {duration(most.busy_us)} (rank {r1}, GPU {d1})"
                        + ("." if even else ": the GPU with less work idles wherever they wait for each other (a "
                           "collective, a copy between them)."))
        lines += [f"- rank {r}, GPU {d}: idle {percent(x.idle_pct)}, busy {percent(x.busy_pct)}" for r, d, x in gpus[:16]]
        return "\n".join(lines)

    def _summary(self, q: Question, overview: OverviewAnswer, verdict: VerdictAnswer, steps: StepsAnswer | None = None) -> str:
        a, v = overview.analysis, verdict.verdict
        lines = [f"A {a.format} trace with {len(a.ranks)} rank(s) on {', '.join(a.devices) or 'no GPU'}."]
        if steps is not None:  # "how long is the trace?", "the total training time?": the window it records first
            lines[:0] = [self._run_length(overview, steps), ""]
        if re.search(GPUS_COUNTED, q.text, re.I):  # "how many GPUs?": those in the trace, and the job's size where it says more
            gpus = sum(len(r.devices) for r in overview.ranks)
            world = overview.trace.world_size
            lines[:0] = [f"**{counted(gpus, 'GPU')} in {'this trace' if len(a.ranks) == 1 else 'these traces'}** "
                         f"({counted(len(a.ranks), 'rank')})"
                         + (f"; the job ran {world} ranks (the trace's distributed info): load the directory with every "
                            "rank's trace to see the others." if world and world > len(a.ranks) else "."), ""]
        for r in overview.ranks[:8]:
            lines += [f"- {line}" for line in device_lines(r.source)]
            lines.append(f"  rank {r.rank}: limiter {r.limiter} ({r.root_cause})")
        if len(overview.ranks) > 8:
            lines.append(f"- and {len(overview.ranks) - 8} more ranks (ask about one by number)")
        lines += ["", f"**Verdict:** {v.headline}.", f"{v.hypothesis}", "",
                  f"**Next step:** {v.next_step}", *_saving(v)]
        if self.ctx.other is not None:
            lines += ["", "A second trace is loaded: ask “did it help?” to compare."]
        return "\n".join(lines)

    def _run_length(self, overview: OverviewAnswer, steps: StepsAnswer) -> str:
        """The GPU time the trace records (the longest rank's span), its profiled steps, and that a profile is
        a window of the run, not the run."""
        spans = {r.rank: r.breakdown.total.span_us for r in overview.ranks}
        longest = max(spans, key=lambda rank: spans[rank])
        lead = (f"**The trace records {duration(spans[longest])} of GPU activity**"
                + (f" (rank {longest}'s span, the longest of the {len(spans)} ranks')" if len(spans) > 1 else
                   " (first to last device activity)"))
        if (s := steps.steps) is not None and s.count:
            who = f"rank {steps.scope['rank']}" if len(spans) > 1 and steps.scope and "rank" in steps.scope else "it"
            lead += (f"; {who} ran {counted(s.count, 'profiled step')} of "
                     f"{duration(s.step_time_us)}")
        return (lead + ". A profile records a window of the run, not the whole run, which takes about the step time "
                "times the steps it runs, plus start-up, evaluation and checkpoints.")

    def _unknown(self, q: Question, overview: OverviewAnswer, verdict: VerdictAnswer) -> str:
        if q.foreign:
            lead = ("Without a model I read questions in English only; open questions need a configured model "
                    "(OPENAI_API_KEY, or OPENAI_BASE_URL for a local server). Here is the trace in short:")
        elif written := OP_NAME.findall(q.text):  # "how long does aten::mm take?" of a trace with no aten::mm
            ops = self._result({"rank": q.rank}, "op_time")
            led = ", ".join(code(o.name) for o in ops.top[:5]) if ops is not None else ""
            lead = (f"This trace has no op {code(written[0].rstrip('.?'))} that launched device work"
                    + (f"; the ops with the most device time are {led}" if led else "") + ". Here is the trace in short:")
        elif (asked := TIME_OF_NAMED.search(q.text)) and not self._named_in_trace(what := named_of(asked)):
            # "how much time is spent in the sampler?" of a trace where nothing is called that: said, not guessed
            lead = (f"Nothing in this trace is named {code(what)}: no kernel, op, module or host event holds that word, "
                    "so its time cannot be read here (code the profiler does not record by name can be wrapped in "
                    f"`torch.profiler.record_function({what!r})` to appear). Here is the trace in short:")
        else:
            lead = "I did not recognize that question, so here is the trace in short:"
        return "\n".join([lead, "", self._summary(q, overview, verdict), "",
                          "Without a model I can answer: " + "; ".join(f"“{c}”" for c in CANNED_QUESTIONS) + "."])


#: a question about how things stand after the change, with two runs loaded ("what limits it now?")
def _streamed(text: str, unverified_numbers: list[str]) -> list[Token | Answer]:
    """An answer's closing events: its text a word at a time, as a model streams, then the answer."""
    return [*(Token(piece) for piece in re.findall(r"\S+\s*", text)), Answer(text, unverified_numbers)]


_FIRST_RUN, _SECOND_RUN = "**In the first run** (before the change):\n\n", "**In the second run** (after the change):\n\n"
#: a question asked of both runs: "did the comm to compute ratio change?", "X before and after"
_BOTH_RUNS = re.compile(r"\bdid (?:the |my |its |our )?(?!change\b|fix\b)\w+(?: \w+){0,6} change\b|\bbefore and after\b|"
                        r"\b(?:in )?(?:both|each) runs?\b", re.I)
_ABOUT_AFTER = re.compile(r"\b(?:now|still|anymore|any more|remaining|left over|second run|after run|new run|next)\b",
                          re.I)
#: how much the change bought, asked ("what is the speedup?", "how much faster is the second run?")
_SPEEDUP_ASKED = re.compile(r"\bspeed-?ups?\b|\bhow much (?:faster|slower|quicker)\b|\bhow many times faster\b", re.I)
#: a question about what the host does while the GPU waits ("what does the CPU do while the GPU is idle?")
_HOST_DURING_IDLE = re.compile(r"\b(?:cpu|host|python|thread)\b.{0,30}\b(?:do|does|doing|did)\b", re.I)
#: whether communication overlaps compute, asked ("is NCCL overlapping with compute?", "is the all-reduce hidden?")
_OVERLAP_ASKED = re.compile(r"\boverlap\w*|\bhidden\b|\bhid(?:e|es|ing)\b", re.I)
#: whether the link is used to the full ("is the network saturated?", "is NVLink maxed out?")
_SATURATED_ASKED = re.compile(r"\bsaturat\w*|\bmaxed\b|\bmax(?:ing)? out\b|\b(?:at|near|reach\w*) (?:its|the)"
                              r"(?: \w+'s)? (?:limit|peak|max\w*|capacity)\b", re.I)
#: the load across GPUs asked about ("are the two GPUs balanced?", "is the work even across GPUs?")
_BALANCE_ASKED = re.compile(r"\b(?:balanced?|imbalance\w*|unbalanced|even(?:ly)?|uneven\w*|equal(?:ly)?|same (?:load|work))\b",
                            re.I)
#: the least device work of any GPU, as a share of the most, that still reads as balanced
BALANCED_WORK = 0.9
#: what the whole trace shows asked ("what is this program doing?"), not only its kind of job
_WHOLE_TRACE_ASKED = re.compile(r"\bwhat (?:is|does) this (?:trace|job|program|workload|run)\b", re.I)
#: a question about kernels that asks which to work on ("which kernel should I tune first?")
_WHAT_TO_TUNE = re.compile(r"\b(?:tune|optimi[sz]e|speed up|focus on|work on|improve|rewrite|fuse)\b", re.I)
#: the ranks a question about every rank lists, at most
_RANKS_LISTED = 32
#: a question about every rank ("across all ranks", "which rank communicates the most?": every rank's, to rank them)
_EVERY_RANK = re.compile(r"\b(?:across|each|every|per|all|between|among) (?:the )?(?:\d+ )?ranks?\b|\branks'|"
                         r"\bwhich ranks?\b", re.I)


def _own_tool(name: str, q: Question, at: dict) -> list[tuple[str, dict]]:
    """A registered detector's plan: its own tool, on the rank and GPU the question names."""
    return [(name, at)]


#: the inference phases (phases.ORDER) as a question says them
_PHASE_WORDS = [("prefill", r"\bpre-?fill"), ("mixed", r"\bmixed\b|chunked prefill"), ("decode", r"\bdecod")]
_PHASE_WINDOWS = {"prefill": "new requests arriving while it records",
                  "mixed": "chunked prefill on, new requests arriving while others decode",
                  "decode": "requests that generate more than one token, recorded past their first"}
#: "is attention the bottleneck?": the class made this much faster is replayed, and it is the
#: bottleneck where that makes the step at least BOTTLENECK_SAVING_PCT faster
BOTTLENECK_SPEEDUP = 2.0
BOTTLENECK_SAVING_PCT = 10.0


@dataclass(frozen=True)
class _Collective:
    """A kind of collective as questions name it, and how its kernels are found: by their name
    (NCCL's AllReduce, vLLM's multimem_all_reduce), or by the op that launched them (NCCL runs
    all-to-all as SendRecv kernels)."""

    label: str
    said: str
    filters: dict[str, str]
    kind: str  # its name among the communication result's kinds (CollectiveKind.kind)


_COLLECTIVES = [_Collective("All-reduce", r"all[- _]?reduce", {"name_filter": "allreduce"}, "all_reduce"),
                _Collective("All-gather", r"all[- _]?gather", {"name_filter": "allgather"}, "all_gather"),
                _Collective("Reduce-scatter", r"reduce[- _]?scatter", {"name_filter": "reducescatter"}, "reduce_scatter"),
                _Collective("All-to-all", r"all[- _]?to[- _]?all", {"op_filter": "all_to_all"}, "all_to_all"),
                _Collective("Broadcast", r"broadcast", {"name_filter": "broadcast"}, "broadcast")]


#: steps weighed against each other ("how variable are the step times?", "is the first step slower?")
_COMPARED_STEPS = re.compile(r"\bvar(?:y|ies|iable|iance|iation)\b|\bjitter\b|\bstable\b|\bconsistent\b|\bstd\b|"
                             r"\bstandard deviation\b|\bslow(?:er|est)\b|\bfast(?:er|est)\b|\bwarm-?up\b|\bdiffer", re.I)
#: what one step recorded says of steps compared
_ONE_STEP = ("The trace records one step, so there is nothing to weigh it against: record several (a profiler "
             "schedule's `active=5`) to see how steps vary.")
#: the host and the device weighed against each other ("is the CPU or the GPU the bottleneck?")
_HOST_OR_DEVICE = re.compile(r"\b(?:cpu|host)(?:[- ]bound)? or (?:the )?(?:gpu|device)\b|"
                             r"\b(?:gpu|device)(?:[- ]bound)? or (?:the )?(?:cpu|host)\b", re.I)
#: a typical value asked ("what is the average gap?", "the median gap length")
_TYPICAL = re.compile(r"\b(?:average|mean|median|typical)\b", re.I)
#: each step asked about ("how long does the data loader take per step?")
_PER_STEP = re.compile(r"\b(?:per|each|every|a) (?:training )?(?:step|iteration)\b|\bby step\b", re.I)
#: how long something takes, asked
_TIME_ASKED = re.compile(r"\bhow (?:much|long)\b|\btime (?:is )?spent\b|\btotal time\b", re.I)
#: what a rank that ran no GPU work is, said before where its host time goes
_NO_GPU_WORK = "**No GPU work in this trace** (CPU activities only): its time is the host's, by op below."


def _collective_named(text: str) -> list[_Collective]:
    """The kinds of collective a question names, in the question's order."""
    found = [(m.start(), c) for c in _COLLECTIVES if (m := re.search(rf"\b{c.said}", text, re.I))]
    return [c for _, c in sorted(found, key=lambda f: f[0])]


#: the batch of an inference server's step asked as requests ("how many requests are in the batch?")
_REQUESTS_ASKED = re.compile(r"\bhow many (?:requests|sequences|prompts)\b|\brequests? (?:are )?(?:in|per) (?:the |a |each )?"
                             r"(?:batch|step)\b|\bconcurrent requests\b|\bbatch[- ]?size\b|"
                             r"\b(?:how (?:big|large) is|size of) the (?:decode |decoding )?batch\b", re.I)
#: "how many kernels ran?": every kernel counted, not only those linked to a launch call
_KERNELS_COUNTED = re.compile(r"\b(?:how many|number of|count of)\b.{0,20}\bkernels?\b(?!.{0,20}\b(?:per|a|each) "
                              r"(?:step|iteration)\b)", re.I)
#: communication weighed against computation: "comm to compute ratio", "communication vs compute time"
_RATIO_ASKED = re.compile(r"\bratio\b|\b(?:vs\.?|versus|against|compar\w*|relative)\b.{0,25}\bcomput|"
                          r"\bcomput\w*\b.{0,25}\b(?:vs\.?|versus|against|compar\w*|relative)\b", re.I)


#: the kinds of copy as questions name them ("host to device", "H2D", "GPU to CPU"), in the memcpy detector's keys
_COPY_KINDS_SAID = [("HtoD", r"\bhost[- ]to[- ]device\b|\bh2d\b|\bhtod\b|\bcpu[- ]to[- ]gpu\b|"
                             r"\b(?:copied|copies|moved|sent|transferred|uploaded) (?:on)?to the (?:gpu|device)\b"),
                    ("DtoH", r"\bdevice[- ]to[- ]host\b|\bd2h\b|\bdtoh\b|\bgpu[- ]to[- ]cpu\b|"
                             r"\b(?:copied|copies|moved|sent|transferred) (?:back )?to the (?:cpu|host)\b"),
                    ("DtoD", r"\bdevice[- ]to[- ]device\b|\bd2d\b|\bdtod\b"),
                    ("PtoP", r"\bpeer[- ]to[- ]peer\b|\bp2p\b|\bptop\b|\bgpu[- ]to[- ]gpu\b|"
                             r"\bbetween (?:the )?(?:gpus|devices)\b")]
_COPY_KIND_WORDS = {"HtoD": "host-to-device", "DtoH": "device-to-host", "DtoD": "device-to-device",
                    "PtoP": "peer-to-peer"}


#: how a step's kernels are counted (StepsResult.kernels_per_step)
_KERNELS_A_STEP = "the mean over its steps of the kernels that start inside each step's device work"


#: the roofline asked by name ("what is the arithmetic intensity?"): the bound answer with the kernels' classes and
#: each counted op's FLOP per byte against the GPU's ridge point
_ROOFLINE_ASKED = re.compile(r"\barithmetic intensity\b|\broofline\b|\bflops? per byte\b|\bridge point\b", re.I)
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                 "ten": 10, "twenty": 20}
#: how many items a question asks for ("the top 3 kernels", "the ten slowest kernels", "top-20")
_HOW_MANY = re.compile(r"\btop[- ]?(\d{1,2}|" + "|".join(_NUMBER_WORDS) + r")\b|"
                       r"\b(\d{1,2}|" + "|".join(_NUMBER_WORDS) + r") (?:hottest|slowest|biggest|largest|longest|"
                       r"heaviest|most expensive|costliest|most (?:called|launched)|top)\b", re.I)


def _how_many(q: Question, default: int) -> int:
    """The number of items the question asks for, within MAX_ITEMS, or `default`."""
    if not (m := _HOW_MANY.search(q.text)):
        return default
    said = (m.group(1) or m.group(2)).lower()
    return max(1, min(int(said) if said.isdigit() else _NUMBER_WORDS[said], MAX_ITEMS))


def _slow_order(q: Question) -> str:
    """How "the slowest kernel" is ranked: by its longest single run where the question asks for the
    longest ("how long is the longest kernel?"), else by its time per call."""
    longest = re.search(r"\blongest\b|\bmax(?:imum)? (?:single )?kernel\b", q.text, re.I)
    per_call = re.search(r"\bper (?:call|launch)\b|\b(?:average|mean)\b", q.text, re.I)
    return "max" if longest and not per_call else "mean"


#: a question about the typical kernel rather than the hottest ("what is the average kernel duration?")
#: one kernel named by its rank ("the slowest kernel", "the top kernel"): the hottest, by total time
_ONE_TOP_KERNEL = re.compile(r"\bthe (?:slowest|hottest|top|biggest|largest|longest|heaviest|most expensive|costliest|"
                             r"main|dominant) kernel\b(?!s)", re.I)
_TYPICAL_KERNEL = re.compile(r"\b(?:average|mean|median|typical)\b.{0,20}\bkernels?\b|"
                             r"\bkernels?\b.{0,20}\b(?:average|mean|median|typical)\b|how long (?:is|does) a kernel", re.I)
_FACTOR = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:x|×|times)\b", re.I)
#: a change asked as shorter or faster, not gone ("halved the data loading", "2x faster loading")
_SHORTER = r"\bhalv\w*|\bhalf\b|\btwice as fast\b|\b\d+(?:\.\d+)?\s*(?:x|×|times)\b|\b(?:faster|quicker|shorter)\b"


def _rank(at: dict) -> dict:
    """The rank of a scope (what_if replays a rank: no GPU of it alone)."""
    return {"rank": at["rank"]} if "rank" in at else {}


def _names_cause(text: str, root: str) -> bool:
    """Whether a question names a root cause, in the vocabulary's words for it."""
    pattern = (GAP_CAUSES[root].said if root in GAP_CAUSES else "") or (ROOT_CAUSES[root].said if root in ROOT_CAUSES else "")
    return bool(pattern and re.search(pattern, text, re.I))


def _op_in_both(change: OpChange, d: DiffResult) -> str:
    """An op's kernels in the before and the after trace (diff.op_change), said with the diff's noise band."""
    name, b, a = code(change["op"]), change["before_us"], change["after_us"]
    if not b and not a:
        return f"Neither trace has kernels launched by {name}."
    if change["change_pct"] is None or not a:
        return f"{name}'s kernels are only in the {'after' if a else 'before'} trace ({duration(a or b)} per {d.time_basis})."
    moved = change["change_pct"]
    lead = "**Faster:**" if moved <= -d.noise_pct else "**Slower:**" if moved >= d.noise_pct else "**About the same:**"
    return (f"{lead} the kernels {name} launched (itself or through the ops inside) took {duration(b)} per "
            f"{d.time_basis} before and {duration(a)} after ({moved:+.1f}%).")


def _device_time_of(scope: Scope) -> str:
    """Whose device time a share is of: the rank's GPUs', or the one GPU asked about."""
    device = scope.get("device")
    return "the rank's device time" if device in (None, "all") else f"GPU {device}'s device time"


def _or_absent(us: float | None) -> str:
    """A kernel's time in one trace of a comparison, or that the trace's top kernels lack it."""
    return duration(us) if us is not None else "not in its top kernels"


#: how close a replay's prediction must come to the measured gain to be called right: within the
#: run-to-run noise (percentage points), or within this fraction of the prediction
PREDICTION_TOLERANCE = 0.1


def _prediction_checked(p: Prediction, d: DiffResult) -> str:
    """The before verdict's prediction against the measured change, said first: held (within the
    noise or a tenth of it), over or under; a bound without a replay, within it or not."""
    if p["simulated_pct"] is not None:
        simulated, measured = p["simulated_pct"], p["measured_pct"]
        if abs(measured - simulated) <= max(d.noise_pct, PREDICTION_TOLERANCE * abs(simulated)):
            lead = "**Yes, the prediction held:**"
        else:
            lead = "**It promised more than came:**" if measured < simulated else "**It was cautious:**"
        said = f"{lead} the before verdict {p['sentence']}."
        if measured < simulated and d.new_problems:  # where the rest went: what the change brought forward
            said += f" Part of the gain went to what limits it now: {d.new_problems[0]}."
        return said
    lead = "**Within its bound:**" if p["within_estimate"] else "**No, outside its bound:**"
    return f"{lead} the before verdict {p['sentence']} (an upper bound, with no replay to predict it)."


def _what_grew(d: DiffResult) -> str:
    """What got slower between the runs: the run itself when it did, else what grew though it got
    faster (new problems, kernels and ranges that take longer per step or per trace)."""
    basis = d.time_basis
    kernels = sorted((k for k in d.kernels if k["before_us"] and k["after_us"]
                      and k["after_us"] > k["before_us"] * (1 + d.noise_pct / 100)),
                     key=lambda k: -((k["after_us"] or 0.0) - (k["before_us"] or 0.0)))[:3]
    ranges = [r for r in d.ranges if r["change_pct"] is not None and r["change_pct"] >= d.noise_pct][:3]
    lead = (f"**It is slower:** {d.grew}." if d.slower_pct >= d.noise_pct and d.grew else
            "**The run is not slower**, but these grew:")
    lines = [lead, *(f"- {p}" for p in d.new_problems)]
    lines += [f"- kernel {code(shorten(k['label'], 80))}: {_or_absent(k['before_us'])} → {_or_absent(k['after_us'])} "
              f"per {basis}" for k in kernels]
    lines += [f"- range {code(shorten(r['name'], 60))}: host {_or_absent(r['before_host_us'])} → "
              f"{_or_absent(r['after_host_us'])} per {basis}" for r in ranges]
    if len(lines) == 1:
        lines.append("- nothing beyond the run-to-run noise")
    return "\n".join(lines)


def _yes_no(q: Question) -> bool:
    """Whether the question asks for a yes or a no ("did it help?", "is it faster?")."""
    return asks_yes_or_no(q.text)


#: collectives' bus bandwidth at this share of the links' peak or more is near it (nccl-tests reach 80-90% on large messages)
GOOD_BUSBW_PCT = 60.0
#: running out of GPU memory asked ("am I running out of memory?", "will it OOM?", "does it fit?")
_OUT_OF_MEMORY_ASKED = re.compile(r"\bout of memory\b|\boom\b|\benough (?:gpu )?memory\b|\brun(?:ning)? out\b|"
                                  r"\bmemory (?:full|limit|headroom|pressure)\b|\bfits?\b|\bheadroom\b", re.I)
#: a GPU whose allocator holds this share of its memory at the peak is close to running out
NEAR_FULL_PCT = 90.0
#: copies under this share of the span: pinning their memory saves little, whatever share is pageable
LITTLE_COPIES_PCT = 1.0


def _asks_advice(q: Question) -> bool:
    """Whether a yes-or-no question asks what to do ("should I pin?", "would pinning help?"), not how
    things are ("is pin_memory on?"): its yes means "do it"."""
    return bool(re.match(r"\s*(?:should|would|will|could|do\s+(?:i|we)\s+need|is\s+it\s+worth)\b", q.text, re.I))


def _how_to_profile(kernel: str, amd: bool) -> str:
    """How to see why a kernel takes the time it does: its hardware counters, with the GPU maker's profiler."""
    line, profiler = kernel_profiler(kernel, amd)
    if amd:
        return (f"To see why `{shorten(kernel, 50)}` takes that long: `{line}` reads its counters with {profiler} "
                "(then `rocprof-compute analyze -p workloads/hot_kernel/...`).")
    return (f"To see why `{shorten(kernel, 50)}` takes that long: `{line}` runs it under "
            f"{profiler} and joins the reading to the trace (or `ncu --kernel-name regex:NAME --set full --csv --page "
            "details --log-file ncu.csv python train.py`, then `traceagent analyze TRACE --kernels ncu.csv`).")


def _why_slow(names: list[str], profiled: KernelProfilesAnswer, amd: bool) -> str:
    """Nsight Compute's reading of the first of these kernels it profiled, or how to get one."""
    found = next((p for name in names for p in profiled.kernels if same_kernel(p.name, name)), None)
    if found is None:
        return _how_to_profile(short_name(names[0]), amd)
    return f"Nsight Compute ({profiled.profiles.path if profiled.profiles else 'export'}): {profile_sentence(found)}"


def _collectives_asked(q: Question, c: CollectivesResult) -> list[str]:
    """What a question asks of the collectives' payloads, first: whether they are latency- or
    bandwidth-bound (the collectives detector's `bound`), and their message sizes."""
    lead = []
    if asked := re.search(r"\b(latency|bandwidth)[- ]bound\b", q.text, re.I):
        said = {"latency": "latency-bound: most of their time is in small messages",
                "bandwidth": "bandwidth-bound: large messages near the link's peak",
                "below_peak": "large messages, well below the link's peak"}[c.bound]
        yes = c.bound == asked.group(1).lower()
        lead.append(f"**{'Yes' if yes else 'No'}: {said}** ({percent(c.small_time_pct)} of the collectives' time is "
                    f"in messages under {size(c.small_bytes)}).")
    elif _SATURATED_ASKED.search(q.text) or (re.search(r"\b(?:bandwidth|busbw|throughput)\b", q.text, re.I) and (
            _yes_no(q) or re.search(r"\bhow (?:good|fast|high|low)\b", q.text, re.I))):
        # "is the all-reduce bandwidth good?", "is the network saturated?": judged against the links' peak, small
        # messages said apart
        near, below = ("Yes: near", "No: well below") if _yes_no(q) else ("Near", "Well below")
        said = (f"**{near} the links' peak**" if c.peak_pct >= GOOD_BUSBW_PCT else
                "**Low, but latency-bound**" if c.bound == "latency" else f"**{below} the links' peak**")
        lead.append(f"{said} ({rate(c.busbw_gbps)} bus bandwidth over {counted(c.calls, 'collective')}, "
                    f"{percent(c.peak_pct)} of the links' peak" + (
                        f"; {percent(c.small_time_pct)} of their time is in messages under {size(c.small_bytes)}, "
                        "which no link speed shortens" if c.bound == "latency" else "") + ").")
    if c.calls_per_step is not None and re.search(r"\b(?:per|a|each) (?:training )?(?:step|iteration)\b", q.text, re.I):
        lead.append(f"**{c.calls_per_step:g} collectives a step** ({counted(c.calls, 'call')} with a recorded payload, "
                    "over the trace's steps).")
    named = _collective_named(q.text)
    if named and re.search(r"\b(?:bandwidth|busbw|algbw|throughput|fast|slow)\b", q.text, re.I):
        # "what is the all-gather bandwidth?": that kind's rows first (each process group's), or that it has none
        rows = [r for r in c.rows if r.collective == named[0].kind]
        lead += [f"**{named[0].label} on group {r.group} ({r.group_size} ranks): busbw {rate(r.busbw_gbps)}** (best call "
                 f"{rate(r.best_busbw_gbps)}), {percent(r.peak_pct)} of {c.links[r.link].kind}'s "
                 f"{c.links[r.link].peak_gbps:g} GB/s, over {counted(r.calls, 'call')} moving {size(r.bytes)}."
                 for r in rows] or [
            f"**No {named[0].label.lower()} with a recorded payload** in this scope: its collectives are "
            + ", ".join(dict.fromkeys(r.collective for r in c.rows)) + "."]
    if re.search(r"\b(?:message|payload|buffer|transfer)s?\s*sizes?\b|\bhow (?:big|large)\b|\bsizes? of\b|"
                 r"\b(?:average|mean|median|typical)\b.{0,25}\bsizes?\b|\bmessages?\b.{0,20}\b(?:small|large|big|tiny)\b|"
                 rf"\b(?:{COLLECTIVES_SAID}) sizes?\b",
                 q.text, re.I):
        # "are the messages small?": yes where most of the collectives' time is in messages the link's latency sets
        small = "" if not (_yes_no(q) and re.search(r"\b(?:small|tiny)\b", q.text, re.I)) else (
            f"**{'Yes' if c.small_time_pct >= 50 else 'No'}:** {percent(c.small_time_pct)} of the collectives' time is in "
            f"messages under {size(c.small_bytes)}, where the link's latency, not its bandwidth, sets the time. ")
        lead.append(small + "**Message sizes** (median per call): " + "; ".join(
            f"{r.collective} on group {r.group} {size(r.median_bytes)} ({counted(r.calls, 'call')})" for r in c.rows[:5])
            + ". By size: " + "; ".join(f"{b.size}: {counted(b.calls, 'call')}, {percent(b.time_pct)} of the time"
                                        for b in c.sizes) + ".")
    return [*lead, ""] if lead else []


def _bandwidth_lines(c: CollectivesResult) -> str:
    """The collectives' bandwidth: the verdict (bandwidth- or latency-bound), the largest rows,
    each share of a link's peak with the link it assumed."""
    rows = [f"- {r.collective} on group {r.group} ({r.group_size} ranks): {counted(r.calls, 'call')}, {size(r.bytes)}, "
            f"busbw {rate(r.busbw_gbps)} (best call {rate(r.best_busbw_gbps)}), {percent(r.peak_pct)} of "
            f"{c.links[r.link].kind}'s {c.links[r.link].peak_gbps:g} GB/s" for r in c.rows[:3]]
    assumed = "; ".join(f"{link.kind}: {link.assumption} ({link.source})" for link in c.links)
    return "\n".join([f"\n{collectives_sentence(c)}", *rows, f"\nLink assumed: {assumed}."])


def _standing(rank: int | None, c: RankComparison | None) -> str | None:
    """Where a rank a question names stands among the job's ranks ("why is rank 3 slow?"): the
    straggler, or waiting for it in the collectives matched across ranks; None without them."""
    me = next((r for r in c.ranks if r.rank == rank), None) if c is not None and c.matched else None
    if c is None or me is None:
        return None
    if rank == c.straggler:
        return (f"**Rank {rank} is the straggler:** it entered {me.last_count} of the {c.matched} matched collectives "
                f"last, and caused {duration(me.caused_waiting_us)} of the other ranks' waiting in them "
                f"({c.caused_waiting_pct:.0f}% of all).")
    waits, share, caused = _waiting(me, c)
    return f"**Rank {rank} is not the straggler:** it {waits} {share}" + (f"; {caused}." if caused else ".")


def _waiting(me: RankCollectives, c: RankComparison) -> tuple[str, str, str]:
    """How a rank's waiting is said: what it waits, over what share, and how much of all waiting the
    straggler causes ("" without one): its waiting is for whoever entered after it, not the straggler alone."""
    return (f"waits {duration(me.exposed_waiting_us)} in collectives for the ranks that enter after it",
            f"({percent(me.exposed_waiting_pct)} of its device time, with no compute beside it)",
            f"rank {c.straggler}, the straggler, causes {c.caused_waiting_pct:.0f}% of the ranks' waiting"
            if c.straggler is not None else "")


def _unavailable(u: Unavailable, what: str | None = None) -> str:
    """'This trace cannot say which rank…: why. To get it: how.' from a tool's `unavailable`."""
    return f"This trace cannot say {what or u['what']}: {u['why']}. To get it: {u['how_to_get_it']}."


#: a diff row a question names, by the start of its name, and which way is better (-1: less): a cause of idle
#: ("did the sync fix help?": "idle: sync") before the total idle; pinned memory is the copies', not the peak's
_METRICS_ASKED = [(re.compile(r"\bstab(?:le|ility)\b|\bstead(?:y|ier|iness)\b|\bconsisten\w*|\bvar(?:y|ies|iance|iation|"
                              r"iability|iable)\b|\bjitter\w*|\bspread\b|\bnois(?:y|ier|e)\b|\bfluctuat\w*", re.I),
                   "step time spread", -1),
                  (re.compile(r"\bsyncs?\b|\bsynchroni[sz]\w*", re.I), "idle: sync", -1),
                  (re.compile(r"\bdata ?load\w*|\bdataloader\b|\binput pipeline\b|\bnum_workers\b", re.I),
                   "idle: dataloader", -1),
                  (re.compile(r"\blaunch(?:es|ing)?\b", re.I), "idle: launch_overhead", -1),
                  (re.compile(r"\bpin(?:ned|ning)?[- _]memory\b|\bcop(?:y|ies)\b|\bmemcpy\b", re.I), "exposed copies", -1),
                  (re.compile(r"\bmemory\b|\bvram\b|\boom\b", re.I), "peak memory", -1),
                  (re.compile(r"\bidle\b", re.I), "idle", -1),
                  (re.compile(r"\bbus(?:y|ier)\b|\butili[sz]\w*", re.I), "busy", 1),
                  (re.compile(r"\btensor cores?\b", re.I), "math on tensor cores", 1),
                  (re.compile(r"\bcommunicat\w*|\bnccl\b|\bcollectives?\b", re.I), "exposed communication", -1)]
#: a change asked whether it worked ("did the sync fix help?"): yes where its measure moved the better way
_WORKED = re.compile(r"\b(?:help\w*|work\w*|improv\w*|better|worse|succeed\w*|pay off|paid off)\b", re.I)
#: the step time's spread asked to have grown ("is it less stable?", "does it vary more?"); "more stable" is less
_SPREAD_GREW = re.compile(r"\b(?:less|un)\s?(?:stable|steady|consistent)\b|\b(?:more|higher|larger|bigger) (?:variab\w*|"
                          r"jitter\w*|nois\w*|spread|variance|fluctuat\w*)|\b(?:var(?:y|ies)|jitters?|fluctuates?) more\b|"
                          r"\b(?:noisier|jitterier)\b", re.I)
_LESS = re.compile(r"\b(?:down|less|lower|fewer|smaller|decreas\w*|reduc\w*|drop\w*|shr[iu]nk\w*|cut)\b", re.I)
_MORE = re.compile(r"\b(?:up|more|higher|larger|bigger|busier|increas\w*|gr[eo]w\w*|rais\w*)\b", re.I)


def _measure_asked(text: str) -> tuple[str, int] | None:
    """The diff row a question names (the start of its name) and which way is better, from _METRICS_ASKED."""
    return next(((name, better) for pattern, name, better in _METRICS_ASKED if pattern.search(text)), None)


def _names_root_cause(text: str, d: DiffResult) -> bool:
    """Whether the measure a question names is the idle of the before run's root cause ("the data loading fix")."""
    asked = _measure_asked(text)
    return asked is not None and asked[0] == f"idle: {d.root_cause['cause']}"


def _metric_asked(text: str, d: DiffResult) -> str | None:
    """The diff's row for the one measure a question asks about ("did the idle time go down?"), with a yes or no
    where it asks for a direction; None where it names no measure of the diff's."""
    if (asked := _measure_asked(text)) is None:
        return None
    name, better = asked
    m = next((m for m in d.metrics if m.name.startswith(name)), None)
    if m is None:
        return ("**The two traces do not both record memory**, so its change cannot be read here: profile both runs "
                "with `torch.profiler.profile(profile_memory=True)`." if name == "peak memory" else None)
    row = f"{m.name} {m.shown(m.before)} → {m.shown(m.after)}, {m.change_shown()}."
    if name == "step time spread":  # its words run the other way: "more stable" asks for less spread
        wants = 1 if _SPREAD_GREW.search(text) else -1
    else:
        wants = -1 if _LESS.search(text) else 1 if _MORE.search(text) else better if _WORKED.search(text) else 0
    if not (wants and asks_yes_or_no(text)) or m.change is None:
        return f"**{upper_first(row)}**"
    # a change inside the runs' noise (times), under 1% (memory) or under a point (shares) is no change
    same = (abs(m.change) < 1.0 if isinstance(m, ShareMetric) else
            m.change_pct is not None and abs(m.change_pct) < (d.noise_pct if isinstance(m, TimeMetric) else 1.0))
    return ("**About the same:** " if same else "**Yes:** " if m.change * wants > 0 else "**No:** ") + row


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _tensor_cores(dtype: str | None) -> str:
    """Whether the matmuls' data type runs on tensor cores, and the change that would."""
    if dtype == "fp32":
        return ("**Tensor cores:** the matmuls run in fp32 (from the recorded shapes), which has no tensor-core path "
                "unless TF32 is on (A100 and later: `torch.backends.cuda.matmul.allow_tf32 = True`; kernels named "
                "`…tf32…` or `…1688…` show it). Mixed precision (`torch.autocast(\"cuda\", dtype=torch.bfloat16)`) runs "
                "them on tensor cores: `traceagent whatif TRACE --change amp` predicts what it buys.")
    return f"**Tensor cores:** the matmuls run in {dtype}, a tensor-core data type." if dtype else ""


def _saving(v: Verdict) -> list[str]:
    """The verdict's saving estimate as a paragraph, when it has one."""
    return ["", v.saving.sentence] if v.saving else []
