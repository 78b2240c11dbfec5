#!/usr/bin/env bash
# Evaluation time of `--eval full` (distributed layer-wise inference) against
# `--eval sampled --eval-fanout all` in one invocation (issue #14, "Inference"):
# Facebook, 4 workers (METIS), sage 10,10, batch 1024, one epoch, for each
# strategy given. Both configurations run back to back on the same machine
# and partition, so load hits both alike. Prints one JSON object:
#   {"dataset", "workers", "runs": [{"strategy", "full": {"eval_seconds",
#    "eval_bytes", "test_accuracy"}, "sampled": {...}, "ratio"}...]}
# ratio = full eval_seconds / sampled eval_seconds (the issue asks <= 0.2);
# eval_bytes = every category of `bytes.eval`, summed.
#   scripts/eval-ratio.sh [DATA_DIR] [STRATEGY...]
# DATA_DIR defaults to a temp dir (Facebook is imported from
# ../shared/datasets/musae-facebook when missing, its features stored as
# FEATURES says: dense, as the issue measured, or auto = sparse for Facebook's
# bag-of-words rows); strategies default to model-centric and leapgnn; LEAPGNN
# names the binary (target/release/leapgnn).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEAPGNN:-$root/target/release/leapgnn}
data=${1:-}
shift || true
strategies=("$@")
[ ${#strategies[@]} -gt 0 ] || strategies=(model-centric leapgnn)
if [ -z "$data" ]; then
  data=$(mktemp -d)
  trap 'rm -rf "$data"' EXIT
fi
if [ ! -e "$data/facebook" ]; then
  "$bin" --data-dir "$data" download facebook --from "$root/../shared/datasets/musae-facebook" \
    --features "${FEATURES:-dense}" --json >/dev/null
fi
common=(train facebook --no-tui --json --workers 4 --epochs 1 --model sage --fanout 10,10 --batch-size 1024)
out=$(mktemp)
for s in "${strategies[@]}"; do
  for eval in full sampled; do
    "$bin" --data-dir "$data" "${common[@]}" --strategy "$s" --eval "$eval" --eval-fanout all \
      --run "eval-ratio-$s-$eval-$$" 2>/dev/null | tr -d '\n' >>"$out"
    echo >>"$out"
  done
done
python3 - "$out" "${FEATURES:-dense}" "${strategies[@]}" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def one(s):
    return {
        "eval_seconds": sum(e["eval_seconds"] for e in s["history"]),
        "eval_bytes": sum(v for v in s["bytes"]["eval"].values() if isinstance(v, int)),
        "test_accuracy": s["test_accuracy"],
    }
out = []
for i, strategy in enumerate(sys.argv[3:]):
    full, sampled = one(runs[2 * i]), one(runs[2 * i + 1])
    out.append({"strategy": strategy, "full": full, "sampled": sampled,
                "ratio": full["eval_seconds"] / sampled["eval_seconds"]})
print(json.dumps({"dataset": "facebook", "workers": 4, "features": sys.argv[2], "runs": out}, indent=1))
EOF
rm -f "$out"
