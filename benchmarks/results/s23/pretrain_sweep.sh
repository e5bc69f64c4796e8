#!/usr/bin/env bash
# Session 23: which shorter label-free pretraining chain keeps solve-then-point? Each chain runs
# benchmarks/solve_point_probe.py stage after stage from the induction-wired base (runs/s22/wired2), circuit frozen,
# on a GPU (--device cuda, fp32); chains run side by side. Usage: pretrain_sweep.sh OUT_DIR [DEVICE]
# A chain is "name stage stage ...", a stage "steps:shares:lr:batch:corpus_seed"; SEED=k before a chain: its seed.
# MAXN=k: context/pointer rows of prompts with at most k candidates. SWEEP=1 (default), 2 or 3 picks the set of chains (session 23 ran both).
set -u
OUT=${1:?out dir}; DEV=${2:-cuda}; W=${WORK:-/tmp/sweep}
DATA=.cache/datasets/procedural_math-3583d4193f4a; BASE=runs/s22/wired2
mkdir -p "$OUT" "$W"
chain() {
  local name=$1; shift; local model=$BASE i=0 n=$#
  for stage in "$@"; do
    i=$((i + 1)); IFS=: read -r steps shares lr batch cseed <<< "$stage"
    local problems=20; [ $i -eq $n ] && problems=100
    python3 benchmarks/solve_point_probe.py --model "$model" --dataset $DATA --out "$W/$name-$i" --steps "$steps" \
      --shares "$shares" --lr "$lr" --batch "$batch" --corpus-seed "$cseed" --problems $problems --seed "${SEED:-0}" \
      --freeze-circuit --device "$DEV" --max-candidates "${MAXN:-0}" > "$W/$name-$i.log" 2>&1 || { echo "$name stage $i failed"; tail -5 "$W/$name-$i.log"; return; }
    model="$W/$name-$i"
  done
  echo "$name done: $(tail -2 "$W/$name-$n.log" | tr '\n' ' ')"
}
S=0.85,0,0.15; C=0,0.85,0.15
if [ "${SWEEP:-1}" = 1 ]; then
chain ref   600:$S:3e-3:32,4,4:902 300:0,0.7,0.3:1e-3:32,4,4:903 300:0,0.8,0.2:1e-3:32,4,4:904 600:$C:1e-3:32,4,4:905 &
chain a300  300:$S:3e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
chain b300  300:$S:3e-3:32,4,4:902 600:$C:1e-3:32,4,4:903 &
chain c450  450:$S:3e-3:32,4,4:902 450:$C:2e-3:32,4,4:903 &
chain d300x8 300:$S:3e-3:32,4,4:902 300:$C:2e-3:32,8,8:903 &
chain e150  150:$S:3e-3:32,4,4:902 750:$C:2e-3:32,4,4:903 &
chain f-mix 900:0.45,0.4,0.15:3e-3:32,4,4:902 &
chain g300  300:$S:3e-3:32,4,4:902 600:$C:3e-3:32,4,4:903 &
chain h600  600:$S:3e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
chain i300  300:$S:3e-3:32,4,4:902 900:$C:2e-3:32,4,4:903 &
elif [ "${SWEEP}" = 2 ]; then
chain s600c300   600:$S:3e-3:32,4,4:902 300:$C:2e-3:32,4,4:903 &
chain s900c300   900:$S:3e-3:32,4,4:902 300:$C:2e-3:32,4,4:903 &
chain s750c450   750:$S:3e-3:32,4,4:902 450:$C:2e-3:32,4,4:903 &
SEED=1 chain h600-seed1 600:$S:3e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
SEED=2 chain h600-seed2 600:$S:3e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
chain s600c600lr3 600:$S:3e-3:32,4,4:902 600:$C:3e-3:32,4,4:903 &
chain s400lr5c600 400:$S:5e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
chain s1200   1200:$S:3e-3:32,4,4:902 &
chain s600mix600 600:$S:3e-3:32,4,4:902 600:0.4,0.45,0.15:2e-3:32,4,4:903 &
chain s600c300x8 600:$S:3e-3:32,4,4:902 300:$C:3e-3:32,8,8:903 &
else
SEED=1 chain s750c450-seed1 750:$S:3e-3:32,4,4:902 450:$C:2e-3:32,4,4:903 &
SEED=2 chain s750c450-seed2 750:$S:3e-3:32,4,4:902 450:$C:2e-3:32,4,4:903 &
MAXN=3 chain s600c600n3x8 600:$S:3e-3:32,8,8:902 600:$C:2e-3:32,8,8:903 &
MAXN=4 chain s600c450n4x8 600:$S:3e-3:32,8,8:902 450:$C:2e-3:32,8,8:903 &
MAXN=3 chain s750c450n3x8 750:$S:3e-3:32,8,8:902 450:$C:2e-3:32,8,8:903 &
chain s900c450 900:$S:3e-3:32,4,4:902 450:$C:2e-3:32,4,4:903 &
chain s750c600 750:$S:3e-3:32,4,4:902 600:$C:2e-3:32,4,4:903 &
chain s750c450lr1 750:$S:3e-3:32,4,4:902 450:$C:1e-3:32,4,4:903 &
MAXN=2 chain s750c450n2x8 750:$S:3e-3:32,8,8:902 450:$C:2e-3:32,8,8:903 &
chain s750c300x8 750:$S:3e-3:32,4,4:902 300:$C:2e-3:32,8,8:903 &
fi
wait
python3 - "$W" "$OUT" <<'PY'
import json, sys, pathlib
w, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = {}
for p in sorted(w.glob("*/probe.json")):
    d = json.loads(p.read_text()); r = d["reading"]; s = r["selection"]
    rows[p.parent.name] = {"args": d["args"], "seconds": d.get("seconds"), "loss_last20": d.get("loss_last20"),
                           "solve": r["solve_rate_prompts"], "pointer_reading": r["pointer_reading"],
                           "pointer_accuracy": r["pointer_accuracy"], "genselect": s["genselect"],
                           "genselect_ci": [s["genselect_lo"], s["genselect_hi"]], "majority": s["majority"],
                           "over_majority": s["over_majority"], "over_majority_ci": [s["over_majority_lo"], s["over_majority_hi"]]}
(out / "sweep.json").write_text(json.dumps(rows, indent=1))
for k, v in rows.items():
    print(f"{k:12s} solve {v['solve']:.3f} ptr {v['pointer_reading']:.3f} gs {v['genselect']:.3f} maj {v['majority']:.3f} "
          f"over {v['over_majority']:+.3f} [{v['over_majority_ci'][0]:+.3f},{v['over_majority_ci'][1]:+.3f}] t {v['seconds']}")
PY
