"""Ranks analysed as Dask tasks: the same results as in this process, a bad rank reported while
the others are analysed, rank files read through fsspec. The jobs are built here by
test_multigpu.write_job, whose expected straggler and causes are worked out there by hand."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from test_multigpu import write_job

import traceagent
from traceagent import tasks
from traceagent.agent.tools import AnalysisContext, build_tools
from traceagent.cli import main
from traceagent.detect.analysis import RankFailure
from traceagent.tasks import SMALL_JOB_BYTES, scheduler_for
from traceagent.trace import cache, heap

RANKS, LATE = 8, 5
# one worker runs them all: the module fixtures (a cluster, loaded apps) start once
pytestmark = pytest.mark.xdist_group("dask")


@pytest.fixture(scope="module")
def cluster(session_cache_dir):
    from distributed import LocalCluster  # here: only the worker that runs these imports Dask

    # workers start before any test's environment is set: give them the session's cache
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR, env={"TRACEAGENT_CACHE_DIR": str(session_cache_dir)}) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    return write_job(tmp_path_factory.mktemp("job") / "run", late_rank=LATE, how="dataloader", ranks=RANKS)


def test_ranks_on_a_cluster_give_what_this_process_gives(job, cluster):
    here = traceagent.analyze(job, scheduler="none", use_cache=False)
    progress = []
    there = traceagent.analyze(job, scheduler=cluster, use_cache=False, progress=lambda *p: progress.append(p))
    assert [r.rank for r in there.ranks] == list(range(RANKS))
    # progress as ranks finish, in whatever order they do: each count once, each file once
    assert [p[:2] for p in progress] == [(done, RANKS) for done in range(RANKS + 1)]
    assert sorted(p[2] for p in progress[1:]) == sorted(f.name for f in job.iterdir())
    assert there.to_dict() == here.to_dict()
    c = there.comparison
    assert (c.straggler, c.straggler_cause, there.verdict.root_cause) == (LATE, "dataloader", "straggler")
    # the workers sent back results, not events: this process holds no rank's frames
    assert all(r.loaded is None for r in there.ranks) and all(r.loaded is not None for r in here.ranks)


def test_a_query_past_the_results_loads_that_rank_again(job, cluster):
    analysis = traceagent.analyze(job, scheduler=cluster)
    there = build_tools(AnalysisContext(analysis))
    # loaded once while it is asked about: what detectors memoize per Trace is not redone per query
    assert analysis.rank(4).trace is analysis.rank(4).trace and analysis.rank(4).trace.meta.rank == 4
    assert analysis.rank(4).gaps is analysis.rank(4).gaps  # its gaps, likewise: classified once, not per tool call
    # each worker cached the ranks it parsed, where TRACEAGENT_CACHE_DIR says on that worker
    assert all(cache.read(cache.key(str(f))) is not None for f in job.iterdir())
    here = build_tools(AnalysisContext(traceagent.analyze(job, scheduler="none")))
    for tool, query in (("hot_kernels", {"rank": LATE, "device": 0, "top": 3}),
                        ("hot_kernels", {"rank": 2, "name_filter": "sgemm"}),
                        ("idle_gaps", {"rank": 3, "min_us": 100})):  # the gaps, classified again
        mine, theirs = ({t.name: t for t in tools}[tool].invoke(query) for tools in (here, there))
        assert json.loads(theirs) == json.loads(mine)


def test_a_corrupt_rank_is_reported_and_the_others_analysed(tmp_path, cluster, capsys):
    folder = write_job(tmp_path / "run", late_rank=LATE, ranks=RANKS)
    (folder / "rank3.json").write_bytes(b"\x00\x01 not a trace")
    analysis = traceagent.analyze(folder, scheduler="local", use_cache=False)  # a cluster of its own
    assert [r.rank for r in analysis.ranks] == [r for r in range(RANKS) if r != 3]
    assert analysis.failed == [RankFailure(str(folder / "rank3.json"), "not a trace file. Expected PyTorch Profiler "
                                           "JSON (.json/.json.gz) or an Nsight Systems .sqlite export.")]
    assert analysis.comparison.straggler == LATE
    assert analysis.to_dict()["trace"]["failed_ranks"] == [{"file": str(folder / "rank3.json"),
                                                            "error": analysis.failed[0].error}]
    # the command goes on too, with one line on stderr
    assert main(["analyze", str(folder), "--scheduler", cluster, "--no-cache"]) == 0
    assert f"warning: {folder / 'rank3.json'}: not a trace file" in capsys.readouterr().err


def test_a_job_with_no_good_rank_is_one_error(tmp_path, capsys):
    for rank in range(2):
        (tmp_path / f"rank{rank}.json").write_text("{}")
    assert main(["analyze", str(tmp_path), "--scheduler", "none"]) == 2
    assert capsys.readouterr().err.startswith(f"traceagent: error: {tmp_path}: no rank file could be analysed")


def test_ranks_read_through_an_fsspec_filesystem(tmp_path):
    job = write_job(tmp_path / "run", late_rank=2, ranks=4)
    fs = fsspec.filesystem("memory")
    for path in sorted(job.iterdir()):
        fs.pipe(f"/run19/{path.name}", path.read_bytes())
    local = traceagent.analyze(job, scheduler="none").to_dict()
    assert local["comparison"]["straggler"] == 2
    for source in ("memory://run19", "memory://run19/rank*.json", [f"memory://run19/rank{r}.json" for r in range(4)]):
        remote = traceagent.analyze(source, scheduler="none").to_dict()
        assert [r["verdict"] for r in remote["ranks"]] == [r["verdict"] for r in local["ranks"]]
        assert remote["comparison"] == local["comparison"]


def test_a_glob_of_rank_files_on_the_command_line(job, capsys):
    assert main(["analyze", str(job / "rank[2-4]*.json"), "--json", "--scheduler", "none"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in data["ranks"]] == [2, 3, 4]


def test_a_scheduler_that_is_not_there_is_one_line(job, capsys, monkeypatch):
    monkeypatch.setattr(tasks, "CONNECT_TIMEOUT_S", 1)
    assert main(["analyze", str(job), "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traceagent: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    assert "Traceback" not in err


def test_where_ranks_run_by_default(monkeypatch):
    monkeypatch.delenv("TRACEAGENT_SCHEDULER", raising=False)
    assert scheduler_for(None, [SMALL_JOB_BYTES]) is None  # one file: nothing to spread
    assert scheduler_for(None, [1 << 20] * 4) is None  # small: starting workers costs more
    assert scheduler_for(None, [SMALL_JOB_BYTES // 2] * 2) == "local"
    assert scheduler_for("none", [SMALL_JOB_BYTES] * 8) is None
    monkeypatch.setenv("TRACEAGENT_SCHEDULER", "tcp://scheduler:8786")
    assert scheduler_for(None, [1]) == "tcp://scheduler:8786"


def test_the_report_names_a_rank_it_could_not_analyse(tmp_path):
    from traceagent.report.markdown import render_markdown

    folder = write_job(tmp_path / "run", ranks=2)
    (folder / "rank7.json").write_text("[")
    report = render_markdown(traceagent.analyze(folder, scheduler="none"))
    assert f"> Not analysed: `{folder / 'rank7.json'}`:" in report and "2 rank(s)" in report


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_script_read_from_stdin_gets_forked_workers(job):
    # forked workers do not import the main script again: a script with no file (or no __main__
    # guard) gets its LocalCluster, and the same analysis
    script = ("import traceagent\n"
              f"a = traceagent.analyze({str(job)!r}, scheduler='local', use_cache=False)\n"
              "print(a.comparison.straggler, len(a.ranks))\n")
    environ = {k: v for k, v in os.environ.items() if k != "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"}
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120, env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(LATE), str(RANKS)]
    assert "could not start" not in done.stderr and "Traceback" not in done.stderr


def test_a_script_read_from_stdin_with_spawned_workers_analyses_in_its_own_process(job):
    # spawned workers (the user's Dask setting here) would import the main script again, and stdin
    # is not a file: no workers, one warning, the same analysis
    script = ("import traceagent\n"
              f"a = traceagent.analyze({str(job)!r}, scheduler='local', use_cache=False)\n"
              "print(a.comparison.straggler, len(a.ranks))\n")
    environ = dict(os.environ, DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD="spawn")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120, env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(LATE), str(RANKS)]
    assert "could not start a local Dask cluster" in done.stderr and "Traceback" not in done.stderr


#: set here after import: a forked worker has it, a spawned one imports this module afresh
_SET_IN_THIS_PROCESS: object = None


def _what_the_worker_inherited(file: str) -> tuple[str, bool]:
    return os.path.basename(file), _SET_IN_THIS_PROCESS is not None


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_workers_are_forked_when_this_process_runs_no_other_thread(job):
    # in a fresh process, as the CLI runs (pytest-xdist runs threads of its own here)
    files = sorted(str(f) for f in job.iterdir())[:4]
    script = (f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
              "import test_dask\nfrom traceagent import tasks\n"
              "test_dask._SET_IN_THIS_PROCESS = object()\n"
              f"print(tasks.run_per_file(test_dask._what_the_worker_inherited, {files!r}, scheduler='local'))\n")
    environ = {k: v for k, v in os.environ.items() if k != "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == repr([(os.path.basename(f), True) for f in files])


def test_workers_are_spawned_as_dask_says_where_forking_is_unsafe(monkeypatch):
    import threading
    import time

    monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", raising=False)
    expected = "fork" if sys.platform == "linux" else "spawn"
    monkeypatch.setattr(tasks.threading, "active_count", lambda: 1)
    assert tasks.worker_start_method() == expected
    monkeypatch.undo()
    other = threading.Thread(target=time.sleep, args=(0.5,))  # a thread that might hold a lock the child needs
    other.start()
    assert tasks.worker_start_method() == "spawn"
    other.join()
    # the user's choice in Dask's environment variables, or in its config, is kept
    monkeypatch.setattr(tasks.threading, "active_count", lambda: 1)
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", "spawn")
    assert tasks.worker_start_method() == "spawn"
    monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD")
    import dask

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        assert tasks.worker_start_method() == "forkserver"


def test_our_local_cluster_keeps_glibc_adaptive_malloc(monkeypatch):
    # Dask starts workers with MALLOC_TRIM_THRESHOLD_, which makes every large array a load frees
    # a fresh mapping (10% slower per rank), and leaves it in this process's environment for the
    # next cluster; the cluster traceagent starts goes without it, and keeps the rest of Dask's
    # worker environment (one BLAS thread per worker)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # as another cluster started here leaves it
    monkeypatch.setattr(heap, "_reusing", [])  # the allocator as Python starts it (no command line ran here)
    client, cluster = tasks._connect("local", tasks=1)
    with client, cluster:
        environ = client.run(lambda: {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")})
    assert list(environ.values()) == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"  # put back for others here


@pytest.mark.skipif(sys.platform != "linux", reason="NumPy madvises huge pages on Linux only")
def test_spawned_workers_are_told_the_pages_this_process_gives_arrays(monkeypatch):
    # a forked worker inherits NumPy's switch (heap.small_pages_for_arrays); a spawned one reads
    # NUMPY_MADVISE_HUGEPAGE when it imports NumPy, so it is told; a user's own setting is left alone
    from numpy._core import multiarray

    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    before = multiarray._get_madvise_hugepage()
    try:
        multiarray._set_madvise_hugepage(False)
        assert tasks._worker_environ()["NUMPY_MADVISE_HUGEPAGE"] == "0"
        multiarray._set_madvise_hugepage(True)
        assert "NUMPY_MADVISE_HUGEPAGE" not in tasks._worker_environ()  # NumPy's default, as here
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
        multiarray._set_madvise_hugepage(False)
        assert "NUMPY_MADVISE_HUGEPAGE" not in tasks._worker_environ()  # workers inherit the user's 1
    finally:
        multiarray._set_madvise_hugepage(before)


_DYING_LOADER = """
import importlib.abc
import importlib.util
import os
import sys


def _dying_loader(api):
    load_file = api.load_file_keyed

    def _dying(file, *args):
        if file == os.environ["DOOMED_RANK_FILE"]:
            os._exit(9)  # as the OOM killer ends a worker: no exception, no goodbye
        return load_file(file, *args)

    api.load_file_keyed = _dying


class _Patch(importlib.abc.MetaPathFinder):
    # patches traceagent.api once a process imports it: the processes that never do (Dask's
    # scheduler helpers, multiprocessing's resource tracker) skip its import
    def find_spec(self, name, path, target=None):
        if name != "traceagent.api":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module
        spec.loader.exec_module = lambda module: (run(module), _dying_loader(module))
        return spec


sys.meta_path.insert(0, _Patch())
"""


def test_a_rank_whose_worker_dies_every_time_is_a_failed_rank_and_the_job_goes_on(job, tmp_path):
    # every process of the run, the workers Dask's nannies start again after each death included,
    # runs this sitecustomize: the worker that reads rank 3 dies, each of the times Dask retries it
    # (KilledWorker after allowed-failures). That rank is reported; the others are analysed, those
    # the dying worker held too (Dask blames them as well) among them.
    (tmp_path / "sitecustomize.py").write_text(_DYING_LOADER)
    doomed = sorted(str(f) for f in job.iterdir())[3]
    # Dask gives up after the first death here instead of the fourth, to keep the test short: the same KilledWorker
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                   DOOMED_RANK_FILE=doomed, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
    done = subprocess.run([sys.executable, "-m", "traceagent", "analyze", str(job), "--scheduler", "local",
                           "--no-cache", "--json"], capture_output=True, text=True, timeout=180, env=environ)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    failed = data["trace"]["failed_ranks"]
    assert [f["file"] for f in failed] == [doomed] and "worker analysing it died, once" in failed[0]["error"]
    assert len(data["ranks"]) == RANKS - 1 and "Traceback" not in done.stderr
    # one line for the failed rank, and none of Dask's own log lines (distributed.nanny - WARNING - …)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and doomed in lines[0] and "distributed." not in done.stderr, done.stderr
