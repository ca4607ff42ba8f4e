#!/usr/bin/env bash
# `egg bench` over KernelBench's own problem files on the GPU machine, with the expert backend (no model).
# Carry .whl (the CLI's wheels), .kb (KernelBench/levelN/*.py fetched from its repository, never committed) and, to
# go on with a run an earlier call began, egg-out/kb (its store and OUT): a call that finds egg-out/kb/out/bench.json
# passes --resume. The run is stopped with SIGINT before the call's limit (finished problems are kept) and
# egg-out/kb (or $KB) comes back as $OUT/<its folder name>.tar.gz (several runs in one call keep apart). BENCH_ARGS adds flags (--only, --max-autotune...).
# TIMEOUT_S kills a problem's worker after that many seconds; unset, egg bench's own (twice the wall budget + 300 s).
set -uo pipefail
SITE=${SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
export PYTHONPATH=$SITE:$PWD
nvidia-smi -L
RESUME=""
KB=${KB:-egg-out/kb}  # the run's folder (its store and OUT); another name starts another run beside it
[ -f "$KB/out/bench.json" ] && RESUME=--resume
timeout -s INT "${BENCH_S:-540}" python3 -m pipeline.cli bench .kb/KernelBench --expert --device cuda --gpus "${GPUS:-all}" \
  --seeds "${SEEDS:-2}" --rounds "${ROUNDS:-1}" --max-wall-s "${WALL_S:-40}" ${TIMEOUT_S:+--timeout-s "$TIMEOUT_S"} \
  --out "$KB/out" --db "$KB/egg.sqlite" $RESUME ${BENCH_ARGS:-}
echo "egg bench exited $?"
tar czf "$OUT/$(basename "$KB").tar.gz" -C "$(dirname "$KB")" "$(basename "$KB")"
