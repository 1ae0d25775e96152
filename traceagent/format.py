"""How numbers are written for people: one place, so the CLI, the report, the TUI and the
offline analyst all say the same number the same way."""

from __future__ import annotations


def duration(us: float | None) -> str:
    """µs → '812.0 µs', '12.34 ms', '1.234 s'."""
    if us is None:
        return "-"
    if abs(us) >= 1e6:
        return f"{us / 1e6:.3f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """(1, 'call') → '1 call'; (3, 'call') → '3 calls'; (2, 'pass', 'passes') → '2 passes'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def size(nbytes: int | float) -> str:
    """Bytes in decimal units, as bandwidths are quoted (GB/s)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{int(nbytes)} B"


def rate(gbps: float | None) -> str:
    """GB/s → '3.1 GB/s', '20.5 MB/s', '812.0 kB/s' (decimal units, as bandwidths are quoted):
    a few bytes' copy is slow, not '0.0 GB/s'."""
    return _scaled(gbps, ("GB/s", "MB/s", "kB/s"))


def flop_rate(tflops: float | None) -> str:
    """TFLOP/s → '153.7 TFLOP/s', '8.8 GFLOP/s', '12.0 MFLOP/s': a tiny matmul is slow, not '0.0 TFLOP/s'."""
    return _scaled(tflops, ("TFLOP/s", "GFLOP/s", "MFLOP/s"))


def _scaled(value: float | None, units: tuple[str, ...]) -> str:
    """`value` (in units[0]) in the first of `units`, each 1000× smaller, that it reaches 1 of (else the last)."""
    if value is None:
        return "-"
    scale = 1.0
    for unit in units[:-1]:
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
        scale *= 1e-3
    return f"{value / scale:.1f} {units[-1]}"


def shorten(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def upper_first(text: str) -> str:
    """The text with its first letter capitalised, the rest as written ("rank 0, GPU 1" → "Rank 0, GPU 1")."""
    return text[:1].upper() + text[1:]


def shorten_middle(text: str, width: int = 60) -> str:
    """At most `width` characters, its start and end kept (a kernel's template arguments differ at
    either end: `Kernel2<cutlass_80_…_128x2_tn_align8>`)."""
    return text if len(text) <= width else f"{text[:width // 2 - 1]}…{text[-(width - width // 2):]}"


def of_span(devices: int) -> str:
    """What a rank's percentages are over, in words: its span with one device, device time (the
    devices' spans added up) with more."""
    return "of the span" if devices <= 1 else f"of device time ({devices} GPUs)"


def scope(rank: int | None, device: int | str | None = None) -> str:
    """'rank 7, GPU 1', 'rank 7', or 'GPU 1': who a number belongs to."""
    parts = ([f"rank {rank}"] if rank is not None else []) + ([f"GPU {device}"] if device is not None else [])
    return ", ".join(parts)
