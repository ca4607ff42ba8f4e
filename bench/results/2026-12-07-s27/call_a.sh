#!/usr/bin/env bash
# session 27, call A: the level3/8 reference SIGKILL diagnosis, then level1's GEMMs, then level2's two left.
set -uo pipefail
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
export PYTHONPATH=$SITE:$PWD
( while sleep 1; do echo "$(date +%T) $(free -m | sed -n 2p)"; done > "$OUT/diag_mem.txt" ) &
MEM=$!
timeout 100 python3 -m pipeline.cli check egg-out/diag/seed_8.py --ref .kb/KernelBench/level3/8_ResNetBasicBlock.py --device cuda --json > "$OUT/diag_check.json" 2> "$OUT/diag_check.err"
echo "diag check exited $?"
kill $MEM
(dmesg 2>&1 | tail -40) > "$OUT/diag_dmesg.txt"
KB=egg-out/kb27a BENCH_S=320 WALL_S=60 SEEDS=2 ROUNDS=1 BENCH_ARGS="--only level1/1_ --only level1/2_ --only level1/3_ --only level1/6_ --only level1/8_ --only level1/9_ --only level1/18_" bash bench/kb_bench.sh 2>&1 | grep -v '^WARNING: Target'
KB=egg-out/kb27b BENCH_S=110 WALL_S=60 SEEDS=2 ROUNDS=1 BENCH_ARGS="--only level2/ --only level3/" bash bench/kb_bench.sh 2>&1 | grep -v '^WARNING: Target'
