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

from langchain_core.tools import BaseTool

from ..detect.vocabulary import BOUNDS, GAP_CAUSES, LIMITERS, ROOT_CAUSES, label
from ..format import device_lines, duration, memory_peak, of_span, percent, shorten, size, straggler_sentence
from .events import Answer, Token, ToolCall, ToolResult
from .numbers import unverified
from .question import Question, understand
from .tools import AnalysisContext, ToolInputError

NO_LLM = ("_Offline analyst: no LLM is configured, so this answer comes from templates over the detectors. "
          "Set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server such as vLLM, Ollama or llama.cpp) "
          "to talk it through with a model._")

CANNED_QUESTIONS = ["Why is my GPU idle?", "What should I optimize first?", "Is it compute-bound?",
                    "What are the hot kernels?", "Which kernel is slowest per call?", "How much time goes to memcpy?",
                    "Is communication overlapped?", "Which rank is the straggler?", "Where does the sync come from?",
                    "What is the longest gap?", "Which GPU is most idle?", "How long is a step?",
                    "How does the slowest step differ from the median?",
                    "Should I use CUDA graphs?", "What is the MFU?", "What should I profile next?",
                    "Did it help?", "Summarize this trace."]

Plan = Callable[[Question, dict], list[tuple[str, dict]]]


def _plans(has_compare: bool) -> dict[str, Plan]:
    """intent → the tool calls (name, arguments) that answer it, given the question and its scope
    arguments (rank, device)."""
    return {
        "idle": lambda q, at: [("verdict", at), ("idle_gaps", at | _min(q))],
        "optimize_first": lambda q, at: [("verdict", at)],
        "bound": lambda q, at: [("verdict", at), ("idle_gaps", at)],
        "slow_kernel": lambda q, at: [("hot_kernels", at | {"order_by": "mean", "top": 5}),
                                      ("hot_kernels", at | {"top": 3})],
        "kernel": lambda q, at: [("hot_kernels", at | {"name_filter": q.kernel, "top": 3}),
                                 ("kernel_instances", at | {"name": q.kernel, "top": 3})],
        "kernels": lambda q, at: [("hot_kernels", at)],
        "copies": lambda q, at: [("data_movement", at)],
        "memory": lambda q, at: [("memory", at)],
        "dataloader": lambda q, at: [("verdict", at), ("idle_gaps", at | {"cause": "dataloader", "top": 3})],
        "sync": lambda q, at: [("idle_gaps", at | {"cause": "sync", "top": 3})],
        "communication": lambda q, at: [("communication", at)],
        "straggler": lambda q, at: [("communication", at)],
        "step_vs_step": lambda q, at: [("steps", at)],
        "one_step": lambda q, at: [("steps", at), ("idle_gaps", at | {"step": q.steps[0], "top": 3})],
        "steps": lambda q, at: [("steps", at)],
        "launch": lambda q, at: [("launches", at), ("verdict", at)],
        "longest_gap": lambda q, at: [("idle_gaps", at | {"top": 1} | _min(q))],
        "gaps": lambda q, at: [("idle_gaps", at | {"top": 5} | _min(q))],
        "annotations": lambda q, at: [("annotations", at)],
        "mfu": lambda q, at: [("flops", at), ("overview", at), ("hot_kernels", at | {"top": 1})],
        "profile_next": lambda q, at: [("overview", {}), ("verdict", at), ("hot_kernels", at | {"top": 1})],
        "compare": (lambda q, at: [("compare_traces", {})]) if has_compare else (lambda q, at: []),
        "summary": lambda q, at: [("overview", {}), ("verdict", at)],
        "most_idle": lambda q, at: [("overview", {})],
    }


def _min(q: Question) -> dict:
    return {"min_us": q.min_us} if q.min_us else {}


class OfflineAnalyst:
    def __init__(self, ctx: AnalysisContext, tools: dict[str, BaseTool]) -> None:
        self.ctx = ctx
        self.tools = tools

    async def answer(self, question: str) -> AsyncIterator:
        q = understand(question, self.ctx)
        intent = q.intent if q.intent and not q.foreign else "unknown"
        plans = _plans("compare_traces" in self.tools)
        at = {k: v for k, v in (("rank", q.rank), ("device", q.device)) if v is not None}
        calls = plans[intent](q, at) if intent in plans else plans["summary"](q, {})
        results: dict[str, dict] = {}
        for i, (name, args) in enumerate(calls):
            yield ToolCall(f"offline-{i}", name, args)
            try:
                content = await asyncio.to_thread(self.tools[name].invoke, args)
            except ToolInputError as exc:  # a rank, GPU or step the trace does not have
                content = json.dumps({"error": str(exc)})
                yield ToolResult(f"offline-{i}", name, content, ok=False)
                text = f"I cannot answer that for this trace: {exc}."
                break
            self.ctx.sources.add_result(content)
            key = name if name not in results else f"{name}_{i}"
            results[key] = json.loads(content)
            yield ToolResult(f"offline-{i}", name, content, ok=True)
        else:
            text = getattr(self, f"_{intent}")(q, **results)
        text += "\n\n" + NO_LLM
        for piece in re.findall(r"\S+\s*", text):  # stream it like a model would
            yield Token(piece)
        yield Answer(text, unverified(text, self.ctx.sources) if results else [])

    # -- templates: each takes the question and the tool results it asked for -----------------

    def _who(self, result: dict) -> str:
        """'Rank 7: ' before a rank's figures when the job has several ranks (tools default to the
        verdict's rank, so the reader must be told which one this is), or a GPU that was asked."""
        scope = result.get("scope") or {}
        gpu = f", GPU {scope['device']}" if scope.get("device") not in (None, "all") else ""
        if (len(self.ctx.analysis.ranks) < 2 and not gpu) or "rank" not in scope:
            return ""
        return f"Rank {scope['rank']}{gpu}: "

    @staticmethod
    def _of(result: dict) -> str:
        """What the result's percentages are over: the span, or device time for several GPUs."""
        scope = result.get("scope") or {}
        several = scope.get("device") == "all" and len(scope.get("devices", [])) > 1
        return of_span(len(scope["devices"]) if several else 1)

    def _idle(self, q: Question, verdict: dict, idle_gaps: dict) -> str:
        idle = idle_gaps
        if not verdict["limiter"]:
            return verdict["headline"] + ". " + verdict["next_step"]
        # the verdict first: on a copy- or communication-bound trace the idle time is its symptom
        lines = [f"**{verdict['headline']}.** {verdict['hypothesis']}", ""]
        causes = sorted(idle["by_cause_us"].items(), key=lambda kv: -kv[1])
        of = self._of(idle)
        whole = idle.get("device_time_us", idle["span_us"])
        lines.append(f"{self._who(idle)}The GPU is idle **{percent(idle['idle_pct'])}** {of} "
                     f"({duration(idle['idle_us'])} of {duration(whole)}, in {idle['gaps']} gaps). By cause:")
        pcts = idle.get("by_cause_pct", {})
        lines += [f"- {label(GAP_CAUSES, c)}: {duration(us)}" + (f" ({percent(pcts[c])} {of}" if c in pcts else " (")
                  + f"{', ' if c in pcts else ''}{idle['by_cause_count'][c]} gaps)" for c, us in causes[:5] if us > 0]
        lines += self._largest_gap(idle) + self._sync_line(idle)
        lines += ["", f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        return "\n".join(lines)

    def _largest_gap(self, idle: dict) -> list[str]:
        top = idle.get("top_gaps") or []
        if not top:
            return []
        g = top[0]
        what = ", ".join(f"`{shorten(h['name'], 60)}`" for h in g.get("host", [])[:2])
        return [f"\nThe largest gap lasts {duration(g['dur_us'])} at {duration(g['start_us'])} on GPU {g['device']} "
                f"({label(GAP_CAUSES, g['cause'])})" + (f"; meanwhile the host was in {what}" if what else "")
                + (f", from `{g['python']}`" if g.get("python") else "") + "."]

    @staticmethod
    def _sync_line(idle: dict) -> list[str]:
        if not idle["sync_sites"]:
            return []
        s = idle["sync_sites"][0]
        return [f"Synchronizations: `{s['call']}`" + (f" under `{s['op']}`" if s["op"] else "")
                + (f" at `{s['python']}`" if s["python"] else "") + f", {s['count']} times, "
                f"{duration(s['idle_us'])} of idle after them."]

    def _optimize_first(self, q: Question, verdict: dict) -> str:
        savings = verdict.get("savings") or []
        if not savings:
            return f"**{verdict['headline']}.** {verdict['next_step']}"
        first = savings[0]
        lines = [f"Start with **{first['finding']}**: {first['sentence']}", "", f"Why: {verdict['hypothesis']}",
                 "", f"**Next step:** {verdict['next_step']}"]
        if len(savings) > 1:
            lines += ["", "Then, by what fixing each would save at most:"]
            lines += [f"{i}. {s['sentence']}" for i, s in enumerate(savings[1:5], 2)]
        return "\n".join(lines)

    def _bound(self, q: Question, verdict: dict, idle_gaps: dict) -> str:
        limiter, root = verdict["limiter"], verdict["root_cause"]
        if not limiter:
            return verdict["headline"] + "."
        asked = q.limit
        bound = BOUNDS.get(asked or "")
        yes = None if bound is None else bool({limiter, root} & bound.means)
        what = (f"{label(LIMITERS, limiter)}" + (f" ({label(ROOT_CAUSES, root)})" if root else ""))
        if bound is None or yes is None:
            head = f"It is limited by **{what}**."
        elif yes:
            head = f"**Yes.** It is limited by {what}."
        else:
            head = f"**No.** It is limited by {what}, not by {bound.label}."
        lines = [head, "", f"{self._who(verdict)}{verdict['headline']}. {verdict['hypothesis']}"]
        if asked == "copies":
            lines.append("Whether kernels are bound by GPU memory bandwidth is not in a timeline trace: profile the "
                         "hot kernel with Nsight Compute (`ncu --set full`) to see its DRAM throughput.")
        lines += ["", f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        return "\n".join(lines)

    def _slow_kernel(self, q: Question, hot_kernels: dict, hot_kernels_1: dict) -> str:
        per_call, total = hot_kernels["top"], hot_kernels_1["top"]
        if not per_call:
            return "There are no kernels in this scope."
        k, t = per_call[0], total[0]
        lines = [f"{self._who(hot_kernels)}Per call, the slowest kernel is **`{shorten(k['short_name'], 60)}`**: "
                 f"mean {duration(k['mean_us'])}, longest {duration(k['max_us'])}, {k['count']} calls.",
                 f"By total time it is `{shorten(t['short_name'], 60)}`: {duration(t['total_us'])} over "
                 f"{t['count']} calls, {percent(t['share_of_busy_pct'])} of busy time.", "", "Slowest per call:"]
        lines += [f"{i}. `{shorten(r['short_name'], 50)}`: mean {duration(r['mean_us'])}, {r['count']} calls"
                  for i, r in enumerate(per_call[:5], 1)]
        lines += ["", _ncu(t["short_name"])]
        return "\n".join(lines)

    def _kernel(self, q: Question, hot_kernels: dict, kernel_instances: dict) -> str:
        if not hot_kernels["top"]:
            return f"No kernel in this scope matches `{q.kernel}`."
        k = hot_kernels["top"][0]
        lines = [f"{self._who(hot_kernels)}**`{shorten(k['short_name'], 60)}`** ran {k['count']} times for "
                 f"{duration(k['total_us'])}, {percent(k['share_of_busy_pct'])} of busy time (mean "
                 f"{duration(k['mean_us'])}, median {duration(k['median_us'])}, longest {duration(k['max_us'])})"
                 + (f", launched by `{shorten(k['op'], 50)}`" if k["op"] else "")
                 + (f" from `{k['python']}`" if k.get("python") else "") + "."]
        inst = kernel_instances["instances"][:3]
        if inst:
            lines.append("Its longest instances: " + "; ".join(
                f"{duration(i['dur_us'])} at {duration(i['start_us'])} (GPU {i['device']}, stream {i['stream']})"
                for i in inst) + ".")
        lines += ["", f"If it ran twice as fast it would save at most {duration(k['saving_2x_us'])}.",
                  _ncu(k["short_name"])]
        return "\n".join(lines)

    def _kernels(self, q: Question, hot_kernels: dict) -> str:
        top = hot_kernels["top"][:5]
        if not top:
            return "There are no kernels in this trace."
        lines = [f"{self._who(hot_kernels)}{hot_kernels['kernels']} kernels ({hot_kernels['distinct']} distinct names) ran "
                 f"{duration(hot_kernels['total_us'])}. The hottest:"]
        lines += [f"{i}. `{shorten(k['short_name'], 50)}`: {duration(k['total_us'])}, {percent(k['share_of_busy_pct'])} of "
                  f"busy time, {k['count']} launches, mean {duration(k['mean_us'])}"
                  + (f", from `{shorten(k['op'], 40)}`" if k["op"] else "") for i, k in enumerate(top, 1)]
        lines += ["", _ncu(top[0]["short_name"])]
        return "\n".join(lines)

    def _copies(self, q: Question, data_movement: dict) -> str:
        m = data_movement
        if not m["count"]:
            return "There are no memory copies in this scope: data movement is not what limits it."
        of = self._of(m)
        kinds = sorted(m["by_kind"].items(), key=lambda kv: -kv[1]["us"])
        main_kind = kinds[0][0]
        lines = [f"{self._who(m)}Copies ran **{percent(m['share_pct'])}** {of}, mostly {main_kind}; "
                 f"{percent(m['exposed_pct'])} {of} had copies and no compute beside them ({duration(m['exposed_us'])}). "
                 "By kind:"]
        lines += [f"- {kind}: {c['count']} copies, {size(c['bytes'])}, {duration(c['us'])}, {c['gbps']:.1f} GB/s, "
                  + (f"{c['pageable_count']} from pageable memory" if c["pageable_count"] else "pinned or device memory")
                  for kind, c in kinds]
        if m["pageable_count"]:
            lines.append(f"\n{m['pageable_count']} copies touch pageable memory ({size(m['pageable_bytes'])}): they "
                         "are staged through a pinned buffer and block the host. Pin the memory "
                         "(`DataLoader(pin_memory=True)` or `tensor.pin_memory()`) and copy with `non_blocking=True`.")
        return "\n".join(lines)

    def _memory(self, q: Question, memory: dict) -> str:
        if memory.get("unavailable"):
            return _unavailable(memory)
        devices = memory["devices"]
        leaks = [d for d in devices if d["leak"]]
        stall = memory["allocator_idle_us"]
        if leaks:
            lead = "**Yes: memory grows in every step** on GPU " + ", ".join(str(d["device"]) for d in leaks) + " (a leak)."
        elif stall:
            lead = (f"**Allocator calls stall the GPU:** {memory['allocator_calls']} synchronizing allocator calls, "
                    f"{duration(stall)} of idle device time during them.")
        else:
            lead = "**No sign of a memory problem:** no growth across steps and no synchronizing allocator calls."
        lines = [lead, ""]
        for d in devices:
            peak = memory_peak(d) + (" (the trace has no allocator totals)" if d["peak_allocated_bytes"] is None else "")
            lines.append(f"- {self._who(memory)}GPU {d['device']}: {peak}; {d['allocations']} allocations"
                         + (f", {d['allocations_per_step']:g} per step" if d["allocations_per_step"] is not None else ""))
        if memory["allocator_calls"]:
            lines.append(f"\n{memory['allocator_calls']} allocator calls that synchronize "
                         f"({duration(memory['allocator_call_us'])} on the host): reuse buffers, or let the caching "
                         "allocator keep memory "
                         "(avoid `torch.cuda.empty_cache()` in the loop).")
        if leaks:
            lines.append("\nFind what keeps references: tensors appended to a list across steps (losses kept with their "
                         "graph: use `loss.item()` or `.detach()`), caches that grow. `torch.cuda.memory._record_memory_"
                         "history()` shows who allocated each block.")
        return "\n".join(lines)

    def _dataloader(self, q: Question, verdict: dict, idle_gaps: dict) -> str:
        idle = idle_gaps
        waited = idle["by_cause_us"].get("dataloader", 0.0)
        if not waited:
            return (f"{self._who(idle)}{'**No:** ' if _yes_no(q) else ''}the GPU never waits for data loading in this trace. "
                    f"{verdict['headline']}.")
        pct = idle.get("by_cause_pct", {}).get("dataloader")
        lines = [f"{self._who(idle)}{'**Yes:** ' if _yes_no(q) else ''}the GPU waits for data loading {duration(waited)}"
                 + (f" ({percent(pct)} {self._of(idle)})" if pct is not None else "")
                 + f", in {idle['by_cause_count']['dataloader']} gaps."]
        lines += self._largest_gap(idle)
        if verdict["root_cause"] == "dataloader":
            lines += ["", verdict["hypothesis"], "", f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        else:
            lines += ["", f"It is not the main limit, though: {verdict['headline']}."]
        return "\n".join(lines)

    def _sync(self, q: Question, idle_gaps: dict) -> str:
        idle = idle_gaps
        sites = idle["sync_sites"]
        if not sites:
            return (f"{self._who(idle)}No host synchronization leaves the GPU idle in this trace"
                    + (f" (idle after syncs: {duration(idle['by_cause_us']['sync'])})."
                       if idle["by_cause_us"].get("sync") else "."))
        s = sites[0]
        where = f"`{s['python']}`" if s["python"] else None
        lines = [f"{self._who(idle)}" + (f"**{where}**: " if where else "")
                 + f"`{s['call']}`" + (f" under `{s['op']}`" if s["op"] else "")
                 + f" blocks the host {s['count']} times, leaving the GPU idle {duration(s['idle_us'])} after them."]
        if not where:
            lines.append("The trace has no Python frames, so the line is unknown: profile with "
                         "`torch.profiler.profile(with_stack=True)` to get it.")
        lines += [f"- `{o['call']}`" + (f" under `{o['op']}`" if o["op"] else "") + (f" at `{o['python']}`" if o["python"]
                  else "") + f": {o['count']} times, {duration(o['idle_us'])}" for o in sites[1:4]]
        lines += ["", "Common causes: `.item()`, `.cpu()`, `print(tensor)` or a `torch.cuda.synchronize()` in the loop. "
                      "Keep values on the GPU, or read them every N steps."]
        return "\n".join(lines)

    def _communication(self, q: Question, communication: dict) -> str:
        c = communication
        if not c["kernels"]:
            return ("There are no collective (NCCL/RCCL) kernels in this scope, so communication is not a factor."
                    + (f" {_unavailable(c)}" if c.get("unavailable") else ""))
        of = self._of(c)
        lines = [f"{self._who(c)}{c['kernels']} collective kernels ran {duration(c['comm_us'])} "
                 f"({percent(c['share_pct'])} {of}). **{percent(c['exposed_of_comm_pct'])}** of that time no compute "
                 f"overlapped: {duration(c['exposed_us'])}, {percent(c['exposed_pct'])} {of}."]
        if c["top"]:
            lines.append(f"The largest: `{shorten(c['top'][0]['short_name'], 60)}` ({c['top'][0]['count']} calls, "
                         f"{duration(c['top'][0]['total_us'])}).")
        ranks = c.get("ranks")
        if ranks and ranks.get("matched"):
            lines.append(straggler_sentence(ranks))
        elif c.get("unavailable"):
            lines.append(_unavailable(c))
        return "\n".join(lines)

    def _straggler(self, q: Question, communication: dict) -> str:
        ranks = communication.get("ranks")
        if not ranks or not ranks.get("matched"):
            if communication.get("unavailable"):
                return _unavailable(communication, "which rank is the straggler")
            return "The trace cannot say which rank is the straggler: no collective was matched across the ranks."
        rank = ranks.get("straggler")
        rows = sorted(ranks["ranks"], key=lambda r: -r["exposed_waiting_us"])
        asked = next((r for r in rows if r["rank"] == q.rank), None)
        if asked is not None:  # "what is rank 3 waiting for?": that rank first
            late = f"for rank {rank}, the straggler" if rank is not None and rank != q.rank else "for the last rank to enter"
            lead = (f"**Rank {q.rank} waits {duration(asked['exposed_waiting_us'])} {late}** "
                    f"({percent(asked['exposed_waiting_pct'])} of its device time, with no compute beside it); it entered "
                    f"{asked['last_count']} of the collectives last itself.")
        elif rank is None:
            lead = "**No rank is a straggler**: no rank enters most collectives last."
        else:
            lead = f"**Rank {rank}** is the straggler."
        lines = [lead, straggler_sentence(ranks), "", "Waiting for the last rank, by rank (exposed: no compute beside it):"]
        lines += [f"- rank {r['rank']}: {duration(r['exposed_waiting_us'])} exposed waiting, "
                  f"{percent(r['exposed_waiting_pct'])} of its device time; entered {r['last_count']} collectives last"
                  for r in rows[:8]]
        return "\n".join(lines)

    def _steps(self, q: Question, steps: dict) -> str:
        if not steps["count"]:
            return f"{_unavailable(steps)}"
        slow = steps.get("slowest_vs_median") or {}
        extra = ", ".join(f"{label(GAP_CAUSES, k.removeprefix('idle_').removesuffix('_us'))} idle +{duration(v)}"
                          for k, v in slow.items() if k != "idle_us")
        return (f"{self._who(steps)}{steps['count']} steps: mean **{duration(steps['mean_us'])}**, "
                f"median {duration(steps['median_us'])}, "
                f"from {duration(steps['min_us'])} to {duration(steps['max_us'])} (slowest: step {steps['slowest']})."
                + (f" The slowest step spent more than the median on: {extra}." if extra else ""))

    def _step_row(self, steps: dict, number: int) -> dict:
        row = next((r for r in steps["steps"] if r["step"] == number), None)
        if row is None:
            raise LookupError(f"there is no step {number} in this trace; its steps are "
                              f"{', '.join(str(r['step']) for r in steps['steps'])}")
        return row

    def _step_line(self, row: dict) -> str:
        causes = sorted(((k.removeprefix("idle_").removesuffix("_us"), v) for k, v in row.items()
                         if k.startswith("idle_") and k != "idle_us" and v), key=lambda kv: -kv[1])
        return (f"step {row['step']}: {duration(row['host_us'])} on the host ({row['vs_median_pct']:+.2f}% against the "
                f"median step), {duration(row['device_us'])} of device work, idle {duration(row['idle_us'])}"
                + (" (" + ", ".join(f"{label(GAP_CAUSES, c)} {duration(v)}" for c, v in causes[:3]) + ")" if causes else ""))

    def _step_vs_step(self, q: Question, steps: dict) -> str:
        if not steps["count"]:
            return _unavailable(steps)
        try:
            rows = [self._step_row(steps, n) for n in q.steps[:2]]
        except LookupError as exc:
            return f"I cannot compare those: {exc}."
        slower = max(rows, key=lambda r: r["host_us"])
        return "\n".join([f"{self._who(steps)}**Step {slower['step']} is slower.**", "",
                          *[f"- {self._step_line(r)}" for r in rows]])

    def _one_step(self, q: Question, steps: dict, idle_gaps: dict) -> str:
        try:
            row = self._step_row(steps, q.steps[0])
        except LookupError as exc:
            return f"I cannot answer that: {exc}."
        lines = [f"{self._who(steps)}{self._step_line(row)}."]
        if row["step"] == steps["slowest"]:
            lines.append("It is the slowest step.")
        lines += self._largest_gap(idle_gaps)
        return "\n".join(lines)

    def _launch(self, q: Question, launches: dict, verdict: dict) -> str:
        la = launches
        if not la["kernels"]:
            return "No kernel in this trace is linked to its launch call, so launch overhead cannot be measured."
        bound = verdict["root_cause"] == "launch_overhead"
        share = la.get("launch_overhead_idle_pct")
        graphs = la.get("graphs") or {}
        if re.search(r"cuda ?graph", q.text, re.I):
            if graphs.get("used"):
                head = (f"**It already uses them:** {graphs['launches']} graph replays run {graphs['kernels']} kernels "
                        f"({percent(graphs['share_of_kernel_time_pct'])} of kernel time), saving "
                        f"{graphs['launch_calls_saved']} launch calls." + (" More of the step could be captured: launch "
                                                                           "overhead still limits it." if bound else ""))
            else:
                head = ("**Yes:** the host cannot launch kernels fast enough, and a CUDA graph launches a whole step "
                        "at once." if bound else "**Not for speed here:** launch overhead is not what limits this trace.")
        else:
            head = ("**Yes, launch overhead limits it.**" if bound
                    else "**Launch overhead is not the main limit.**")
        lines = [head, "",
                 f"{self._who(la)}{la['kernels']} kernels: the launch call takes {duration(la['median_launch_us'])} "
                 f"(median), a kernel runs {duration(la['median_kernel_us'])} (median), and "
                 f"{percent(la['short_kernel_pct'])} of kernels are shorter than their own launch call. Launch-to-start "
                 f"latency: median {duration(la['median_latency_us'])}, p90 {duration(la['p90_latency_us'])}.",
                 f"Launch-bound gaps leave the GPU idle {duration(la['launch_overhead_idle_us'])}"
                 + (f" ({percent(share)} of the span)." if share is not None else "."),
                 "", f"{verdict['headline']}.", f"**Next step:** {verdict['next_step']}"]
        return "\n".join(lines)

    def _longest_gap(self, q: Question, idle_gaps: dict) -> str:
        top = idle_gaps.get("top_gaps") or []
        if not top:
            return "There is no idle gap in this scope."
        g = top[0]
        lines = [f"{self._who(idle_gaps)}The longest gap lasts **{duration(g['dur_us'])}**, at {duration(g['start_us'])} "
                 f"on GPU {g['device']}: {label(GAP_CAUSES, g['cause'])}."]
        hosts = g.get("host") or []
        if hosts:
            lines.append("Meanwhile the launching thread was in " + ", ".join(
                f"`{shorten(h['name'], 60)}` ({duration(h['overlap_us'])})" for h in hosts[:3]) + ".")
        if g.get("python"):
            lines.append(f"Python: `{g['python']}`.")
        return "\n".join(lines)

    def _gaps(self, q: Question, idle_gaps: dict) -> str:
        idle = idle_gaps
        which = f" of at least {duration(q.min_us)}" if q.min_us else ""
        if not idle["top_gaps"]:
            return f"{self._who(idle)}There are no idle gaps{which} in this scope."
        lines = [f"{self._who(idle)}{idle['matching_gaps']} gaps{which}, {duration(idle['matching_idle_us'])} of idle "
                 "time in all. The largest:"]
        for i, g in enumerate(idle["top_gaps"], 1):
            host = ", ".join(f"`{shorten(h['name'], 50)}`" for h in (g.get("host") or [])[:2])
            lines.append(f"{i}. {duration(g['dur_us'])} at {duration(g['start_us'])} on GPU {g['device']}: "
                         f"{label(GAP_CAUSES, g['cause'])}" + (f"; the host was in {host}" if host else ""))
        return "\n".join(lines)

    def _annotations(self, q: Question, annotations: dict) -> str:
        waiting = [r for r in annotations.get("idle_ranges", []) if not r["gpu_us"]][:5]
        if not annotations.get("ranges") and not waiting:
            return _unavailable(annotations)
        lines = []
        if annotations.get("ranges"):
            lines += [f"{self._who(annotations)}GPU time launched inside each annotated range (a nested range counts "
                      "in its parent too):"]
            lines += [f"{i}. `{shorten(r['name'], 60)}`: {duration(r['gpu_us'])} of GPU time "
                      f"({percent(r['share_of_busy_pct'])} of busy) from {r['kernels']} kernels, {_times(r['count'])}, "
                      f"{duration(r['host_us'])} on the host, the GPU idle {percent(r['idle_pct'])} of it"
                      for i, r in enumerate(annotations["ranges"][:8], 1)]
        if waiting:  # ranges that launch nothing while the GPU waits: post-processing, logging, checkpoints
            lines += ["", f"{self._who(annotations) if not lines else ''}Ranges that launched no GPU work while the "
                      "GPU sat idle:"]
            lines += [f"- `{shorten(r['name'], 60)}`: {duration(r['idle_us'])} of idle GPU time "
                      f"({percent(r['share_of_idle_pct'])} of the idle time), {_times(r['count'])}" for r in waiting]
        return "\n".join(lines).strip()

    def _mfu(self, q: Question, flops: dict, overview: dict, hot_kernels: dict) -> str:
        if flops.get("mfu_pct") is not None:
            partial = flops["counted_ops"] < flops["shaped_ops"]
            lines = [f"{self._who(flops)}**MFU {percent(flops['mfu_pct'])}**"
                     + (" (a lower bound: not every shaped op could be counted)" if partial else "")
                     + f" over the span: the {flops['dtype']} FLOPs "
                     f"of the counted ops against the {flops['peak_family']} {flops['dtype']} peak of "
                     f"{flops['peak_tflops']:g} TFLOP/s per GPU ({flops['peak_source']}).",
                     f"Inside their own kernels those ops reach {flops['achieved_tflops']:g} TFLOP/s "
                     f"({flops['counted_ops']} of {flops['shaped_ops']} shaped ops counted). By op:"]
            lines += [f"- `{o['name']}` ({o['dtype']}, {_times(o['count'])}): {o['achieved_tflops']:g} TFLOP/s"
                      + (f", {percent(o['mfu_pct'])} of peak" if o["mfu_pct"] is not None else "")
                      for o in flops["by_op"][:5] if o["achieved_tflops"] is not None]
            kernels = [k for k in flops.get("by_kernel", []) if k["achieved_tflops"] is not None][:3]
            if kernels:
                lines.append("By kernel: " + "; ".join(
                    f"`{shorten(k['short_name'], 50)}` {k['achieved_tflops']:g} TFLOP/s"
                    + (f" ({percent(k['mfu_pct'])} of peak)" if k["mfu_pct"] is not None else "") for k in kernels) + ".")
            if flops.get("note"):
                lines.append(f"\nNot counted: {flops['note']}.")
            return "\n".join(lines)
        r = overview["ranks"][0]
        top = hot_kernels["top"][0] if hot_kernels["top"] else None
        why = flops.get("note") or "the trace records no shapes"
        lines = [f"**The trace cannot say:** {why}. A timeline records when kernels ran, not how many "
                 "floating-point operations they did.", "",
                 f"What it does say: the GPU is busy {percent(r['breakdown']['busy_pct'])} of the time"
                 + (f", and the top kernel, `{shorten(top['short_name'], 50)}`, takes "
                    f"{percent(top['share_of_busy_pct'])} of busy time." if top else "."), "",
                 "To measure it: profile with `torch.profiler.profile(record_shapes=True)` (PyTorch ≥ 2.1 for "
                 "convolutions), or run the hot kernel under Nsight Compute "
                 "(`ncu --metrics sm__throughput.avg.pct_of_peak_sustained_elapsed`)."]
        return "\n".join(lines)

    def _profile_next(self, q: Question, overview: dict, verdict: dict, hot_kernels: dict) -> str:
        lines = [f"**{verdict['headline']}.**", ""]
        missing = [u for u in overview.get("unavailable", []) if u["what"] not in ("GPU memory use",)]
        top = hot_kernels["top"][0]["short_name"] if hot_kernels["top"] else None
        if verdict["limiter"] == "compute" and top:
            lines.append(f"1. The hot kernel, with Nsight Compute: `ncu --kernel-name regex:{top} --launch-count 5 "
                         f"--set full -o {top[:24]} python train.py`.")
        else:
            lines.append("1. The whole timeline with Nsight Systems, to see the host and the GPU together: `nsys profile "
                         "--trace=cuda,nvtx,osrt --python-backtrace=cuda -o timeline python train.py`.")
            if top:
                lines.append(f"2. The hot kernel, with Nsight Compute: `ncu --kernel-name regex:{top} --launch-count 5 "
                             "--set full -o hot python train.py`.")
        if missing:
            lines += ["", "What this trace lacks, and how to record it:"]
            lines += [f"- {u['what']}: {u['why']}; {u['how_to_get_it']}." for u in missing[:4]]
        lines += ["", f"The fix to try first: {verdict['next_step']}"]
        return "\n".join(lines)

    def _compare(self, q: Question, compare_traces: dict | None = None) -> str:
        if compare_traces is None:
            return ("Only one trace is loaded. To compare before and after, run `traceagent chat BEFORE --compare "
                    "AFTER` or `traceagent diff BEFORE AFTER`.")
        d = compare_traces
        faster = d["slower_pct"] < 0
        if _yes_no(q):  # "did it help?", "is it faster?": the answer first
            lead = "Yes" if faster else "No"
            lines = [f"**{lead}:** {d['headline']}.", ""]
        else:
            lines = [f"**{d['headline']}.**", ""]
        lines += [f"- {m['name']}: {_value(m, 'before')} → {_value(m, 'after')}" for m in d["metrics"][:6]]
        if d.get("prediction"):
            lines.append(f"\nThe before verdict {d['prediction']['sentence']}.")
        lines += [f"\nNew problem: {p}" for p in d["new_problems"]] or ["\nNo new problems."]
        return "\n".join(lines)

    def _most_idle(self, q: Question, overview: dict) -> str:
        gpus = [(r["rank"], int(d), b) for r in overview["ranks"] for d, b in r["breakdown"]["devices"].items()]
        least = bool(re.search(r"\bleast idle|\bmost (?:busy|utili)", q.text, re.I))
        gpus.sort(key=lambda g: g[2]["idle_pct"], reverse=not least)
        rank, device, b = gpus[0]
        lines = [f"**Rank {rank}, GPU {device}**: idle {percent(b['idle_pct'])} of its span "
                 f"({duration(b['idle_us'])} of {duration(b['span_us'])}).", "", "Every GPU, "
                 + ("least" if least else "most") + " idle first:"]
        lines += [f"- rank {r}, GPU {d}: idle {percent(x['idle_pct'])}, busy {percent(x['busy_pct'])}" for r, d, x in gpus[:16]]
        return "\n".join(lines)

    def _summary(self, q: Question, overview: dict, verdict: dict) -> str:
        t = overview["trace"]
        lines = [f"A {t['format']} trace with {t['ranks']} rank(s) on {', '.join(t['devices']) or 'no GPU'}."]
        for r in overview["ranks"][:8]:
            lines += [f"- {line}" for line in device_lines(r)]
            lines.append(f"  rank {r['rank']}: limiter {r['limiter']} ({r['root_cause']})")
        if len(overview["ranks"]) > 8:
            lines.append(f"- and {len(overview['ranks']) - 8} more ranks (ask about one by number)")
        lines += ["", f"**Verdict:** {verdict['headline']}.", f"{verdict['hypothesis']}", "",
                  f"**Next step:** {verdict['next_step']}", *_saving(verdict)]
        if self.ctx.other is not None:
            lines += ["", "A second trace is loaded: ask “did it help?” to compare."]
        return "\n".join(lines)

    def _unknown(self, q: Question, overview: dict, verdict: dict) -> str:
        if q.foreign:
            lead = ("Without a model I read questions in English only; open questions need a configured model "
                    "(OPENAI_API_KEY, or OPENAI_BASE_URL for a local server). Here is the trace in short:")
        else:
            lead = "I did not recognize that question, so here is the trace in short:"
        return "\n".join([lead, "", self._summary(q, overview, verdict), "",
                          "Without a model I can answer: " + "; ".join(f"“{c}”" for c in CANNED_QUESTIONS) + "."])


def _yes_no(q: Question) -> bool:
    """Whether the question asks for a yes or a no ("did it help?", "is it faster?")."""
    return bool(re.match(r"\s*(?:did|does|do|is|are|was|were|has|have|can|could|should|will|would|am)\b", q.text, re.I))


def _ncu(kernel: str) -> str:
    return (f"To see why `{shorten(kernel, 50)}` takes that long: `ncu --kernel-name regex:{kernel} --launch-count 5 "
            "--set full -o hot python train.py`.")


def _unavailable(result: dict, what: str | None = None) -> str:
    """'This trace cannot say which rank…: why. To get it: how.' from a tool's `unavailable`."""
    u = result.get("unavailable") or {}
    return (f"This trace cannot say {what or u.get('what', 'that')}: {u.get('why', 'it lacks the data')}. "
            f"To get it: {u.get('how_to_get_it', '')}.")


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def _value(metric: dict, which: str) -> str:
    return duration(metric[f"{which}_us"]) if f"{which}_us" in metric else percent(metric[f"{which}_pct"])


def _saving(verdict: dict) -> list[str]:
    """The verdict's saving estimate as a paragraph, when it has one."""
    return ["", verdict["saving"]["sentence"]] if verdict.get("saving") else []
