"""The offline analyst: answers common questions from the same tools when no LLM is configured.

It routes a question by its words to a topic, calls that topic's tools (emitting the same events
a model session does), and writes the answer from templates: every number is a tool's number.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable

from langchain_core.tools import BaseTool

from ..detect.vocabulary import GAP_CAUSES, label
from ..format import device_lines, duration, of_span, percent, shorten, size, straggler_sentence
from .events import Answer, Token, ToolCall, ToolResult
from .numbers import unverified
from .tools import AnalysisContext

NO_LLM = ("_Offline analyst: no LLM is configured, so this answer comes from templates over the detectors. "
          "Set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server such as vLLM, Ollama or llama.cpp) "
          "to talk it through with a model._")

# topic → words that point to it, first match wins
TOPICS: list[tuple[str, re.Pattern]] = [
    ("compare", re.compile(r"\b(compar|before|after|diff|improv|regress|fix(ed)? help)", re.I)),
    ("next", re.compile(r"\b(next|what should i|profile|recommend|suggest|how (do|can|to) (i )?(fix|speed))", re.I)),
    ("memcpy", re.compile(r"\b(memcpy|copy|copies|transfer|pageable|pinned|bandwidth|data movement|htod|dtoh)", re.I)),
    ("comm", re.compile(r"\b(communicat|nccl|rccl|allreduce|all-reduce|collective|overlap|exposed|rank)", re.I)),
    ("kernels", re.compile(r"\b(kernel|hot|compute|gemm|matmul|slowest op|hotspot)", re.I)),
    ("steps", re.compile(r"\b(step|iteration)", re.I)),
    ("idle", re.compile(r"\b(idle|wait|stall|gap|slow|bottleneck|utili[sz]|underutil|starv|sync|dataloader|launch)", re.I)),
    ("summary", re.compile(r"\b(summar|overview|diagnos|what'?s wrong|tell me about|explain)", re.I)),
]

CANNED_QUESTIONS = ["Why is my GPU idle?", "What are the hot kernels?", "How much time goes to memcpy?",
                    "Is communication overlapped?", "What should I profile next?", "Summarize this trace."]


def route(question: str) -> str | None:
    for topic, pattern in TOPICS:
        if pattern.search(question):
            return topic
    return None


class OfflineAnalyst:
    def __init__(self, ctx: AnalysisContext, tools: dict[str, BaseTool]) -> None:
        self.ctx = ctx
        self.tools = tools

    async def answer(self, question: str) -> AsyncIterator:
        topic = route(question)
        writer: Callable[..., str] = getattr(self, f"_{topic}") if topic else self._help
        calls = {"idle": ["verdict", "idle_gaps"], "kernels": ["hot_kernels"], "memcpy": ["data_movement"],
                 "comm": ["communication"], "next": ["verdict"], "summary": ["overview", "verdict"],
                 "steps": ["steps"], "compare": ["compare_traces"] if "compare_traces" in self.tools else ["verdict"]}
        results: dict[str, dict] = {}
        for i, name in enumerate(calls.get(topic, [])):
            yield ToolCall(f"offline-{i}", name, {})
            content = await asyncio.to_thread(self.tools[name].invoke, {})
            self.ctx.sources.add_result(content)
            results[name] = json.loads(content)
            yield ToolResult(f"offline-{i}", name, content, ok=True)
        text = writer(**results) + "\n\n" + NO_LLM
        for piece in re.findall(r"\S+\s*", text):  # stream it like a model would
            yield Token(piece)
        yield Answer(text, unverified(text, self.ctx.sources) if results else [])

    # -- templates: each takes the tool results it asked for --------------------------------

    def _who(self, result: dict) -> str:
        """'Rank 7: ' before a rank's figures when the job has several ranks (tools default to the
        verdict's rank, so the reader must be told which one this is)."""
        scope = result.get("scope") or {}
        if len(self.ctx.analysis.ranks) < 2 or "rank" not in scope:
            return ""
        gpu = f", GPU {scope['device']}" if scope.get("device") not in (None, "all") else ""
        return f"Rank {scope['rank']}{gpu}: "

    @staticmethod
    def _of(result: dict) -> str:
        """What the result's percentages are over: the span, or device time for several GPUs."""
        scope = result.get("scope") or {}
        several = scope.get("device") == "all" and len(scope.get("devices", [])) > 1
        return of_span(len(scope["devices"]) if several else 1)

    def _idle(self, verdict: dict, idle_gaps: dict) -> str:
        idle = idle_gaps
        if not self.ctx.analysis.verdict.limiter:
            return verdict["headline"] + ". " + verdict["next_step"]
        causes = sorted(idle["by_cause_us"].items(), key=lambda kv: -kv[1])
        of = self._of(idle)
        whole = idle.get("device_time_us", idle["span_us"])
        lines = [f"{self._who(idle)}The GPU is idle **{percent(idle['idle_pct'])}** {of} "
                 f"({duration(idle['idle_us'])} of {duration(whole)}, in {idle['gaps']} gaps). By cause:"]
        lines += [f"- {label(GAP_CAUSES, c)}: {duration(us)} ({percent(idle['by_cause_pct'][c])} {of}, "
                  f"{idle['by_cause_count'][c]} gaps)" for c, us in causes[:5] if c in idle.get("by_cause_pct", {})]
        top = idle.get("top_gaps") or []
        if top:
            g = top[0]
            what = ", ".join(f"`{shorten(h['name'], 60)}`" for h in g.get("host", [])[:2])
            lines.append(f"\nThe largest gap lasts {duration(g['dur_us'])} at {duration(g['start_us'])} ({g['cause']})"
                         + (f"; meanwhile the host was in {what}." if what else "."))
        if idle["sync_sites"]:
            s = idle["sync_sites"][0]
            lines.append(f"Synchronizations: `{s['call']}`" + (f" under `{s['op']}`" if s["op"] else "")
                         + (f" at `{s['python']}`" if s["python"] else "") + f", {s['count']} times, "
                         f"{duration(s['idle_us'])} of idle after them.")
        lines += ["", f"**Verdict:** {verdict['headline']}. {verdict['hypothesis']}", "",
                  f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        return "\n".join(lines)

    def _kernels(self, hot_kernels: dict) -> str:
        top = hot_kernels["top"][:5]
        if not top:
            return "There are no kernels in this trace."
        lines = [f"{self._who(hot_kernels)}{hot_kernels['kernels']} kernels ({hot_kernels['distinct']} distinct names) ran "
                 f"{duration(hot_kernels['total_us'])}. The hottest:"]
        lines += [f"{i}. `{shorten(k['short_name'], 50)}`: {duration(k['total_us'])}, {percent(k['share_of_busy_pct'])} of "
                  f"busy time, {k['count']} launches, mean {duration(k['mean_us'])}"
                  + (f", from `{shorten(k['op'], 40)}`" if k["op"] else "") for i, k in enumerate(top, 1)]
        k = top[0]
        lines += ["", f"To see why `{shorten(k['short_name'], 50)}` takes that long: `ncu --kernel-name "
                      f"regex:{k['short_name']} --launch-count 5 --set full -o hot python train.py`."]
        return "\n".join(lines)

    def _memcpy(self, data_movement: dict) -> str:
        m = data_movement
        if not m["count"]:
            return "There are no memory copies in this trace: data movement is not what limits it."
        of = self._of(m)
        lines = [f"{self._who(m)}Copies ran **{percent(m['share_pct'])}** {of}; {percent(m['exposed_pct'])} {of} had "
                 f"copies and no compute beside them ({duration(m['exposed_us'])}). By kind:"]
        lines += [f"- {kind}: {c['count']} copies, {size(c['bytes'])}, {duration(c['us'])}, {c['gbps']:.1f} GB/s"
                  + (f", {c['pageable_count']} from pageable memory" if c["pageable_count"] else "")
                  for kind, c in m["by_kind"].items()]
        if m["pageable_count"]:
            lines.append(f"\n{m['pageable_count']} copies touch pageable memory ({size(m['pageable_bytes'])}): they "
                         "are staged through a pinned buffer and block the host. Pin the memory "
                         "(`DataLoader(pin_memory=True)` or `tensor.pin_memory()`) and copy with `non_blocking=True`.")
        return "\n".join(lines)

    def _comm(self, communication: dict) -> str:
        c = communication
        if not c["kernels"]:
            note = c.get("ranks_note", "")
            return ("There are no collective (NCCL/RCCL) kernels in this trace, so communication is not a factor."
                    + (f" {note[0].upper()}{note[1:]}." if note else ""))
        of = self._of(c)
        lines = [f"{self._who(c)}{c['kernels']} collective kernels ran {duration(c['comm_us'])} "
                 f"({percent(c['share_pct'])} {of}). **{percent(c['exposed_of_comm_pct'])}** of that time no compute "
                 f"overlapped: {duration(c['exposed_us'])}, {percent(c['exposed_pct'])} {of}."]
        if c["top"]:
            lines.append(f"The largest: `{shorten(c['top'][0]['name'], 60)}` ({c['top'][0]['count']} calls, "
                         f"{duration(c['top'][0]['total_us'])}).")
        ranks = c.get("ranks")
        if ranks and ranks.get("matched"):
            lines.append(straggler_sentence(ranks))
        elif c.get("ranks_note"):
            lines.append(c["ranks_note"][0].upper() + c["ranks_note"][1:] + ".")
        return "\n".join(lines)

    def _next(self, verdict: dict) -> str:
        lines = [f"**{verdict['headline']}**", "", f"Next step: {verdict['next_step']}", *_saving(verdict)]
        lines += [f"- {note}" for note in verdict["other_losses"] + verdict["also"]]
        return "\n".join(lines)

    def _summary(self, overview: dict, verdict: dict) -> str:
        t = overview["trace"]
        lines = [f"A {t['format']} trace with {t['ranks']} rank(s) on {', '.join(t['devices']) or 'no GPU'}."]
        for r in overview["ranks"][:8]:
            lines += [f"- {line}" for line in device_lines(r)]
            lines.append(f"  rank {r['rank']}: limiter {r['limiter']} ({r['root_cause']})")
        if len(overview["ranks"]) > 8:
            lines.append(f"- and {len(overview['ranks']) - 8} more ranks (ask about one by number)")
        lines += ["", f"**Verdict:** {verdict['headline']}.", f"{verdict['hypothesis']}", "",
                  f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        return "\n".join(lines)

    def _steps(self, steps: dict) -> str:
        if not steps["count"]:
            return steps["note"].capitalize() + "."
        slow = steps.get("slowest_vs_median") or {}
        extra = ", ".join(f"{k.removeprefix('idle_').removesuffix('_us')} idle +{duration(v)}"
                          for k, v in slow.items() if k != "idle_us")
        return (f"{self._who(steps)}{steps['count']} steps: mean {duration(steps['mean_us'])}, "
                f"median {duration(steps['median_us'])}, "
                f"from {duration(steps['min_us'])} to {duration(steps['max_us'])} (slowest: step {steps['slowest']})."
                + (f" The slowest step spent more than the median on: {extra}." if extra else ""))

    def _compare(self, compare_traces: dict | None = None, verdict: dict | None = None) -> str:
        if compare_traces is None:
            return ("Only one trace is loaded. To compare before and after, run `traceagent chat BEFORE --compare "
                    "AFTER` or `traceagent diff BEFORE AFTER`.")
        d = compare_traces
        lines = [f"**{d['headline']}**", ""]
        lines += [f"- {m['name']}: {_value(m, 'before')} → {_value(m, 'after')}" for m in d["metrics"][:6]]
        lines += [f"\nNew problem: {p}" for p in d["new_problems"]] or ["\nNo new problems."]
        return "\n".join(lines)

    def _help(self) -> str:
        return ("I can answer these without a model: " + "; ".join(f"“{q}”" for q in CANNED_QUESTIONS)
                + ". Ask one of those, or configure a model for open questions.")


def _value(metric: dict, which: str) -> str:
    return duration(metric[f"{which}_us"]) if f"{which}_us" in metric else percent(metric[f"{which}_pct"])


def _saving(verdict: dict) -> list[str]:
    """The verdict's saving estimate as a paragraph, when it has one."""
    return ["", verdict["saving"]["sentence"]] if verdict.get("saving") else []
