//! `leapgnn cluster check` as a process, against a real sshd and a dead port.

#[path = "support/bounded.rs"]
mod bounded;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/sshd.rs"]
mod sshd;

use bounded::{Bounded, QUICK_LIMIT};
use sshd::{LEFT_WITHIN, Sshd};
use std::process::{Command, Output};

/// `cluster check --timeout` for a check a host must pass: each SSH step of a
/// good host (handshake, upload of the worker binary, a worker started and
/// heard from) gets it, all on a loaded machine with sshd's processes waiting
/// for a core. The bad hosts here fail for a reason, not a time, so only a
/// hang outlasts it.
const STEP: &str = "60";

fn leapgnn(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    bounded::run_within(cmd.args(args), bounded::RUN_LIMIT, &format!("leapgnn {args:?}"))
}

/// Everything under `dir` (nothing when it does not exist).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().map(Result::unwrap) {
        all.extend(walk(&e.path()));
        all.push(e.path());
    }
    all
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[test]
fn check_reports_every_host_and_fails_on_a_bad_one() {
    let mut sshd = Sshd::start();
    let dead_socket = ports::dead_port();
    let dead = dead_socket.port;
    let bad_host = sshd.host_entry(1).replace(&format!("port = {}", sshd.port), &format!("port = {dead}"));
    let profile = sshd.profile_with_hosts(&format!("{}{bad_host}", sshd.host_entry(2)), "");
    let p = profile.to_str().unwrap();

    let out = leapgnn(&["--json", "cluster", "check", p, "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2);
    for h in hosts {
        for field in ["address", "port", "reachable", "auth", "host_key", "binary", "data", "ok"] {
            assert!(h.get(field).is_some(), "{field} missing in {h}");
        }
    }
    let (good, bad) = (&hosts[0], &hosts[1]);
    assert_eq!(good["port"], sshd.port);
    assert_eq!(good["ranks"], serde_json::json!([0, 1]));
    for field in ["reachable", "host_key", "auth", "binary"] {
        assert_eq!(good[field]["ok"], true, "{field}: {good}");
    }
    assert!(good["binary"]["detail"].as_str().unwrap().contains(env!("CARGO_PKG_VERSION")));
    assert_eq!(good["ok"], true);
    assert_eq!(bad["ok"], false);
    assert_eq!(bad["reachable"]["ok"], false);
    assert!(bad["reachable"]["detail"].as_str().unwrap().contains(&format!("127.0.0.1:{dead}")), "{bad}");
    assert_eq!(bad["auth"]["ok"], serde_json::Value::Null, "not run after an unreachable host");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: ") && err.contains(&format!("127.0.0.1:{dead}")), "{err}");

    // Human table, same verdicts.
    let out = leapgnn(&["cluster", "check", p, "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    let row = |port: u16| table.lines().find(|l| l.contains(&format!("@127.0.0.1:{port} "))).unwrap_or("").to_string();
    assert!(row(sshd.port).trim_end().ends_with(" ok"), "{table}");
    assert!(row(dead).contains("FAIL"), "{table}");
    assert!(table.contains("reachable: host"), "the reason is printed under the row:\n{table}");
    assert_eq!(sshd.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
    sshd.stop();
}

/// Two entries for one sshd stand in for two hosts in tests, and are a slip
/// in a real profile: allowed, with one warning naming both entries and the
/// machine, in the JSON report and once on stderr.
#[test]
fn two_entries_for_one_machine_pass_with_one_warning() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile_with_hosts(&format!("{}{}", sshd.host_entry(1), sshd.host_entry(1)), "");
    let p = profile.to_str().unwrap();
    let machine = format!("{}@127.0.0.1:{}", sshd.user, sshd.port);

    let out = leapgnn(&["--json", "cluster", "check", p, "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["ok"], true);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2);
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");
    let w = warnings[0].as_str().unwrap();
    assert!(w.starts_with(&format!("host[0] and host[1] are the same machine, {machine}:")), "{w}");
    assert!(w.contains("their workers share it"), "{w}");

    let out = leapgnn(&["cluster", "check", p, "--timeout", STEP, "--no-workers"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains(p) && said[0].contains(&machine), "{err}");

    // Entries for different machines: no warning.
    let one = sshd.profile(2, "");
    let out = leapgnn(&["--json", "cluster", "check", one.to_str().unwrap(), "--timeout", STEP, "--no-workers"]);
    assert_eq!(json(&out)["warnings"], serde_json::json!([]));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning:"));
    assert_eq!(sshd.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
    sshd.stop();
}

/// A spare is checked like the hosts it stands in for (it must work the day
/// it takes over), and a data_dir nobody can write fails the check rather
/// than the run's start.
#[test]
fn a_broken_spare_or_an_unwritable_data_dir_fails_the_check() {
    let mut s1 = Sshd::start();
    let mut s2 = Sshd::start();
    // s2's host key is not in s1's known_hosts, which the profile names.
    let hosts = format!("{}{}spare = true\n", s1.host_entry(2), s2.host_entry(2));
    let profile = s1.profile_with_hosts(&hosts, "");
    let out = leapgnn(&["--json", "cluster", "check", profile.to_str().unwrap(), "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    let rows = v["hosts"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!((&rows[0]["spare"], &rows[0]["ok"]), (&false.into(), &true.into()), "{}", rows[0]);
    assert_eq!((&rows[1]["spare"], &rows[1]["port"]), (&true.into(), &s2.port.into()), "{}", rows[1]);
    assert_eq!(rows[1]["host_key"]["ok"], false, "{}", rows[1]);
    assert_eq!(rows[1]["ranks"], serde_json::json!([]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{} (spare)", s2.port)), "{err}");

    let profile = s1.profile(2, "data_dir = \"/proc/leapgnn-data\"");
    let out = leapgnn(&["--json", "cluster", "check", profile.to_str().unwrap(), "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let data = &json(&out)["hosts"][0]["data"];
    assert_eq!(data["ok"], false, "{data}");
    assert!(data["detail"].as_str().unwrap().contains("data_dir /proc/leapgnn-data"), "{data}");
    assert_eq!(json(&out)["hosts"][0]["ports"]["ok"], serde_json::Value::Null, "no worker starts after a failure");
    for s in [&mut s1, &mut s2] {
        assert_eq!(s.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
        s.stop();
    }
}

/// A port that accepts connections but never speaks SSH fails within the
/// profile's connect_timeout (5 s in the test profiles), not the 20 s I/O bound.
#[test]
fn a_port_that_never_speaks_ssh_fails_within_connect_timeout() {
    let sshd = Sshd::start();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accept and hold every connection, saying nothing.
    std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let host = sshd.host_entry(1).replace(&format!("port = {}", sshd.port), &format!("port = {port}"));
    let profile = sshd.profile_with_hosts(&host, "");
    let out = leapgnn(&["--json", "cluster", "check", profile.to_str().unwrap(), "--timeout", "20"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let reachable = &json(&out)["hosts"][0]["reachable"];
    assert_eq!(reachable["ok"], false, "{reachable}");
    let detail = reachable["detail"].as_str().unwrap();
    assert!(detail.contains("no SSH server answered within connect_timeout = 5 s"), "{detail}");
}

#[test]
fn check_starts_every_worker_and_reports_data_to_ship() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(2, "");
    let data = tempfile::tempdir().unwrap();
    // Rank r needs the topology, the manifest and part r: all present locally, none remotely.
    let parts = data.path().join("tiny/parts/metis-2");
    std::fs::create_dir_all(&parts).unwrap();
    for f in ["manifest", "part-0.lgnn", "part-1.lgnn"] {
        std::fs::write(parts.join(f), f.as_bytes()).unwrap();
    }
    std::fs::write(data.path().join("tiny/dataset.lgnn"), b"topology").unwrap();
    let args = |extra: &[&'static str]| {
        let mut a = vec!["--json", "--data-dir", data.path().to_str().unwrap(), "cluster", "check"];
        a.push(profile.to_str().unwrap());
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let run = |extra: &[&'static str]| {
        let a = args(extra);
        leapgnn(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run(&["--dataset", "tiny", "--parts", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["ok"], true);
    let h = &v["hosts"][0];
    assert_eq!(h["ports"]["ok"], true, "{h}");
    let ports = h["ports"]["detail"].as_str().unwrap();
    assert!(ports.contains("rank 0 started") && ports.contains("rank 1 started"), "{ports}");
    // The host's two workers share its cores, as the host counts them.
    let nproc = std::process::Command::new("nproc").output_in(QUICK_LIMIT, "nproc");
    let cores: usize = String::from_utf8_lossy(&nproc.stdout).trim().parse().unwrap();
    use leapgnn::cluster::launcher::{describe_threads, threads_per_worker};
    let share = format!(", {})", describe_threads(threads_per_worker(cores, 2)));
    assert_eq!(ports.matches(&share).count(), 2, "{ports}");
    let d = h["data"]["detail"].as_str().unwrap();
    // 4 distinct files (topology and manifest shared by both ranks); a check sends none.
    assert!(d.contains("0 present and matching, 4 missing or stale"), "{d}");
    // The check may make data_dir (to see that it can be written), but sends nothing into it.
    let sent: Vec<_> = walk(&sshd.remote.join("data")).into_iter().filter(|p| p.is_file()).collect();
    assert_eq!(sent, Vec::<std::path::PathBuf>::new(), "a check must not ship data");

    // 4 parts on 2 slots: rank r needs parts 2r and 2r + 1 (6 distinct files).
    let four = data.path().join("tiny/parts/metis-4");
    std::fs::create_dir_all(&four).unwrap();
    for f in ["manifest", "part-0.lgnn", "part-1.lgnn", "part-2.lgnn", "part-3.lgnn"] {
        std::fs::write(four.join(f), f.as_bytes()).unwrap();
    }
    let out = run(&["--dataset", "tiny", "--parts", "4"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d = json(&out)["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("0 present and matching, 6 missing or stale"), "{d}");

    // A partitioning the data dir does not have: refused with the file named.
    let out = run(&["--dataset", "tiny", "--parts", "2", "--method", "random"]);
    assert_eq!(out.status.code(), Some(1));
    let d = json(&out)["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("random-2") && d.contains("does not exist"), "{d}");

    // The dataset given as a path, as train takes it: the same files (it
    // looked for <data-dir>/<path>/dataset.lgnn and failed).
    let by_path = |dataset: &std::path::Path| {
        let mut a = args(&["--parts", "2"]);
        a.extend(["--dataset".to_string(), dataset.to_str().unwrap().to_string()]);
        leapgnn(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    for path in [data.path().join("tiny"), data.path().join("tiny/dataset.lgnn")] {
        let out = by_path(&path);
        assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        let d = json(&out)["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
        assert!(d.contains("0 present and matching, 4 missing or stale"), "{d}");
    }
    // An archive outside the data directory, its partition beside it: train
    // refuses to ship it, and so does the check.
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("tiny.lgnn");
    std::fs::copy(data.path().join("tiny/dataset.lgnn"), &outside).unwrap();
    let beside = elsewhere.path().join("tiny.parts/metis-2");
    std::fs::create_dir_all(&beside).unwrap();
    for f in ["manifest", "part-0.lgnn", "part-1.lgnn"] {
        std::fs::copy(parts.join(f), beside.join(f)).unwrap();
    }
    let out = by_path(&outside);
    assert_eq!(out.status.code(), Some(1));
    let d = json(&out)["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("outside the data directory") && d.contains("tiny.lgnn"), "{d}");

    // --parts must be at least the profile's worker slots (bad input: exit 2).
    let out = run(&["--dataset", "tiny", "--parts", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sshd.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
    sshd.stop();
}

/// One worker slot and `--parts 1`: the worker owns every node and reads the
/// dataset archive alone (no partition of one part is ever cut), so the
/// check looks for that file only, and names it when the data dir lacks it.
#[test]
fn one_part_checks_the_dataset_alone_and_names_it_when_missing() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("tiny")).unwrap();
    std::fs::write(data.path().join("tiny/dataset.lgnn"), b"topology").unwrap();
    let run = |dataset: &str| {
        let (d, p) = (data.path().to_str().unwrap(), profile.to_str().unwrap());
        leapgnn(&["--json", "--data-dir", d, "cluster", "check", p, "--dataset", dataset, "--parts", "1"])
    };
    let out = run("tiny");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["ok"], true, "{v}");
    let d = v["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
    assert!(d.contains("0 present and matching, 1 missing or stale"), "{d}");
    assert!(!d.contains("manifest") && !d.contains("parts"), "{d}");
    let sent: Vec<_> = walk(&sshd.remote.join("data")).into_iter().filter(|p| p.is_file()).collect();
    assert_eq!(sent, Vec::<std::path::PathBuf>::new(), "a check must not ship data");

    let out = run("absent");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["ok"], false, "{v}");
    let d = v["hosts"][0]["data"]["detail"].as_str().unwrap().to_string();
    let missing = data.path().join("absent/dataset.lgnn");
    assert!(d.contains(&format!("rank 0 needs {}, which does not exist here", missing.display())), "{d}");
    assert!(!d.contains("manifest"), "{d}");
    assert_eq!(sshd.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
    sshd.stop();
}

#[test]
fn local_profile_checks_a_local_worker_and_bad_profiles_exit_2() {
    let local = concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/local.toml");
    let out = leapgnn(&["--json", "cluster", "check", local]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["launcher"], "local");
    assert_eq!(v["hosts"][0]["ports"]["ok"], true, "{v}");

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("lab.toml");
    std::fs::write(
        &p,
        "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"h\"\nuser = \"u\"\npassword = \"hunter2\"\n",
    )
    .unwrap();
    let out = leapgnn(&["cluster", "check", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lab.toml") && err.contains("host[0].password") && !err.contains("hunter2"), "{err}");
    let out = leapgnn(&["cluster", "check", "/no/such/profile.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/profile.toml"));
}

/// A key with a passphrase cannot be used from the profile: the check says
/// so first, with the ssh-add that fixes it, not a guess about authorized_keys.
#[test]
fn a_key_with_a_passphrase_is_named_as_the_cause() {
    let sshd = Sshd::start();
    let key = sshd.path("locked_key");
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "a passphrase", "-f"])
        .arg(&key)
        .status_in(QUICK_LIMIT, "ssh-keygen with a passphrase");
    assert!(st.success());
    // The server would accept the key: only its passphrase stands in the way.
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let authorized = sshd.path("authorized_keys");
    let mut keys = std::fs::read_to_string(&authorized).unwrap();
    keys.push_str(&pubkey);
    std::fs::write(&authorized, keys).unwrap();
    let host = sshd.host_entry(1).replace(&sshd.key.display().to_string(), &key.display().to_string());
    let profile = sshd.profile_with_hosts(&host, "");
    let out = leapgnn(&["--json", "cluster", "check", profile.to_str().unwrap(), "--timeout", STEP]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let auth = &json(&out)["hosts"][0]["auth"];
    assert_eq!(auth["ok"], false, "{auth}");
    let detail = auth["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("ssh-add {}", key.display())) && !detail.contains("authorized_keys"), "{detail}");
}

/// The permission bits of `path` (following a link).
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// `--accept-new-host-keys` rewrites the file that decides which servers are
/// trusted: it must never become writable by other local users (who could
/// then add a key of theirs and sit in the middle of the next run, token
/// and all), not even under `umask 000`, and a private file stays private.
#[test]
fn recording_a_host_key_leaves_known_hosts_writable_by_its_owner_only() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let p = profile.to_str().unwrap();
    let known = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let check_under_umask_000 = || {
        let script = "umask 000 && exec \"$0\" \"$@\"";
        let mut sh = Command::new("sh");
        sh.args(["-c", script, env!("CARGO_BIN_EXE_leapgnn")]);
        sh.args(["--json", "cluster", "check", p, "--timeout", STEP, "--no-workers", "--accept-new-host-keys"]);
        bounded::run_within(&mut sh, bounded::RUN_LIMIT, "cluster check under umask 000")
    };

    // No known_hosts yet: the one made is the owner's alone.
    std::fs::remove_file(&sshd.known_hosts).unwrap();
    let out = check_under_umask_000();
    assert_eq!(json(&out)["hosts"][0]["host_key"]["ok"], true, "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    assert!(recorded.starts_with(known.trim_end()), "the server's key was recorded: {recorded}");
    assert_eq!(mode(&sshd.known_hosts), 0o600, "a new known_hosts under umask 000");

    // A private file behind a link (a managed dotfile) that knows another
    // host: the key is added to the file the link names, which stays 0600.
    let real = sshd.path("dotfiles-known_hosts");
    let other = "[127.0.0.1]:1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKtmvTQ1Xs6b3vQ0Fc5cXc9cQv4pXKxTgk5O3nWbqk3S\n";
    std::fs::write(&real, other).unwrap();
    std::fs::set_permissions(&real, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::remove_file(&sshd.known_hosts).unwrap();
    std::os::unix::fs::symlink(&real, &sshd.known_hosts).unwrap();
    let out = check_under_umask_000();
    assert_eq!(json(&out)["hosts"][0]["host_key"]["ok"], true, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&sshd.known_hosts).unwrap().file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::read_to_string(&real).unwrap(), format!("{other}{recorded}"));
    assert_eq!(mode(&real), 0o600, "a private known_hosts was opened up");

    // One that others could already write loses that, and keeps the rest.
    std::fs::remove_file(&sshd.known_hosts).unwrap();
    std::fs::write(&sshd.known_hosts, other).unwrap();
    std::fs::set_permissions(&sshd.known_hosts, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let out = check_under_umask_000();
    assert_eq!(json(&out)["hosts"][0]["host_key"]["ok"], true, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(mode(&sshd.known_hosts), 0o644);
    assert_eq!(sshd.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new());
    sshd.stop();
}

/// A known_hosts that is not all UTF-8 (a comment in Latin-1, as an older
/// tool or a hand edit leaves it) is read as OpenSSH reads it: the server's
/// key on the next line is still found, and a key recorded with
/// --accept-new-host-keys keeps every other byte of the file. It used to
/// fail every host's check ('stream did not contain valid UTF-8').
#[test]
fn a_known_hosts_with_latin1_comments_still_verifies_and_records_keys() {
    let mut sshd = Sshd::start();
    let profile = sshd.profile(1, "");
    let p = profile.to_str().unwrap();
    let known = std::fs::read(&sshd.known_hosts).unwrap();
    let mut latin1 = b"# serveur de l'\xe9quipe (h\xf4te de calcul)\n".to_vec();
    latin1.extend_from_slice(&known);
    std::fs::write(&sshd.known_hosts, &latin1).unwrap();
    let out = leapgnn(&["--json", "cluster", "check", p, "--timeout", STEP, "--no-workers"]);
    let v = json(&out);
    assert_eq!(v["hosts"][0]["host_key"]["ok"], true, "{v}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    // Only the comment: the key is new, recorded after the file's own bytes.
    let comment = b"# h\xf4te \xe9\n".to_vec();
    std::fs::write(&sshd.known_hosts, &comment).unwrap();
    let out = leapgnn(&["--json", "cluster", "check", p, "--timeout", STEP, "--no-workers", "--accept-new-host-keys"]);
    assert_eq!(json(&out)["hosts"][0]["host_key"]["ok"], true, "{}", String::from_utf8_lossy(&out.stderr));
    let recorded = std::fs::read(&sshd.known_hosts).unwrap();
    assert!(recorded.starts_with(&comment) && recorded.len() > comment.len() + 40, "{recorded:?}");
    sshd.stop();
}

#[test]
fn an_sshd_without_sftp_is_named_with_the_line_to_add() {
    let mut sshd = Sshd::start_without_sftp();
    let profile = sshd.profile(1, "");
    let p = profile.to_str().unwrap();

    let out = leapgnn(&["--json", "cluster", "check", p, "--timeout", "5"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    let host = &v["hosts"][0];
    for field in ["reachable", "host_key", "auth"] {
        assert_eq!(host[field]["ok"], true, "{field}: {host}");
    }
    assert_eq!(host["binary"]["ok"], false, "{host}");
    let detail = host["binary"]["detail"].as_str().unwrap();
    assert!(detail.contains("starting SFTP") && detail.contains("Subsystem sftp"), "{detail}");

    let out = leapgnn(&["cluster", "clean", p, "--dry-run"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Subsystem sftp"), "{err}");
    sshd.stop();
}
