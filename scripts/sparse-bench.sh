#!/usr/bin/env bash
# Sparse vs dense feature storage, single worker, 1 thread (issue #17 item 1):
# the same training run with a baseline binary (BASE, dense archives) and this
# build (NEW), interleaved ROUNDS times so that load on a shared machine hits
# both alike. Training roots/s = roots trained / the epochs' training seconds
# (evaluation excluded), from `train --json`. Prints one TSV line per run.
#   scripts/sparse-bench.sh BASE_BIN BASE_DATA NEW_BIN NEW_DATA [ROUNDS]
# Datasets are imported beforehand in each data dir: facebook, citeseer-planetoid
# (new: auto = sparse), synthetic-arxiv, slashdot (dense 128-d).
set -euo pipefail
base=$1 base_data=$2 new=$3 new_data=$4 rounds=${5:-3}
run() { # label bin data dataset batch epochs
  local label=$1 bin=$2 data=$3 ds=$4 batch=$5 epochs=$6
  RAYON_NUM_THREADS=1 "$bin" --data-dir "$data" train "$ds" --model sage --fanout 10,10 --hidden 128 \
    --batch-size "$batch" --epochs "$epochs" --no-tui --json --run "bench-$label-$ds-$RANDOM$RANDOM" 2>/dev/null |
    python3 -c '
import json, sys
j = json.load(sys.stdin)
label, ds, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
roots = sum(r["roots"] for r in map(json.loads, open(sys.argv[4] + "/runs/" + j["run"] + "/metrics.jsonl")))
secs = sum(j["epoch_seconds"])
acc = j["test_accuracy"]
print("%s\t%s\t%.0f\t%.4f" % (ds, label, roots / secs, acc))
' "$label" "$ds" "$epochs" "$data"
}
for r in $(seq "$rounds"); do
  for spec in "facebook 512 2" "citeseer-planetoid 512 20" "synthetic-arxiv 1024 1" "slashdot 1024 1"; do
    set -- $spec
    run base "$base" "$base_data" "$1" "$2" "$3"
    run new "$new" "$new_data" "$1" "$2" "$3"
  done
done
