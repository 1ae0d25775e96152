"""What no analysis may ever say, whatever the input: negative times or sizes, shares outside
0–100%, non-finite numbers. Used by the hostile-input corpus and the fuzz tests."""

from __future__ import annotations

import math

#: keys that are differences or positions and may be negative or exceed 100
_SIGNED = ("change", "slower_pct", "measured_pct", "start_us", "late_by_us")


def impossible(value, path: str = "") -> list[str]:
    """Every impossible number in an analysis dict (`Analysis.to_dict()`), by its path."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += impossible(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += impossible(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        key = path.rsplit(".", 1)[-1]
        if isinstance(value, float) and not math.isfinite(value):
            found.append(f"{path} = {value}")
        elif any(s in path for s in _SIGNED):
            pass
        elif value < 0 and not key.startswith(("correlation", "rank", "device", "stream", "pid", "tid")):
            found.append(f"{path} = {value}")
        elif key.endswith("_pct") and value > 100.0001:
            found.append(f"{path} = {value}")
    return found
