#!/bin/sh
# What runs on this machine's GPU, in tiers that skip (saying why) when CUDA or a package is missing; no network,
# about 8 minutes on one NVIDIA GPU. Results: one JSON line per tier on stdout and in $OUT/device_check.jsonl
# (OUT defaults to /tmp), then a table. Tiers and options: scripts/device_check.py --help.
#   sh scripts/device_check.sh                 # every tier on the GPU
#   sh scripts/device_check.sh --device cpu    # what runs without one (the CUDA tiers skip)
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
rm -f "$OUT/device_check.jsonl"
PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec timeout 540 "$PY" scripts/device_check.py \
    --out "$OUT/device_check.jsonl" "$@"
