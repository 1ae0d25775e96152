"""Nsight Systems SQLite export → Trace.

Tables are read whole with SQL (names resolved through StringIds in the query), so no Python
code runs per event. Enum values are decoded through the export's ENUM tables when it has them
and through nsys's documented values when it does not (older exports).
"""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pandas as pd

from ..errors import TraceError
from .model import Trace, TraceMeta
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


def _read(con: sqlite3.Connection, tables: set[str], path: str) -> Trace:
    def query(sql: str) -> pd.DataFrame:
        return pd.read_sql_query(sql, con)

    copy_kinds, memory_kinds = _enums(con, tables)
    parts = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        parts.append(query(
            "SELECT 'kernel' AS kind, COALESCE(d.value, s.value) AS name, k.deviceId AS device, "
            "k.streamId AS stream, k.start, k.end, k.correlationId AS correlation, k.globalPid, "
            "0 AS bytes, NULL AS copyKind, NULL AS srcKind, NULL AS dstKind "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds d ON d.id = k.demangledName "
            "LEFT JOIN StringIds s ON s.id = k.shortName"))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        parts.append(query(
            "SELECT 'memcpy' AS kind, 'Memcpy' AS name, deviceId AS device, streamId AS stream, start, end, "
            "correlationId AS correlation, globalPid, bytes, copyKind, srcKind, dstKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        parts.append(query(
            "SELECT 'memset' AS kind, 'Memset' AS name, deviceId AS device, streamId AS stream, start, end, "
            "correlationId AS correlation, globalPid, bytes, NULL AS copyKind, NULL AS srcKind, memKind AS dstKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMSET"))
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        parts.append(query(
            "SELECT 'sync' AS kind, 'Synchronization' AS name, deviceId AS device, streamId AS stream, start, end, "
            "correlationId AS correlation, globalPid, 0 AS bytes, NULL AS copyKind, NULL AS srcKind, NULL AS dstKind "
            "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"))
    gpu = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None

    cpu_parts = []
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        cpu_parts.append(query(
            "SELECT 'runtime' AS kind, s.value AS name, r.globalTid, r.start, r.end, r.correlationId AS correlation "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId"))
    if "NVTX_EVENTS" in tables:
        cpu_parts.append(query(
            "SELECT 'annotation' AS kind, COALESCE(n.text, s.value) AS name, n.globalTid, n.start, n.end, "
            "-1 AS correlation FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            f"WHERE n.eventType IN {_NVTX_RANGES} AND n.end IS NOT NULL"))
    cpu = pd.concat([p for p in cpu_parts if len(p)], ignore_index=True) if any(len(p) for p in cpu_parts) else None

    gpu_cols = _gpu_columns(gpu, copy_kinds, memory_kinds)
    cpu_cols = _cpu_columns(cpu)
    meta = TraceMeta(format="nsys", path=str(path), devices=_device_names(con, tables),
                     profiler=_profiler(con, tables))
    return finish_trace(gpu_cols, cpu_cols, meta)


def _pid(global_id: pd.Series) -> np.ndarray:
    # nsys packs the pid into bits 24..47 of globalTid/globalPid, the tid into bits 0..23
    return ((global_id.to_numpy(np.int64) >> 24) & 0xFFFFFF).astype(np.int64)


def _gpu_columns(gpu: pd.DataFrame | None, copy_kinds: dict, memory_kinds: dict) -> dict:
    if gpu is None:
        return {"name": [], "kind": []}
    # correlation ids are per process: make them unique across the processes of one export
    correlation = (_pid(gpu["globalPid"]) << 32) | gpu["correlation"].fillna(-1).to_numpy(np.int64)
    # name copies and memsets as Kineto does, so one parser (normalize) reads both formats
    copy = gpu["copyKind"].map(copy_kinds).fillna("")
    src = gpu["srcKind"].map(memory_kinds).fillna("unknown").str.capitalize()
    dst = gpu["dstKind"].map(memory_kinds).fillna("unknown").str.capitalize()
    name = gpu["name"].fillna("").astype(object)
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
    }


def _cpu_columns(cpu: pd.DataFrame | None) -> dict:
    if cpu is None:
        return {"name": [], "kind": []}
    names = pd.Categorical(cpu["name"].fillna(""))
    clean = [_NVTX_OP_SUFFIX.sub("", _API_SUFFIX.sub("", n)) for n in names.categories]
    names = names.rename_categories(clean) if len(set(clean)) == len(clean) else pd.Categorical(
        np.asarray(clean, dtype=object)[names.codes])
    driver = np.asarray([bool(re.match(r"cu[A-Z]", n)) for n in names.categories] + [False])[names.codes]
    kind = cpu["kind"].to_numpy(object).copy()
    kind[(kind == "runtime") & driver] = "driver"
    tid_global = cpu["globalTid"].fillna(0)
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
        rows = con.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER").fetchall()
        copy_kinds = {i: _ENUM_COPY[n.removeprefix("CUDA_MEMCPY_KIND_")] for i, n in rows
                      if n.removeprefix("CUDA_MEMCPY_KIND_") in _ENUM_COPY}
    if "ENUM_CUDA_MEM_KIND" in tables:
        rows = con.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND").fetchall()
        memory_kinds = {i: _ENUM_MEMORY[n.removeprefix("CUDA_MEMOPR_MEMORY_KIND_")] for i, n in rows
                        if n.removeprefix("CUDA_MEMOPR_MEMORY_KIND_") in _ENUM_MEMORY}
    return copy_kinds, memory_kinds


def _device_names(con: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "TARGET_INFO_GPU" in tables:
        rows = con.execute("SELECT id, name FROM TARGET_INFO_GPU").fetchall()
        return {int(i): str(n) for i, n in rows if i is not None}
    return {}  # newer exports without TARGET_INFO_GPU: finish_trace names them "GPU <id>"


def _profiler(con: sqlite3.Connection, tables: set[str]) -> str:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):  # the older exports' name is the second
        if table in tables:
            row = con.execute(f"SELECT value FROM {table} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
            if row:
                return f"Nsight Systems {row[0]}"
    return "Nsight Systems"
