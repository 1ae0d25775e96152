"""Device time by module: which layer of the model the GPU's time goes to.

PyTorch's profiler records each `nn.Module` call as a range (`nn.Module: Qwen2DecoderLayer_3`, with
`with_stack=True`: the module hooks run in the forward pass only). A module call's device time is
that of the device ops launched inside its range on its thread, its children's included (a layer
holds its attention and MLP); calls are grouped by module type (the name less its `_3` suffix); a call inside another call of
its own type is that call's work, counted once.
Each call's time is one range sum over the launches in thread-time order, never a loop per event.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import counted, duration, percent, shorten
from ...text import code, md_prose, md_table
from ...trace.model import Trace, matches, rows_where
from ...trace.normalize import thread_time
from ..core.asked import ENGLISH, SLOWEST
from ..core.bounds import Count
from ..core.host import launch_points
from ..core.view import pct, us
from .base import Detector

MODULE = re.compile(r"^nn\.Module: ")
_INSTANCE = re.compile(r"_\d+$")


@dataclass(frozen=True)
class ModulesParams:
    """top: how many module types to keep, most device time first."""

    top: Count = 12


@dataclass(frozen=True)
class ModuleTime:
    name: str  # the module's type: its range's name less "nn.Module: " and the instance suffix
    calls: int
    device_us: float  # the device ops launched inside its calls (children included), durations added up
    mean_device_us: float  # per call
    max_device_us: float  # its longest call's
    host_us: float  # its calls' host time, added up
    share_pct: float  # of the rank's device time (shares overlap: a module holds its children)
    longest_call: str = ""  # the instance its longest call ran ("Qwen2DecoderLayer_0": the first layer)


@dataclass(frozen=True)
class ModulesResult:
    """Per rank, every GPU of it, the forward pass (where module ranges are recorded)."""

    device_time_us: float  # every device op's duration added up: the shares' denominator
    modules: list[ModuleTime]  # the top types by device time
    slowest_per_call: str | None  # the type with the longest mean call, of those kept that are called more than once
    # the model: the type of the call that holds the most other module calls (the outermost module of
    # the forward pass; a checkpointed block re-run in the backward holds a few), kept or not among the
    # top; None where no call holds another
    model: ModuleTime | None = None
    # 2.13: the model's repeated block (the type named ...Layer or ...Block with the most device time, called
    # more than once) and how many distinct instances of it the trace ran ("how many layers?"); None without one
    layer: str | None = None
    layers: int | None = None


#: the type names of a model's repeated blocks: Qwen2DecoderLayer, BertLayer, TransformerBlock, BasicBlock
_BLOCK = re.compile(r"(?:Layer|Block)$")


def detect_modules(trace: Trace, params: ModulesParams = ModulesParams()) -> ModulesResult | None:
    """None where the trace records no module ranges or no device work."""
    cpu, gpu = trace.cpu, trace.gpu
    modules = cpu.loc[(cpu["kind"] == "python").to_numpy() & matches(cpu["name"], MODULE),
                      ["name", "pid", "tid", "start", "end"]]
    ops = rows_where(gpu, (gpu["kind"] != "sync").to_numpy())
    if modules.empty or ops.empty:
        return None
    dur = (ops["end"].to_numpy(np.int64) - ops["start"].to_numpy(np.int64)).clip(0)
    launched, l_pid, l_tid, l_t = launch_points(trace, ops["correlation"].to_numpy())
    m_start, m_end = modules["start"].to_numpy(np.int64), modules["end"].to_numpy(np.int64)
    # calls' starts and launches on one axis where each thread owns a stretch (normalize.thread_time,
    # numbered together so both sides agree): each call's device time is a range sum over the launches
    t = np.concatenate([m_start, l_t])
    t_min, width = int(t.min()), int(max(m_end.max(), t.max()) - t.min()) + 1
    axis = thread_time(np.concatenate([modules["pid"].to_numpy(np.int64), l_pid]),
                       np.concatenate([modules["tid"].to_numpy(np.int64), l_tid]), t, t_min, width)
    m_axis, l_axis = axis[:len(modules)], axis[len(modules):]  # m_axis: each call's start
    order = np.argsort(l_axis, kind="stable")
    sorted_axis = l_axis[order]
    summed = np.concatenate([[0], np.cumsum(dur[launched][order])])
    lo = np.searchsorted(sorted_axis, m_axis, side="left")
    hi = np.searchsorted(sorted_axis, m_axis + (m_end - m_start), side="right")
    per_call = summed[hi] - summed[lo]
    instance = modules["name"].astype(str).str.removeprefix("nn.Module: ").to_numpy()
    kind = pd.Series(instance).str.replace(_INSTANCE, "", regex=True).to_numpy()
    table = pd.DataFrame({"type": kind, "instance": instance, "device": per_call, "host": m_end - m_start,
                          "at": m_axis, "until": m_axis + (m_end - m_start)})
    outermost = _outermost_type(table)
    # a call inside another call of its own type (a GraphModule within a GraphModule) is that call's
    # work: only the outermost calls of a type count, or its time would count twice
    table = table.sort_values(["type", "at", "until"], ascending=[True, True, False], kind="stable")
    reached = table.groupby("type", sort=False)["until"].cummax().groupby(table["type"], sort=False).shift(1)
    table = table[~(table["at"] < reached).to_numpy()]
    grouped = table.groupby("type", sort=False).agg(calls=("device", "size"), device=("device", "sum"),
                                                    mean=("device", "mean"), longest=("device", "max"),
                                                    host=("host", "sum"), at=("device", "idxmax"))
    total = int(dur.sum())

    def module_time(name: str, r: pd.Series) -> ModuleTime:
        return ModuleTime(name, int(r["calls"]), us(int(r["device"])), us(float(r["mean"])), us(int(r["longest"])),
                          us(int(r["host"])), pct(r["device"], total), str(table.at[r["at"], "instance"]))
    model = module_time(outermost, grouped.loc[outermost]) if outermost is not None else None
    grouped = grouped[grouped["device"] > 0].sort_values("device", ascending=False, kind="stable").head(params.top)
    kept = [module_time(str(name), r) for name, r in grouped.iterrows()]
    repeated = [m for m in kept if m.calls > 1]  # layers repeat; the model's own single call is not one
    slowest = max(repeated, key=lambda m: m.mean_device_us).name if repeated else None
    block = next((m.name for m in repeated if _BLOCK.search(m.name)), None)  # kept most device time first
    layers = int(table.loc[(table["type"] == block).to_numpy(), "instance"].nunique()) if block else None
    return ModulesResult(us(total), kept, slowest, model, block, layers)


def _outermost_type(calls: pd.DataFrame) -> str | None:
    """The type of the call that holds the most other module calls: calls sorted by start on the
    one per-thread axis, those inside a call are the ones that start before it ends."""
    at, until = calls["at"].to_numpy(np.int64), calls["until"].to_numpy(np.int64)
    order = np.lexsort((-until, at))
    inside = np.searchsorted(at[order], until[order], side="left") - np.arange(len(order)) - 1
    best = int(np.argmax(inside))
    return str(calls["type"].iloc[order[best]]) if inside[best] > 0 else None


def modules_sentence(result: ModulesResult) -> str | None:
    """'By module (a module's time holds its children's; the forward pass): Qwen2DecoderLayer, 24
    calls, 30.1 ms (66.2% of device time), 1.25 ms a call; …'"""
    if not result.modules:
        return None
    parts = [f"{shorten(m.name, 40)}, {counted(m.calls, 'call')}, {duration(m.device_us)} "
             f"({percent(m.share_pct)} of device time), {duration(m.mean_device_us)} a call" for m in result.modules[:6]]
    text = (f"By module (nn.Module ranges, the forward pass; a module's time holds its children's, so shares overlap): "
            f"{'; '.join(parts)}.")
    slowest = next((m for m in result.modules if m.name == result.slowest_per_call), None)
    if slowest is not None:
        text += (f" The slowest of the modules called more than once: {shorten(slowest.name, 40)}, "
                 f"{duration(slowest.mean_device_us)} a call (longest {duration(slowest.max_device_us)}, "
                 f"{shorten(slowest.longest_call, 40)}).")
    return text


def modules_section(result: ModulesResult, params: ModulesParams) -> list[str]:
    """The report's table: one row per module type kept."""
    rows = [[code(shorten(m.name, 50)), str(m.calls), duration(m.device_us), percent(m.share_pct),
             duration(m.mean_device_us),
             duration(m.max_device_us) + (f" ({code(shorten(m.longest_call, 40))})" if m.calls > 1 else ""),
             duration(m.host_us)] for m in result.modules]
    return [md_prose(modules_sentence(result) or ""), "",
            md_table(["module", "calls", "device time", "share", "per call", "longest", "host time"], rows)]


#: words that end many module types' names without naming one ("layer" of every *DecoderLayer)
_GENERIC_MODULE_WORDS = {"layer", "layers", "model", "block", "module", "list", "dict", "sequential", "head", "time"}


#: what people call a block that models name otherwise: the experts of a mixture-of-experts layer (FusedMoE,
#: Qwen3MoeSparseMoeBlock), the feed-forward block (LlamaMLP, GPT2MLP)
_ALIASES = {"expert": ("moe", "moeblock", "experts"), "experts": ("moe", "moeblock"), "feedforward": ("mlp", "mlpblock", "ffn"),
            "ffn": ("mlp", "mlpblock", "feedforward")}


def modules_named(text: str, types: Iterable[str]) -> list[str]:
    """The module types the question names, the best named first: a type is named by a word (or two
    run together: "self attention") its name ends with; the longest such word wins, and of the types
    it names, the shortest ("attention": BertAttention, not BertSelfAttention)."""
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", text)]
    said = {w for w in words if len(w) >= 3} - ENGLISH - _GENERIC_MODULE_WORDS
    said |= {a + b for a, b in itertools.pairwise(words)}  # "self attention": SelfAttention
    said |= {w[:-1] for w in said if w.endswith("s")}  # "the samplers"
    said |= {alias for w in list(said) for alias in _ALIASES.get(w, ())}  # "the experts": FusedMoE
    best: dict[str, tuple[int, int, str]] = {}  # each word's best type
    for t in types:
        for w in said:
            if t.lower().endswith(w):
                best[w] = max(best.get(w, (0, 0, "")), (len(w), -len(t), t))
    # a word inside a longer one that names a type ("attention" in "selfattention") names nothing of its own
    kept = [w for w in best if not any(w != v and w in v for v in best)]
    return list(dict.fromkeys(best[w][2] for w in sorted(kept, key=lambda w: best[w], reverse=True)))


_LAYERS_COUNTED = re.compile(r"\bhow many\b.{0,20}\b(?:layers?|blocks?)\b", re.I)


def modules_lead(result: ModulesResult, question: str) -> str | None:
    """The model's layer count where the question asks it, the module with the longest calls where it asks
    for the slowest, or the time of each module type it names ("attention vs MLP"); else None."""
    if _LAYERS_COUNTED.search(question) and result.layers is not None:
        return (f"**{counted(result.layers, 'layer')}** of `{result.layer}` (the distinct instances of the model's "
                "repeated block that the trace ran).")
    by_name = {m.name: m for m in result.modules}
    if SLOWEST.search(question) and (slow := by_name.get(result.slowest_per_call or "")) is not None:
        return (f"**{code(slow.name)} has the longest calls: {duration(slow.mean_device_us)} of device time a "
                f"call** ({counted(slow.calls, 'call')}; of the modules called more than once)"
                + (f"; its longest call is {code(slow.longest_call)}'s, {duration(slow.max_device_us)}."
                   if slow.longest_call else "."))
    return " ".join(f"**{code(m.name)}: {duration(m.device_us)} of device time** ({percent(m.share_pct)} of "
                    f"the rank's, {counted(m.calls, 'call')}, {duration(m.mean_device_us)} a call)."
                    for m in (by_name[n] for n in modules_named(question, by_name))) or None


#: this analysis, as the registry finds it (detect/registry.py): its key, parameters, result, hooks
DETECTOR = Detector("modules", "Modules", "Device time by nn.Module type in the forward pass (a module's calls, the device "
                    "time of the ops launched inside them with their children's, per call, the longest call, host time, "
                    "share of device time), and the slowest module per call.",
                    ModulesParams(), ModulesResult, lambda i, p: detect_modules(i.trace, p),
                    lambda r, p: modules_sentence(r), since="2.6",
                    needs=("the trace records no nn.Module ranges",
                           "profile with torch.profiler.profile(with_stack=True, with_modules=True)"),
                    asks=r"\b(?:which|slowest|heaviest|most expensive|costliest) (?:\w+ )?(?:layers?|modules?|blocks?)\b|"
                         r"\b(?:mlps?|ffn|feed-?forward|decoder layers?|encoder layers?|transformer blocks?)\b|"
                         r"\b(?:layers?|modules?)\b.{0,30}\b(?:slow\w*|take|takes|took|cost\w*|expensive)\b|"
                         r"\bper (?:layer|module)\b|\bnn\.module\b|\bby (?:layer|module)\b|"
                         r"\bhow many (?:\w+ )?(?:layers?|modules?|blocks?)\b",
                    lead=modules_lead, section=modules_section, place=64)
