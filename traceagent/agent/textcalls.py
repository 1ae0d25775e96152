"""Tool calls a model wrote as text instead of sending them as calls.

Small local models, and servers whose chat template does not parse tool calls, put the call in the
answer: a fenced or bare JSON object naming a tool (`{"name": "idle_gaps", "arguments": {...}}`),
the same inside `<tool_call>` tags or after `[TOOL_CALLS]` / `<|python_tag|>`, `<function=name>`
blocks, or a Python-style `functions.idle_gaps(top=3)`. `written_calls` finds them so the session
can run them as calls; `could_be_call` tells it to hold streamed text back until it knows.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Collection
from dataclasses import dataclass

_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input", "kwargs")
_FUNCTION_TAG = re.compile(r"<function=(?P<name>[\w.-]+)>(?P<body>.*?)(?:</function>|\Z)", re.S)
_PARAMETER_TAG = re.compile(r"<parameter=(?P<key>[\w-]+)>\s*(?P<value>.*?)\s*</parameter>", re.S)
_WRAPPERS = re.compile(r"```[\w-]*|```|</?tool_calls?>|\[TOOL_CALLS\]|<\|python_tag\|>|<\|/?tool_call\|?>|"
                       r"</?function_calls?>|<\|eom_id\|>|<\|eot_id\|>|<end_of_turn>")
MAX_LEFT_OVER = 300  # prose beside the calls beyond this: the reply is an answer that quotes a call


@dataclass(frozen=True)
class WrittenCall:
    name: str
    args: dict
    span: tuple[int, int]  # where in the text


def written_calls(text: str, tools: Collection[str]) -> list[WrittenCall]:
    """The tool calls written in `text`, in order; none when the text is an answer that merely
    mentions a call (more than MAX_LEFT_OVER characters of other prose)."""
    found = _json_calls(text, tools) + _tag_calls(text, tools) + _python_calls(text, tools)
    found.sort(key=lambda c: c.span)
    calls: list[WrittenCall] = []
    for call in found:  # a call inside another's span (a tag around JSON) is the same call
        if not calls or call.span[0] >= calls[-1].span[1]:
            calls.append(call)
    if not calls:
        return []
    left = list(text)
    for call in calls:
        left[call.span[0]:call.span[1]] = [" "] * (call.span[1] - call.span[0])
    prose = _WRAPPERS.sub(" ", "".join(left))
    return calls if len(" ".join(prose.split())) <= MAX_LEFT_OVER else []


def could_be_call(text: str, tools: Collection[str]) -> bool:
    """Whether a reply that starts with `text` may turn out to be a tool call written as text (so
    the session holds it back instead of showing it as the answer)."""
    head = text.lstrip()[:60]
    if not head:
        return True
    if head[0] in "{[<`":
        return True
    word = re.match(r"(?:functions\.)?(\w*)", head)
    return bool(word and any(t.startswith(word.group(1)) for t in tools) and
                (len(head) <= len(word.group(0)) or head[len(word.group(0)):].lstrip()[:1] in ("(", "")))


def _call_from(obj: object, tools: Collection[str]) -> tuple[str, dict] | None:
    """(name, args) when a decoded JSON value is a call of one of `tools`."""
    if not isinstance(obj, dict):
        return None
    function = obj.get("function")
    if isinstance(function, dict):  # {"type": "function", "function": {"name": ..., ...}}
        obj = function
    name = obj.get("name") or obj.get("tool") or obj.get("tool_name") or obj.get("function")
    if not isinstance(name, str):
        return None
    name = name.removeprefix("functions.")
    if name not in tools:
        return None
    args: object = next((obj[k] for k in _ARGUMENT_KEYS if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            return None
    return (name, args) if isinstance(args, dict) else None


def _json_calls(text: str, tools: Collection[str]) -> list[WrittenCall]:
    decoder = json.JSONDecoder()
    calls: list[WrittenCall] = []
    i = 0
    while (i := _next_open(text, i)) >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i += 1
            continue
        items = value if isinstance(value, list) else [value]
        pairs = [_call_from(item, tools) for item in items]
        if pairs and all(pairs):
            calls += [WrittenCall(name, args, (i, end)) for name, args in filter(None, pairs)]
            i = end
        else:
            i += 1
    return calls


def _next_open(text: str, start: int) -> int:
    positions = [p for p in (text.find("{", start), text.find("[", start)) if p >= 0]
    return min(positions) if positions else -1


def _tag_calls(text: str, tools: Collection[str]) -> list[WrittenCall]:
    """`<function=name>{json}</function>` or `<function=name><parameter=k>v</parameter>...`."""
    calls = []
    for m in _FUNCTION_TAG.finditer(text):
        name = m.group("name").removeprefix("functions.")
        if name not in tools:
            continue
        body = m.group("body").strip()
        params = {p.group("key"): _literal(p.group("value")) for p in _PARAMETER_TAG.finditer(body)}
        if not params and body:
            try:
                params = json.loads(body)
            except ValueError:
                continue
        if isinstance(params, dict):
            calls.append(WrittenCall(name, params, m.span()))
    return calls


def _python_calls(text: str, tools: Collection[str]) -> list[WrittenCall]:
    """`functions.idle_gaps(top=3)`, `idle_gaps({"top": 3})`, `verdict()`: literal arguments only."""
    calls = []
    names = "|".join(re.escape(t) for t in sorted(tools, key=len, reverse=True))
    for m in re.finditer(rf"(?<![\w.])(?:functions\.)?(?P<name>{names})\s*\(", text):
        end = _closing(text, m.end() - 1)
        if end < 0:
            continue
        try:
            node = ast.parse(text[m.start():end].removeprefix("functions."), mode="eval").body
            assert isinstance(node, ast.Call)
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
            if len(node.args) == 1 and isinstance(given := ast.literal_eval(node.args[0]), dict):
                args = given | args
            elif node.args:
                continue
        except (SyntaxError, ValueError, AssertionError, TypeError, MemoryError, RecursionError):
            continue
        calls.append(WrittenCall(m.group("name"), args, (m.start(), end)))
    return calls


def _closing(text: str, open_at: int) -> int:
    """The index after the parenthesis that closes the one at `open_at`, or -1."""
    depth = 0
    for i in range(open_at, min(len(text), open_at + 4000)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return -1


def _literal(value: str) -> object:
    """A `<parameter>` value: JSON where it parses (numbers, booleans), else the text."""
    try:
        return json.loads(value)
    except ValueError:
        return value
