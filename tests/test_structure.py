"""The package's shape, read from its source with `ast`: no import cycles, data flows one way
through the layers (DESIGN.md, "The flow"), and the vocabulary is defined in one module."""

from __future__ import annotations

import ast
from functools import cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from traceagent.detect.core import vocabulary

PACKAGE = Path(__file__).parents[1] / "traceagent"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path) -> set[str]:
    """Every traceagent module this file imports, at module level or inside functions."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("traceagent")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("traceagent"):
                # `from . import x` may name a submodule: count it when it is one
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if _is_module(sub) else target)
    return found - {name}


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


@cache  # one parse of the package for every test here (the graph is only read)
def import_graph() -> dict[str, set[str]]:
    return {module_name(p): internal_imports(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_cycles():
    graph = import_graph()
    # a package's __init__ runs before its submodules: importing a parent is not a cycle edge
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    try:
        tuple(TopologicalSorter(edges).static_order())
    except CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_the_walk_finds_a_cycle_when_there_is_one(tmp_path):
    # the check above is only worth something if TopologicalSorter sees the edges we build
    with pytest.raises(CycleError):
        tuple(TopologicalSorter({"a": {"b"}, "b": {"a"}}).static_order())
    assert "traceagent.agent.events" in import_graph()["traceagent.agent.session"]


@pytest.mark.parametrize("layer, must_not_import", [
    ("traceagent.trace", ("traceagent.detect", "traceagent.agent", "traceagent.report", "traceagent.tui",
                          "traceagent.cli", "traceagent.tasks", "traceagent.api", "traceagent.request",
                          "traceagent.profile")),
    ("traceagent.detect", ("traceagent.agent", "traceagent.report", "traceagent.tui", "traceagent.cli", "traceagent.profile",
                           "traceagent.trace.load", "traceagent.trace.kineto", "traceagent.trace.nsys")),
    # inside detect/: the views and tables, then the detectors, then the verdict and its consumers,
    # then the comparison; the runner (analysis, registry) above them all
    ("traceagent.detect.core", ("traceagent.detect.detectors", "traceagent.detect.verdict", "traceagent.detect.compare",
                                "traceagent.detect.analysis", "traceagent.detect.registry")),
    ("traceagent.detect.detectors", ("traceagent.detect.verdict", "traceagent.detect.compare",
                                     "traceagent.detect.analysis", "traceagent.detect.registry")),
    ("traceagent.detect.verdict", ("traceagent.detect.compare", "traceagent.detect.analysis",
                                   "traceagent.detect.registry")),
    ("traceagent.agent", ("traceagent.report", "traceagent.tui", "traceagent.cli")),
    ("traceagent.report", ("traceagent.agent", "traceagent.tui", "traceagent.cli", "traceagent.profile.record")),
    # recording runs the user's script and keeps it: it uses the analysis, never the presentation
    ("traceagent.profile", ("traceagent.agent", "traceagent.report", "traceagent.tui", "traceagent.cli")),
])
def test_data_flows_one_way(layer, must_not_import):
    offending = {(m, d) for m, deps in import_graph().items() if m.startswith(layer)
                 for d in deps if d.startswith(must_not_import)}
    assert not offending


def test_the_launcher_in_the_users_process_imports_nothing_of_ours():
    # it runs as a file inside the user's script's process: no pandas, no Rich, only torch
    assert import_graph()["traceagent.profile._launch"] == set()


def test_no_result_or_answer_writes_its_own_json():
    # results are encoded from their fields (core/encode.py), answers are projections of theirs
    # (agent/answers.py); Analysis.to_dict is the public API's name for that encoding
    defined = [f"{module_name(path)}.{cls.name}" for path in PACKAGE.rglob("*.py")
               for cls in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(cls, ast.ClassDef)
               for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "to_dict"]
    assert defined == ["traceagent.detect.analysis.Analysis"]


def _string_literals(node: ast.AST) -> list[str]:
    return [n.value for n in node.elts] if all(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                               for n in getattr(node, "elts", [None])) else []


WORDS = set(vocabulary.LIMITERS) | set(vocabulary.ROOT_CAUSES) | set(vocabulary.GAP_CAUSES)


def vocabulary_tables(path: Path) -> list[int]:
    """Lines of literal tables of vocabulary words: a dict whose keys are two or more of the words
    and whose values are short strings (labels, colours), or a tuple/list/set of three or more words that
    are most of its items (a table header that names a few classes of work is not a table)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            # short strings (labels, colours, words); advice keyed by cause is logic, not vocabulary
            strings = all(isinstance(v, ast.Constant) and isinstance(v.value, str) and len(v.value) < 60
                          for v in node.values)
            if strings and len([k for k in keys if k in WORDS]) >= 2:
                lines.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = _string_literals(node)
            words = [w for w in items if w in WORDS]
            if len(words) >= 3 and 2 * len(words) > len(items):
                lines.append(node.lineno)
    return lines


def test_limiter_and_cause_words_are_defined_once():
    found = {str(p.relative_to(PACKAGE)): lines for p in PACKAGE.rglob("*.py")
             if p.name != "vocabulary.py" and (lines := vocabulary_tables(p))}
    assert found == {}


def test_the_table_finder_finds_a_table(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text('COLORS = {"dataloader": "#e4572e", "sync": "#8e44ad"}\nCAUSES = ("sync", "dataloader", "host_other")\n')
    assert vocabulary_tables(sample) == [1, 2]


def test_every_word_has_a_label_meaning_and_colours():
    for table in (vocabulary.LIMITERS, vocabulary.ROOT_CAUSES, vocabulary.GAP_CAUSES, vocabulary.WORK):
        for name, word in table.items():
            assert word.name == name and word.label and word.meaning and word.color.startswith("#") and word.style
    assert set(vocabulary.GAP_ROOT) == set(vocabulary.GAP_CAUSES)
    assert set(vocabulary.GAP_ROOT.values()) <= set(vocabulary.ROOT_CAUSES)
    assert all(word.measure for word in vocabulary.ROOT_CAUSES.values())
    assert all(word.finding for word in vocabulary.GAP_CAUSES.values())  # each names its saving


def test_the_system_prompt_states_the_four_limiters():
    text = (PACKAGE.parent / "prompts" / "system.md").read_text()
    assert "$vocabulary" in text and "three" not in text
    prompt = vocabulary.as_prompt()
    assert all(f"`{name}`" in prompt for name in vocabulary.LIMITERS) and len(vocabulary.LIMITERS) == 4


def test_an_analysis_option_is_named_in_one_place_per_interface():
    """The options travel as one AnalyzeRequest: the chat app and its loader never name one."""
    for module in ("tui/app.py", "tui/loader.py"):
        text = (PACKAGE / module).read_text()
        assert not any(option in text for option in ("graph_capture", "max_bytes", "kernels=", "settings="))
    cli = (PACKAGE / "cli.py").read_text()
    assert cli.count("AnalyzeRequest(") == 1  # request_of: the command line's one place


def test_the_chat_apps_loader_receives_one_request_object(monkeypatch):
    import pickle
    import subprocess

    from traceagent.request import AnalyzeRequest
    from traceagent.tui import loader

    sent = []

    def child(command, input, capture_output):
        sent.append((command, pickle.loads(input)))
        return subprocess.CompletedProcess(command, 0, pickle.dumps(("analysis", None)), b"")

    monkeypatch.setattr(loader.subprocess, "run", child)
    request = AnalyzeRequest("t.json", steps=r"step_(\d+)", settings=("idle.top=3",), graph_capture="cap.json")
    assert loader.load_in_child(request, request.of_other("u.json")) == ("analysis", None)
    (command, (received, compare)), = sent
    assert command[-1] == "traceagent.tui.loader"  # no options as argv values
    assert received == request and received.pattern.pattern == r"step_(\d+)"
    assert compare.source == "u.json" and compare.graph_capture is None and compare.settings == ("idle.top=3",)
