"""Build small Kineto traces by hand, in µs, as real-format JSON files the loader reads.

    b = TraceBuilder()
    b.kernel("gemm", start=0, dur=100, launch_at=0)
    trace = b.load(tmp_path)
"""

from __future__ import annotations

from pathlib import Path

from conftest import write_trace

import traceagent

PID, TID = 100, 100


class TraceBuilder:
    def __init__(self, device_name: str = "Test GPU", **top) -> None:
        self.events: list[dict] = []
        self.correlation = 0
        self.external = 0
        self.top = {"deviceProperties": [{"id": 0, "name": device_name}], **top}

    def _x(self, cat: str, name: str, ts: float, dur: float, pid=PID, tid=TID, **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
        self.events.append(event)
        return event

    def op(self, name: str, start: float, dur: float, cat: str = "cpu_op", tid: int = TID) -> dict:
        self.external += 1
        return self._x(cat, name, start, dur, tid=tid, **{"External id": self.external})

    def python(self, name: str, start: float, dur: float, tid: int = TID) -> dict:
        return self._x("python_function", name, start, dur, tid=tid)

    def runtime(self, name: str, start: float, dur: float, correlation: int | None = None, cat: str = "cuda_runtime",
                tid: int = TID) -> dict:
        args = {"correlation": correlation} if correlation is not None else {}
        return self._x(cat, name, start, dur, tid=tid, **args)

    def _device(self, cat: str, name: str, start: float, dur: float, stream: int, launch_at: float | None,
                launch_dur: float, call: str, device: int = 0, launch_tid: int = TID, **args) -> dict:
        self.correlation += 1
        if launch_at is not None:
            driver = call.startswith("cu") and not call.startswith("cuda")
            self.runtime(call, launch_at, launch_dur, correlation=self.correlation,
                         cat="cuda_driver" if driver else "cuda_runtime", tid=launch_tid)
        return self._x(cat, name, start, dur, pid=device, tid=stream, device=device, stream=stream,
                       correlation=self.correlation, **args)

    def kernel(self, name: str, start: float, dur: float, stream: int = 7, launch_at: float | None = None,
               launch_dur: float = 5.0, device: int = 0, call: str = "cudaLaunchKernel", launch_tid: int = TID) -> dict:
        return self._device("kernel", name, start, dur, stream, launch_at, launch_dur, call, device, launch_tid)

    def collective(self, start: float, dur: float, nelems: int, name: str = "allreduce", dtype: str = "BFloat16",
                   ranks: list[int] | None = None, out_nelems: int | None = None, stream: int = 20,
                   kernel: str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") -> dict:
        """An NCCL kernel with the payload PyTorch >= 2.1 records on it (args as Kineto writes them)."""
        ranks = list(range(8)) if ranks is None else ranks
        event = self.kernel(kernel, start, dur, stream=stream)
        event["args"] |= {"Collective name": name, "In msg nelems": nelems,
                          "Out msg nelems": nelems if out_nelems is None else out_nelems, "Group size": len(ranks),
                          "dtype": dtype, "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                          "Process Group Description": "default_pg", "Process Group Ranks": str(ranks)}
        return event

    def memcpy(self, start: float, dur: float, nbytes: int, kind: str = "HtoD", src: str = "Pageable",
               dst: str = "Device", stream: int = 7, launch_at: float | None = None, launch_dur: float = 5.0) -> dict:
        return self._device("gpu_memcpy", f"Memcpy {kind} ({src} -> {dst})", start, dur, stream, launch_at,
                            launch_dur, "cudaMemcpyAsync", bytes=nbytes)

    def memory(self, ts: float, nbytes: int, allocated: int | None = None, reserved: int | None = None,
               device: int = 0) -> dict:
        """A caching-allocator [memory] instant event (profile_memory=True); totals as new traces write them."""
        args = {"Device Type": 1, "Device Id": device, "Bytes": nbytes}
        args |= {"Total Allocated": allocated} if allocated is not None else {}
        args |= {"Total Reserved": reserved} if reserved is not None else {}
        event = {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": PID, "tid": TID,
                 "ts": ts, "args": args}
        self.events.append(event)
        return event

    def write(self, path: Path) -> Path:
        return write_trace(path, self.events, **self.top)

    def load(self, tmp_path: Path, name: str = "trace.json"):
        return traceagent.load(self.write(tmp_path / name), use_cache=False).traces[0]
