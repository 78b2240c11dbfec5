#!/usr/bin/env bash
# Builds leapgnn with `--features cuda` on any x86-64 Linux machine, GPU or
# not, with the CUDA 13.0 toolkit from PyPI (no system CUDA, no root):
#
#   scripts/build-cuda.sh                 # target/cuda/release/leapgnn, for Hopper (compute 9.0)
#   CUDA_COMPUTE_CAP=80 scripts/build-cuda.sh   # another card: 80 A100, 86 RTX 30xx, 89 L4/RTX 40xx
#
# The wheels go to $LEAPGNN_CUDA_CACHE (default ~/.cache/leapgnn/cuda-13.0),
# installed once. candle links the CUDA driver library (libcuda.so.1) that
# only a GPU driver installs; a stub with the same soname, defining every
# driver function cudarc declares, satisfies the linker, and the real driver
# library is the one loaded at run time. Extra arguments go to `cargo build`.
#
# LEAPGNN_CUDA_TARGET_DIR=target builds in the CPU build's target directory,
# reusing every dependency the cuda feature leaves alone (CI, after its tests);
# target/release/leapgnn is then the cuda binary until the next CPU build, which
# puts its own back without compiling anything.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${LEAPGNN_CUDA_CACHE:-$HOME/.cache/leapgnn/cuda-13.0}
TARGET_DIR=${LEAPGNN_CUDA_TARGET_DIR:-target/cuda}
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
# Pinned: nvcc 13.0 is what the 580-series drivers run; the cu12 wheels ship no nvcc.
WHEELS=(
	nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvrtc==13.0.88
	nvidia-cublas==13.0.2.14 nvidia-curand==10.4.5.25 nvidia-cuda-crt==13.0.88
	nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85
)
STAMP=$CACHE/.installed-$(printf '%s\n' "${WHEELS[@]}" | sha256sum | cut -c1-16)
if [[ ! -f $STAMP ]]; then
	echo "build-cuda: installing the CUDA 13.0 toolkit wheels into $CACHE" >&2
	rm -rf "$CACHE.tmp"
	python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$CACHE.tmp" "${WHEELS[@]}"
	rm -rf "$CACHE"
	mv "$CACHE.tmp" "$CACHE"
	touch "$STAMP"
fi
CU=$CACHE/nvidia/cu13
[[ -x $CU/bin/nvcc ]] || { echo "build-cuda: $CU/bin/nvcc is missing; remove $CACHE and run again" >&2; exit 1; }

# The unversioned names the linker asks for (the wheels ship only .so.13 / .so.10).
for l in "$CU"/lib/lib{cublas,cublasLt,cudart,nvrtc,curand}.so.*; do
	[[ $l == *.alt.* ]] && continue
	ln -sf "$(basename "$l")" "${l%%.so.*}.so"
done
[[ -e $CU/lib64 ]] || ln -s lib "$CU/lib64"

# The driver stub, from the names in the cudarc source this build compiles.
cudarc=$(cargo metadata --format-version 1 --features cuda |
	python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc"))')
sys_rs=$(dirname "$cudarc")/src/driver/sys/mod.rs
mkdir -p "$CU/lib/stubs"
grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$sys_rs" | sort -u | awk '{ print "int " $4 "(void) { return 999; }" }' >"$CU/lib/stubs/cuda_stub.c"
n=$(wc -l <"$CU/lib/stubs/cuda_stub.c")
((n > 100)) || { echo "build-cuda: found only $n driver functions in $sys_rs" >&2; exit 1; }
cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$CU/lib/stubs/libcuda.so" "$CU/lib/stubs/cuda_stub.c"

# candle-kernels compiles its quantized-matmul kernels (about a minute of nvcc
# each, and the longest step of this build) on half the cores unless told; one
# nvcc peaks at about 250 MiB, so every core can take one.
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
export PATH=$CU/bin:$PATH CUDA_ROOT=$CU CUDA_PATH=$CU CUDA_TOOLKIT_ROOT_DIR=$CU LIBRARY_PATH=$CU/lib
echo "build-cuda: nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), compute capability $CUDA_COMPUTE_CAP, $n driver functions stubbed${NVCC_APPEND_FLAGS:+, nvcc flags appended: $NVCC_APPEND_FLAGS}" >&2
cargo build --release --features cuda --target-dir "$TARGET_DIR" "$@"
BIN=$TARGET_DIR/release/leapgnn

# Smoke check, GPU or not: with the stub standing in for the driver, the binary
# starts, trains on the CPU, and refuses --device cuda naming the device.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ln -s "$CU/lib/stubs/libcuda.so" "$tmp/libcuda.so.1"
run() { LD_LIBRARY_PATH=$CU/lib:$tmp "$BIN" --data-dir "$tmp/data" "$@"; }
run train --epochs 1 --no-tui --json >"$tmp/cpu.json" 2>"$tmp/cpu.err" ||
	{ cat "$tmp/cpu.err" >&2; echo "build-cuda: $BIN does not train on the CPU" >&2; exit 1; }
rc=0
run train --device cuda --epochs 1 --no-tui >/dev/null 2>"$tmp/cuda.err" || rc=$?
if ((rc != 2)) || ! grep -q "cannot open CUDA device 0" "$tmp/cuda.err"; then
	cat "$tmp/cuda.err" >&2
	echo "build-cuda: $BIN --device cuda without a GPU should exit 2 naming the device (exit $rc)" >&2
	exit 1
fi
echo "build-cuda: $BIN trains on the CPU and asks for CUDA device 0 with --device cuda" >&2
echo "build-cuda: to run it: LD_LIBRARY_PATH=$CU/lib $BIN ... (and an NVIDIA driver's libcuda.so.1)" >&2
