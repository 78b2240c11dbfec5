//! Bandwidth and latency of every ordered pair of workers, measured over the
//! same authenticated TCP mesh training uses. Pairs take turns (a barrier
//! between them), so one link is measured at a time: worker a sends small
//! messages that b echoes (round trip / 2 = latency), then `bytes`-long ones
//! that b acknowledges (bandwidth = bytes / (that time - a small round trip)).
//! Medians over `repeats` rounds, after one warm-up round.

use super::figures::Link;
use super::fit::median;
use crate::cluster::Launcher;
use crate::cluster::driver::{DriverOptions, run_job};
use crate::cluster::worker_session::Job;
use crate::comm::{Category, Mesh, MeshConfig, tag};
use anyhow::Context;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ProbeTask {
    pub bytes: usize,
    pub repeats: usize,
    pub timeout_ms: u64,
}

impl Default for ProbeTask {
    fn default() -> Self {
        ProbeTask { bytes: 4 << 20, repeats: 5, timeout_ms: 30_000 }
    }
}

/// The `probe` task of a worker: joins the mesh, takes its turns, returns the
/// links it measured as sender (`{"rank", "links": [...]}`).
pub fn probe_worker(job: Job) -> anyhow::Result<serde_json::Value> {
    let task: ProbeTask = serde_json::from_value(job.config.get("probe").cloned().unwrap_or_default())
        .context("the driver sent a malformed probe task (are driver and worker the same version?)")?;
    let (rank, world) = (job.rank, job.world);
    let timeout = Duration::from_millis(task.timeout_ms.max(1));
    let mut mc = MeshConfig::new(rank, job.peers, job.secret);
    mc.encrypt = job.encrypt;
    mc.write_timeout = timeout;
    let listener =
        Arc::try_unwrap(job.listener).or_else(|shared| shared.try_clone()).context("cannot use the mesh listener")?;
    let mesh = Mesh::establish(listener, &mc)?;
    let rounds = task.repeats.max(1) + 1;
    let big = vec![0u8; task.bytes.max(1)];
    let mut links = Vec::new();
    for a in 0..world {
        for b in (0..world).filter(|&b| b != a) {
            mesh.barrier(timeout)?;
            let base = ((a * world + b) as u64) << 16;
            if rank == a {
                let mut small = Vec::with_capacity(rounds);
                let mut large = Vec::with_capacity(rounds);
                for k in 0..2 * rounds {
                    let payload = if k < rounds { vec![0u8; 8] } else { big.clone() };
                    let t = tag::make(tag::USER, base | k as u64);
                    let start = Instant::now();
                    mesh.send(b, t, Category::Control, payload)?;
                    mesh.recv(b, t, timeout)?;
                    let s = start.elapsed().as_secs_f64();
                    // Round 0 of each kind warms the path up.
                    match k {
                        0 => {}
                        k if k < rounds => small.push(s),
                        k if k == rounds => {}
                        _ => large.push(s),
                    }
                }
                let rtt = median(&small).unwrap_or(0.0);
                let transfer = (median(&large).unwrap_or(0.0) - rtt).max(1e-9);
                links.push(Link { from: a, to: b, bandwidth: big.len() as f64 / transfer, latency: rtt / 2.0 });
            } else if rank == b {
                for k in 0..2 * rounds {
                    let t = tag::make(tag::USER, base | k as u64);
                    mesh.recv(a, t, timeout)?;
                    mesh.send(a, t, Category::Control, vec![0u8; 8])?;
                }
            }
        }
    }
    mesh.barrier(timeout)?;
    Ok(serde_json::json!({ "rank": rank, "links": links }))
}

/// Starts `world` workers through `launcher`, probes every ordered pair, and
/// returns the links sorted by (from, to).
pub fn probe_links(
    launcher: &dyn Launcher,
    world: usize,
    task: &ProbeTask,
    interrupted: &AtomicBool,
    driver_bind: std::net::SocketAddr,
    encrypt: bool,
) -> anyhow::Result<Vec<Link>> {
    if world < 2 {
        return Ok(Vec::new());
    }
    let config = serde_json::json!({ "task": "probe", "probe": task });
    let opts = DriverOptions { bind: driver_bind, encrypt, ..DriverOptions::default() };
    let values = run_job(launcher, world, &config, &opts, interrupted, |_| {})
        .with_context(|| format!("the bandwidth/latency probe among {world} workers failed"))?;
    let mut links: Vec<Link> = Vec::new();
    for v in values {
        let got: Vec<Link> = serde_json::from_value(v.get("links").cloned().unwrap_or_default())
            .context("a worker's probe report is malformed")?;
        links.extend(got);
    }
    links.sort_by_key(|l| (l.from, l.to));
    Ok(links)
}
