#!/usr/bin/env bash
# One device call of the H200 benchmarks: runs the named parts in order, each under its own time limit, and packs
# each part's files into $OUT/<part>.tar.gz as soon as it ends (a device call returns at most 8 files, and a part cut
# by its limit still leaves what it wrote). Run from the repository root on the GPU machine, with .whl carried:
#     bash bench/h200_call.sh agreement repeats gputests   # parts: agreement repeats clocks variance gputests profile profilecli tune optimize startup judgespeed kboptimize expert sessions
# Limits per part (seconds) can be changed by environment variables, e.g. TUNE_S=300; AGREEMENT_ARGS, REPEATS_ARGS,
# CLOCKS_ARGS, VARIANCE_ARGS, OPTIMIZE_ARGS and EXPERT_ARGS add arguments to those parts' scripts, e.g.
# OPTIMIZE_ARGS='--only softmax' (JUDGESPEED_ARGS='--parts repeat,judge' splits judgespeed over two calls). Two
# instances at once (one per GPU, CUDA_VISIBLE_DEVICES) need their own SITE
# (where the wheels are installed); OPTIMIZE_TAG names an optimize part's files apart (optimize$OPTIMIZE_TAG.tar.gz),
# GPUTESTS_PATHS picks the gpu tests.
set -u
OUT=${OUT:?set OUT to the folder whose files come back}
export PYTHONUNBUFFERED=1
WHEELS=${WHEELS:-.whl}
if [ -d "$WHEELS" ]; then  # the image lacks pydantic; its own pytest and plugins stay
  wheels=$(ls "$WHEELS"/*.whl | grep -v -E '/(pytest|pluggy|iniconfig|packaging)-')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "${SITE:-/tmp/site}" $wheels || exit 3
  export PYTHONPATH=${SITE:-/tmp/site}:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/machine.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' >> "$OUT/machine.txt" 2>&1
df -h /dev/shm /tmp >> "$OUT/machine.txt" 2>&1

part() {  # name, limit, command...
  local name=$1 limit=$2
  shift 2
  mkdir -p "$OUT/$name"
  local t0=$SECONDS
  echo "=== $name (limit ${limit} s): $*" | tee -a "$OUT/calls.log"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name/stdout.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/calls.log"
  tail -n 25 "$OUT/$name/stdout.log"
  tar -czf "$OUT/$name.tar.gz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
}

for p in "$@"; do
  case $p in
    agreement)
      part judge_agreement "${AGREEMENT_S:-200}" python3 bench/judge_h200.py --out "$OUT/judge_agreement" --part agreement ${AGREEMENT_ARGS:-} ;;
    repeats)
      part judge_repeats "${REPEATS_S:-170}" python3 bench/judge_h200.py --out "$OUT/judge_repeats" --part repeats --repeats "${REPEATS_N:-5}" ${REPEATS_ARGS:-} ;;
    clocks)
      part judge_clocks "${CLOCKS_S:-240}" python3 bench/judge_clocks.py --out "$OUT/judge_clocks" ${CLOCKS_ARGS:-} ;;
    variance)
      part judge_variance "${VARIANCE_S:-120}" python3 bench/judge_variance.py --out "$OUT/judge_variance" ${VARIANCE_ARGS:-} ;;
    gputests)
      part gputests "${GPUTESTS_S:-200}" python3 -m pytest -q -m gpu -p no:cacheprovider ${GPUTESTS_PATHS:-tests/gpu tests/profiler} -rA ;;
    profile)
      part profile "${PROFILE_S:-300}" python3 bench/profile_h200.py --out "$OUT/profile" ;;
    profilecli)  # `egg profile` as a user runs it: the human report with NCU counters, then the JSON (from the cache)
      part profilecli "${PROFILECLI_S:-120}" bash -c 'python3 -m pipeline.cli profile examples/candidates/softmax_triton.py --ref data/problems/suite/level1/23_Softmax.py --mode ncu && python3 -m pipeline.cli profile examples/candidates/softmax_triton.py --ref data/problems/suite/level1/23_Softmax.py --mode ncu --json > "$0/profile_softmax.json"' "$OUT/profilecli" ;;
    tune)
      part tune "${TUNE_S:-330}" python3 bench/tune_h200.py --out "$OUT/tune" --deadline-s "$(( ${TUNE_S:-330} - 30 ))" ;;
    startup)  # issue 13: torch's import and a CUDA context in fresh processes, 1, 2 and 3 at a time
      part startup "${STARTUP_S:-200}" python3 bench/judge_startup.py --out "$OUT/startup" ;;
    judgespeed)  # issue 13: first and repeat `egg check` of the five examples in fresh processes, one long-lived Judge
      part judgespeed "${JUDGESPEED_S:-570}" python3 bench/judge_speed.py --out "$OUT/judgespeed" ${JUDGESPEED_ARGS:-} ;;
    optimize)
      part "optimize${OPTIMIZE_TAG:-}" "${OPTIMIZE_S:-540}" python3 bench/optimize_h200.py --out "$OUT/optimize${OPTIMIZE_TAG:-}" --deadline-s "$(( ${OPTIMIZE_S:-540} - 30 ))" ${OPTIMIZE_ARGS:-} ;;
    kboptimize)  # issue 21: `egg optimize` with no model on KernelBench's own problems at their published sizes (.kb carried)
      part kboptimize "${KBOPTIMIZE_S:-400}" bash -c 'for p in ${KB_PROBLEMS:-level1/19_ReLU level1/23_Softmax}; do
          n=$(basename "$p"); t0=$SECONDS
          timeout "${KB_EACH_S:-190}" python3 -m pipeline.cli optimize ".kb/KernelBench/$p.py" --device cuda --seeds 1 --rounds 1 \
            --max-wall-s "${KB_WALL_S:-90}" --out "/tmp/kboptimize-$$/$n" > "$0/$n.log" 2>&1
          echo "$p: exit $? after $((SECONDS - t0)) s"; tail -n 3 "$0/$n.log"
          cp "/tmp/kboptimize-$$/$n/report.md" "$0/$n.report.md" 2>/dev/null; cp "/tmp/kboptimize-$$/$n/evidence.json" "$0/$n.evidence.json" 2>/dev/null
        done' "$OUT/kboptimize" ;;
    expert)  # the expert backend (no model) over the suite; EXPERT_ARGS e.g. "--level 1 --quick" or "--resume FILE"
      part "expert${EXPERT_TAG:-}" "${EXPERT_S:-570}" python3 bench/expert_h200.py --out "$OUT/expert${EXPERT_TAG:-}" --deadline-s "$(( ${EXPERT_S:-570} - 40 ))" ${EXPERT_ARGS:-} ;;
    sessions)  # sessions through the app's worker, recorded for Learn; SESSIONS_ARGS e.g. "--backend expert --only gemm_fp16,small_softmax"
      part sessions "${SESSIONS_S:-500}" python3 bench/sessions_h200.py --out "$OUT/sessions" --deadline-s "$(( ${SESSIONS_S:-500} - 40 ))" ${SESSIONS_ARGS:-} ;;
    *) echo "unknown part $p" ;;
  esac
done
