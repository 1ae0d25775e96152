"""The written diagnosis as Markdown: verdict first, then the evidence. Rendered from the same
dict `analyze --json` prints, so the two never disagree."""

from __future__ import annotations

import re

from ..detect.analysis import Analysis, RankAnalysis
from ..detect.compare.diff import DiffResult
from ..detect.core.vocabulary import GAP_CAUSES, label
from ..detect.detectors.kernel_profiles import SOL_PCT, KernelProfilesResult, profile_sentence
from ..detect.detectors.kernels import short_name
from ..detect.detectors.launch import NO_LAUNCHES, latency_note
from ..detect.registry import DETECTORS
from ..detect.verdict.savings import by_expected
from ..format import counted, duration, of_span, percent, scope, shorten, size
from ..sentences import further_findings, gap_evidence, gpu_behind, slowest_step_sentence, straggler_sentence
from ..text import code, md_literal, md_prose, md_table, visible

TOP_GAPS = 8
TOP_KERNELS = 10


#: the fold around the full kernel names, as raw HTML in Markdown (render_markdown's `fold`)
FULL_NAMES_FOLD = ("<details><summary>Full kernel names</summary>", "</details>")


def model_markdown(text: str) -> str:
    """A model's Markdown made safe to embed: its emphasis and code stay, but it cannot open a
    link, an image or HTML, and a code fence it left open is closed so the report goes on."""
    text = re.sub(r"([<>\[\]!])", r"\\\1", visible(text, keep_lines=True))
    fences = re.findall(r"^ {0,3}(`{3,}|~{3,})", text, re.MULTILINE)  # only a line that starts with one opens or closes
    if len(fences) % 2:
        text += "\n" + fences[-1]
    return text


def render_markdown(analysis: Analysis, summary: str | None = None,
                    fold: tuple[str, str] = FULL_NAMES_FOLD) -> str:
    """The report; `summary` is an optional paragraph (written by the model, already checked).
    `fold`: the lines that open and close the full kernel names (the HTML report passes markers
    no trace or model can guess, and makes them a <details> element)."""
    v = analysis.verdict
    out = [f"# traceagent diagnosis: {code(analysis.path)}", "",
           f"{analysis.format} trace, {len(analysis.ranks)} rank(s), devices: "
           f"{md_literal(', '.join(analysis.devices)) or 'none'}."]
    for warning in analysis.warnings:
        out.append(f"\n> Warning: {md_literal(warning)}")
    for failed in analysis.failed:
        out.append(f"\n> Not analysed: {code(failed.file)}: {md_literal(failed.error)} (the other ranks were)")
    out += ["", "## Verdict", ""]
    if v.limiter:
        out.append(f"**{md_prose(v.headline)}**  ")
        out.append(f"Limiter: `{v.limiter}` · root cause: `{v.root_cause}`")
    else:
        out.append(f"**{md_prose(v.headline)}**")
    # verdict prose quotes trace strings (kernel names, frames): it shows literally but for our own code spans
    out += ["", f"**Hypothesis.** {md_prose(v.hypothesis)}", "", f"**Next step.** {md_prose(v.next_step)}"]
    if v.saving:
        out += ["", f"**What fixing it would save.** {md_prose(v.saving.sentence)}"]
    if v.other_losses:
        out += ["", f"**Also.** {md_prose(' '.join(v.other_losses))}"]
    if summary:
        out += ["", "## Summary", "", model_markdown(summary)]
    out += ["", "## What would sharpen this diagnosis", ""]
    missing = list(v.also)
    if len(analysis.ranks) == 1 and (analysis.world_size or 1) > 1:
        missing.append(f"This is one rank of {analysis.world_size}: load the directory of all ranks' traces to "
                       "compare ranks.")
    out += [f"- {md_prose(m)}" for m in missing] or ["- Nothing obvious: the trace has steps and Python frames."]
    if not v.limiter:
        return "\n".join(out) + "\n"

    out += ["", "## Where device time went", "",
            md_table(["rank", "GPU", "span", "busy", "idle", "compute", "communication", "exposed comm", "memcpy",
                      "memset", "verdict"],
                     [[str(r.rank), str(device), duration(b.span_us), duration(b.busy_us),
                       percent(b.idle_pct), duration(b.compute_us), duration(b.comm_us),
                       duration(b.exposed_comm_us), duration(b.memcpy_us), duration(b.memset_us),
                       f"{r.verdict.limiter}/{r.verdict.root_cause}"]
                      for r in analysis.ranks for device, b in r.breakdown.devices.items()])]
    out += ["", "Each row is one GPU over its own span. Classes of work are unions over all streams; two "
                "classes running at once both count."]
    out += savings_section(analysis.focus)
    # the verdict's rank first, then the others in rank order (the table above has them all)
    ranks = sorted(analysis.ranks, key=lambda r: (r.rank != analysis.focus.rank, r.rank or 0))
    for r in ranks[:8]:
        out += _rank_sections(r, len(ranks) > 1, fold)
    if len(ranks) > 8:
        out += ["", f"_{len(ranks) - 8} more ranks: see `traceagent analyze --json`._"]
    c = analysis.comparison
    if c and c.matched:
        out += ["", "## Ranks compared", "",
                f"{c.matched} collectives matched on every rank. Waiting is the part of a collective before the "
                "last rank entered it: the late rank's cost, not communication.", "",
                md_table(["rank", "in collectives", "waiting", "exposed waiting", "communication proper", "entered last",
                          "compute"],
                         [[str(x.rank), duration(x.comm_us), duration(x.waiting_us), duration(x.exposed_waiting_us),
                           duration(x.communication_us), str(x.last_count), duration(x.compute_us)] for x in c.ranks]),
                "", straggler_sentence(c)]
    if analysis.kernel_profiles:
        out += kernel_profiles_section(analysis.kernel_profiles)
    return "\n".join(out) + "\n"


def savings_section(rank: RankAnalysis, top: int = 6) -> list[str]:
    """What fixing each finding would buy on the verdict's rank, the most expected first: the what-if replay's
    prediction where the finding has a change to replay (`traceagent whatif`), and the upper bound beside it."""
    savings = by_expected(rank.findings.savings)[:top]
    if not savings:
        return []
    whole = "step" if any(s.step_pct is not None for s in savings) else "span"
    rows = [[md_literal(s.finding), code(s.change) if s.change and s.simulated_pct is not None else "-",
             percent(max(s.simulated_pct, 0.0)) if s.simulated_pct is not None else "-",
             percent(s.bound_pct) if s.gpus == 1 else s.bound] for s in savings]  # several GPUs: their device time
    return ["", f"## What each fix would buy (rank {rank.rank})", "",
            f"Predicted: the trace's dependency graph replayed with the change made (`traceagent whatif TRACE --change "
            f"SPEC` tries others); beside it, what the finding itself costs (a change can reach past it: launches from a CUDA "
            f"graph shorten every gap a launch causes). Shares of the mean {whole}.",
            "", md_table(["finding", "change", "predicted", "the finding costs"], rows)]


def kernel_profiles_section(result: KernelProfilesResult) -> list[str]:
    """Why the profiled kernels are slow: Nsight Compute's speed of light, occupancy and class per
    kernel, its time in the trace, the next step, and ncu's own rules with the largest estimated gain."""
    where = f" joined to rank {result.rank}'s kernels by name" if result.rank is not None else ""
    out = ["", "## Why the profiled kernels are slow (Nsight Compute)", "",
           f"From {code(result.path)}{where}. A kernel is memory- or compute-bound when that unit reaches "
           f"{SOL_PCT:g}% of its peak (speed of light); below that on both it is latency-bound.", "",
           md_table(["kernel", "bound", "compute", "memory", "occupancy (theoretical)", "limited by", "waves",
                     "profiled", "in the trace"],
                    [[code(shorten(short_name(k.name), 40)), k.bound, percent(k.compute_pct), percent(k.memory_pct),
                      f"{percent(k.achieved_occupancy_pct)} ({percent(k.theoretical_occupancy_pct)})",
                      ", ".join(k.occupancy_limiters) or "-", f"{k.waves:g}" if k.waves is not None else "-",
                      duration(k.duration_us),
                      f"{k.trace_count} × = {duration(k.trace_total_us)}" if k.trace_total_us is not None else "-"]
                     for k in result.kernels])]
    for k in result.kernels[:5]:
        out += ["", f"- {md_literal(profile_sentence(k))}"]
        out += [f"  - ncu {md_literal(r.name)}"
                + (f" (estimated speedup {percent(r.speedup_pct)})" if r.speedup_pct is not None else "")
                + f": {md_literal(shorten(r.description, 300))}" for r in k.rules[:2]]
    if result.unmatched and result.rank is not None:
        out += ["", f"_{len(result.unmatched)} profiled kernel(s) have no kernel of the same name in the trace._"]
    return out


def _rank_sections(r: RankAnalysis, several: bool, fold: tuple[str, str] = FULL_NAMES_FOLD) -> list[str]:
    who = f" (rank {r.rank})" if several else ""
    f = r.findings
    idle, copies, comm = f.idle, f.memcpy, f.comm
    devices = len(idle.devices)
    of = of_span(devices)
    if devices > 1:
        said = [f"{scope(r.rank, d)}: idle {duration(x.idle_us)} of its span {duration(x.span_us)} "
                f"({percent(x.idle_pct)})." for d, x in idle.devices.items()]
        said.append(f"Together: idle {duration(idle.idle_us)} of {duration(idle.device_time_us)} of device "
                    f"time ({percent(idle.idle_pct)}) in {counted(idle.gaps, 'gap')}.")
    else:
        said = [f"{scope(r.rank, next(iter(idle.devices), None))}: idle {duration(idle.idle_us)} of "
                f"{duration(idle.span_us)} ({percent(idle.idle_pct)}) in {counted(idle.gaps, 'gap')}."]
    out = ["", f"## Idle time{who}", "", " ".join(said), "",
           md_table(["cause", "idle", f"share {of}", "gaps"],
                    [[c, duration(us), percent(idle.by_cause_pct[c]), str(idle.by_cause_count[c])]
                     for c, us in sorted(idle.by_cause_us.items(), key=lambda kv: -kv[1])])]
    if idle.top_gaps:
        out += ["", "Largest gaps:", "",
                md_table(["at", "trace clock (µs)", "length", "cause", "evidence"],
                         [[duration(g.start_us), f"{g.ts_us:.3f}", duration(g.dur_us), g.cause,
                           gap_evidence(g, wrap=code)]
                          for g in idle.top_gaps[:TOP_GAPS]])]
    if idle.sync_sites:
        out += ["", "Synchronizations that stalled the device:", "",
                md_table(["call", "op", "Python line", "gaps after it", "idle in them"],
                         [[code(s.call), code(s.op) if s.op else "-", code(s.python) if s.python else "-",
                           str(s.count), duration(s.idle_us)]
                          for s in idle.sync_sites])]
    if idle.by_line:
        out += ["", "Lines of code the GPU idles over (the launching thread's line in each gap, a sync's where it "
                "waited; launch latency aside):", "",
                md_table(["Python line", "idle", "gaps", "mostly"],
                         [[code(r.python), duration(r.idle_us), str(r.gaps), label(GAP_CAUSES, r.cause)]
                          for r in idle.by_line])]
    out += ["", f"## Data movement{who}", ""]
    if copies.count:
        out += [f"Copies ran {percent(copies.share_pct)} {of}; {percent(copies.exposed_pct)} {of} "
                f"had copies and no compute. {copies.pageable_count} copies touched pageable memory "
                f"({size(copies.pageable_bytes)}).", "",
                md_table(["kind", "count", "bytes", "time", "GB/s", "pageable", "exposed"],
                         [[k, str(c.count), size(c.bytes), duration(c.us), f"{c.gbps:.1f}",
                           str(c.pageable_count), duration(c.exposed_us)] for k, c in copies.by_kind.items()])]
    else:
        out.append("No copies.")
    out += ["", f"## Communication{who}", ""]
    if comm.kernels:
        out += [f"{comm.kernels} collective kernels ran {duration(comm.comm_us)} ({percent(comm.share_pct)} "
                f"{of}); {percent(comm.exposed_of_comm_pct)} of that time no compute overlapped "
                f"({duration(comm.exposed_us)}, {percent(comm.exposed_pct)} {of})."]
        if comm.top:
            out += ["", md_table(["collective", "count", "total"],
                                 [[code(shorten(c["name"], 70)), str(c["count"]), duration(c["total_us"])]
                                  for c in comm.top])]
        if comm.kinds:  # each kind's own overlap: an all-to-all can sit exposed while the all-reduces hide
            out += ["", md_table(["kind", "kernels", "time", "exposed", "exposed share"],
                                 [[k.kind, str(k.kernels), duration(k.time_us), duration(k.exposed_us),
                                   percent(k.exposed_pct)] for k in comm.kinds])]
        out += sections_under(r, "Communication", who)
    else:
        out.append("No collective kernels.")
    kernels = f.kernels.top[:TOP_KERNELS]
    out += ["", f"## Hot kernels{who}", "",
            f"{f.kernels.kernels} kernels of {f.kernels.distinct} distinct names ran "
            f"{duration(f.kernels.total_us)}. The top {len(kernels)}:", "",
            md_table(["#", "kernel", "count", "total", "share of busy", "mean", "median", "max", "launched by"],
                     [[str(i), code(k.shown(80)), str(k.count), duration(k.total_us),
                       percent(k.share_of_busy_pct), duration(k.mean_us), duration(k.median_us),
                       duration(k.max_us), (code(shorten(k.op, 40)) + _op_source(k.op_from)) if k.op else "-"]
                      for i, k in enumerate(kernels, 1)])]
    # a detector with a section of its own says its sentence there, once
    own = {d.title for d in DETECTORS if d.section is not None and not d.report_under and r.results.get(d.name) is not None}
    for title, line in further_findings(r):
        if title not in own:
            out += ["", f"**{title}.** {md_prose(line)}"]
    out += sections_under(r, "", who)
    if kernels:
        out += ["", fold[0], ""]
        out += [f"{i}. {code(k.name)}" for i, k in enumerate(kernels, 1)]
        out += ["", fold[1]]
    launch, steps = f.launch, f.steps
    out += ["", f"## Launch and steps{who}", "",
            NO_LAUNCHES if not launch.kernels else
            f"Kernels start a median {duration(launch.median_latency_us)} after their launch call (queueing "
            f"included; p90 {duration(launch.p90_latency_us)}). {percent(launch.short_kernel_pct)} of kernels "
            f"ran shorter than their launch call (median kernel {duration(launch.median_kernel_us)}, median "
            f"launch {duration(launch.median_launch_us)})." + (f" {md_prose(note)}" if (note := latency_note(launch)) else "")]
    if steps and steps.count:
        out += ["", f"{steps.count} steps: mean {duration(steps.mean_us)}, median {duration(steps.median_us)}, "
                f"slowest {duration(steps.max_us)} (step {steps.slowest}).{gpu_behind(steps)}"]
        if slowest := slowest_step_sentence(steps):
            out.append(md_prose(slowest))
    else:
        out += ["", "No steps in this trace."]
    return out


def sections_under(r: RankAnalysis, heading: str, who: str) -> list[str]:
    """The report sections detectors put under a core section (`heading`: "Communication"), or, for
    "", the sections of their own, each under its title (detectors/base.py: `section`)."""
    out: list[str] = []
    for d in DETECTORS:
        result = r.results.get(d.name)
        if d.section is None or d.report_under != heading or result is None:
            continue
        lines = d.section(result, r.params.params_for(d))
        out += lines if heading else ["", f"## {md_literal(d.title)}{who}", *lines]
    return out


def _op_source(source: str | None) -> str:
    """How a replayed kernel's op was found: said, since a graph replay's launch names no op."""
    return {"capture": " (graph capture)", "kernel name": " (by kernel name)"}.get(source or "", "")


def _maybe(value: float | None) -> str:
    return duration(value) if value is not None else "-"


def render_diff_markdown(d: DiffResult) -> str:
    rc = d.root_cause
    out = ["# traceagent diff", "", f"Before: {code(d.before['path'])} ({d.before['limiter']}/{d.before['root_cause']})  ",
           f"After: {code(d.after['path'])} ({d.after['limiter']}/{d.after['root_cause']})", "",
           f"**{md_literal(d.headline)}**", ""]
    if rc["cause"]:
        status = "gone" if rc["gone"] else "still there"
        out.append(f"The before trace's root cause, {rc['what']}, is {status}: "
                   f"{percent(rc['before_pct'])} → {percent(rc['after_pct'])}.")
    if p := d.prediction:
        if p["measured_pct"] <= -d.noise_pct:
            outcome = (f"the after trace is {percent(-p['measured_pct'])} slower: the change did not help"
                       + (f"; {md_literal(d.grew)} grew most" if d.grew else ""))
        elif p["measured_pct"] < d.noise_pct:  # never "-0.7% faster", nor a gain of nothing "within the estimate"
            direction = "slower" if p["measured_pct"] < 0 else "faster"
            outcome = (f"the after trace is about as fast ({percent(abs(p['measured_pct']))} {direction}; runs differ by "
                       f"up to {percent(d.noise_pct)}): no gain to measure")
        else:
            held = ("within the estimate (it is an upper bound)" if p["within_estimate"]
                    else "more than estimated: something besides the root cause changed too")
            outcome = f"the after trace is {percent(p['measured_pct'])} faster, {held}"
        if p["simulated_pct"] is not None:  # the replay's prediction, and how far the measurement landed from it
            off = p["measured_pct"] - p["simulated_pct"]
            predicted = (f"{percent(max(p['simulated_pct'], 0.0))} (simulated with {md_prose(p['replayed_as'] or '')}; at most "
                         f"{percent(p['predicted_up_to_pct'])}), and the measurement is {abs(off):.1f} points "
                         f"{'above' if off > 0 else 'below'} the simulation")
        else:
            predicted = f"up to {percent(p['predicted_up_to_pct'])}"
        out += ["", f"The before trace's verdict predicted fixing it would save {predicted}; {outcome}."]
    elif d.slower_pct >= d.noise_pct:
        out += ["", f"The after trace is {percent(d.slower_pct)} slower: the change did not help"
                    + (f"; {md_literal(d.grew)} grew most." if d.grew else ".")]
    out += ["", md_table(["metric", "before", "after", "change"],
                         [[m.name, m.shown(m.before), m.shown(m.after), m.change_shown()] for m in d.metrics])]
    # what the tables below are over
    per = "per step" if d.time_basis == "step" else "for the before's work" if d.work else "in the trace"
    if d.kernels:
        out += ["", f"Hot kernels ({per}):", "",
                md_table(["kernel", "before", "after", "share of kernel time", "calls"],
                         [[code(shorten(k['label'], 80)), duration(k["before_us"]), duration(k["after_us"]),
                           f"{percent(k['before_share_pct'])} → {percent(k['after_share_pct'])}",
                           f"{k['before_count'] or 0} → {k['after_count'] or 0}"]
                          for k in d.kernels])]
    if d.classes:
        out += ["", f"GPU time by class of work ({per}, every GPU):", "",
                md_table(["class", "before", "after", "share of device time"],
                         [[c["label"], _maybe(c["before_us"]), _maybe(c["after_us"]),
                           f"{percent(c['before_share_pct'])} → {percent(c['after_share_pct'])}"] for c in d.classes])]
    if d.ranges:
        out += ["", f"Ranges (record_function / NVTX, {per}; the most grown first):", "",
                md_table(["range", "host before", "host after", "change", "GPU before", "GPU after"],
                         [[code(shorten(r["name"], 50)), _maybe(r["before_host_us"]), _maybe(r["after_host_us"]),
                           f"{r['change_pct']:+.1f}%" if r["change_pct"] is not None else "-",
                           _maybe(r["before_gpu_us"]), _maybe(r["after_gpu_us"])] for r in d.ranges])]
    out += ["", "New problems:" if d.new_problems else "No new problems."]
    out += [f"- {md_literal(p)}" for p in d.new_problems]
    out += [f"\n_{md_prose(n)}_" for n in d.notes]  # a note may quote a kernel's name
    return "\n".join(out) + "\n"
