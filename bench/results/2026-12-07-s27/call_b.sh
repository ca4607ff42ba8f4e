#!/usr/bin/env bash
# session 27, call B: level3/8's reference again (the story now names a protocol break), level2/99's re-verification,
# level1/2, 3, 8 on the exact GEMM with the referee's host room, then the largest tensors as far as time goes.
set -uo pipefail
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
export PYTHONPATH=$SITE:$PWD
timeout 70 python3 -m pipeline.cli check egg-out/diag/seed_8.py --ref .kb/KernelBench/level3/8_ResNetBasicBlock.py --device cuda --json > "$OUT/diag2_check.json" 2> "$OUT/diag2_check.err"
echo "diag check exited $?"
KB=egg-out/kb27b BENCH_S=95 WALL_S=60 SEEDS=2 ROUNDS=1 BENCH_ARGS="--only level2/ --only level3/" bash bench/kb_bench.sh 2>&1 | grep -v '^WARNING: Target'
KB=egg-out/kb27d BENCH_S=175 WALL_S=60 SEEDS=2 ROUNDS=1 BENCH_ARGS="--only level1/2_ --only level1/3_ --only level1/8_" bash bench/kb_bench.sh 2>&1 | grep -v '^WARNING: Target'
KB=egg-out/kb27c BENCH_S=200 WALL_S=60 SEEDS=2 ROUNDS=1 BENCH_ARGS="--only level1/34_ --only level1/38_ --only level1/39_ --only level1/45_" bash bench/kb_bench.sh 2>&1 | grep -v '^WARNING: Target'
