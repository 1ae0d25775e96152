"""Format-independent finishing of a Trace: the loaders hand over raw columns, this adds the rest.

Everything here works on whole columns (or on the few distinct names), never per event.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from ..text import bounded, visible
from .model import (
    CPU_COLUMNS,
    GPU_COLUMNS,
    MEMORY_COLUMNS,
    METRIC_COLUMNS,
    STEP_COLUMNS,
    Trace,
    TraceMeta,
    among,
    categorical,
    in_order_of_appearance,
    listed_for,
    matches,
    typed_frame,
)

# "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoD (Device -> Device)", "Memset (Device)"
_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_MEMSET_NAME = re.compile(r"Memset\s*\((\w+)\)", re.IGNORECASE)
_COPY_KIND = {"htod": "HtoD", "dtoh": "DtoH", "dtod": "DtoD", "htoh": "HtoH", "ptop": "PtoP"}
_MEMORY_KIND = {k: k for k in ("pageable", "pinned", "device", "managed", "array")}

#: Collective kernels: NCCL (ncclKernel_* old, ncclDevKernel_* current), RCCL, and NVLink SHARP /
#: symmetric-memory collectives (multimem_all_reduce_kernel on B200, one_shot/two_shot all-reduce).
COMM_KERNEL = re.compile(r"nccl|rccl|multimem_|\b(one|two)_shot_all_reduce|symm_mem", re.IGNORECASE)
#: Ops whose launches are collectives even when the kernel name does not say so.
COMM_OP = re.compile(r"^(c10d::|record_param_comms|nccl:)")
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
#: The host call that replays a CUDA (or HIP) graph: every kernel of the replay carries its correlation id.
GRAPH_LAUNCH = re.compile(r"^(?:cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)(?:_v\d+|_ptsz)?$")
DATALOADER_NAME = re.compile(r"^enumerate\((DataLoader|DataPipe)\)")
#: A user's range (record_function, NVTX) named for loading data: its time is data loading.
DATA_RANGE = re.compile(r"data[ _-]?load|load[ _-]?(batch|data)|[gs]et[ _-]?batch|fetch[ _-]?(batch|data)|next[ _-]?batch"
                        r"|input[ _-]?pipeline|\bdataloader\b|\bprefetch", re.IGNORECASE)
#: An inference server's step: SGLang's scheduler range `step[DECODE bs=32]` / `step[EXTEND bs=15
#: toks=15360]` (EXTEND is prefill; MIXED both), and vLLM's model-runner range
#: `execute_{tokens}_context_{prefill requests}(…)_generation_{decode requests}(…)`.
SERVING_STEP = re.compile(r"^step\[(?P<sglang>EXTEND|PREFILL|DECODE|MIXED|IDLE)\b(?P<args>[^\]]*)\]$"
                          # vLLM: execute_context_N(T)_generation_M(T) (N prefill requests of T tokens, M
                          # decode requests), earlier execute_TOKENS_context_N(…)_generation_M(…)
                          r"|^execute_(?:(?P<tokens>\d+)_)?context_(?P<context>\d+)\((?P<context_tokens>\d+)?.*?\)"
                          r"_generation_(?P<generation>\d+)\((?P<generation_tokens>\d+)?")
#: A user's range naming an iteration, when there is no ProfilerStep: "step 12", "iteration_3", or a
#: bare "train_step" repeated (numbered in order).
ITERATION_NAME = re.compile(r"^(?:train(?:ing)?[ _-]?)?(?:step|iter(?:ation)?|batch)(?:[ _#:-]*(\d+))?$"
                            r"|^(?:forward[ _-]?backward|decode[ _-]?step|train[ _-]?iter)$", re.IGNORECASE)


def parse_copy_names(names: pd.Categorical) -> tuple[pd.Categorical, pd.Categorical, pd.Categorical]:
    """Copy kind and source/destination memory kinds, parsed once per distinct copy name."""
    kinds, srcs, dsts = [], [], []
    for name in names.categories:
        kind = src = dst = None
        if m := _MEMCPY_NAME.search(name):
            kind = _COPY_KIND.get(m.group(1).lower())
            src = _MEMORY_KIND.get((m.group(2) or "").lower())
            dst = _MEMORY_KIND.get((m.group(3) or "").lower())
        elif m := _MEMSET_NAME.search(name):
            dst = _MEMORY_KIND.get(m.group(1).lower())
        kinds.append(kind)
        srcs.append(src)
        dsts.append(dst)
    codes = names.codes
    return tuple(_take(values, codes) for values in (kinds, srcs, dsts))


def _take(values: list, codes: np.ndarray) -> pd.Categorical:
    """Map per-category values onto rows (code -1, a missing name, maps to None)."""
    lookup = np.array([*values, None], dtype=object)
    return categorical(lookup[codes])


def thread_time(pid: np.ndarray, tid: np.ndarray, t: np.ndarray, t_min: int, width: int) -> np.ndarray:
    """Times shifted so each thread owns a disjoint stretch of one axis: per-thread interval
    work then runs as a single sorted-array pass over all threads."""
    thread, _ = pd.factorize(thread_keys(pid, tid))  # threads numbered in any order: hashing, not sorting
    return numbered_thread_time(thread, t, t_min, width)


def numbered_thread_time(thread: np.ndarray, t: np.ndarray, t_min: int, width: int) -> np.ndarray:
    """thread_time for threads already numbered 0, 1, …: thread × width + (t − t_min), built in one array."""
    out = thread.astype(np.int64) * width
    out += t
    out -= t_min
    return out


def thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each (pid, tid) as one int64: the pid above 32 bits, the tid's 32 bits below (Kineto writes
    pthread ids cut to int32, negative ones too), so `key >> 32` is the pid again."""
    return (np.asarray(pid, dtype=np.int64) << 32) ^ (np.asarray(tid, dtype=np.int64) & 0xFFFFFFFF)


def nesting_depth(pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of each host event among the events of its thread that enclose it (0 = outermost).

    For properly nested intervals the enclosing events are those that started before it
    (in start order, longer first on ties) and have not ended by its start.
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    t_min, width = int(start.min()), int(end.max() - start.min()) + 1
    s = thread_time(pid, tid, start, t_min, width)
    e = s + (end - start)
    order = start_order(s, e)
    depth = np.empty(n, dtype=np.int32)
    depth[order] = depth_in_start_order(s[order], e[order])
    return depth


def depth_in_start_order(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For events in start order (start_order) on one axis: how many earlier ones are still open at
    each start, its depth where events nest. A zero-length event ends at its own start, so it is not
    subtracted from itself."""
    # ends in start order are nearly sorted already: timsort (stable) takes 2.4× less than quicksort on them
    ended = np.searchsorted(np.sort(e, kind="stable"), s, side="right") - (e == s)
    return np.maximum(np.arange(len(s)) - ended, 0)


def start_order(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Positions in order of start, the longer first among equal starts (an enclosing event before
    what it encloses). One stable argsort, then only the runs of equal starts sorted by length:
    host events come nearly in start order, where a two-key lexsort took 20 times as long."""
    order = np.argsort(s, kind="stable")
    s_sorted = s[order]
    tied = np.zeros(len(s), dtype=bool)
    same = s_sorted[1:] == s_sorted[:-1]
    tied[1:] |= same
    tied[:-1] |= same
    if tied.any():
        runs = order[tied]  # the tied positions, their runs in start order
        order[tied] = runs[np.lexsort((s[runs] - e[runs], s[runs]))]
    return order


def innermost_enclosing(outer: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row position in `outer` (host events with pid/tid/start/end) of the innermost event on the
    same thread that encloses time `t`, or -1 (innermost_by_thread)."""
    if len(outer) == 0 or len(t) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    return innermost_by_thread(thread_keys(outer["pid"].to_numpy(), outer["tid"].to_numpy()),
                               outer["start"].to_numpy(np.int64), outer["end"].to_numpy(np.int64), thread_keys(pid, tid), t)


def innermost_by_thread(o_thread: np.ndarray, o_start: np.ndarray, o_end: np.ndarray, thread: np.ndarray,
                        t: np.ndarray) -> np.ndarray:
    """Position among events (their threads as thread_keys, starts, ends) of the innermost one on
    thread `thread` (thread_keys) that encloses time `t`, or -1.

    Among the events that started by `t`, the innermost encloser is the last one (in start
    order) still open at `t`: the rightmost end time ≥ t at or before that position, found for
    all queries at once by walking a max-tree of end times (2n values, where a table of window
    maxima held n log n).
    """
    result = np.full(len(t), -1, dtype=np.int64)
    if len(o_start) == 0 or len(t) == 0:
        return result
    t_min = int(min(o_start.min(), t.min()))
    width = int(max(o_end.max(), t.max()) - t_min) + 1
    # the events' threads numbered by hashing, each query's looked up among them (-1: a thread with
    # no event, where no query finds one): no concatenated copy of events and queries
    threads, known = pd.factorize(o_thread)
    s = numbered_thread_time(threads, o_start, t_min, width)
    del threads
    order = np.argsort(s, kind="stable")
    e = o_end - o_start
    e += s
    tree = _max_tree(e[order])
    del e
    s = s[order]
    known_threads = pd.Index(known)
    # the queries' axis times are made a chunk at a time, as innermost_open answers them
    for lo in range(0, len(t), QUERY_CHUNK):
        asked_thread = known_threads.get_indexer(thread[lo:lo + QUERY_CHUNK])
        q = np.where(asked_thread >= 0, numbered_thread_time(asked_thread, np.asarray(t[lo:lo + QUERY_CHUNK], dtype=np.int64),
                                                             t_min, width), -1)
        found = _last_open(tree, s, q, q)
        hit = found >= 0
        result[lo:lo + QUERY_CHUNK][hit] = order[found[hit]]
    return result


def innermost_open(s: np.ndarray, e: np.ndarray, q: np.ndarray, at_least: np.ndarray) -> np.ndarray:
    """For events on one axis in start order (s sorted, e their ends) and query times q (-1: none):
    the position of the last event started by q whose end is at least `at_least` (q for an event
    open at q inclusive, q + 1 for one still running after q), or -1. The queries are answered
    QUERY_CHUNK at a time: what each step of the tree walk holds stays small however many are asked."""
    result = np.full(len(q), -1, dtype=np.int64)
    tree = _max_tree(e)
    for lo in range(0, len(q), QUERY_CHUNK):
        result[lo:lo + QUERY_CHUNK] = _last_open(tree, s, q[lo:lo + QUERY_CHUNK], at_least[lo:lo + QUERY_CHUNK])
    return result


def _last_open(tree: np.ndarray, s: np.ndarray, q: np.ndarray, at_least: np.ndarray) -> np.ndarray:
    """innermost_open for one chunk of queries, over the max-tree of the events' ends (_max_tree)."""
    found = np.full(len(q), -1, dtype=np.int64)
    last_started = np.searchsorted(s, q, side="right") - 1
    asked = np.flatnonzero((last_started >= 0) & (q >= 0))
    found[asked] = _rightmost_at_least(tree, last_started[asked], at_least[asked])
    return found


#: queries innermost_open and innermost_by_thread walk the tree for at once
QUERY_CHUNK = 1 << 16


def _max_tree(values: np.ndarray) -> np.ndarray:
    """A max-tree over `values`: leaves from index `len(tree) // 2`, each node the larger of its two
    children (the smallest int64 past the values)."""
    size = 1 << max(int(len(values) - 1).bit_length(), 0)
    tree = np.full(2 * size, np.iinfo(np.int64).min, dtype=np.int64)
    tree[size:size + len(values)] = values
    for level_start in (size >> k for k in range(1, size.bit_length())):
        tree[level_start:2 * level_start] = np.maximum(tree[2 * level_start:4 * level_start:2],
                                                       tree[2 * level_start + 1:4 * level_start:2])
    return tree


def _rightmost_at_least(tree: np.ndarray, upto: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """For each query, the largest index i ≤ upto with values[i] ≥ floor, or -1, in the max-tree
    of the values (_max_tree): climb from leaf `upto` until a left sibling's subtree holds a value
    ≥ floor, then descend into its rightmost such leaf; each is one vectorised step per tree level."""
    size = len(tree) // 2
    node = upto + size
    done = tree[node] >= floor  # the leaf itself
    climbing = ~done
    while climbing.any():
        at = np.flatnonzero(climbing)
        n = node[at]
        hit = ((n & 1) == 1) & (tree[n - 1] >= floor[at])  # a right child whose left sibling holds one
        node[at[hit]] = n[hit] - 1
        climbing[at[hit]] = False
        up = at[~hit]
        node[up] >>= 1
        gone = up[node[up] <= 1]  # climbed to the root: nothing at or before `upto`
        node[gone] = 0
        climbing[gone] = False
    descending = np.flatnonzero((node > 0) & (node < size))
    while len(descending):
        n = node[descending]
        right = 2 * n + 1
        node[descending] = np.where(tree[right] >= floor[descending], right, 2 * n)
        descending = descending[node[descending] < size]
    return np.where(node > 0, node - size, -1)


def _visible_names(values) -> pd.Categorical:
    """A string column with every category made visible and bounded (text.visible, text.bounded):
    once per distinct name."""
    cats = categorical(values)
    names = [str(c) for c in cats.categories]
    shown = [visible(bounded(n)) for n in names]
    if shown == names:
        return cats
    if len(set(shown)) == len(shown):
        return cats.rename_categories(shown)
    return categorical(np.asarray([*shown, None], dtype=object)[cats.codes])


def finish_trace(gpu: dict, cpu: dict, meta: TraceMeta, memory: dict | None = None,
                 metrics: pd.DataFrame | None = None) -> Trace:
    """Build the typed frames, link device work to ops, flag collectives, derive steps. Every
    string from the trace is made visible here (no raw control characters past this point).
    The column dicts are consumed: the frames take their arrays without copying them."""
    meta.devices = {d: visible(bounded(name, 256)) for d, name in meta.devices.items()}
    if "stack" in cpu:
        cpu["stack"] = _visible_names(cpu["stack"])
    if "kernel" in cpu:
        cpu["kernel"] = _visible_names(cpu["kernel"])
    gpu_names = _visible_names(gpu.pop("name"))
    copy_kind, src_kind, dst_kind = parse_copy_names(gpu_names)
    is_copy = np.asarray(gpu["kind"]) == "memcpy"
    gpu["copy_kind"] = categorical(np.where(is_copy, np.asarray(copy_kind, dtype=object), np.asarray(None, dtype=object)))
    gpu["src_kind"] = src_kind
    gpu["dst_kind"] = dst_kind
    gpu["name"] = gpu_names

    cpu_names = _visible_names(cpu.pop("name"))
    cpu["name"] = cpu_names
    kind = categorical(cpu["kind"])
    loading = matches(pd.Series(cpu_names), DATALOADER_NAME) | (
        np.asarray(kind == "annotation") & matches(pd.Series(cpu_names), DATA_RANGE))
    if loading.any():
        if "dataloader" not in kind.categories:
            kind = kind.add_categories(["dataloader"])
        kind[loading] = "dataloader"
        kind = in_order_of_appearance(kind.codes, kind.categories)
    cpu["kind"] = kind
    if "depth" not in cpu:
        cpu["depth"] = nesting_depth(*(np.asarray(cpu[c], dtype=np.int64) for c in ("pid", "tid", "start", "end")))

    gpu_frame = typed_frame(gpu, GPU_COLUMNS)
    cpu_frame = typed_frame(cpu, CPU_COLUMNS)
    gpu.clear()  # the frames hold these arrays now (not copies); nothing else may
    cpu.clear()
    _link_ops(gpu_frame, cpu_frame)
    gpu_frame["op_from"] = attributed_replays(gpu_frame, cpu_frame)
    gpu_frame["is_comm"] = _comm_flags(gpu_frame)
    gpu_frame = _sorted_by_start(gpu_frame)
    cpu_frame = _sorted_by_start(cpu_frame)
    steps = derive_steps(gpu_frame, cpu_frame)
    used = sorted(int(d) for d in gpu_frame["device"].unique())
    if used:  # a trace lists every GPU in the machine; keep those it recorded work on
        meta.devices = device_names(used, meta.devices)
    memory_frame = typed_frame(memory or {}, MEMORY_COLUMNS).sort_values("time", kind="stable", ignore_index=True)
    metric_frame = typed_frame({} if metrics is None else {c: metrics[c].to_numpy() for c in metrics}, METRIC_COLUMNS)
    return Trace(gpu=gpu_frame, cpu=cpu_frame, steps=steps, meta=meta, memory=memory_frame,
                 metrics=metric_frame.sort_values(["device", "time"], kind="stable", ignore_index=True))


def _sorted_by_start(frame: pd.DataFrame) -> pd.DataFrame:
    """`sort_values("start", kind="stable")`, a column at a time: each unsorted column is let go
    once its sorted copy exists, so memory holds the frame and one column more, not two frames."""
    order = np.argsort(frame["start"].to_numpy(), kind="stable")
    if (order[1:] > order[:-1]).all():  # already in order (one thread, or merged by time)
        return frame.reset_index(drop=True)
    labels, columns = frame.columns, {}
    for name in list(labels):
        values = frame.pop(name).array
        columns[name] = values.take(order)
    return pd.DataFrame(columns, columns=labels, copy=False)  # the labels' dtype kept (see typed_frame)


def _link_ops(gpu: pd.DataFrame, cpu: pd.DataFrame) -> None:
    """Fill each device activity's op: the innermost host op around the call that launched it.

    Nesting in time is used rather than External ids because some PyTorch versions stamp the
    launch call with its correlation id instead of the op's id; ids are the fallback when the
    launch call is missing (sampled traces).
    """
    ops = cpu.loc[among(cpu["kind"], ["op", "annotation", "dataloader"]), ["pid", "tid", "start", "end", "external_id", "name"]]
    calls = _first_launch_calls(cpu)
    owner = innermost_enclosing(ops, calls["pid"].to_numpy(), calls["tid"].to_numpy(), calls["start"].to_numpy())
    call = pd.Index(calls["correlation"].to_numpy()).get_indexer(gpu["correlation"].to_numpy())
    op_pos = np.append(owner, -1)[call]  # no launch call (-1): no op

    name = ops["name"].array  # the op's name as a code: no object array of names for every row
    codes = np.full(len(gpu), -1, dtype=name.codes.dtype)
    external = gpu["external_id"].to_numpy().copy()
    linked = op_pos >= 0
    codes[linked] = name.codes[op_pos[linked]]
    external[linked] = ops["external_id"].to_numpy()[op_pos[linked]]
    unlinked = ~linked & (external >= 0)
    if unlinked.any():  # no launch call (sampled traces): the last op with the same External id
        op_ids = ops["external_id"].to_numpy()
        with_id = np.flatnonzero(op_ids >= 0)
        last = ~pd.Series(op_ids[with_id]).duplicated(keep="last").to_numpy()
        by_id = pd.Series(with_id[last], index=op_ids[with_id][last])
        pos = pd.Series(external[unlinked]).map(by_id).fillna(-1).to_numpy(np.int64)
        codes[np.flatnonzero(unlinked)[pos >= 0]] = name.codes[pos[pos >= 0]]
    gpu["external_id"] = external
    gpu["op"] = in_order_of_appearance(codes, name.categories)


def _launch_calls(cpu: pd.DataFrame) -> pd.DataFrame:
    """Runtime and driver calls with a correlation id: the columns linking ops, steps and replay
    attribution read."""
    mask = among(cpu["kind"], ["runtime", "driver"]) & (cpu["correlation"] >= 0).to_numpy()
    return cpu.loc[mask, ["name", "correlation", "pid", "tid", "start", "kernel"]]


def _first_launch_calls(cpu: pd.DataFrame) -> pd.DataFrame:
    """Each correlation id's launch call: its first call (as core/host.calls_by_correlation)."""
    return _launch_calls(cpu).drop_duplicates("correlation")


def capture_ops(trace: Trace) -> dict[str, str]:
    """Kernel name → the op around its launch in a graph capture: launch calls that record their
    kernel (the trace's own capture, or a capture trace vLLM writes apart), most common op first."""
    return _capture_ops(trace.cpu)


def with_capture(trace: Trace, captured: dict[str, str]) -> Trace:
    """The trace with its graph-replayed kernels given the ops of a separate capture trace (capture_ops)."""
    gpu = trace.gpu.copy()
    gpu["op_from"] = attributed_replays(gpu, trace.cpu, captured)
    return replace(trace, gpu=gpu)


def _capture_ops(cpu: pd.DataFrame) -> dict[str, str]:
    calls = _launch_calls(cpu)
    calls = calls[calls["kernel"].notna().to_numpy()]
    if calls.empty:
        return {}
    ops = cpu.loc[among(cpu["kind"], ["op"]), ["pid", "tid", "start", "end", "name"]]
    owner = innermost_enclosing(ops, calls["pid"].to_numpy(), calls["tid"].to_numpy(), calls["start"].to_numpy())
    kernels, names = calls["kernel"].array, ops["name"].array
    best = _most_common(kernels.codes[owner >= 0], names.codes[owner[owner >= 0]], len(kernels.categories),
                        len(names.categories))
    return {str(kernels.categories[k]): str(names.categories[o]) for k, o in enumerate(best[:-1]) if o >= 0}


def _most_common(keys: np.ndarray, values: np.ndarray, n_keys: int, n_values: int) -> np.ndarray:
    """For each key code, the value code paired with it most often (-1: none), from codes; one
    more entry at the end, -1, so that key code -1 reads as none."""
    ok = (keys >= 0) & (values >= 0)
    pair, count = np.unique(keys[ok].astype(np.int64) * (n_values + 1) + values[ok], return_counts=True)
    pair = pair[np.lexsort((count, pair // (n_values + 1)))]  # by key, then count: each key's last is its most common
    best = np.full(n_keys + 1, -1, dtype=np.int64)
    if len(pair):
        last = np.append(pair[1:] // (n_values + 1) != pair[:-1] // (n_values + 1), True)
        best[pair[last] // (n_values + 1)] = pair[last] % (n_values + 1)
    return best


def attributed_replays(gpu: pd.DataFrame, cpu: pd.DataFrame, captured: dict[str, str] | None = None) -> pd.Categorical:
    """Give kernels replayed from a graph the op of their capture (in this trace, or `captured`
    from a capture trace), else the op that launches the same kernel outside graphs; their op
    around the replay call (a step's range) says nothing. Returns `op_from` (model.GPU_COLUMNS);
    sets `op` in place."""
    source = np.full(len(gpu), None, dtype=object)
    has_op = gpu["op"].notna().to_numpy()
    if not any(GRAPH_LAUNCH.match(str(name)) for name in cpu["name"].cat.categories):  # no graphs: the usual case
        source[has_op] = "launch"
        return categorical(source)
    graph_calls = cpu["correlation"].to_numpy()[matches(cpu["name"], GRAPH_LAUNCH)
                                                & among(cpu["kind"], ["runtime", "driver"])]
    kernel = (gpu["kind"] == "kernel").to_numpy()
    replay = kernel & np.isin(gpu["correlation"].to_numpy(), graph_calls)
    source[has_op & ~replay] = "launch"
    if replay.any():
        own = _capture_ops(cpu) if cpu["kernel"].notna().any() else {}
        capture = {**(captured or {}), **own}  # the trace's own capture first
        names = [str(c) for c in gpu["name"].cat.categories]
        name_code = gpu["name"].cat.codes.to_numpy()
        op_codes = gpu["op"].cat.codes.to_numpy()
        ops = list(gpu["op"].cat.categories)
        # by kernel name: the op most often launching each name outside graphs
        eager = kernel & ~replay
        by_name = _most_common(name_code[eager], op_codes[eager], len(names), len(ops))
        # from the capture: each distinct name looked up once, its op added to the categories if new
        index = {op: i for i, op in enumerate(ops)}
        for op in dict.fromkeys(capture.values()):
            if op not in index:
                index[op] = len(ops)
                ops.append(op)
        by_capture = np.array([index[capture[n]] if n in capture else -1 for n in names] + [-1], dtype=np.int64)
        at = np.flatnonzero(replay)
        from_capture, from_name = by_capture[name_code[at]], by_name[name_code[at]]
        new = op_codes.astype(np.int64)
        new[at] = np.where(from_capture >= 0, from_capture, from_name)
        source[at[from_capture >= 0]] = "capture"
        source[at[(from_capture < 0) & (from_name >= 0)]] = "kernel name"
        gpu["op"] = in_order_of_appearance(new, ops)
    return categorical(source)


def device_names(used: list[int], listed: dict[int, str]) -> dict[int, str]:
    """Names for the devices that ran work, as the trace lists them (`listed_for`). A device listed
    without a name (an empty one, as some ROCm traces write), or not listed, is named by its id."""
    names = listed_for(used, listed)
    return {d: names.get(d) or f"GPU {d}" for d in used}


def _comm_flags(gpu: pd.DataFrame) -> np.ndarray:
    flagged = matches(gpu["name"], COMM_KERNEL) | matches(gpu["op"], COMM_OP)
    return flagged & (gpu["kind"].to_numpy() == "kernel")


def derive_steps(gpu: pd.DataFrame, cpu: pd.DataFrame, pattern: re.Pattern | None = None) -> pd.DataFrame:
    """Step host ranges, and the device range of the work each step launched. Steps are
    ProfilerStep#N; without those, the user's iteration ranges (record_function or NVTX:
    ITERATION_NAME); or the ranges whose names match `pattern` (`--steps`). A number in the name
    (its first group) numbers the step; otherwise steps are numbered in order."""
    host = _step_ranges(cpu, STEP_NAME, kinds=("op", "annotation")) if pattern is None else None
    if pattern is None and host is not None and host.empty:
        host = _step_ranges(cpu, SERVING_STEP, kinds=("annotation", "op"))
    if host is None or host.empty:
        host = _step_ranges(cpu, pattern or ITERATION_NAME, kinds=("annotation",) if pattern is None
                            else ("op", "annotation", "python", "dataloader"))
    if host.empty:
        return typed_frame({}, STEP_COLUMNS)
    # a step can appear on several threads; keep its widest range
    host = host.sort_values("dur").drop_duplicates("step", keep="last").sort_values("start")
    starts, ends = host["start"].to_numpy(), host["end"].to_numpy()

    work = gpu[gpu["kind"] != "sync"]
    first = _first_launch_calls(cpu)
    pos = pd.Index(first["correlation"].to_numpy()).get_indexer(work["correlation"].to_numpy())
    # in exact ns, an op without a launch call at its own start (a map would make every time a float)
    launch_at = np.where(pos >= 0, np.append(first["start"].to_numpy(np.int64), 0)[pos], work["start"].to_numpy(np.int64))
    slot = np.searchsorted(starts, launch_at, side="right") - 1
    inside = (slot >= 0) & (launch_at < ends[np.clip(slot, 0, None)])
    grouped = pd.DataFrame({"slot": slot[inside], "start": work["start"].to_numpy()[inside],
                            "end": work["end"].to_numpy()[inside]}).groupby("slot")
    gpu_start, gpu_end = _each_step(grouped["start"].min(), len(host)), _each_step(grouped["end"].max(), len(host))
    served = [serving_phase(str(n)) for n in host["name"].astype(object)]
    return typed_frame({
        "step": host["step"].to_numpy(),
        "name": host["name"].astype(object).to_numpy(),
        "start": starts,
        "end": ends,
        "gpu_start": gpu_start,
        "gpu_end": gpu_end,
        "phase": [p for p, _ in served],
        "tokens": pd.array([t for _, t in served], dtype="Int64"),
    }, STEP_COLUMNS)


def _each_step(by_slot: pd.Series, steps: int) -> pd.arrays.IntegerArray:
    """A value per step from one per slot (step position) that has device work, <NA> for the
    others, in exact ns (a reindex would make them floats, off by up to 128 ns at epoch times)."""
    values, missing = np.zeros(steps, dtype=np.int64), np.ones(steps, dtype=bool)
    values[by_slot.index.to_numpy()] = by_slot.to_numpy(np.int64)
    missing[by_slot.index.to_numpy()] = False
    return pd.arrays.IntegerArray(values, missing)


def serving_phase(name: str) -> tuple[str | None, int | None]:
    """(prefill, decode or mixed; tokens) from an inference server's step name, (None, None) for others."""
    found = SERVING_STEP.match(name)
    if found is None:
        return None, None
    if found["sglang"]:
        numbers = dict(re.findall(r"(\w+)=(\d+)", found["args"] or ""))
        tokens = _number(numbers.get("toks") or numbers.get("bs") or "")
        phase = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}.get(found["sglang"])
        return phase, tokens if tokens >= 0 else None
    context, generation = _number(found["context"]), _number(found["generation"])
    phase = "mixed" if context > 0 and generation > 0 else "prefill" if context > 0 else "decode" if generation > 0 else None
    if found["tokens"] and _number(found["tokens"]) >= 0:
        return phase, _number(found["tokens"])
    counts = [_number(t) for t in (found["context_tokens"], found["generation_tokens"]) if t and _number(t) >= 0]
    return phase, sum(counts) if counts else None


def _number(text: str) -> int:
    """A step or token number from a range's name, or -1: digits only, and small enough for an
    int64 column (a name can say ProfilerStep#99999999999999999999999)."""
    return int(text) if text.isdigit() and len(text) <= 18 else -1


def _step_ranges(cpu: pd.DataFrame, pattern: re.Pattern, kinds: tuple[str, ...]) -> pd.DataFrame:
    """Host ranges whose names match, with a `step` number and `dur`; empty when none match."""
    names = [str(n) for n in cpu["name"].cat.categories]
    found = [pattern.match(n) for n in names]
    hit = np.array([m is not None for m in found] + [False])[cpu["name"].cat.codes.to_numpy()]
    numbers = np.array([_number(m.group(1)) if m and m.groups() and m.group(1) else -1
                        for m in found] + [-1], dtype=np.int64)[cpu["name"].cat.codes.to_numpy()]
    rows = hit & among(cpu["kind"], kinds)
    if not rows.any():  # most patterns find nothing: no copy of the frame to say so
        return cpu.iloc[:0]
    host = cpu[rows].copy()
    host["step"] = numbers[rows]
    host["dur"] = host["end"] - host["start"]
    if (host["step"] < 0).any():  # names without a number: number them in order of their start
        host = host.sort_values("start", kind="stable")
        host = host[host["depth"] == host["depth"].min()]  # the outermost, not a nested repeat
        host["step"] = np.arange(len(host))
    return host


def with_step_pattern(trace: Trace, pattern: re.Pattern) -> Trace:
    """The trace with steps taken from the host ranges whose names match `pattern` (`--steps`)."""
    return replace(trace, steps=derive_steps(trace.gpu, trace.cpu, pattern))


def as_analysed(trace: Trace, steps: re.Pattern | None = None, captured: dict[str, str] | None = None) -> Trace:
    """The trace as an analysis asked for it: steps from `--steps`, replayed kernels given a
    separate capture's ops (`--graph-capture`); as loaded when neither is given."""
    if steps is not None:
        trace = with_step_pattern(trace, steps)
    return with_capture(trace, captured) if captured else trace


def split_ranks(trace: Trace) -> list[Trace]:
    """A merged multi-rank file (events tagged with their rank) as one Trace per rank; any other
    trace as itself. Untagged events (process metadata, flows) stay with no rank."""
    ranks = sorted((_values_in(trace.gpu["rank"]) | _values_in(trace.cpu["rank"])) - {-1})
    if len(ranks) < 2:
        return [trace]
    out = []
    for rank in ranks:
        gpu = trace.gpu[trace.gpu["rank"] == rank].reset_index(drop=True)
        cpu = trace.cpu[trace.cpu["rank"] == rank].reset_index(drop=True)
        used = sorted(int(d) for d in gpu["device"].unique())
        meta = replace(trace.meta, rank=int(rank), world_size=trace.meta.world_size or len(ranks),
                       devices={d: trace.meta.devices.get(d, f"GPU {d}") for d in used},
                       warnings=[*trace.meta.warnings, f"rank {rank} of a merged file of {len(ranks)} ranks"])
        memory = trace.memory[trace.memory["rank"] == rank].reset_index(drop=True)
        metrics = trace.metrics[trace.metrics["device"].isin(used)].reset_index(drop=True)
        out.append(Trace(gpu=gpu, cpu=cpu, steps=derive_steps(gpu, cpu), meta=meta, memory=memory, metrics=metrics))
    return out


def _values_in(column: pd.Series) -> set[int]:
    """The distinct values of an integer column; one pass when they are all the same (one rank)."""
    values = column.to_numpy()
    if len(values) == 0:
        return set()
    if values.min() == values.max():
        return {int(values[0])}
    return {int(v) for v in np.unique(values)}
