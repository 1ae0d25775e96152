#!/usr/bin/env python3
"""The number check's measured corpus: answers written against real tool results, labelled.

    python tools/number_corpus.py            # score the corpus: false positives and negatives
    python tools/number_corpus.py --build    # rebuild tests/data/number_corpus.json from the traces

Each answer is labelled:
- correct: every number is a tool value (converted, rounded, hedged or bounded as people write);
- invented: one number no tool returned (a perturbed value, a µs value called ms, a count called
  a time, a number taken from a kernel name, a rank or step the trace does not have);
- identifier: numbers that are not claims (GPU and model names, versions, flags, shapes, dates,
  file:line, list markers, ranks and steps the trace has, kernel names);
- derived: a number computed with the `calc` tool from tool values.

A false positive is a correct, identifier or derived answer with any number flagged; a false
negative is an invented answer whose invented number is not flagged. Invented values are checked
against every number in every result under every unit conversion (stricter than the check
itself), so an "invented" number is never one a tool could have meant.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traceagent.agent.numbers import Sources, unverified  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "number_corpus.json"
DATA = ROOT / "tests" / "data"
TRACES = {  # name → path under tests/data (licences in tests/data/SOURCES.md)
    "resnet50_nw0": "kineto/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz",
    "nsys_2gpu": "nsys-ai/mfu_2gpu_before.sqlite",
    "dlrm_8rank": "dlrm_8rank",
    "b200_vllm": "tracelens/b200_eager_trace.json.gz",
}
CALLS = [("overview", {}), ("verdict", {}), ("idle_gaps", {"top": 5}), ("data_movement", {}),
         ("hot_kernels", {"top": 8, "full_names": True}), ("launches", {}), ("steps", {}), ("communication", {})]


# -- scoring ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Score:
    answers: int
    false_positives: int
    clean: int  # answers that should have no flag
    false_negatives: int
    invented: int
    misses: list[tuple[str, str, list[str]]]  # (label, text, flagged) of each wrong judgement

    @property
    def fp_rate(self) -> float:
        return 100.0 * self.false_positives / max(self.clean, 1)

    @property
    def fn_rate(self) -> float:
        return 100.0 * self.false_negatives / max(self.invented, 1)

    def line(self) -> str:
        return (f"{self.answers} answers: false positives {self.false_positives}/{self.clean} ({self.fp_rate:.1f}%), "
                f"false negatives {self.false_negatives}/{self.invented} ({self.fn_rate:.1f}%)")


def sources_of(trace: dict) -> Sources:
    """What a session would check against: the system prompt's figures and the tool results."""
    sources = Sources()
    sources.add_prose(trace["system"])
    for result in trace["results"]:
        sources.add_result(result)
    return sources


def score(corpus: dict) -> Score:
    sources = [sources_of(t) for t in corpus["traces"]]
    fp = fn = clean = invented = 0
    misses = []
    for a in corpus["answers"]:
        flagged = unverified(a["text"], sources[a["trace"]])
        if a["label"] == "invented":
            invented += 1
            if not all(any(i in f for f in flagged) for i in a["invented"]):
                fn += 1
                misses.append((a["label"], a["text"], flagged))
        else:
            clean += 1
            if flagged:
                fp += 1
                misses.append((a["label"], a["text"], flagged))
    return Score(len(corpus["answers"]), fp, clean, fn, invented, misses)


# -- building ---------------------------------------------------------------------------------------

def ms(us: float, d: int = 1) -> str:
    return f"{us / 1e3:.{d}f} ms"


def pct(x: float, d: int = 1) -> str:
    return f"{x:.{d}f}%"


def leaves(value, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    """(key path, |number|) for every number in a result."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        yield path, abs(float(value))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, str(k)))
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v, path)


# a number's family, read plainly from its key path (any component with the suffix)
FAMILIES = {"us": ("_us", "us"), "pct": ("_pct",), "gbps": ("gbps",), "bytes": ("bytes",)}
SCALES = {"µs": ("us", (1.0,)), "ms": ("us", (1e3,)), "s": ("us", (1e6,)), "ns": ("us", (1e-3,)),
          "%": ("pct", (1.0,)), "GB/s": ("gbps", (1.0,)), "MB": ("bytes", (1e6, 2**20)), "kB": ("bytes", (1e3, 1024))}


class Results:
    """One trace's tool results, by tool name, and every number in them for collision checks."""

    def __init__(self, named: dict[str, dict], system: str) -> None:
        self.r = named
        self.keyed = list(leaves(list(named.values())))
        self.system = system

    def __getattr__(self, name: str) -> dict:
        return self.r[name]

    def collides(self, value: float, decimals: int, unit: str | None = None) -> bool:
        """Whether a tool number rounds to `value` as stated in `unit`: of that unit's family
        (µs for ms, %, GB/s, bytes for MB), or with no unit, any number under any conversion."""
        half = 0.5 * 10 ** -decimals + 1e-9
        if unit is None:
            scales = (1, 1e3, 1e6, 1e-3, 1e9, 2**20, 2**30)
            return any(abs(n / s - value) <= half for _, n in self.keyed for s in scales)
        family, scales = SCALES[unit]
        suffixes = FAMILIES[family]
        return any(abs(n / s - value) <= half for path, n in self.keyed for s in scales
                   if any(k.endswith(suffixes) for k in path))

    def invent(self, base: float, decimals: int, factors=(1.37, 0.61, 2.9, 0.43, 1.83, 3.7, 0.27, 5.3)) -> float:
        """A value near `base` that no tool number reaches under any conversion."""
        for f in factors:
            v = round(abs(base) * f, decimals)
            if v and not self.collides(v, decimals):
                return v
        raise LookupError("no invented value avoids every tool number")


Template = Callable[[Results], "str | tuple[str, list[str]] | None"]
CORRECT: list[Template] = []
INVENTED: list[Template] = []
IDENTIFIER: list[Template] = []
DERIVED: list[Template] = []


def template(kind: list[Template]) -> Callable[[Template], Template]:
    def register(f: Template) -> Template:
        kind.append(f)
        return f
    return register


def _idle(R: Results) -> dict:
    return R.idle_gaps


def _top_cause(R: Results) -> tuple[str, float, float] | None:
    by = {c: u for c, u in R.idle_gaps["by_cause_us"].items() if u > 0}
    if not by or "by_cause_pct" not in R.idle_gaps:
        return None
    cause = max(by, key=by.get)
    return cause, by[cause], R.idle_gaps["by_cause_pct"][cause]


def _kernel(R: Results, i: int = 0) -> dict | None:
    top = R.hot_kernels["top"]
    return top[i] if len(top) > i else None


def _gap(R: Results) -> dict | None:
    gaps = R.idle_gaps["top_gaps"]
    return gaps[0] if gaps else None


# correct answers, phrased as models phrase them

@template(CORRECT)
def _(R):
    return f"The GPU is idle {pct(R.idle_gaps['idle_pct'])} of the time."


@template(CORRECT)
def _(R):
    i = R.idle_gaps
    return f"Idle time totals {ms(i['idle_us'])} out of {ms(i['device_time_us'])} of device time."


@template(CORRECT)
def _(R):
    b = R.overview["ranks"][0]["breakdown"]
    return f"Busy: **{pct(b['busy_pct'])}**; idle: {pct(b['idle_pct'], 2)} (rank {R.overview['ranks'][0]['rank']})."


@template(CORRECT)
def _(R):
    if not (t := _top_cause(R)):
        return None
    cause, us, share = t
    return f"The largest cause is `{cause}` at {ms(us, 2)} ({pct(share)} of device time)."


@template(CORRECT)
def _(R):
    return f"In seconds, the GPUs sat idle for {R.idle_gaps['idle_us'] / 1e6:.3f} s."


@template(CORRECT)
def _(R):
    if not (g := _gap(R)):
        return None
    return f"The longest gap lasts {ms(g['dur_us'])} and starts {ms(g['start_us'])} into the trace."


@template(CORRECT)
def _(R):
    if not (g := _gap(R)):
        return None
    return f"That gap is {round(g['dur_us']):,} µs long."


@template(CORRECT)
def _(R):
    rows = [f"- {c}: {ms(u, 2)}" for c, u in R.idle_gaps["by_cause_us"].items() if u > 0]
    return "Idle by cause:\n" + "\n".join(rows) if rows else None


@template(CORRECT)
def _(R):
    rows = [f"| `{k['short_name']}` | {k['total_us'] / 1e3:.2f} ms | {k['share_of_busy_pct']:.1f}% | {k['count']} |"
            for k in R.hot_kernels["top"][:4]]
    return "| kernel | total | share of busy | calls |\n|---|---|---|---|\n" + "\n".join(rows) if rows else None


@template(CORRECT)
def _(R):
    if not (k := _kernel(R)):
        return None
    return f"`{k['short_name']}` runs {k['count']} times for {ms(k['total_us'], 2)} in total, {k['mean_us']:.1f} µs on average."


@template(CORRECT)
def _(R):
    if not (k := _kernel(R)):
        return None
    return (f"It takes **{k['share_of_busy_pct']:.1f}%** of busy time (median {k['median_us']:.1f} µs, "
            f"longest {k['max_us']:.1f} µs).")


@template(CORRECT)
def _(R):
    if not (k := _kernel(R, 1)):
        return None
    return f"The runner-up, {k['short_name']}, accounts for {k['share_of_busy_pct']:.0f}% of busy time."


@template(CORRECT)
def _(R):
    kinds = R.data_movement["by_kind"]
    if not kinds:
        return None
    kind, k = max(kinds.items(), key=lambda kv: kv[1]["bytes"])
    return f"{k['count']} {kind} copies moved {k['bytes'] / 1e6:.1f} MB at {k['gbps']:.2f} GB/s."


@template(CORRECT)
def _(R):
    d = R.data_movement
    if not d["count"]:
        return None
    return f"Copies take {pct(d['share_pct'], 2)} of device time ({d['exposed_us']:.1f} µs exposed)."


@template(CORRECT)
def _(R):
    d = R.data_movement
    if not d["bytes"]:
        return None
    return f"In total {d['bytes'] / 2**20:.1f} MiB were copied ({d['bytes']:,} bytes)."


@template(CORRECT)
def _(R):
    la = R.launches
    if not la["kernels"]:
        return None
    return (f"Median launch-to-start latency is {la['median_latency_us']:.1f} µs (p90 {la['p90_latency_us']:.1f} µs); "
            f"{la['short_kernel_pct']:.1f}% of kernels are shorter than their launch call.")


@template(CORRECT)
def _(R):
    la = R.launches
    if not la["kernels"]:
        return None
    return f"Each launch call takes about {la['median_launch_us'] * 1000:.0f} ns."


@template(CORRECT)
def _(R):
    st = R.steps
    if not st.get("count") or st["count"] < 2:
        return None
    return f"Step {st['slowest']} is the slowest at {ms(st['max_us'])}; the median step takes {ms(st['median_us'])}."


@template(CORRECT)
def _(R):
    st = R.steps
    if not st.get("count"):
        return None
    return f"Steps average {ms(st['mean_us'], 2)} ± {ms(st['std_us'], 2)} over {st['count']} steps."


@template(CORRECT)
def _(R):
    st = R.steps
    if not st.get("count"):
        return None
    row = st["steps"][-1]
    return (f"In step {row['step']} the device was idle {ms(row['idle_us'])}, "
            f"{row['vs_median_pct']:+.1f}% against the median step.")


@template(CORRECT)
def _(R):
    c = R.communication
    if not c["kernels"]:
        return None
    return (f"Collectives take {ms(c['comm_us'], 2)}, {pct(c['share_pct'])} of device time, and "
            f"{c['exposed_of_comm_pct']:.0f}% of that is not hidden by compute.")


@template(CORRECT)
def _(R):
    v = R.verdict
    if v["root_cause"] != "straggler":
        return None
    e = v["evidence"]
    return (f"Rank {e['straggler_rank']} enters {e['last_pct']:.0f}% of collectives last; the others wait "
            f"{pct(e['others_exposed_waiting_pct'])} of their device time ({ms(e['others_waiting_us'], 1)}).")


@template(CORRECT)
def _(R):
    s = R.verdict.get("saving")
    if not s:
        return None
    per = f" ({ms(s['per_step_us'])} per step)" if s.get("per_step_us") else ""
    share = s["step_pct"] if s.get("step_pct") is not None else s["pct"]
    return f"Fixing it would save up to {share:.1f}% of step time{per}."


@template(CORRECT)
def _(R):
    return f"Roughly {round(R.idle_gaps['idle_pct'])}% of the time the GPU sits idle."


@template(CORRECT)
def _(R):
    us = R.idle_gaps["idle_us"]
    return f"That is about {round(us / 1e3)} ms of idle time." if us >= 1e4 else None


@template(CORRECT)
def _(R):
    x = R.idle_gaps["idle_pct"]
    bound = math.floor(x / 10) * 10
    return f"More than {bound}% of the time is idle." if bound >= 10 else None


@template(CORRECT)
def _(R):
    if not (t := _top_cause(R)):
        return None
    return f"Waiting accounts for `{ms(t[1])}` of the timeline."


@template(CORRECT)
def _(R):
    return f"Verdict: {R.verdict['headline']}."


@template(CORRECT)
def _(R):
    h = R.hot_kernels
    return f"The trace ran {h['kernels']:,} kernels with {h['distinct']} distinct names." if h["kernels"] > 10 else None


@template(CORRECT)
def _(R):
    d = R.data_movement
    return f"There are {d['memset_count']} memsets taking {d['memset_us']:.1f} µs." if d["memset_count"] > 10 else None


@template(CORRECT)
def _(R):
    devices = R.overview["ranks"][0]["breakdown"]["devices"]
    if len(devices) < 2:
        return None
    return " ".join(f"GPU {d} is idle {pct(b['idle_pct'])} of its span." for d, b in devices.items())


@template(CORRECT)
def _(R):
    return f"Idle time: {R.idle_gaps['idle_us']:.3e} µs."


@template(CORRECT)
def _(R):
    b = R.overview["ranks"][0]["breakdown"]
    return f"The trace spans {b['span_us'] / 1e6:.2f} s on rank {R.overview['ranks'][0]['rank']}."


@template(CORRECT)
def _(R):
    if not (t := _top_cause(R)) or not (g := _gap(R)):
        return None
    cause, us, _ = t
    return (f"Most idle time ({pct(R.idle_gaps['idle_pct'])}) comes from {cause}: {ms(us)} over "
            f"{R.idle_gaps['by_cause_count'][cause]} gaps, the largest {ms(g['dur_us'], 2)}.")


@template(CORRECT)
def _(R):
    if not (k := _kernel(R)):
        return None
    return f"If `{k['short_name']}` ran 2× faster it would save at most {ms(k['saving_2x_us'])}."


@template(CORRECT)
def _(R):
    x = R.idle_gaps["idle_pct"]
    return f"Idle ≈{x:.0f}% overall."


@template(CORRECT)
def _(R):
    sites = R.idle_gaps["sync_sites"]
    if not sites:
        return None
    s = sites[0]
    return f"`{s['call']}` blocks {s['count']} times, costing {ms(s['idle_us'], 2)} of idle time."


@template(CORRECT)
def _(R):
    d = R.data_movement
    if not d["pageable_count"]:
        return None
    return f"{d['pageable_count']} copies ({d['pageable_bytes']:,} bytes) come from pageable memory."


@template(CORRECT)
def _(R):
    i = R.idle_gaps
    return f"The idle-gap threshold for launch-bound gaps is {i['launch_gap_us']:.0f} µs; there are {i['gaps']:,} gaps."


@template(CORRECT)
def _(R):
    i = R.idle_gaps
    return f"Idle: {i['idle_us'] / 1e3:.1f}ms ({i['idle_pct']:.1f} percent), i.e. {i['idle_us'] / 1e6:.2f}s."


@template(CORRECT)
def _(R):
    rows = [f"| {c} | {u / 1e3:.1f} ms | {R.idle_gaps['by_cause_count'][c]} |"
            for c, u in R.idle_gaps["by_cause_us"].items() if u > 0][:4]
    return "| cause | idle | gaps |\n|---|---:|---:|\n" + "\n".join(rows) if rows else None


@template(CORRECT)
def _(R):
    b = R.overview["ranks"][0]["breakdown"]
    return f"~{b['busy_us'] / 1e6:.1f} s busy (**{b['busy_pct']:.0f}%**), {b['compute_us'] / 1e3:,.0f} ms of it compute."


@template(CORRECT)
def _(R):
    c = R.overview["ranks"][0]["counts"]
    return f"The trace has {c['kernels']:,} kernels, {c['runtime_calls']:,} runtime calls and {c['host_events']:,} host events."


@template(CORRECT)
def _(R):
    if not (g := _gap(R)):
        return None
    return f"Gap at t={g['start_us'] / 1e6:.4f} s lasting {g['dur_us']:.0f} µs ({g['cause']})."


@template(CORRECT)
def _(R):
    rows = [f"| {c} | {u / 1e3:.2f} | {R.idle_gaps['by_cause_pct'][c]:.1f} |"
            for c, u in R.idle_gaps["by_cause_us"].items() if u > 0 and c in R.idle_gaps.get("by_cause_pct", {})][:4]
    return "| cause | idle (ms) | share (%) |\n|---|---:|---:|\n" + "\n".join(rows) if rows else None


@template(CORRECT)
def _(R):
    rows = [f"| `{k['short_name']}` | {k['total_us']:.1f} | {k['mean_us']:.1f} |" for k in R.hot_kernels["top"][:3]]
    return "| kernel | total µs | mean µs |\n|---|---|---|\n" + "\n".join(rows) if rows else None


# invented numbers: (answer, [the invented text])

@template(INVENTED)
def _(R):
    if not (g := _gap(R)) or R.collides(round(g["dur_us"]), 0, "ms"):
        return None
    text = f"{round(g['dur_us'])} ms"  # a µs value called ms
    return f"The largest gap is {text} long.", [text]


@template(INVENTED)
def _(R):
    n = R.data_movement["memset_count"] or R.hot_kernels["distinct"]
    if n <= 10 or R.collides(n, 0, "ms"):
        return None
    text = f"{n} ms"  # a count called a time
    return f"Memsets cost {text}.", [text]


@template(INVENTED)
def _(R):
    if not (k := _kernel(R)) or R.collides(round(k["mean_us"]), 0, "%"):
        return None
    text = f"{round(k['mean_us'])}%"  # a mean in µs stated as a share
    return f"The top kernel takes {text} of busy time.", [text]


@template(INVENTED)
def _(R):
    v = R.invent(R.idle_gaps["idle_pct"], 1, (1.37, 1.61, 0.71, 1.9))
    return f"The GPU is idle {v:.1f}% of the time.", [f"{v:.1f}%"]


@template(INVENTED)
def _(R):
    if not (t := _top_cause(R)):
        return None
    v = R.invent(t[1] / 1e3, 1)
    return f"Data waits add up to {v:.1f} ms.", [f"{v:.1f} ms"]


@template(INVENTED)
def _(R):
    kinds = R.data_movement["by_kind"]
    if not kinds:
        return None
    k = max(kinds.values(), key=lambda k: k["bytes"])
    v = R.invent(k["gbps"], 1, (3.1, 0.29, 4.7, 7.3))
    return f"Copies reach {v:.1f} GB/s.", [f"{v:.1f} GB/s"]


@template(INVENTED)
def _(R):
    if not R.data_movement["bytes"]:
        return None
    v = R.invent(R.data_movement["bytes"] / 1e6, 1, (2.7, 0.37, 6.1, 11.3))
    return f"About {v:.1f} MB crossed the bus.", [f"{v:.1f} MB"]


@template(INVENTED)
def _(R):
    n = R.hot_kernels["kernels"]
    v = R.invent(n, 0, (1.5, 0.7, 2.3, 3.1))
    return f"The job launched {int(v):,} kernels.", [f"{int(v):,}"]


@template(INVENTED)
def _(R):
    v = 3.7 if not R.collides(3.7, 1) else 4.3
    return f"Fusing the small ops would make the step {v}× faster.", [f"{v}×"]


@template(INVENTED)
def _(R):
    s = R.verdict.get("saving")
    if not s:
        return None
    v = R.invent(s["pct"], 1, (1.9, 0.41, 2.3, 0.6))
    return f"The fix saves {v:.1f}% of step time.", [f"{v:.1f}%"]


@template(INVENTED)
def _(R):
    i = R.idle_gaps
    v = R.invent(i["idle_us"] / 1e3, 1, (0.47, 1.73, 2.6, 0.19))
    return (f"The GPU is idle {pct(i['idle_pct'])} of the time ({v:.1f} ms), mostly between steps.",
            [f"{v:.1f} ms"])


@template(INVENTED)
def _(R):
    names = [k["name"] for k in R.hot_kernels["top"] if "name" in k]
    for name in names:  # a number that exists only inside a kernel name
        for token in name.replace(",", " ").replace("<", " ").replace(">", " ").split():
            if token.isdigit() and int(token) > 10 and not R.collides(int(token), 0, "µs"):
                text = f"{token} µs"
                return f"Each call of that kernel lasts {text}.", [text]
    return None


@template(INVENTED)
def _(R):
    ranks = {r["rank"] for r in R.overview["ranks"]}
    missing = next(n for n in range(11, 99) if n not in ranks)
    return f"Rank {missing} is the one holding everyone back.", [f"Rank {missing}"]


@template(INVENTED)
def _(R):
    steps = {s["step"] for s in R.steps.get("steps", [])}
    missing = next(n for n in range(41, 999) if n not in steps)
    return f"The stall is in step {missing}.", [f"step {missing}"]


@template(INVENTED)
def _(R):
    us = R.idle_gaps["idle_us"]
    v = round(us / 1e3)  # ms value called seconds
    return (f"Idle time is {v} s in total.", [f"{v} s"]) if v > 10 and not R.collides(v, 0, "s") else None


@template(INVENTED)
def _(R):
    v = R.invent(R.idle_gaps["idle_pct"], 1, (1.19, 0.83, 1.47))
    return f"The share to remove is `{v:.1f}%`.", [f"{v:.1f}%"]


@template(INVENTED)
def _(R):
    v = R.invent(R.idle_gaps["idle_pct"], 0, (1.9, 1.6, 0.5, 2.2))
    return f"About {int(v)}% of the timeline is idle.", [f"{int(v)}%"]


@template(INVENTED)
def _(R):
    if not (k := _kernel(R)):
        return None
    v = R.invent(k["total_us"] / 1e3, 2, (1.41, 0.58, 2.2))
    return f"`{k['short_name']}` takes {v:.2f} ms across the trace.", [f"{v:.2f} ms"]


@template(INVENTED)
def _(R):
    la = R.launches
    if not la["kernels"]:
        return None
    v = R.invent(la["median_latency_us"], 1, (2.3, 0.31, 4.1))
    return f"Launches wait {v:.1f} µs before the kernel starts.", [f"{v:.1f} µs"]


@template(INVENTED)
def _(R):
    st = R.steps
    if not st.get("count"):
        return None
    v = R.invent(st["mean_us"] / 1e3, 1, (1.33, 0.66, 1.9))
    return f"A step takes {v:.1f} ms on average.", [f"{v:.1f} ms"]


@template(INVENTED)
def _(R):
    c = R.communication
    if not c["kernels"]:
        return None
    v = R.invent(c["share_pct"], 1, (2.1, 0.45, 3.3))
    return f"Communication is {v:.1f}% of device time.", [f"{v:.1f}%"]


@template(INVENTED)
def _(R):
    v = R.invent(R.overview["ranks"][0]["breakdown"]["span_us"] / 1e6, 2, (1.7, 0.44, 2.9))
    return f"The profiled window is {v:.2f} s long.", [f"{v:.2f} s"]


@template(INVENTED)
def _(R):
    if not (t := _top_cause(R)):
        return None
    v = R.invent(t[1] / 1e3, 2, (1.52, 0.66, 2.4))
    return (f"| cause | idle (ms) |\n|---|---:|\n| {t[0]} | {v:.2f} |", [f"{v:.2f} ms"])


@template(INVENTED)
def _(R):
    v = R.invent(R.idle_gaps["idle_pct"], 2, (1.13, 0.87))
    return (f"- idle: **{v:.2f}%**\n- busy: {pct(R.overview['ranks'][0]['breakdown']['busy_pct'])}",
            [f"{v:.2f}%"])


# identifiers: numbers that are not claims (with, at most, correct numbers beside them)

@template(IDENTIFIER)
def _(R):
    return "On an A100 80GB or an H100, compile with `torch.compile` and keep batch size 256 with NCCL 2.18."


@template(IDENTIFIER)
def _(R):
    if not (k := _kernel(R)):
        return None
    return f"Run `ncu --kernel-name regex:{k['short_name'][:30]} --launch-count 20 --set full -o prof python train.py`."


@template(IDENTIFIER)
def _(R):
    return "This pattern shows up in ResNet50, Llama-2-13B and GPT-4 class models in bf16 or fp8 on sm_90 and MI300X."


@template(IDENTIFIER)
def _(R):
    return "Set `DataLoader(num_workers=8, pin_memory=True, prefetch_factor=4)` and re-profile."


@template(IDENTIFIER)
def _(R):
    return "For shapes like 4096x4096 or [32, 3, 224, 224], pick multiples of 64."


@template(IDENTIFIER)
def _(R):
    return "Look at train.py:42 and model.py(118): forward, then line 77 of the loader."


@template(IDENTIFIER)
def _(R):
    return "This was profiled on 2024-03-05 with PyTorch 2.1.0 and CUDA 12.1 (driver 535.104.05)."


@template(IDENTIFIER)
def _(R):
    return "Step 1: add workers to the DataLoader.\nStep 2: pin host memory.\nStep 3: re-profile."


@template(IDENTIFIER)
def _(R):
    return "1. Fuse small ops.\n2. Capture a CUDA graph.\n3. Re-profile and compare.\n12. (unused)"


@template(IDENTIFIER)
def _(R):
    ranks = [r["rank"] for r in R.overview["ranks"]]
    devices = R.idle_gaps["scope"]["devices"]
    return f"Start with rank {ranks[-1]} on GPU {devices[-1]}."


@template(IDENTIFIER)
def _(R):
    steps = [s["step"] for s in R.steps.get("steps", [])]
    return f"Compare step {steps[0]} with ProfilerStep#{steps[-1]}." if steps else None


@template(IDENTIFIER)
def _(R):
    if not (k := _kernel(R)) or "name" not in k:
        return None
    return f"The kernel is `{k['name'][:200]}`."


@template(IDENTIFIER)
def _(R):
    return "Use 8-GPU nodes, the top 20 kernels and p99 latency on an x86_64 host with a 2080Ti for 1080p tests."


@template(IDENTIFIER)
def _(R):
    return "Python 3.11 and Triton 3.0 since 2023; see https://pytorch.org/docs/2.3/profiler.html for details."


@template(IDENTIFIER)
def _(R):
    return "Try `--batch-size 512` and `-n 16`, or seq_len=2048 with hidden size 4096."


@template(IDENTIFIER)
def _(R):
    return "Option 2 is simpler; see section 3 and the 7B and 13B variants."


# derived via calc: the generator calls calc with tool values; the answer states its result

def _n(x: float) -> str:
    """A number as a tool wrote it (JSON): integers without a decimal point."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def derivations(R: Results) -> list[tuple[str, str, Callable[[float], str]]]:
    """(expression, unit, sentence from the result) over this trace's tool values."""
    out = []
    by = {c: u for c, u in R.idle_gaps["by_cause_us"].items() if u > 0}
    causes = sorted(by, key=by.get, reverse=True)
    if len(causes) >= 2:
        a, b = causes[:2]
        out.append((f"{_n(by[a])} / {_n(by[b])}", "x", lambda r, a=a, b=b: f"{a} costs {r:.1f}× as much idle as {b}."))
        out.append((f"{_n(by[a])} / {_n(R.idle_gaps['idle_us'])} * 100", "pct",
                    lambda r, a=a: f"{a} is {r:.1f}% of all idle time."))
    b = R.overview["ranks"][0]["breakdown"]
    out.append((f"{_n(b['span_us'])} - {_n(b['idle_us'])}", "us",
                lambda r: f"Outside the gaps, {r / 1e3:.1f} ms remain busy."))
    if k := _kernel(R):
        out.append((f"{_n(k['total_us'])} / {_n(k['count'])}", "us",
                    lambda r: f"Per call that is {r:.2f} µs."))
    st = R.steps
    if st.get("count", 0) >= 2:
        out.append((f"({_n(st['max_us'])} - {_n(st['median_us'])}) / {_n(st['median_us'])} * 100", "pct",
                    lambda r: f"The slowest step is {r:.1f}% slower than the median."))
    if R.data_movement["count"]:
        d = R.data_movement
        out.append((f"{_n(d['bytes'])} / {_n(d['count'])}", "bytes",
                    lambda r: f"An average copy moves {r / 1e3:.1f} kB."))
    return out


def build() -> dict:
    import traceagent
    from traceagent.agent.prompts import trace_summary
    from traceagent.agent.session import Session
    from traceagent.agent.tools import AnalysisContext, calc, dumps

    traces, answers = [], []
    for index, (name, rel) in enumerate(TRACES.items()):
        ctx = AnalysisContext(traceagent.analyze(DATA / rel, use_cache=False))
        session = Session(ctx)  # seeds ctx.sources as a conversation would
        tools = session.tools
        results = [tools[tool].invoke(args) for tool, args in CALLS]
        for result in results:
            ctx.sources.add_result(result)
        R = Results({tool: json.loads(r) for (tool, _), r in zip(CALLS, results)}, trace_summary(ctx))
        for kind, label in ((CORRECT, "correct"), (IDENTIFIER, "identifier")):
            for t in kind:
                if text := t(R):
                    answers.append({"trace": index, "label": label, "text": text})
        for t in INVENTED:
            try:
                made = t(R)
            except LookupError:  # every candidate value is some tool number: no honest invention here
                continue
            if made:
                answers.append({"trace": index, "label": "invented", "text": made[0], "invented": made[1]})
        for expression, unit, sentence in derivations(R):
            result = dumps(calc(ctx, expression, unit))
            results.append(result)
            value = next(v for k, v in json.loads(result).items() if k.startswith("result"))
            answers.append({"trace": index, "label": "derived", "text": sentence(value), "calc": expression})
        traces.append({"name": name, "path": f"tests/data/{rel}", "system": R.system, "results": results})
    return {"about": "answers labelled against real tool results; see tools/number_corpus.py",
            "traces": traces, "answers": answers}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help=f"rebuild {CORPUS.relative_to(ROOT)} from the traces")
    parser.add_argument("-v", "--verbose", action="store_true", help="list each wrong judgement")
    args = parser.parse_args()
    if args.build:
        corpus = build()
        CORPUS.write_text(json.dumps(corpus, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        labels = {label: sum(a["label"] == label for a in corpus["answers"])
                  for label in ("correct", "invented", "identifier", "derived")}
        print(f"wrote {CORPUS.relative_to(ROOT)}: {len(corpus['answers'])} answers {labels}")
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    result = score(corpus)
    print(result.line())
    if args.verbose:
        for label, text, flagged in result.misses:
            print(f"  [{label}] {text!r} → flagged {flagged}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
