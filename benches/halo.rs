//! The full-graph halo plan: derive it at start (one pass over the in-edges)
//! or store it with the partition and read it back? Times both for every part
//! of a partitioned dataset (default: synthetic-products, 4 METIS parts):
//!
//!     leapgnn download synthetic-products && leapgnn partition synthetic-products --parts 4
//!     HALO_DATA_DIR=<data dir> cargo bench --bench halo
//!
//! "Store" writes the plan's arrays (block CSR, halo and send lists) to a file
//! and reads them back, the least a stored plan costs to load.

use leapgnn::format::{DatasetFile, ManifestFile};
use leapgnn::train::fullgraph::HaloPlan;
use std::io::Write;
use std::time::Instant;

fn main() {
    let Ok(dir) = std::env::var("HALO_DATA_DIR") else {
        eprintln!("skipping: set HALO_DATA_DIR to a data dir holding a partitioned dataset");
        return;
    };
    let name = std::env::var("HALO_DATASET").unwrap_or_else(|_| "synthetic-products".into());
    let parts: usize = std::env::var("HALO_PARTS").ok().and_then(|p| p.parse().ok()).unwrap_or(4);
    let root = std::path::Path::new(&dir).join(&name);
    let ds = DatasetFile::open(root.join("dataset.lgnn")).expect("dataset");
    let m = ManifestFile::open(root.join(format!("parts/metis-{parts}"))).expect("partition");
    let tmp = tempfile::tempdir().expect("tempdir");
    for rank in 0..parts {
        let t = Instant::now();
        let plan = HaloPlan::derive(ds.graph(), Some(m.node_part()), (rank, parts), true)
            .expect("a share within 32-bit offsets");
        let derive = t.elapsed().as_secs_f64();
        let mut words: Vec<u32> = Vec::new();
        words.extend(&plan.block.src);
        words.extend(&plan.block.indptr);
        words.extend(&plan.block.indices);
        plan.send.iter().for_each(|s| words.extend(s));
        let path = tmp.path().join(format!("plan-{rank}"));
        let mut f = std::fs::File::create(&path).expect("create");
        f.write_all(bytemuck::cast_slice(&words)).expect("write");
        f.sync_all().expect("sync");
        drop(f);
        let t = Instant::now();
        let bytes = std::fs::read(&path).expect("read");
        let back: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(std::hint::black_box(back).len(), words.len());
        let load = t.elapsed().as_secs_f64();
        println!(
            "{name} part {rank}/{parts}: owned {}, halo {}, edges {}: derive {derive:.3} s, stored plan {:.1} MB read back in {load:.3} s",
            plan.owned().len(),
            plan.halo().len(),
            plan.block.num_edges(),
            bytes.len() as f64 / 1e6,
        );
    }
}
