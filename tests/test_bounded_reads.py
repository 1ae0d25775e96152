"""Memory is bounded whatever the file: a gzip bomb, a sparse file of zeros after a valid start,
a huge string. Each ends in seconds with one line and exit 2, in a process whose peak memory the
test measures (os.wait4), or loads with its strings capped. Files are made small: gzip members
repeated, sparse files, generators."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
import zlib

import pytest
from builder import TraceBuilder

import traceagent
from traceagent.cli import main
from traceagent.text import MAX_TEXT_CHARS
from traceagent.trace import reading

GiB = 1 << 30


def gzip_bomb(path, inflated: int, fill: bytes, head: bytes = b"") -> int:
    """A gzip whose members inflate to `head` then `inflated` bytes of `fill`: one compressed MiB
    member written again and again, so a 10 GiB bomb takes 10 MB and no time to make. Its size."""
    member = gzip.compress(fill * (1 << 20), compresslevel=9)
    with open(path, "wb") as f:
        if head:
            f.write(gzip.compress(head))
        for _ in range(inflated >> 20):
            f.write(member)
    return os.path.getsize(path)


def run_cli(args: list[str], env_cache, address_space: int | None = None) -> tuple[int, str, float, float]:
    """(exit code, stderr, seconds, peak RSS in bytes) of `traceagent ARGS` in a fresh process;
    with `address_space`, under that `ulimit -v` (RLIMIT_AS), as a container or Slurm would cap it."""
    import resource

    def limited() -> None:
        if address_space is not None:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    env = {**os.environ, "TRACEAGENT_CACHE_DIR": str(env_cache)}
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "traceagent", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=env, preexec_fn=limited)
    stderr = child.stderr.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return child.returncode, stderr, time.monotonic() - started, usage.ru_maxrss * 1024


@pytest.mark.parametrize("fill", [b"\0", b" "], ids=["zeros", "whitespace_inside_the_array"])
def test_a_10_gib_gzip_bomb_ends_fast_with_exit_2_and_bounded_memory(tmp_path, fill):
    bomb = tmp_path / "bomb.json.gz"
    head = b'{"traceEvents": [' if fill == b" " else b""  # valid JSON up to the bomb: only the ratio stops it
    size = gzip_bomb(bomb, 10 * GiB, fill, head)
    assert size < 12 << 20  # 10 GiB behind ~10 MB
    code, stderr, seconds, peak = run_cli(["analyze", str(bomb)], tmp_path / "cache")
    assert code == 2 and "Traceback" not in stderr
    assert str(bomb) in stderr and ("NUL bytes" in stderr if fill == b"\0" else "inflates more than 200×" in stderr)
    assert seconds < 10 and peak < GiB


def test_an_8_gb_sparse_file_of_zeros_after_a_valid_start_ends_fast(tmp_path):
    sparse = tmp_path / "sparse.json"
    prefix = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2},\n'
    with open(sparse, "wb") as f:
        f.write(prefix)
        f.truncate(8 * GiB)  # the rest: a hole that reads as zeros, taking no disk
    code, stderr, seconds, peak = run_cli(["analyze", str(sparse)], tmp_path / "cache")
    assert code == 2 and "Traceback" not in stderr
    assert f"a run of NUL bytes at byte {len(prefix):,} of its text" in stderr  # where the prefix ends
    assert seconds < 10 and peak < GiB


def test_a_budget_the_user_sets_stops_a_large_trace_and_lifts_the_ratio_check(tmp_path, capsys):
    b = TraceBuilder()
    for i in range(3000):
        b.kernel("gemm", i * 10, 5)
    text = b.write(tmp_path / "t.json").read_bytes()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text))
    assert main(["analyze", str(path), "--no-cache", "--max-bytes", str(len(text) // 2)]) == 2
    message = capsys.readouterr().err
    assert "the --max-bytes budget" in message and "Traceback" not in message
    assert main(["analyze", str(path), "--no-cache", "--max-bytes", str(len(text) * 2), "--json"]) == 0


def test_inflation_is_checked_against_the_compressed_bytes_read(tmp_path, monkeypatch):
    # the same check the bomb test makes at 64 MiB, here at 64 kB: a highly repetitive (valid) trace
    monkeypatch.setattr(reading, "RATIO_FLOOR", 64 << 10)
    events = ",".join(['{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1}'] * 20_000)
    text = ('{"traceEvents":[' + events + "]}").encode()
    path = tmp_path / "repetitive.json.gz"
    path.write_bytes(gzip.compress(text, 9))
    assert len(text) / path.stat().st_size > reading.MAX_RATIO  # what makes it suspicious
    with pytest.raises(traceagent.TraceError, match="inflates more than 200×"):
        traceagent.load(path, use_cache=False)
    assert len(traceagent.load(path, use_cache=False, max_bytes=len(text) * 2).traces[0].gpu) == 20_000


def test_a_gzip_of_several_members_reads_whole_and_one_cut_short_keeps_what_it_holds(tmp_path):
    b = TraceBuilder()
    for i in range(200):
        b.kernel("gemm", i * 10, 5)
    text = b.write(tmp_path / "t.json").read_bytes()
    half = len(text) // 2
    joined = tmp_path / "members.json.gz"
    joined.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))  # as `cat a.gz b.gz` makes
    assert len(traceagent.load(joined, use_cache=False).traces[0].gpu) == 200
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:-40])
    trace = traceagent.load(cut, use_cache=False).traces[0]
    assert 0 < len(trace.gpu) < 200 and any("cut short" in w for w in trace.meta.warnings)
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(64))
    with pytest.raises(traceagent.TraceError, match="corrupt gzip"):
        traceagent.load(corrupt, use_cache=False)


def test_a_huge_name_is_capped_at_load_with_its_length_and_hash(tmp_path):
    huge = "k" * 5_000_000 + "_tail"
    other = "k" * 5_000_000 + "_other"  # the same start: capped, the two must stay two names
    b = TraceBuilder()
    b.kernel(huge, 0, 10)
    b.kernel(other, 20, 10)
    b.kernel("small", 40, 10)
    path = b.write(tmp_path / "huge.json")
    trace = traceagent.load(path, use_cache=False).traces[0]
    names = list(trace.gpu["name"])
    assert names[2] == "small"
    assert len(names[0]) <= MAX_TEXT_CHARS and names[0] != names[1]
    assert f"{len(huge):,} characters" in names[0]
    data = json.dumps(traceagent.analyze(path, use_cache=False).to_dict())
    assert len(data) < 200_000  # a few capped copies, not several 5 MB ones


def test_parse_size_reads_units():
    assert reading.parse_size("2000") == 2000
    assert reading.parse_size("500MB") == 500_000_000 and reading.parse_size("1GiB") == GiB
    assert reading.parse_size("1.5k") == 1500 and reading.parse_size("20 gb") == 20_000_000_000
    with pytest.raises(ValueError):
        reading.parse_size("lots")


def test_zlib_level_inflation_of_the_reader_matches_gzip(tmp_path):
    # the streaming inflater gives the same text as gzip.decompress for a real compressed trace
    from conftest import NCCL_A100

    with open(NCCL_A100, "rb") as f:
        stream = reading.TraceStream(f, str(NCCL_A100))
        text = b"".join(iter(lambda: stream.read(1 << 20), b""))
    assert text == gzip.decompress(NCCL_A100.read_bytes()) and zlib.crc32(text)


def test_a_member_boundary_falling_between_two_reads_loses_nothing(tmp_path, monkeypatch):
    # the second member's magic bytes split across two reads of the compressed file
    b = TraceBuilder()
    for i in range(50):
        b.kernel("gemm", i * 10, 5)
    text = b.write(tmp_path / "t.json").read_bytes()
    first = gzip.compress(text[:len(text) // 2])
    path = tmp_path / "members.json.gz"
    path.write_bytes(first + gzip.compress(text[len(text) // 2:]))
    monkeypatch.setattr(reading, "_INPUT_BLOCK", len(first) + 1)  # the block ends after the 0x1f of the magic
    with open(path, "rb") as f:
        assert reading.TraceStream(f, str(path)).read() == text


def test_the_bombs_refusal_advice_followed_ends_in_one_line_within_the_memory_limit(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    gzip_bomb(bomb, 10 * GiB, b" ", b'{"traceEvents": [')
    code, stderr, _, _ = run_cli(["analyze", str(bomb)], tmp_path / "cache")
    advice = re.search(r"--max-bytes (\S+)\)", stderr).group(1)  # what the refusal tells the user to try
    code, stderr, seconds, peak = run_cli(["analyze", str(bomb), "--max-bytes", advice], tmp_path / "cache",
                                              4 * GiB)
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert str(bomb) in stderr and "half the memory this process may still take" in stderr
    assert peak < 3 * GiB and seconds < 60
    print(f"bomb with --max-bytes {advice} under ulimit -v 4G: {seconds:.1f} s, peak {peak / GiB:.2f} GiB")


def test_a_2_gib_string_under_a_4_gib_address_space_limit_is_one_line(tmp_path):
    path = tmp_path / "huge_name.json.gz"
    head = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "name": "'
    gzip_bomb(path, 2 * GiB, b"a", head)
    with open(path, "ab") as f:
        f.write(gzip.compress(b'"}]}'))
    code, stderr, seconds, peak = run_cli(["analyze", str(path), "--max-bytes", "20GB"], tmp_path / "cache",
                                              4 * GiB)
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert str(path) in stderr and "memory this process may still take" in stderr
    assert peak < 3 * GiB and seconds < 60
    print(f"2 GiB string under ulimit -v 4G: {seconds:.1f} s, peak {peak / GiB:.2f} GiB")


def test_the_memory_available_reads_cgroup_limits_v1_and_v2(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "job" / "memory.max").write_text(str(3 * GiB))  # the job's limit, an ancestor's
    (v2 / "job" / "memory.current").write_text(str(1 * GiB))
    (v2 / "job" / "step" / "memory.max").write_text("max\n")
    (v2 / "job" / "step" / "memory.current").write_text(str(GiB // 2))
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/step\n")
    assert reading._cgroup_room(str(proc), str(v2)) == 2 * GiB
    v1 = tmp_path / "v1"
    (v1 / "memory" / "slurm").mkdir(parents=True)
    (v1 / "memory" / "slurm" / "memory.limit_in_bytes").write_text(str(8 * GiB))
    (v1 / "memory" / "slurm" / "memory.usage_in_bytes").write_text(str(5 * GiB))
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")  # no limit at the root
    proc.write_text("4:memory:/slurm\n1:cpu:/\n")
    assert reading._cgroup_room(str(proc), str(v1)) == 3 * GiB
    proc.write_text("0::/\n")
    assert reading._cgroup_room(str(proc), str(tmp_path / "none")) is None


def test_the_memory_available_reads_the_address_space_limit():
    import resource

    script = ("import resource; from traceagent.trace import reading\n"
              "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))\n"
              "print(reading._rlimit_room(), reading.available_memory())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    room, available = map(int, done.stdout.split())
    assert 0 < room < 6 * GiB and available <= room
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # this process untouched


def test_a_200_mb_kernel_name_in_an_nsight_export_is_cut_before_it_reaches_python(tmp_path):
    import sqlite3

    from conftest import NSYS_BEFORE

    path = tmp_path / "huge_name.sqlite"
    path.write_bytes(NSYS_BEFORE.read_bytes())
    with sqlite3.connect(path) as con:
        (name_id,) = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        con.execute("UPDATE StringIds SET value = printf('%.*c', 200000000, 'k') WHERE id = ?", (name_id,))
    assert path.stat().st_size > 200_000_000
    code, stderr, seconds, peak = run_cli(["analyze", str(path), "--json"], tmp_path / "cache")
    assert code == 0 and "Traceback" not in stderr
    assert peak < GiB
    trace = traceagent.load(path, use_cache=False).traces[0]
    cut = [n for n in trace.gpu["name"].cat.categories if n.startswith("kkkk")]
    assert len(cut) == 1 and len(cut[0]) <= MAX_TEXT_CHARS and "[200000000 characters, id" in cut[0]
    print(f"200 MB name in StringIds: {seconds:.1f} s, peak {peak / GiB:.2f} GiB")


def after_the_command_line(tmp_path, probe: str, variable: str, user_setting: str | None) -> str:
    """What `probe` (Python, printing one line to stderr) prints in a process that ran the command
    line on a small trace, with the user's `variable` set to `user_setting` (None: unset)."""
    trace = TraceBuilder()
    trace.kernel("k", 10, 5)
    path = trace.write(tmp_path / "t.json")
    script = f"import numpy, sys; from traceagent.cli import main\nmain(['info', sys.argv[1]])\n{probe}"
    env = {k: v for k, v in os.environ.items() if k != variable}
    if user_setting is not None:
        env[variable] = user_setting
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env, check=True)
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(sys.platform != "linux", reason="NumPy madvises huge pages on Linux only")
@pytest.mark.parametrize("user_setting, huge_pages", [(None, False), ("1", True)])
def test_the_command_line_gives_arrays_small_pages_unless_the_user_chose(tmp_path, user_setting, huge_pages):
    # huge pages stalled the analysis where the kernel compacts memory to find them (heap.small_pages_for_arrays)
    probe = "print(numpy._core.multiarray._get_madvise_hugepage(), file=sys.stderr)"
    assert after_the_command_line(tmp_path, probe, "NUMPY_MADVISE_HUGEPAGE", user_setting) == str(huge_pages)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator settings")
@pytest.mark.parametrize("user_setting, own_mapping", [(None, False), ("65536", True)])
def test_the_command_line_serves_large_arrays_from_the_heap_unless_the_user_chose(tmp_path, user_setting, own_mapping):
    # each large temporary of an analysis was its own mapping, faulted in page by page and unmapped
    # when freed (heap.reuse_freed_arrays): after the command line, a 400 MB array lies in [heap]
    probe = ("from traceagent.trace import heap\n"
             "array = numpy.ones(50_000_000)\n"  # 400 MB
             "start = array.__array_interface__['data'][0]\n"
             "for line in open('/proc/self/maps'):\n"
             "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
             "    if lo <= start < hi:\n"
             "        print(line.strip().endswith('[heap]'), heap.pages_environ().get('MALLOC_MMAP_MAX_'), file=sys.stderr)")
    in_heap, told = after_the_command_line(tmp_path, probe, "MALLOC_MMAP_MAX_", user_setting).split()
    # in the heap, and a spawned Dask worker is told the same; the user's own setting is theirs
    assert (in_heap, told) == (("False", "None") if own_mapping else ("True", "0"))
