"""The ranges a detector parameter may take, declared on its field (`launch_gap_us: Micros = 10.0`)
and checked wherever a value comes from outside (`--set`, MCP's settings): NaN, infinities,
negative or absurd values are refused with the range, never turned into a silent other verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from msgspec import Meta

#: a duration in µs: up to about 11.6 days
Micros = Annotated[float, Meta(ge=0, le=1e12)]
#: a percentage of some denominator
Percent = Annotated[float, Meta(ge=0, le=100)]
#: a fraction of some whole
Share = Annotated[float, Meta(ge=0, le=1)]
#: the share of a gap (or of a lateness) that must be covered for a cause to be named; above 1 never is
Cover = Annotated[float, Meta(ge=0, le=2)]
#: how many of something to keep or show (at least one)
Count = Annotated[int, Meta(ge=1, le=1_000_000)]
#: how many of something to allow (zero allowed)
Allowance = Annotated[int, Meta(ge=0, le=1_000_000)]
#: how many times something else a quantity may be (a ratio)
Times = Annotated[float, Meta(ge=0, le=1e6)]
#: a bandwidth in Gb/s or GB/s; 0 where the field says it means "the usual one"
Bandwidth = Annotated[float, Meta(ge=0, le=1e6)]


@dataclass(frozen=True)
class TaggedBy:
    """`Annotated[A | B | ..., TaggedBy("kind")]`: a union whose members each say which they are in
    the key `key`; the JSON Schema says so (pydantic reads this when the schema is generated, and is
    imported only then: the analysis does not load it)."""

    key: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic import Field

        return handler(Annotated[source, Field(discriminator=self.key)])


def field_range(owner: type, name: str) -> Meta | None:
    """The range declared on `owner`'s field `name`, or None."""
    hint = get_type_hints(owner, include_extras=True).get(name)
    if get_origin(hint) is not Annotated:
        return None
    return next((m for m in get_args(hint)[1:] if isinstance(m, Meta)), None)


def out_of_range(owner: type, name: str, value: Any) -> str | None:
    """Why `value` may not be `owner.name` (its declared range, or not finite), or None if it may."""
    if isinstance(value, float) and not math.isfinite(value):
        return "a finite number"
    meta = field_range(owner, name)
    if meta is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    low, high = meta.ge, meta.le
    if (low is not None and value < low) or (high is not None and value > high):
        return f"a number from {_plain(low)} to {_plain(high)}"
    return None


def _plain(bound: float | None) -> str:
    """1000000 as 1,000,000 (not 1e+06), 0.5 as 0.5."""
    if bound is None:
        return "any"
    return f"{bound:,.0f}" if float(bound).is_integer() else f"{bound:g}"
