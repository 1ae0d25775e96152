#!/usr/bin/env python3
"""Write a realistic PyTorch Profiler (Kineto) trace of a requested size, deterministic by seed.

    python tools/synth_trace.py --size 100MB --out /tmp/t100.json
    python tools/synth_trace.py --size 100MB --ranks 8 --out /tmp/ranks/      # rank-0.json ... rank-7.json
    python tools/synth_trace.py --size 10MB --plant sync --out /tmp/sync.json.gz

Each step has what real training steps have, in their proportions: a DataLoader fetch, a
host-to-device copy, forward and backward ops (cpu_op with nested ops, python_function frames,
cudaLaunchKernel with ac2g flows, kernels with CUPTI args), memsets, an all-reduce on a second
stream, and the optimizer. `--plant` makes one limiter dominate: dataloader, sync, launch,
pageable, comm or compute.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from pathlib import Path

import msgspec

PLANTS = ("dataloader", "sync", "launch", "pageable", "comm", "compute")
PID, MAIN, BWD = 4242, 4242, 4300
KERNELS = [
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)", "aten::mm", 180),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)", "aten::gelu", 25),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", "aten::native_layer_norm", 30),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})", "aten::add", 12),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)", "flash_attn::_flash_attn_forward", 220),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)", "aten::sum", 40),
]
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
FRAMES = ["train.py(88): train_step", "torch/nn/modules/module.py(1751): _call_impl", "model.py(41): forward",
          "torch/nn/functional.py(2901): layer_norm", "model.py(57): forward"]


class Writer:
    """Streams events to a file, one per line as Kineto writes them, and counts bytes."""

    def __init__(self, path: Path, rank: int, world: int) -> None:
        self.file = gzip.open(path, "wb", compresslevel=1) if path.name.endswith(".gz") else open(path, "wb")
        self.bytes = 0
        self.first = True
        header = {"schemaVersion": 1, "deviceProperties": [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072, "computeMajor": 9,
             "computeMinor": 0, "numSms": 132}], "distributedInfo": {"backend": "nccl", "rank": rank,
                                                                      "world_size": world}}
        # the header as Kineto writes it, spaces after colons: some readers (HTA) find the rank
        # with a regex that expects them
        head = json.dumps(header, indent=2)[:-2].encode() + b',\n  "traceEvents": [\n'
        self._write(head)
        self.encoder = msgspec.json.Encoder()

    def _write(self, data: bytes) -> None:
        self.file.write(data)
        self.bytes += len(data)

    def events(self, batch: list[dict]) -> None:
        if not batch:
            return
        body = b",\n".join(self.encoder.encode(e) for e in batch)
        self._write(body if self.first else b",\n" + body)
        self.first = False

    def close(self) -> None:
        self._write(b'\n  ],\n  "traceName": "synthetic"\n}\n')
        self.file.close()


class Step:
    """Builds one training step's events; times in µs with ns fractions, as current Kineto writes."""

    def __init__(self, rng: random.Random, plant: str | None, state: dict, slower_us: float = 0.0,
                 waiting_us: float = 0.0) -> None:
        self.rng, self.plant, self.state = rng, plant, state
        self.slower_us = slower_us  # a straggler's GPU: each forward/backward kernel this much longer
        self.waiting_us = waiting_us  # the other ranks: each all-reduce this much longer, waiting for it
        self.events: list[dict] = []

    def _id(self, key: str) -> int:
        self.state[key] += 1
        return self.state[key]

    def x(self, cat: str, name: str, ts: float, dur: float, tid=MAIN, pid=PID, **args) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
                 "dur": round(dur, 3), "args": args}
        self.events.append(event)
        return event

    def launch(self, t: float, name: str, op: str, dur: float, stream: int = 7, tid: int = MAIN,
               launch_us: float = 4.0) -> float:
        """An op with a nested op, a Python frame, a launch call with its flow, and its kernel.
        Returns the host time after the op; the device cursor advances in state['gpu']."""
        ext, corr = self._id("ext"), self._id("corr")
        overhead = self.rng.uniform(6, 14) if self.plant != "launch" else self.rng.uniform(8, 12)
        total = overhead + launch_us + 2
        self.x("python_function", self.rng.choice(FRAMES), t - 1, total + 2, tid=tid,
               **{"Python id": self._id("py"), "Python parent id": 1})
        self.x("cpu_op", op, t, total, tid=tid, **{"External id": ext, "Record function id": 0,
               "Input Dims": [[32, 1024, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]})
        self.x("cpu_op", op.replace("aten::", "aten::_") if op.startswith("aten::") else op + "_impl",
               t + 1, total - 2, tid=tid, **{"External id": self._id("ext"), "Record function id": 0})
        call_at = t + overhead
        self.x("cuda_runtime", "cudaLaunchKernel", call_at, launch_us, tid=tid,
               **{"External id": ext, "cbid": 211, "correlation": corr})
        start = max(self.state["gpu"], call_at + launch_us + self.rng.uniform(2, 6))
        self.x("kernel", name, start, dur, pid=0, tid=stream, **{
            "External id": ext, "queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": corr,
            "registers per thread": 128, "shared memory": 16384, "blocks per SM": 2.1, "warps per SM": 8.4,
            "grid": [264, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12})
        self.events.append({"ph": "s", "id": corr, "pid": PID, "tid": tid, "ts": round(call_at, 3),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": round(start, 3),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})
        if stream == 7:
            self.state["gpu"] = start + dur
        return t + total + 1

    def build(self, number: int, t: float, kernels_per_step: int) -> float:
        rng, plant = self.rng, self.plant
        step_start = t
        # data loading: long in the main process when planted
        # the GPU runs ~40 ms of queued work per step, so a planted fetch must take longer than that
        load = rng.uniform(100_000, 120_000) if plant == "dataloader" else rng.uniform(150, 300)
        self.x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, load,
               **{"External id": self._id("ext")})
        t += load + 5
        # the batch to the device
        nbytes = (1 if plant == "launch" else 64) * 1024 * 1024
        src = "Pageable" if plant == "pageable" else "Pinned"
        copy_dur = nbytes / (3e3 if plant == "pageable" else 20e3)  # µs at 3 or 20 GB/s
        corr = self._id("corr")
        self.x("cuda_runtime", "cudaMemcpyAsync", t, copy_dur if plant == "pageable" else 8,
               **{"External id": self._id("ext"), "cbid": 41, "correlation": corr})
        start = max(self.state["gpu"], t + 5)
        self.x("gpu_memcpy", f"Memcpy HtoD ({src} -> Device)", start, copy_dur, pid=0, tid=7,
               device=0, context=1, stream=7, correlation=corr, bytes=nbytes,
               **{"memory bandwidth (GB/s)": round(nbytes / copy_dur / 1e3, 3)})
        self.state["gpu"] = start + copy_dur
        t += (copy_dur if plant == "pageable" else 8) + 3
        # forward and backward
        for i in range(kernels_per_step):
            name, op, dur = KERNELS[i % len(KERNELS)]
            if plant == "launch":
                dur = rng.uniform(1.5, 3.0)
            elif plant == "compute":
                dur = dur * 6
            dur = dur * rng.uniform(0.8, 1.2) + self.slower_us
            tid = BWD if i > kernels_per_step // 2 else MAIN  # backward runs on the autograd thread
            t = self.launch(t, name, op, dur, tid=tid)
            if i % 50 == 25:
                corr = self._id("corr")
                self.x("cuda_runtime", "cudaMemsetAsync", t, 3, **{"External id": self._id("ext"), "correlation": corr})
                self.x("gpu_memset", "Memset (Device)", max(self.state["gpu"], t + 4), 1.5, pid=0, tid=7,
                       device=0, context=1, stream=7, correlation=corr, bytes=4096)
                t += 4
        # gradient all-reduce on the communication stream
        comm_dur = (self.state["gpu"] - step_start if plant == "comm" else rng.uniform(200, 400)) + self.waiting_us
        comm_start = self.state["gpu"]
        self.launch(t, NCCL, "nccl:all_reduce", comm_dur, stream=20)
        # the optimizer waits for the gradients (cudaStreamWaitEvent on the all-reduce), as in DDP
        self.state["gpu"] = max(self.state["gpu"], comm_start + comm_dur + 20)
        t += 20
        # the optimizer, and the loss read back
        t = self.launch(t, KERNELS[3][0], "Optimizer.step#AdamW.step", 30)
        if plant == "sync":
            item = self.x("cpu_op", "aten::item", t, 0, **{"External id": self._id("ext")})
            sync_end = max(self.state["gpu"], t + 10) + 5
            self.x("cuda_runtime", "cudaStreamSynchronize", t + 5, sync_end - t - 5,
                   **{"External id": item["args"]["External id"], "correlation": self._id("corr")})
            item["dur"] = round(sync_end - t + 2, 3)
            self.x("python_function", "train.py(97): log_metrics", sync_end + 3, 30_000)
            t = sync_end + 30_010
        self.x("cpu_op", f"ProfilerStep#{number}", step_start - 2, t - step_start + 4,
               **{"External id": self._id("ext"), "Record function id": 0})
        return t + 10


def synthesize(out: Path, size: int, plant: str | None = None, seed: int = 0, rank: int = 0, world: int = 1,
               kernels_per_step: int = 400, straggler: int | None = None, slower_us: float = 12.0) -> Path:
    """Write one rank's trace of about `size` bytes (uncompressed). With `straggler`, every rank
    draws the same durations (data-parallel ranks run the same steps); the straggler's kernels run
    `slower_us` longer each, and every other rank waits that much per kernel in each all-reduce,
    so the ranks' all-reduces end together, as collectives do."""
    rng = random.Random(seed * 1000 + (rank if straggler is None else 0))
    late = {} if straggler is None else (
        {"slower_us": slower_us} if rank == straggler else {"waiting_us": slower_us * kernels_per_step})
    state = {"ext": 0, "corr": 0, "py": 0, "gpu": 0.0}
    writer = Writer(out, rank, world)
    t = 1_700_000_000_000.0 + rank * 3.217  # µs, with ns fractions as current traces have
    state["gpu"] = t
    number = 1
    while writer.bytes < size:
        step = Step(rng, plant, state, **late)
        t = step.build(number, t, kernels_per_step)
        writer.events(step.events)
        number += 1
    writer.close()
    return out


def tiny_kernels(out: Path, count: int, per_step: int = 10_000, seed: int = 0, launches: bool = True) -> Path:
    """Write a trace of `count` kernels of 1–3 µs, each with the cudaLaunchKernel that queued it
    (correlated), in ProfilerStep ranges of `per_step` kernels: the launch-bound shape (many tiny
    kernels, few bytes each) where per-event costs, not bytes, decide a reader's speed and memory.
    Without `launches`: the kernels alone, with no args, as a trace of the GPU's activity alone
    records them (about 85 bytes an event)."""
    rng = random.Random(seed)
    writer = Writer(out, 0, 1)
    names = [k[0].split("(")[0][:60] for k in KERNELS]  # short names: the event count, not the bytes, is the load
    t = gpu = 1_700_000_000_000.0
    for first in range(0, count, per_step):
        batch: list[dict] = []
        n = min(per_step, count - first)
        step_start = t
        for corr in range(first + 1, first + n + 1):
            dur = round(rng.uniform(1.0, 3.0), 3)
            if not launches:
                batch.append({"ph": "X", "cat": "kernel", "name": rng.choice(names), "pid": 0, "tid": 7,
                              "ts": round(gpu, 3), "dur": dur})
                gpu += dur + 0.5
                continue
            batch.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": MAIN,
                          "ts": round(t, 3), "dur": 2.5, "args": {"correlation": corr, "cbid": 211}})
            gpu = max(gpu, t + 3.0)
            batch.append({"ph": "X", "cat": "kernel", "name": rng.choice(names), "pid": 0, "tid": 7,
                          "ts": round(gpu, 3), "dur": dur,
                          "args": {"correlation": corr, "device": 0, "stream": 7}})
            gpu += dur + 0.5
            t += 3.0
        if launches:
            batch.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{first // per_step + 1}",
                          "pid": PID, "tid": MAIN, "ts": round(step_start, 3), "dur": round(t - step_start, 3),
                          "args": {}})
        writer.events(batch)
    writer.close()
    return out


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kKmMgG]?)[bB]?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text} (say 10MB, 1GB)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=parse_size, required=True, help="uncompressed size per rank: 10MB, 1GB")
    parser.add_argument("--out", type=Path, required=True, help="a file (.json or .json.gz), or a folder with --ranks")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--plant", choices=PLANTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.ranks > 1:
        args.out.mkdir(parents=True, exist_ok=True)
        for rank in range(args.ranks):
            synthesize(args.out / f"rank-{rank}.json", args.size, args.plant, args.seed, rank, args.ranks)
    else:
        synthesize(args.out, args.size, args.plant, args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
