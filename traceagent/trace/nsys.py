"""Nsight Systems SQLite export → Trace.

Tables are read whole with SQL (names resolved through StringIds in the query), so no Python
code runs per event. Enum values are decoded through the export's ENUM tables when it has them
and through nsys's documented values when it does not (older exports).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..text import MAX_TEXT_CHARS
from .model import MAX_COPY_BYTES, MAX_TIME_NS, Trace, TraceMeta
from .normalize import finish_trace

# nsys's own values (not CUPTI's raw enums), for exports without ENUM tables
COPY_KIND_IDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 9: "HtoH", 10: "PtoP",
                 11: "HtoD", 12: "DtoH", 13: "DtoD", 3: "HtoD", 4: "DtoH", 5: "DtoD", 6: "DtoD", 7: "DtoD"}
MEMORY_KIND_IDS = {0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device", 6: "managed"}
_ENUM_COPY = {"HTOD": "HtoD", "DTOH": "DtoH", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP",
              "UVM_HTOD": "HtoD", "UVM_DTOH": "DtoH", "UVM_DTOD": "DtoD", "HTOA": "HtoD", "ATOH": "DtoH",
              "ATOA": "DtoD", "ATOD": "DtoD", "DTOA": "DtoD"}
_ENUM_MEMORY = {"PAGEABLE": "pageable", "PINNED": "pinned", "DEVICE": "device", "ARRAY": "array",
                "MANAGED": "managed", "DEVICE_STATIC": "device", "MANAGED_STATIC": "managed"}
_API_SUFFIX = re.compile(r"_v\d{4,}$")  # cudaLaunchKernel_v7000 → cudaLaunchKernel (keeps ..._v2)
# torch.autograd.profiler.emit_nvtx names each range "aten::add, seq = 7, op_id = 42, sizes = ..."
_NVTX_OP_SUFFIX = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = .*$")
_NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange


def load_nsys(path: str) -> Trace:
    """Read one Nsight Systems SQLite export into a Trace (all its processes and devices)."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.text_factory = _text  # damaged bytes in a name are a replacement character, not an error
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"unreadable SQLite file ({exc})", "Re-export it with `nsys export --type sqlite`.") from None
    if "StringIds" not in tables or not (tables & {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                                                   "NVTX_EVENTS", "TARGET_INFO_SESSION_START_TIME"}):
        raise TraceError(path, "a SQLite database but not an Nsight Systems export",
                         "Export a report with `nsys export --type sqlite REPORT.nsys-rep`.")
    try:
        with con:
            return _read(con, tables, path)
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"damaged Nsight export ({exc})", "Re-export it with `nsys export --type sqlite`.") from None
    finally:
        con.close()


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _cut(column: str, key: str = "rowid") -> str:
    """SQL for `column` cut to text.MAX_TEXT_CHARS in SQLite, before any of it reaches Python: a
    name of hundreds of megabytes would otherwise be copied per row by pandas. A cut one keeps its
    length and `key` (its row), so two long names stay two."""
    keep = MAX_TEXT_CHARS - 64
    return (f"CASE WHEN length({column}) > {MAX_TEXT_CHARS} THEN substr({column}, 1, {keep}) || '…[' || "
            f"length({column}) || ' characters, id ' || {key} || ']' ELSE {column} END")


@dataclass(frozen=True)
class _Table:
    """What a reader needs from one export table: the columns without which its rows mean nothing,
    and the ones it can do without (read as NULL when the export lacks them)."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


#: The tables read, and their columns. Exports differ by nsys version: older ones lack some
#: optional columns; a table that lacks a required one is skipped with a warning.
SCHEMA = {
    "CUPTI_ACTIVITY_KIND_KERNEL": _Table(("start", "end"), ("deviceId", "streamId", "correlationId", "globalPid",
                                                           "demangledName", "shortName", "gridX", "gridY", "gridZ")),
    "CUPTI_ACTIVITY_KIND_MEMCPY": _Table(("start", "end"), ("deviceId", "streamId", "correlationId", "globalPid",
                                                           "bytes", "copyKind", "srcKind", "dstKind")),
    "CUPTI_ACTIVITY_KIND_MEMSET": _Table(("start", "end"), ("deviceId", "streamId", "correlationId", "globalPid",
                                                           "bytes", "memKind")),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": _Table(("start", "end"), ("deviceId", "streamId", "correlationId",
                                                                    "globalPid")),
    "CUPTI_ACTIVITY_KIND_RUNTIME": _Table(("start", "end"), ("globalTid", "correlationId", "nameId")),
    "NVTX_EVENTS": _Table(("start", "end", "eventType"), ("text", "textId", "globalTid")),
}
_TEXT = {"text"}  # columns holding strings themselves (the rest hold ids into StringIds)
_NUMERIC = {"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "globalTid", "bytes", "copyKind",
            "srcKind", "dstKind", "memKind", "eventType", "nameId", "textId", "demangledName", "shortName", "gridX",
            "gridY", "gridZ"}


def _read_table(con: sqlite3.Connection, name: str, warnings: list[str]) -> pd.DataFrame | None:
    """One table's rows with every schema column (missing optional ones as NULL); numbers checked:
    rows whose times are not integers, or that end before they start, are dropped and counted."""
    spec = SCHEMA[name]
    present = {row[1] for row in con.execute(f"PRAGMA table_info({name})")}
    missing = [c for c in spec.required if c not in present]
    if missing:
        warnings.append(f"{name} has no {', '.join(missing)} column: its rows were skipped")
        return None
    columns = ", ".join((f"{_cut(c)} AS {c}" if c in _TEXT else c) if c in present else f"NULL AS {c}"
                        for c in (*spec.required, *spec.optional))
    frame = pd.read_sql_query(f"SELECT {columns} FROM {name}", con)
    for column in frame.columns:
        if column in _NUMERIC and not pd.api.types.is_numeric_dtype(frame[column]):  # text or blobs
            frame[column] = pd.to_numeric(frame[column].map(lambda v: v if isinstance(v, (int, float)) else None),
                                          errors="coerce")
    times = frame[["start", "end"]]
    ok = (times.notna().all(axis=1).to_numpy() & (frame["end"].fillna(-1) >= frame["start"].fillna(0)).to_numpy()
          & times.fillna(0).apply(lambda c: c.between(-MAX_TIME_NS, MAX_TIME_NS)).all(axis=1).to_numpy())  # sums stay in int64
    # (not abs(): abs of the smallest int64 overflows back to itself)
    if "bytes" in frame:
        ok &= frame["bytes"].fillna(0).between(0, MAX_COPY_BYTES).to_numpy()
    if not ok.all():
        warnings.append(f"{name}: dropped {int((~ok).sum()):,} rows with impossible values (missing, non-numeric or "
                        "reversed times, negative byte counts)")
    return frame[ok].reset_index(drop=True)


def _strings(con: sqlite3.Connection) -> dict:
    """The export's string table; rows damaged into other types are left out (names then read as
    missing, never as bytes)."""
    try:
        rows = con.execute(f"SELECT id, {_cut('value', 'id')} FROM StringIds").fetchall()
    except sqlite3.Error:
        return {}
    return {i: v for i, v in rows if type(i) is int and type(v) is str}


def _read(con: sqlite3.Connection, tables: set[str], path: str) -> Trace:
    copy_kinds, memory_kinds = _enums(con, tables)
    warnings: list[str] = []
    strings = _strings(con)
    frames = {name: _read_table(con, name, warnings) for name in SCHEMA if name in tables}

    def name_of(ids: pd.Series) -> pd.Series:
        return ids.map(strings)

    parts = []
    if (k := frames.get("CUPTI_ACTIVITY_KIND_KERNEL")) is not None and len(k):
        parts.append(pd.DataFrame({
            "kind": "kernel", "name": name_of(k["demangledName"]).fillna(name_of(k["shortName"])),
            "device": k["deviceId"], "stream": k["streamId"], "start": k["start"], "end": k["end"],
            "correlation": k["correlationId"], "globalPid": k["globalPid"], "bytes": 0,
            "copyKind": None, "srcKind": None, "dstKind": None,
            "blocks": (k["gridX"] * k["gridY"] * k["gridZ"]).astype(float)}))
    if (m := frames.get("CUPTI_ACTIVITY_KIND_MEMCPY")) is not None and len(m):
        parts.append(pd.DataFrame({
            "kind": "memcpy", "name": "Memcpy", "device": m["deviceId"], "stream": m["streamId"], "start": m["start"],
            "end": m["end"], "correlation": m["correlationId"], "globalPid": m["globalPid"], "bytes": m["bytes"],
            "copyKind": m["copyKind"], "srcKind": m["srcKind"], "dstKind": m["dstKind"]}))
    if (m := frames.get("CUPTI_ACTIVITY_KIND_MEMSET")) is not None and len(m):
        parts.append(pd.DataFrame({
            "kind": "memset", "name": "Memset", "device": m["deviceId"], "stream": m["streamId"], "start": m["start"],
            "end": m["end"], "correlation": m["correlationId"], "globalPid": m["globalPid"], "bytes": m["bytes"],
            "copyKind": None, "srcKind": None, "dstKind": m["memKind"]}))
    if (y := frames.get("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")) is not None and len(y):
        parts.append(pd.DataFrame({
            "kind": "sync", "name": "Synchronization", "device": y["deviceId"], "stream": y["streamId"],
            "start": y["start"], "end": y["end"], "correlation": y["correlationId"], "globalPid": y["globalPid"],
            "bytes": 0, "copyKind": None, "srcKind": None, "dstKind": None}))
    gpu = pd.concat(parts, ignore_index=True) if parts else None

    cpu_parts = []
    if (r := frames.get("CUPTI_ACTIVITY_KIND_RUNTIME")) is not None and len(r):
        cpu_parts.append(pd.DataFrame({"kind": "runtime", "name": name_of(r["nameId"]), "globalTid": r["globalTid"],
                                       "start": r["start"], "end": r["end"], "correlation": r["correlationId"]}))
    if (n := frames.get("NVTX_EVENTS")) is not None and len(n):
        n = n[n["eventType"].isin(_NVTX_RANGES)]
        cpu_parts.append(pd.DataFrame({"kind": "annotation", "name": n["text"].where(n["text"].notna(),
                                                                                      name_of(n["textId"])),
                                       "globalTid": n["globalTid"], "start": n["start"], "end": n["end"],
                                       "correlation": -1}))
    cpu = pd.concat([p for p in cpu_parts if len(p)], ignore_index=True) if any(len(p) for p in cpu_parts) else None

    gpu_cols = _gpu_columns(gpu, copy_kinds, memory_kinds, _sm_counts(con, tables))
    cpu_cols = _cpu_columns(cpu)
    meta = TraceMeta(format="nsys", path=str(path), devices=_device_names(con, tables),
                     profiler=_profiler(con, tables), warnings=warnings)
    return finish_trace(gpu_cols, cpu_cols, meta, metrics=_gpu_metrics(con, tables, warnings))


#: Nsight's GPU metric names → model.GPU_METRICS' keys (values are % of the unit's peak)
_METRIC_NAMES = [(re.compile(pattern), key) for pattern, key in [
    (r"^PCIe RX Throughput \[Throughput %\]$", "pcie_rx_pct"),
    (r"^PCIe TX Throughput \[Throughput %\]$", "pcie_tx_pct"),
    (r"^NVLink RX (?:Requests|Responses) User Data \[Throughput %\]$|^NVLink RX Throughput \[Throughput %\]$",
     "nvlink_rx_pct"),
    (r"^NVLink TX (?:Requests|Responses) User Data \[Throughput %\]$|^NVLink TX Throughput \[Throughput %\]$",
     "nvlink_tx_pct"),
    (r"^SMs? Active \[Throughput %\]$", "sm_active_pct"),
    (r"^Tensor Active \[Throughput %\]$", "tensor_active_pct"),
    (r"^DRAM Read Bandwidth \[Throughput %\]$", "dram_read_pct"),
    (r"^DRAM Write Bandwidth \[Throughput %\]$", "dram_write_pct"),
]]


def _gpu_metrics(con: sqlite3.Connection, tables: set[str], warnings: list[str]) -> pd.DataFrame | None:
    """The GPU metric samples we interpret (nsys --gpu-metrics-devices), by CUDA device: a sample's
    typeId ends in the GPU's perfworks id (TARGET_INFO_GPU.pwGpuId), which names its device."""
    if not {"GPU_METRICS", "TARGET_INFO_GPU_METRICS"} <= tables:
        return None
    try:
        names = con.execute("SELECT DISTINCT metricId, substr(metricName, 1, 256) FROM TARGET_INFO_GPU_METRICS").fetchall()
        keys = {i: key for i, name in names if type(i) is int and type(name) is str
                for pattern, key in _METRIC_NAMES if pattern.match(name)}
        if not keys:
            return None
        rows = pd.read_sql_query("SELECT timestamp AS time, typeId, metricId, value FROM GPU_METRICS WHERE metricId IN "
                                 f"({','.join(map(str, keys))})", con)
        pw = dict(con.execute("SELECT pwGpuId, id FROM TARGET_INFO_GPU").fetchall()) if "TARGET_INFO_GPU" in tables else {}
    except (sqlite3.Error, pd.errors.DatabaseError) as exc:
        warnings.append(f"GPU_METRICS could not be read ({exc}): no GPU metrics")
        return None
    for column in ("time", "typeId", "value"):
        rows[column] = pd.to_numeric(rows[column], errors="coerce")
    rows = rows.dropna()
    rows = rows[rows["time"].between(-MAX_TIME_NS, MAX_TIME_NS) & rows["value"].between(0, 1e4)]
    gpu_id = rows["typeId"].astype(np.int64) & 0xFF
    only = next(iter(pw.values())) if len(pw) == 1 else None  # one GPU: its samples, whatever the id's layout
    device = {int(g): pw.get(int(g), int(g) if only is None else only) for g in gpu_id.unique()}  # a few GPUs
    rows = rows.assign(device=gpu_id.map(device).astype(np.int64),
                       metric=rows["metricId"].map(keys), time=rows["time"].astype(np.int64))
    # a direction's NVLink requests and responses are one sample each: added together
    return rows.groupby(["device", "time", "metric"], as_index=False, sort=False)["value"].sum()


def _pid(global_id: pd.Series) -> np.ndarray:
    # nsys packs the pid into bits 24..47 of globalTid/globalPid, the tid into bits 0..23
    return ((global_id.to_numpy(np.int64) >> 24) & 0xFFFFFF).astype(np.int64)


def _gpu_columns(gpu: pd.DataFrame | None, copy_kinds: dict, memory_kinds: dict, sm_counts: dict[int, int]) -> dict:
    if gpu is None:
        return {"name": [], "kind": []}
    # a kernel's grid blocks over its GPU's SMs, as Kineto's "blocks per SM" (NaN where either is unknown)
    blocks = gpu["blocks"] if "blocks" in gpu else pd.Series(np.nan, index=gpu.index)
    sms = gpu["device"].map(sm_counts).astype(float)
    # correlation ids are per process: make them unique across the processes of one export
    correlation = (_pid(gpu["globalPid"].fillna(0)) << 32) | gpu["correlation"].fillna(-1).to_numpy(np.int64)
    # name copies and memsets as Kineto does, so one parser (normalize) reads both formats
    copy = gpu["copyKind"].map(copy_kinds).fillna("")
    src = gpu["srcKind"].map(memory_kinds).fillna("unknown").str.capitalize()
    dst = gpu["dstKind"].map(memory_kinds).fillna("unknown").str.capitalize()
    name = gpu["name"].fillna("").astype(str).astype(object)
    is_copy, is_set = gpu["kind"] == "memcpy", gpu["kind"] == "memset"
    name[is_copy] = "Memcpy " + copy[is_copy] + " (" + src[is_copy] + " -> " + dst[is_copy] + ")"
    name[is_set] = "Memset (" + dst[is_set] + ")"
    return {
        "kind": gpu["kind"].to_numpy(object),
        "name": name.to_numpy(object),
        "device": gpu["device"].fillna(-1).to_numpy(np.int64),
        "stream": gpu["stream"].fillna(-1).to_numpy(np.int64),
        "start": gpu["start"].to_numpy(np.int64),
        "end": gpu["end"].to_numpy(np.int64),
        "correlation": correlation,
        "bytes": gpu["bytes"].fillna(0).to_numpy(np.int64),
        "blocks_per_sm": (blocks / sms).to_numpy(np.float32),
    }


def _cpu_columns(cpu: pd.DataFrame | None) -> dict:
    if cpu is None:  # no runtime calls nor NVTX ranges: a device-only export
        empty = np.zeros(0, dtype=np.int64)
        return {"name": [], "kind": [], "pid": empty, "tid": empty, "start": empty, "end": empty, "correlation": empty}
    names = pd.Categorical(cpu["name"].fillna("").astype(str))
    clean = [_NVTX_OP_SUFFIX.sub("", _API_SUFFIX.sub("", n)) for n in names.categories]
    names = names.rename_categories(clean) if len(set(clean)) == len(clean) else pd.Categorical(
        np.asarray(clean, dtype=object)[names.codes])
    driver = np.asarray([bool(re.match(r"cu[A-Z]", n)) for n in names.categories] + [False])[names.codes]
    kind = cpu["kind"].to_numpy(object).copy()
    kind[(kind == "runtime") & driver] = "driver"
    tid_global = cpu["globalTid"].fillna(0).astype(np.int64)
    pid = _pid(tid_global)
    correlation = cpu["correlation"].fillna(-1).to_numpy(np.int64)
    correlation = np.where(correlation >= 0, (pid << 32) | correlation, -1)
    return {
        "kind": kind,
        "name": np.asarray(names, dtype=object),
        "pid": pid,
        "tid": (tid_global.to_numpy(np.int64) & 0xFFFFFF),
        "start": cpu["start"].to_numpy(np.int64),
        "end": cpu["end"].to_numpy(np.int64),
        "correlation": correlation,
    }


def _enums(con: sqlite3.Connection, tables: set[str]) -> tuple[dict, dict]:
    """Copy and memory kinds by id, from the export's ENUM tables or the built-in table."""
    copy_kinds, memory_kinds = dict(COPY_KIND_IDS), dict(MEMORY_KIND_IDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        rows = _id_rows(con, "ENUM_CUDA_MEMCPY_OPER")
        copy_kinds = {i: _ENUM_COPY[n.removeprefix("CUDA_MEMCPY_KIND_")] for i, n in rows
                      if n.removeprefix("CUDA_MEMCPY_KIND_") in _ENUM_COPY}
    if "ENUM_CUDA_MEM_KIND" in tables:
        rows = _id_rows(con, "ENUM_CUDA_MEM_KIND")
        memory_kinds = {i: _ENUM_MEMORY[n.removeprefix("CUDA_MEMOPR_MEMORY_KIND_")] for i, n in rows
                        if n.removeprefix("CUDA_MEMOPR_MEMORY_KIND_") in _ENUM_MEMORY}
    return copy_kinds, memory_kinds


def _id_rows(con: sqlite3.Connection, table: str) -> list[tuple[int, str]]:
    """(id, name) rows of a small lookup table whose ids are integers and names text; other rows
    (damage) are left out, and a table without those columns gives none."""
    try:
        rows = con.execute(f"SELECT id, {_cut('name', 'id')} FROM {table}").fetchall()
    except sqlite3.Error:
        return []
    return [(i, n) for i, n in rows if type(i) is int and type(n) is str]


def _sm_counts(con: sqlite3.Connection, tables: set[str]) -> dict[int, int]:
    """Each GPU's SM count, where the export has TARGET_INFO_GPU (newer exports do not)."""
    try:
        rows = con.execute("SELECT id, smCount FROM TARGET_INFO_GPU").fetchall() if "TARGET_INFO_GPU" in tables else []
    except sqlite3.Error:
        return {}
    return {i: n for i, n in rows if type(i) is int and type(n) is int and n > 0}


def _device_names(con: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "TARGET_INFO_GPU" in tables:
        return dict(_id_rows(con, "TARGET_INFO_GPU"))
    return {}  # newer exports without TARGET_INFO_GPU: finish_trace names them "GPU <id>"


def _profiler(con: sqlite3.Connection, tables: set[str]) -> str:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):  # the older exports' name is the second
        if table in tables:
            try:
                row = con.execute(f"SELECT substr(value, 1, 256) FROM {table} WHERE name = 'EXPORT_PRODUCT_VERSION'"
                                  ).fetchone()
            except sqlite3.Error:
                row = None
            if row and isinstance(row[0], str):
                return f"Nsight Systems {row[0]}"
    return "Nsight Systems"
