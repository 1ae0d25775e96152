"""Hot kernels: device kernels grouped by name and ranked by total time."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...format import percent, shorten, shorten_middle
from ...text import QUESTION_NAME_CHARS, code
from ...trace.model import Trace, matches, rows_where
from ..core import intervals as iv
from ..core.host import host_time_ns, launched_inside, ranges_named
from ..core.view import on_device, pct, us, views_of
from .base import Detector, Key


def short_name(name: str) -> str:
    """A readable kernel name: no return type, template arguments, parameters or namespaces.
    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' → 'vectorized_elementwise_kernel'."""
    return qualified_name(name).split("::")[-1] or name[:60]


@functools.lru_cache(maxsize=4096)  # a name is asked for again by every detector that lists it
def qualified_name(name: str) -> str:
    """A kernel's name with its namespaces, without return type, template arguments or parameters.
    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' → 'at::native::vectorized_elementwise_kernel'."""
    text = re.sub(r"^(void|__global__)\s+", "", name.strip())
    text = _strip_bracketed(text, "(", ")")
    text = _strip_bracketed(text, "<", ">").strip()
    return text.split(" ")[-1] if " " in text else text


#: kernels named for the template that wraps the real one (cutlass's `Kernel2<cutlass_80_simt_sgemm_…>`)
_WRAPPER = re.compile(r"^(?:Kernel\d*|device_kernel)$")
_NAMESPACE = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_]\w*)::")


def distinct_labels(names: list[str]) -> list[str]:
    """Names to show for kernels listed together: each one's short name, and where several share it
    (cutlass's `Kernel2`, PyTorch's `elementwise_kernel`) the template argument that tells most of
    them apart, without namespaces: `Kernel2<cutlass_80_tensorop_bf16_s16816gemm_…>`,
    `vectorized_elementwise_kernel<CUDAFunctor_add<BFloat16>>`. A few names per list."""
    shorts = [short_name(n) for n in names]
    labels = list(shorts)
    for short in {s for s in shorts if shorts.count(s) > 1}:
        mine = [i for i, s in enumerate(shorts) if s == short]
        args = [_template_args(names[i], short) for i in mine]
        # the argument that tells most of them apart (the functor, not a vector width), the first of equals
        told = [len({a[k] if k < len(a) else "" for a in args}) for k in range(max(map(len, args)))]
        if max(told, default=1) < 2:
            continue
        at = told.index(max(told))
        # each unwrapped, but those that unwrapped look alike (a wrapper tells them apart) as written
        unwrapped = [_readable_arg(a[at]) if at < len(a) else None for a in args]
        for i, a, text in zip(mine, args, unwrapped):
            if text is not None:
                text = text if unwrapped.count(text) == 1 else _readable_arg(a[at], unwrap=False)
                labels[i] = f"{short}<{shorten_middle(text, 60)}>"
    for i, short in enumerate(shorts):  # a bare wrapper says nothing alone: the kernel it wraps does
        if labels[i] == short and _WRAPPER.match(short) and (wrapped := _template_args(names[i], short)[:1]) \
                and wrapped[0]:
            labels[i] = f"{short}<{shorten_middle(_readable_arg(wrapped[0]), 60)}>"
    return labels


def _readable_arg(arg: str, unwrap: bool = True) -> str:
    """A template argument as people tell kernels apart by it: no namespaces, return types, parameter
    lists or `operator()`, lambdas as `{lambda#N}` (Kineto's and Nsight's spellings), and PyTorch's
    gpu_kernel_impl wrapper unwrapped to the functor inside (unless that is what tells them apart)."""
    text = re.sub(r"\[lambda\([^()]*\) \(instance (\d+)\)\]", r"{lambda#\1}", arg)  # Nsight's lambdas
    text = re.sub(r"::operator ?\(\)\(\) const", "", text)
    text = _NAMESPACE.sub("", text).removeprefix("void ")
    while (shorter := re.sub(r"\([^()]*\)", "", text)) != text:
        text = shorter
    return re.sub(r"^gpu_kernel_impl(?:_nocast)?<(.*)>(?:::.*)?$", r"\1", text) if unwrap else text


def _template_args(name: str, short: str) -> list[str]:
    """The top-level template arguments of `short<...>` in a full kernel name, or []."""
    at = name.find(short + "<")
    if at < 0:
        return []
    args: list[str] = []
    part: list[str] = []
    depth = 0
    for ch in name[at + len(short) + 1:]:  # one kernel name, not a loop per event
        if ch in "<({":
            depth += 1
        elif ch in ">)}":
            if depth == 0 and ch == ">":
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(part).strip())
            part = []
            continue
        part.append(ch)
    return [*args, "".join(part).strip()]


def leading_kernels(names: pd.Series, dur: np.ndarray, rows: np.ndarray, top: int = 3) -> tuple[list[str], int]:
    """Among the device ops in `rows` (a mask over a categorical `names` column and its ops'
    durations in ns): the short names of the kernels with the most time, and the time of the
    first (by full name), by one bincount over the names' codes."""
    categories = names.cat.categories
    codes = names.cat.codes.to_numpy(np.int64)[rows] + 1  # -1 (no name) counts apart, at 0
    by_name = np.bincount(codes, weights=dur[rows], minlength=len(categories) + 1)[1:]
    best = [n for n in np.argsort(-by_name, kind="stable")[:top] if by_name[n] > 0]
    return list(dict.fromkeys(short_name(str(categories[n])) for n in best)), int(by_name[best[0]]) if best else 0


def _strip_bracketed(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:  # a kernel name, not a per-event loop
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _running_ns(kernels: pd.DataFrame) -> dict[str, int]:
    """Per kernel name, the time at least one instance ran (per device, added up): the share of
    busy time can then never pass 100% when instances overlap on several streams."""
    out: dict[str, int] = {}
    codes, device = kernels["name"].cat.codes.to_numpy(), kernels["device"].to_numpy()  # as stored: no int64 copies
    if not len(codes):
        return out
    # the names present numbered 0, 1, 2…: a few (the top ones), so a (name, device) key fits 16 bits, which
    # numpy sorts by radix, in linear time
    present = np.flatnonzero(np.bincount(codes, minlength=len(kernels["name"].cat.categories)))
    low = int(device.min())  # devices counted from the lowest (-1: unknown), so no two keys meet
    devices = int(device.max()) - low + 1
    number = np.zeros(int(codes.max()) + 1, dtype=np.uint16 if len(present) * devices < 1 << 16 else np.int64)
    number[present] = np.arange(len(present))
    key = number[codes]
    key *= devices
    key += (device - low).astype(key.dtype)
    order = np.argsort(key, kind="stable")  # each (name, device) a slice, in the table's order within it
    key = key[order]
    firsts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    del key
    # each slice's times gathered on their own, not every chosen kernel's at once (ten million kernels: 150 MiB)
    start, end = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    categories = kernels["name"].cat.categories
    for a, b in zip(firsts.tolist(), np.append(firsts[1:], len(order)).tolist()):  # top names only
        name = str(categories[codes[order[a]]])
        rows = order[a:b]
        out[name] = out.get(name, 0) + iv.length(iv.union(start[rows], end[rows]))
    return out


@dataclass(frozen=True)
class HotKernel:
    name: str  # as the trace has it (demangled)
    short_name: str
    count: int
    total_us: float
    share_of_busy_pct: float  # the time any instance ran (instances on several streams count once), of busy time
    mean_us: float
    median_us: float
    max_us: float
    op: str | None  # the op that launched it most often
    is_comm: bool
    saving_2x_us: float = 0.0  # what making it 2× faster would save at most: half its time
    op_from: str | None = None  # how its op was found (model.GPU_COLUMNS["op_from"]): launch, capture, kernel name
    label: str = ""  # its name to show: the short name, told apart from others in the list that share it

    def shown(self, width: int) -> str:
        """Its label in `width` characters: the short name whole where it fits, and the template
        argument that tells it apart cut in its middle (tile sizes and lambdas differ at its end)."""
        room = width - len(self.short_name) - 2
        if self.label == self.short_name or room < 6:
            return shorten(self.label, width)
        return f"{self.short_name}<{shorten_middle(self.label[len(self.short_name) + 1:-1], room)}>"


@dataclass(frozen=True)
class KernelsResult:
    kernels: int
    distinct: int
    total_us: float
    top: list[HotKernel]
    mean_us: float = 0.0  # 2.14: total_us over kernels ("what is the average kernel duration?")


ORDERS = {"total": "sum", "mean": "mean", "max": "max", "count": "size"}


def loosely(text: str) -> re.Pattern[str]:
    """A pattern finding `text` in a name, case and underscores aside: libraries spell one thing
    AllReduce, all_reduce and allreduce (NCCL's kernels, vLLM's, c10d's ops)."""
    return re.compile("_?".join(re.escape(c) for c in text.replace("_", "")), re.IGNORECASE)


def is_op_name(trace: Trace, op: str) -> bool:
    """Whether the trace has an op or host range of this very name (case aside)."""
    wanted = op.strip().lower()
    return any(str(c).lower() == wanted for column in (trace.gpu["op"], trace.cpu["name"]) for c in column.cat.categories)


def op_pattern(trace: Trace, op: str) -> re.Pattern[str]:
    """The ops an op filter names: the op of that very name where the trace has one (aten::convolution,
    not aten::convolution_backward too), else every op whose name holds it (loosely)."""
    return re.compile(f"^{re.escape(op.strip())}$", re.IGNORECASE) if is_op_name(trace, op) else loosely(op)


@dataclass(frozen=True)
class OpHost:
    """An op filter's ops on the host (op_pattern): the whole rank, whichever GPU their kernels ran on."""

    calls: int  # its events (ops, record_function ranges, Python frames of that name)
    host_us: float  # the time inside them on the threads that ran them, overlaps counted once (host_time_ns)


def op_host(trace: Trace, op: str) -> OpHost:
    ranges = ranges_named(trace, op_pattern(trace, op))
    return OpHost(len(ranges), us(host_time_ns(ranges)))


def launched_by(trace: Trace, work: pd.DataFrame, op: str) -> np.ndarray:
    """Which rows of device work (taken from trace.gpu) an op launched, itself or through the ops
    inside it: the kernel's own op (the innermost around its launch) or any op around that matches
    (op_pattern). "How long does aten::convolution take?" counts the kernels of aten::cudnn_convolution."""
    pattern = op_pattern(trace, op)
    return matches(work["op"], pattern) | launched_inside(trace, work["correlation"].to_numpy(), pattern)


def op_kernels(trace: Trace, op: str) -> np.ndarray:
    """Which rows of trace.gpu are kernels the op launched, itself or through the ops inside it (launched_by)."""
    gpu = trace.gpu
    return (gpu["kind"] == "kernel").to_numpy() & launched_by(trace, gpu, op)


def detect_hot_kernels(trace: Trace, top: int = 10, name_filter: str | None = None,
                       device: int | None = None, order: str = "total", op_filter: str | None = None,
                       collectives: bool = False) -> KernelsResult:
    """The kernels taking the most device time (on every device, or one), or the longest per
    call (`order` mean or max) or most launched (count); `name_filter` keeps names containing it
    (case and underscores aside), `op_filter` kernels launched by the op it names or inside it (launched_by),
    `collectives` the collective kernels alone (the communication detector's)."""
    # the columns read here, and rows copied only where some are dropped (a rank of kernels alone is its table)
    kernels = on_device(trace.gpu, device)[["name", "kind", "device", "start", "end", "is_comm", "op", "op_from",
                                             "correlation"]]
    keep = (kernels["kind"] == "kernel").to_numpy()
    if name_filter:
        keep = keep & matches(kernels["name"], loosely(name_filter))
    if op_filter:
        keep = keep & launched_by(trace, kernels, op_filter)
    if collectives:
        keep = keep & kernels["is_comm"].to_numpy(bool)
    kernels = rows_where(kernels, keep)
    busy = sum(iv.length(v.busy) for v in views_of(trace, device))
    if kernels.empty:
        return KernelsResult(0, 0, 0.0, [])
    dur = (kernels["end"] - kernels["start"]).to_numpy(np.int64)
    stats = _per_name(kernels["name"], dur)
    stats = stats.sort_values(ORDERS[order], ascending=False, kind="stable")
    chosen = stats.head(top)
    chosen_rows = kernels["name"].isin(chosen.index).to_numpy()
    chosen = chosen.assign(median=[np.median(dur[(kernels["name"] == name).to_numpy()])
                                   for name in chosen.index])  # for the few listed only: a median sorts
    launched = rows_where(kernels, chosen_rows)
    # the op that launched each chosen kernel most often (a few names: per-group work is bounded)
    pairs = launched.groupby(["name", "op", "op_from"], observed=True).size().sort_values(ascending=False)
    ops = {name: (op, source) for name, op, source in reversed(pairs.index.tolist())}
    comm = launched.groupby("name", observed=True)["is_comm"].any()
    running = _running_ns(launched)
    labels = dict(zip(chosen.index, distinct_labels([str(n) for n in chosen.index])))
    rows = [HotKernel(
        name=name, short_name=short_name(name), label=labels[name], count=int(r["size"]), total_us=us(r["sum"]),
        share_of_busy_pct=pct(running[name], busy), mean_us=us(r["mean"]), median_us=us(r["median"]), max_us=us(r["max"]),
        op=ops[name][0] if name in ops else None, is_comm=bool(comm[name]),
        saving_2x_us=us(r["sum"] / 2), op_from=ops[name][1] if name in ops else None,
    ) for name, r in chosen.iterrows()]
    return KernelsResult(kernels=len(kernels), distinct=len(stats), total_us=us(int(dur.sum())), top=rows,
                         mean_us=us(dur.sum() / len(dur)))


def _per_name(names: pd.Series, dur: np.ndarray) -> pd.DataFrame:
    """Per kernel name (those that ran, in category order, as a groupby gives them): its launches, total,
    mean and longest time in ns, by bincounts over the names' codes (a groupby hashed every row again)."""
    codes = names.cat.codes.to_numpy()
    named = codes >= 0  # a kernel with no name is counted in no name's row
    codes, dur = codes[named], dur[named]
    count = len(names.cat.categories)
    size = np.bincount(codes, minlength=count)
    total = np.bincount(codes, weights=dur, minlength=count)  # exact: sums of ns below 2**53
    longest = np.zeros(count, dtype=np.int64)
    np.maximum.at(longest, codes, dur)
    ran = np.flatnonzero(size)
    return pd.DataFrame({"size": size[ran], "sum": total[ran].astype(np.int64), "mean": total[ran] / size[ran],
                         "max": longest[ran]}, index=names.cat.categories[ran])


@dataclass(frozen=True)
class KernelCounts:
    """A rank's kernels: how many ran, how many distinct names, their device time and its mean."""

    count: int
    distinct: int
    total_us: float
    mean_us: float  # 2.14


def kernel_findings(result: KernelsResult, on: str) -> list[tuple[str, str]]:
    """The three hottest kernels; the question is the user's words: the name capped and quoted as
    code, however long or odd."""
    return [(f"kernel {shorten(k.short_name, 24)} {percent(k.share_of_busy_pct)}",
             f"Why is {code(shorten(k.short_name, QUESTION_NAME_CHARS))} hot{on}?") for k in result.top[:3]]


#: printed as two keys: the hot kernels, and how many kernels ran
DETECTOR = Detector("kernels", "Hot kernels", "The kernels that take the most device time.", None, KernelsResult,
                    lambda i, p: detect_hot_kernels(i.trace), place=14, tool=False, findings=kernel_findings,
                    keys=(Key("hot_kernels", list[HotKernel], lambda r: r.top),
                          Key("kernels", KernelCounts, lambda r: KernelCounts(r.kernels, r.distinct, r.total_us, r.mean_us))))
