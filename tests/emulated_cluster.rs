//! scripts/emulated-cluster.sh for real: network namespaces, veth, a bridge,
//! tc shaping and one sshd per emulated host. The script must leave nothing
//! behind, and its report must compare the strategies it ran.

#[path = "dist_support/mod.rs"]
mod dist_support;

use dist_support::bounded::{Bounded, QUICK_LIMIT};
use std::path::Path;
use std::process::{Command, Output};

/// The runs share the host's namespace list, so one at a time (else one run's
/// hosts would look like another's leftovers).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn script(args: &[&str]) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bash = Command::new("bash");
    bash.arg(root.join("scripts/emulated-cluster.sh")).args(["--bin", env!("CARGO_BIN_EXE_leapgnn")]).args(args);
    dist_support::bounded::run_within(
        &mut bash,
        dist_support::bounded::RUN_LIMIT,
        &format!("scripts/emulated-cluster.sh {args:?}"),
    )
}

/// Namespaces and links named after the script's runs (`lg<pid>-h<i>`, `lgbr<pid>`, `lgv<pid>-<i>`).
fn leftovers() -> Vec<String> {
    let ns = Command::new("ip").args(["netns", "list"]).output_in(QUICK_LIMIT, "ip netns list");
    let links = Command::new("ip").args(["-o", "link", "show"]).output_in(QUICK_LIMIT, "ip -o link show");
    let mut left: Vec<String> = String::from_utf8_lossy(&ns.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("lg") && n.contains("-h"))
        .map(str::to_string)
        .collect();
    left.extend(
        String::from_utf8_lossy(&links.stdout)
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .filter(|n| n.starts_with("lgbr") || n.starts_with("lgv")),
    );
    left
}

/// Whether this machine lets us make network namespaces (root with
/// CAP_NET_ADMIN and iproute2); a container without them cannot run the
/// emulated cluster at all, which the script reports with exit 2.
fn namespaces_allowed() -> bool {
    let name = format!("lgprobe{}", std::process::id());
    let made = Command::new("ip")
        .args(["netns", "add", &name])
        .try_output_in(QUICK_LIMIT, "ip netns add")
        .is_ok_and(|o| o.status.success());
    if made {
        Command::new("ip").args(["netns", "del", &name]).output_in(QUICK_LIMIT, "ip netns del");
    } else {
        eprintln!("skipped: this machine does not allow network namespaces (needs root, CAP_NET_ADMIN, iproute2)");
    }
    made
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn hosts_come_up_pass_the_cluster_check_and_leave_nothing_behind() {
    let _one = serial();
    if !namespaces_allowed() {
        return;
    }
    let before = leftovers();
    let out = tempfile::tempdir().unwrap();
    let o = script(&["--hosts", "3", "--check-only", "--rate", "50mbit", "--out", out.path().to_str().unwrap()]);
    let err = stderr(&o);
    assert!(o.status.success(), "the script failed:\n{err}");
    assert_eq!(err.matches(": all hosts ok").count(), 1, "{err}");
    assert_eq!(err.matches("mesh listening on 10.213.").count(), 3, "{err}");
    assert!(err.contains("rate 50Mbit"), "the link is not shaped:\n{err}");
    // The bucket banks at most one 64 KiB segment (1 ms of 50 Mb/s is less): a
    // link that idled must not then run above its rate.
    assert!(err.contains("burst 64Kb"), "the token bucket is not one segment:\n{err}");
    // Nor below it: packets of a quarter of the bucket keep it metering.
    assert!(err.contains("gso_max_size 16384"), "GSO packets are not capped:\n{err}");
    // Each host its own CPU quota (the default: cores / hosts), which its sshd's
    // sessions and workers ran under during the cluster check.
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    let quota = format!("{:.3} cores (cgroup", cores / 3.0);
    let hosts: Vec<&str> = err.lines().filter(|l| l.contains(&quota)).collect();
    assert_eq!(hosts.len(), 3, "one quota line per host:\n{err}");
    // The quota comes in 10 ms periods (cores x 10,000 us each), so a host
    // runs at its share steadily instead of flat out and then stopped.
    let share: f64 = format!("{:.3}", cores / 3.0).parse().unwrap();
    let limit = format!("{} us per 10000 us)", ((share * 10_000.0).round() as u64).max(1000));
    for l in hosts {
        assert!(l.contains(&limit), "the quota is not {limit}: {l}");
        let periods: u64 = l.split(", ").last().unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(periods > 0, "no process of this host ran in its cgroup: {l}");
    }
    assert!(err.contains("clean: no namespace, link, qdisc, cgroup or process"), "{err}");
    assert_eq!(leftovers(), before);
    assert!(cgroups_left().is_empty(), "{:?}", cgroups_left());

    // --host-cpus off: no cgroup at all.
    let o = script(&["--hosts", "2", "--check-only", "--host-cpus", "off", "--out", out.path().to_str().unwrap()]);
    let err = stderr(&o);
    assert!(o.status.success(), "the script failed:\n{err}");
    assert!(!err.contains("cores (cgroup"), "{err}");
    assert_eq!(leftovers(), before);
}

/// cgroups named after the script's hosts (`lg<pid>-h<i>`) under either hierarchy.
fn cgroups_left() -> Vec<String> {
    ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"]
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("lg") && n.contains("-h"))
        .collect()
}

#[test]
fn bad_arguments_exit_2_before_touching_the_network() {
    let _one = serial();
    let before = leftovers();
    for args in [
        &["--hosts", "0"][..],
        &["--rate"][..],
        &["--frobnicate"][..],
        &["--host-cpus", "lots"][..],
        &["--cpu-period", "0"][..],
    ] {
        let o = script(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
    let o = script(&["--hosts", "2", "--sweep", "fast", "--dataset", "nothing-here"]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(leftovers(), before);
}

#[test]
fn a_two_host_run_reports_every_strategy_against_model_centric() {
    let _one = serial();
    if !namespaces_allowed() {
        return;
    }
    let data = dist_support::cora();
    let out = tempfile::tempdir().unwrap();
    let o = script(&[
        "--hosts",
        "2",
        "--dataset",
        "cora",
        "--data-dir",
        data.path().to_str().unwrap(),
        "--strategies",
        "model-centric,leapgnn",
        "--sweep",
        "20mbit,1gbit",
        "--epochs",
        "1",
        "--batch-size",
        "64",
        "--out",
        out.path().to_str().unwrap(),
        "--leapgnn-grid",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "the script failed:\n{err}");
    assert!(err.contains("clean: no namespace, link, qdisc, cgroup or process"), "{err}");
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    // The grid: leapgnn at T = 1, 2 with prefetch on and off, set against the plan.
    for rate in ["20mbit", "1gbit"] {
        for v in ["t1-on", "t1-off", "t2-on", "t2-off"] {
            let run = out.path().join(format!("run-{rate}-leapgnn@{v}.json"));
            let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&run).unwrap()).unwrap();
            assert_eq!(s["prefetch"], v.ends_with("-on"), "{v}: {s}");
            assert_eq!(s["time_steps"], u64::from(v.as_bytes()[1] - b'0'), "{v}");
            assert!(report.contains(&format!("| {rate} | leapgnn@{v} |")), "{report}");
        }
        assert!(
            report.contains(&format!("At {rate}: leapgnn (the plan: T = "))
                && report.contains("the fastest of the 5 leapgnn configurations measured is"),
            "{report}"
        );
    }
    for rate in ["20mbit", "1gbit"] {
        for s in ["model-centric", "leapgnn"] {
            assert!(out.path().join(format!("run-{rate}-{s}.json")).is_file(), "{rate} {s} missing:\n{err}");
            assert!(report.contains(&format!("| {rate} | {s} |")), "{report}");
        }
    }
    assert!(report.contains("| 20mbit | model-centric | 1 |") && report.contains("1.00x"), "{report}");
    let svg = std::fs::read_to_string(out.path().join("bench.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("leapgnn"), "{}", &svg[..svg.len().min(200)]);
}

/// The full-graph strategies run on the emulated hosts as on local workers:
/// RETEXO too (it takes `--rounds`, not the `--epochs` the other runs get,
/// which made it fail and go missing from the report), on the same METIS
/// partition as the others, and each moves exactly the bytes of the same run
/// on local worker processes, with the same loss.
#[test]
fn full_graph_strategies_run_on_the_emulated_hosts_as_on_local_workers() {
    let _one = serial();
    if !namespaces_allowed() {
        return;
    }
    let data = dist_support::cora();
    let d = data.path();
    let out = tempfile::tempdir().unwrap();
    let dir = d.to_str().unwrap();
    let o = script(&[
        "--hosts",
        "2",
        "--dataset",
        "cora",
        "--data-dir",
        dir,
        "--strategies",
        "retexo,varco",
        "--rate",
        "1gbit",
        "--epochs",
        "2",
        "--out",
        out.path().to_str().unwrap(),
        "--",
        "--hidden",
        "16",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "the script failed:\n{err}");
    assert!(!err.contains("missing from the report"), "{err}");
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    let common = ["train", "cora", "--no-tui", "--json", "--workers", "2", "--parts", "2", "--seed", "0"];
    let local: [(&str, &[&str]); 2] = [
        ("retexo", &["--strategy", "retexo", "--rounds", "2", "--partition", "metis", "--hidden", "16"]),
        ("varco", &["--strategy", "varco", "--epochs", "2", "--hidden", "16"]),
    ];
    for (s, args) in local {
        assert!(report.contains(&format!("| 1gbit | {s} |")), "{s} is not in the report:\n{report}");
        let emulated: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.path().join(format!("run-1gbit-{s}.json"))).unwrap()).unwrap();
        let here = dist_support::json(d, &[&common[..], args].concat());
        assert_eq!(emulated["epochs"], here["epochs"], "{s}");
        assert_eq!(emulated["bytes"], here["bytes"], "{s}: the emulated hosts' bytes vs local workers'");
        assert_eq!(emulated["final_loss"], here["final_loss"], "{s}");
    }
}
