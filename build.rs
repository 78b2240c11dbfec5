//! With the `cuda` feature, compiles leapgnn's own CUDA kernels
//! (`src/model/cuda/*.cu`) to PTX with nvcc (`scripts/build-cuda.sh` puts
//! the PyPI toolkit's nvcc on PATH). Without it, nothing to do.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/model/cuda/rows.cu");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("rows.ptx");
    // PTX for a virtual architecture is compiled by the driver for the card it
    // meets, so 75 (the oldest CUDA 13 supports) runs on every newer card.
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "75".into());
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", &format!("-arch=compute_{cap}"), "-o"])
        .arg(&out)
        .arg("src/model/cuda/rows.cu")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{nvcc} failed on src/model/cuda/rows.cu ({s})"),
        Err(e) => panic!(
            "cannot run {nvcc} ({e}): the cuda feature compiles leapgnn's kernels with nvcc; \
             scripts/build-cuda.sh installs one and puts it on PATH"
        ),
    }
}
