#!/usr/bin/env bash
# On a host with an NVIDIA GPU: trains the same runs with the CUDA build and
# the CPU build, seed 0, and compares them: the loss of every epoch, test
# accuracy, and the median training seconds per epoch after the first (the
# first includes the driver compiling candle's kernels, about 20 s once per
# machine; cached after in ~/.nv/ComputeCache).
#
#   scripts/build-cuda.sh && cargo build --release && scripts/cuda-check.sh
#
# LEAPGNN_CPU / LEAPGNN_CUDA name the binaries (default target/release and
# target/cuda/release); the CUDA libraries are found under /usr/local,
# /opt (PyTorch's wheels) or the build-cuda.sh cache. Cora and Facebook are
# imported from ../shared/datasets, synthetic-arxiv is generated. Exit 1 if a
# run fails, or if a shallow model's loss curve (GraphSAGE, GCN, GAT under
# sampled, full-graph, RETEXO and VARCO training) differs from the CPU's by
# more than 1e-4 relative at any epoch; deep models are reported, not judged
# (see README: CUDA).
set -u
cd "$(dirname "$0")/.."
CPU=${LEAPGNN_CPU:-target/release/leapgnn}
CUDA=${LEAPGNN_CUDA:-target/cuda/release/leapgnn}
for b in "$CPU" "$CUDA"; do [[ -x $b ]] || { echo "cuda-check: $b is missing (see the usage line in this script)" >&2; exit 2; }; done
command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "cuda-check: no GPU here (nvidia-smi lists none)" >&2; exit 2; }
libs=""
for l in libcublas.so.13 libcudart.so.13 libcurand.so.10 libcublasLt.so.13; do
	p=$(find /usr/local /opt "${LEAPGNN_CUDA_CACHE:-$HOME/.cache/leapgnn/cuda-13.0}" -name "$l" -print -quit 2>/dev/null)
	[[ -n $p ]] && libs="$libs:$(dirname "$p")"
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
OUT=$(mktemp -d)
DATA=$OUT/data
trap 'rm -rf "$OUT"' EXIT
"$CPU" --data-dir "$DATA" download cora-planetoid --from ../shared/datasets/planetoid/converted/cora >/dev/null &&
	"$CPU" --data-dir "$DATA" download facebook --from ../shared/datasets/musae-facebook >/dev/null &&
	"$CPU" --data-dir "$DATA" download synthetic-arxiv >/dev/null || { echo "cuda-check: importing the datasets failed" >&2; exit 1; }
failed=0
run() { # name judged(0/1) timeout train-args...
	local name=$1 judged=$2 t=$3
	shift 3
	for dev in cuda cpu; do
		local bin=$CPU
		[[ $dev == cuda ]] && bin=$CUDA
		# SIGTERM asks leapgnn to stop after the iteration in progress, which may
		# never come on a run that is stuck: -k kills it 10 s later.
		if ! timeout -k 10 "$t" "$bin" --data-dir "$DATA" --json train "$@" --no-tui --device $dev --seed 0 >"$OUT/$name-$dev.json" 2>"$OUT/$name-$dev.err"; then
			echo "$name on $dev failed:" && tail -3 "$OUT/$name-$dev.err"
			failed=1
			return
		fi
	done
	python3 - "$OUT/$name" "$name" "$judged" <<'PY' || failed=1
import json, statistics, sys
base, name, judged = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
cpu, cuda = (json.load(open(f"{base}-{d}.json")) for d in ("cpu", "cuda"))
rel = [abs(a["loss"] - b["loss"]) / max(abs(a["loss"]), 1e-12) for a, b in zip(cpu["history"], cuda["history"])]
def secs(s):
    t = [h["seconds"] for h in s["history"]]
    return statistics.median(t[1:]) if len(t) > 1 else t[0]
verdict = "" if not judged else ("ok" if max(rel) <= 1e-4 else "DIFFERS")
print(f"{name:9s} loss rel. diff: epoch 1 {rel[min(1, len(rel) - 1)]:.1e}, max {max(rel):.1e} over {len(rel)} epochs; "
      f"test acc. cuda {cuda['test_accuracy']:.4f} cpu {cpu['test_accuracy']:.4f}; "
      f"s/epoch cuda {secs(cuda):.3f} cpu {secs(cpu):.3f} ({secs(cuda) / secs(cpu):.2f}x) {verdict}", flush=True)
sys.exit(1 if verdict == "DIFFERS" else 0)
PY
}
run sxfull 1 120 synthetic-arxiv --workers 4 --full-batch --model sage --hidden 256 --epochs 5
run fbfull 1 120 facebook --workers 4 --full-batch --model sage --hidden 256 --epochs 11
run sxmc 1 120 synthetic-arxiv --workers 4 --strategy model-centric --model sage --epochs 1
run sagemax 1 60 cora-planetoid --workers 4 --strategy model-centric --model sage-max --epochs 20
run gat 1 60 cora-planetoid --workers 4 --strategy leapgnn --model gat --epochs 30
run retexo 1 60 cora-planetoid --workers 4 --strategy retexo --model gcn --rounds 180
run varco 1 60 cora-planetoid --workers 4 --strategy varco --epochs 90 --hidden 64
run sxpipe 1 120 synthetic-arxiv --workers 4 --strategy gnnpipe --model gcn --layers 8 --hidden 64 --chunks 4 --epochs 3
run sxdeep 0 120 synthetic-arxiv --workers 4 --full-batch --model deepgcn --layers 8 --hidden 64 --epochs 4
run gnnpipe 0 60 cora-planetoid --workers 4 --strategy gnnpipe --model deepgcn --layers 8 --hidden 64 --chunks 4 --epochs 30
run deepmb 0 60 cora-planetoid --workers 4 --strategy leapgnn --model deepgcn --epochs 10
run film 0 60 cora-planetoid --workers 4 --strategy leapgnn --model film --epochs 11
exit $failed
