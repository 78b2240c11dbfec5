//! With the `cuda` feature, compiles leapgnn's own CUDA kernels
//! (`src/model/cuda/*.cu`) to PTX with nvcc (`scripts/build-cuda.sh` puts
//! the PyPI toolkit's nvcc on PATH). Without it, nothing to do.
//!
//! Always: embeds `LEAPGNN_SOURCE_HASH`, a hash of the sources the binary is
//! built from, so that a driver tells apart two builds of one package version
//! (`leapgnn::BUILD_ID`) without hashing its own 70 MB executable at start,
//! and `LEAPGNN_DEVICE_FEATURES`, the device features enabled (`+cuda`).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary is built from; `tests/` and docs are not.
const SOURCES: [&str; 5] = ["src", "cmds", "build.rs", "Cargo.toml", "Cargo.lock"];

/// Features that change which devices the binary drives: a build id names
/// those enabled, since the same sources built with and without them are
/// different builds that must not join one job.
const DEVICE_FEATURES: [&str; 1] = ["cuda"];

fn main() {
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo:rerun-if-env-changed=NVCC");
    let mut files = Vec::new();
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
        collect(Path::new(s), &mut files);
    }
    files.sort();
    // SipHash with fixed keys: the same sources give the same id on every host.
    let mut h = std::hash::DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display())).hash(&mut h);
    }
    println!("cargo:rustc-env=LEAPGNN_SOURCE_HASH={:016x}", h.finish());
    let features: String = DEVICE_FEATURES
        .iter()
        .filter(|f| std::env::var_os(format!("CARGO_FEATURE_{}", f.to_uppercase())).is_some())
        .map(|f| format!("+{f}"))
        .collect();
    println!("cargo:rustc-env=LEAPGNN_DEVICE_FEATURES={features}");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("rows.ptx");
    // PTX for a virtual architecture is compiled by the driver for the card it
    // meets, so 75 (the oldest CUDA 13 supports) runs on every newer card.
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "75".into());
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    // Any source change now reruns this script: nvcc only when its input or settings changed.
    let stamp = out.with_extension("stamp");
    let mut kernel = std::hash::DefaultHasher::new();
    std::fs::read("src/model/cuda/rows.cu").ok().hash(&mut kernel);
    let want = format!("{cap}\n{nvcc}\n{:016x}", kernel.finish());
    if out.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return;
    }
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", &format!("-arch=compute_{cap}"), "-o"])
        .arg(&out)
        .arg("src/model/cuda/rows.cu")
        .status();
    match status {
        Ok(s) if s.success() => std::fs::write(&stamp, want).expect("cannot write the PTX stamp in OUT_DIR"),
        Ok(s) => panic!("{nvcc} failed on src/model/cuda/rows.cu ({s})"),
        Err(e) => panic!(
            "cannot run {nvcc} ({e}): the cuda feature compiles leapgnn's kernels with nvcc; \
             scripts/build-cuda.sh installs one and puts it on PATH"
        ),
    }
}

fn collect(p: &Path, files: &mut Vec<PathBuf>) {
    match std::fs::read_dir(p) {
        Ok(entries) => {
            for e in entries {
                collect(&e.expect("cannot list the sources").path(), files);
            }
        }
        Err(_) if p.is_file() => files.push(p.to_path_buf()),
        Err(_) => {}
    }
}
