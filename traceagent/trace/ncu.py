"""Nsight Compute CSV exports (`ncu --csv --page details` or `--page raw`) → one `KernelLaunch`
per profiled launch, with its metrics under names that do not depend on the page.

The details page has a row per metric ("Section Name", "Metric Name", "Metric Unit", "Metric
Value", and rule rows with "Rule Name/Type/Description"); the raw page has a column per metric
and a second header row of units. Both may follow whatever the profiled program printed to
stdout and ncu's own `==PROF==` lines: reading starts at the header. Values may carry thousands
separators ("1,215,000,000.00"). Strings from the file are untrusted: made visible and bounded.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

from ..errors import TraceError
from ..format import size
from ..text import bounded, visible
from . import reading, storage

#: what each normalized metric is called on the details page (section, metric) and on the raw page
METRICS: dict[str, tuple[tuple[str, str], tuple[str, ...]]] = {
    "duration": (("GPU Speed Of Light Throughput", "Duration"), ("gpu__time_duration.sum",)),
    "compute_pct": (("GPU Speed Of Light Throughput", "Compute (SM) Throughput"),
                    ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    "memory_pct": (("GPU Speed Of Light Throughput", "Memory Throughput"),
                   ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
    "dram_pct": (("GPU Speed Of Light Throughput", "DRAM Throughput"),
                 ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                  "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
    "achieved_occupancy_pct": (("Occupancy", "Achieved Occupancy"), ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    "theoretical_occupancy_pct": (("Occupancy", "Theoretical Occupancy"), ("sm__maximum_warps_per_active_cycle_pct",)),
    "registers": (("Launch Statistics", "Registers Per Thread"), ("launch__registers_per_thread",)),
    "waves": (("Launch Statistics", "Waves Per SM"), ("launch__waves_per_multiprocessor",)),
    "limit_registers": (("Occupancy", "Block Limit Registers"), ("launch__occupancy_limit_registers",)),
    "limit_shared_mem": (("Occupancy", "Block Limit Shared Mem"), ("launch__occupancy_limit_shared_mem",)),
    "limit_warps": (("Occupancy", "Block Limit Warps"), ("launch__occupancy_limit_warps",)),
    "limit_blocks": (("Occupancy", "Block Limit SM"), ("launch__occupancy_limit_blocks",)),
    "warp_cycles_per_instruction": (("Warp State Statistics", "Warp Cycles Per Issued Instruction"),
                                    ("smsp__average_warp_latency_per_inst_issued.ratio",)),
    "dram_bytes": (("Memory Workload Analysis", "DRAM Bytes"), ("dram__bytes.sum",)),
}
#: floating-point instruction counts (raw page): FLOPs = add + mul + 2 × fma, per precision
FLOP_COUNTERS = re.compile(r"^sm__sass_thread_inst_executed_op_([dfh])(add|mul|fma)_pred_on\.sum$")
#: warp stall reasons (raw page, or details with --metrics): cycles stalled per issued instruction
STALL = re.compile(r"^smsp__(?:average_)?warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$"
                   r"|^smsp__pcsamp_warps_issue_stalled_(\w+)$")
#: a time's unit → ns
_TIME_UNITS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9,
               "second": 1e9}
_BYTE_UNITS = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "kb": 1e3, "mb": 1e6, "gb": 1e9,
               "kib": 1024, "mib": 1 << 20, "gib": 1 << 30}
_HEADER = ("ID", "Kernel Name")
#: a file larger than this is not an ncu CSV of a handful of kernels (the memory a bad file may take)
MAX_CSV_BYTES = 256 << 20


@dataclass
class KernelLaunch:
    """One profiled launch: its kernel, launch shape, normalized metrics and ncu's own advice."""

    id: int
    name: str
    block: str  # "(384, 1, 1)"
    grid: str
    device: str
    cc: str  # compute capability "10.0"
    metrics: dict[str, float] = field(default_factory=dict)  # METRICS' names; duration in ns, dram_bytes in bytes
    stalls: dict[str, float] = field(default_factory=dict)  # reason → cycles per issued instruction
    flops: float | None = None  # from the SASS instruction counters, where recorded
    rules: list[tuple[str, str, float | None]] = field(default_factory=list)  # ncu's OPT/WRN rules: name, text, speedup %


def load_ncu(path: str) -> list[KernelLaunch]:
    """The launches of an ncu CSV export; TraceError (one line, exit 2) for anything else."""
    path = storage.as_local(path)
    storage.check_file(path)  # a pipe or a device would block or read forever
    try:
        raw, _ = reading.read_text(path, MAX_CSV_BYTES, too_large=lambda limit, seen: TraceError(
            path, f"over {size(limit)} of text (read {size(seen)} so far): an Nsight Compute export of a few kernels "
            "is a few megabytes", "Export only the kernels you need: ncu --kernel-name regex:NAME --launch-count 3 "
            "--csv --page details --log-file out.csv ..."))
    except OSError as exc:
        raise TraceError(path, f"cannot be read: {exc.strerror or exc}", "Check the path of the ncu export.") from None
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if start is None:
        raise TraceError(path, "not an Nsight Compute CSV: no header row with \"ID\" and \"Kernel Name\"",
                         "Export one with `ncu --csv --page details --log-file out.csv ...` (or --page raw).")
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    except csv.Error as exc:
        raise TraceError(path, f"malformed CSV after line {start + 1}: {exc}", "Re-export it with ncu --csv.") from None
    header = rows[0]
    read = _details if "Metric Name" in header and "Metric Value" in header else _raw
    launches = read(path, header, rows[1:], start)
    if not launches:
        raise TraceError(path, "an Nsight Compute CSV without any profiled kernel",
                         "Check that ncu's --kernel-name/--launch-skip filters matched a launch.")
    return launches


def _is_header(line: str) -> bool:
    try:
        cells = next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return False
    return all(h in cells for h in _HEADER)


def _launch(row: dict[str, str], path: str, line: int) -> KernelLaunch:
    try:
        launch_id = int(_number(row.get("ID", "")))
    except ValueError:
        raise TraceError(path, f"line {line}: the ID column holds {visible(bounded(row.get('ID', ''), 40))!r}, not a "
                         "number", "Re-export it with ncu --csv.") from None
    return KernelLaunch(launch_id, _text(row.get("Kernel Name", "")), _text(row.get("Block Size", "")),
                        _text(row.get("Grid Size", "")), _text(row.get("Device", "")), _text(row.get("CC", "")))


def _text(value: str, limit: int = 512) -> str:
    return visible(bounded(value.strip(), limit))


def _number(value: str) -> float:
    """'1,215,000,000.00' → 1215000000.0; ValueError for text ('n/a', 'PolicySpread')."""
    return float(value.replace(",", "").strip())


def _scaled(name: str, value: float, unit: str) -> float:
    """Durations to ns and byte counts to bytes, whatever unit the page used."""
    unit = unit.strip().lower()
    if name == "duration":
        return value * _TIME_UNITS.get(unit, 1.0)
    if name == "dram_bytes":
        return value * _BYTE_UNITS.get(unit, 1.0)
    return value


_BY_SECTION = {pair: name for name, (pair, _) in METRICS.items()}
_BY_RAW = {raw: name for name, (_, raws) in METRICS.items() for raw in raws}


def _store(launch: KernelLaunch, metric: str, name: str | None, value: float, unit: str) -> None:
    if name is not None:
        launch.metrics[name] = _scaled(name, value, unit)
    elif found := STALL.match(metric):
        launch.stalls[found.group(1) or found.group(2)] = value
    elif found := FLOP_COUNTERS.match(metric):
        launch.flops = (launch.flops or 0.0) + value * (2 if found.group(2) == "fma" else 1)


def _details(path: str, header: list[str], rows: list[list[str]], start: int) -> list[KernelLaunch]:
    launches: dict[int, KernelLaunch] = {}
    for n, cells in enumerate(rows, start + 2):
        if not any(cells):
            continue
        row = dict(zip(header, cells))
        launch = _launch(row, path, n)
        launch = launches.setdefault(launch.id, launch)
        if row.get("Rule Name") and row.get("Rule Type", "").strip() in ("OPT", "WRN"):
            try:
                speedup: float | None = _number(row.get("Estimated Speedup", ""))
            except ValueError:
                speedup = None
            launch.rules.append((_text(row["Rule Name"], 80), _text(row.get("Rule Description", ""), 2000), speedup))
            continue
        metric, section = row.get("Metric Name", ""), row.get("Section Name", "")
        try:
            value = _number(row.get("Metric Value", ""))
        except ValueError:
            continue  # a text value ('PolicySpread', 'all') or none: nothing we compute with
        _store(launch, metric, _BY_SECTION.get((section, metric)) or _BY_RAW.get(metric), value,
               row.get("Metric Unit", ""))
    return list(launches.values())


def _raw(path: str, header: list[str], rows: list[list[str]], start: int) -> list[KernelLaunch]:
    units = rows[0] if rows and not rows[0][:1] == [] and not rows[0][0].strip() else None  # the units row
    body = rows[1:] if units is not None else rows
    launches = []
    for n, cells in enumerate(body, start + (3 if units is not None else 2)):
        if not any(cells):
            continue
        if len(cells) != len(header):
            raise TraceError(path, f"line {n}: {len(cells)} columns where the header has {len(header)}",
                             "The file was cut or edited; re-export it with ncu --csv --page raw.")
        row = dict(zip(header, cells))
        launch = _launch(row, path, n)
        for i, metric in enumerate(header):
            try:
                value = _number(cells[i])
            except ValueError:
                continue
            _store(launch, metric, _BY_RAW.get(metric), value, units[i] if units is not None else "")
        launches.append(launch)
    return launches
