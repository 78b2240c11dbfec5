//! Cluster profiles (`profiles/*.toml`): which launcher, which hosts, how
//! many workers each, where the shipped binary and data live remotely, and
//! the host-key policy. Loading validates everything up front so a typo is
//! reported with the file and key before any connection is made.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every profile error, an unreadable file included, is fixed by the user.
impl crate::error::Blame for ProfileError {
    fn is_bad_input(&self) -> bool {
        true
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read cluster profile {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid cluster profile: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{path}: {key}: {msg}")]
    Invalid { path: PathBuf, key: String, msg: String },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// Child processes on this machine.
    #[default]
    Local,
    /// `leapgnn worker` on remote hosts over SSH.
    Ssh,
    /// `srun` steps on the nodes of the Slurm allocation the driver runs in.
    Slurm,
}

/// One `[[host]]` entry.
#[derive(Debug, Clone, Serialize)]
pub struct HostSpec {
    pub address: String,
    pub port: u16,
    pub user: String,
    /// Private key file; `None` means the ssh agent (`SSH_AUTH_SOCK`).
    pub identity: Option<PathBuf>,
    pub workers: usize,
    /// `gpus = G`: the host's workers take its GPUs in turn, each seeing
    /// one (`CUDA_VISIBLE_DEVICES`), so `--device cuda` runs them on
    /// different GPUs; `workers` defaults to G.
    pub gpus: Option<usize>,
}

impl HostSpec {
    /// `user@address:port`, the name used in every message about this host.
    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.user, self.address, self.port)
    }

    /// `address:port` (`[address]:port` for an IPv6 address): where this
    /// entry's workers run, told apart from another entry's on the same
    /// address by its port (two sshd ports of one machine).
    pub fn endpoint(&self) -> String {
        match self.address.contains(':') {
            true => format!("[{}]:{}", self.address, self.port),
            false => format!("{}:{}", self.address, self.port),
        }
    }
}

/// A validated profile. Local paths are absolute (`~` expanded, relative
/// paths taken from the profile's directory); remote paths stay as written
/// and are resolved on each host (`~` is the remote user's home).
#[derive(Debug, Clone)]
pub struct Profile {
    /// The file it came from (for messages); `None` for the built-in default.
    pub path: Option<PathBuf>,
    pub launcher: LauncherKind,
    /// Remote working directory: the binary goes to `bin/`, data to `data_dir`.
    pub remote_dir: String,
    /// Remote data directory, relative to `remote_dir` unless absolute or `~`.
    pub data_dir: String,
    pub known_hosts: PathBuf,
    pub accept_new_host_keys: bool,
    /// The leapgnn build to ship (e.g. a static build for older hosts); default: this executable.
    pub binary: Option<PathBuf>,
    /// Where the driver's control listener binds; default 127.0.0.1:0 (local) or 0.0.0.0:0 (ssh).
    pub driver_bind: Option<SocketAddr>,
    pub connect_timeout: Duration,
    /// Extra environment for every worker (set explicitly, not via the remote login shell).
    pub env: Vec<(String, String)>,
    /// `encrypt = true`: as `train --encrypt`.
    pub encrypt: bool,
    pub hosts: Vec<HostSpec>,
    /// `[[host]]` entries with `spare = true`: no ranks of their own; a
    /// restart moves the ranks of an unreachable host to the first unused
    /// spare with at least as many worker slots.
    pub spares: Vec<HostSpec>,
    /// The `[cost]` table (cost-model figures, see `crate::cost::Figures`), as written.
    pub cost: Option<toml::Table>,
    /// `launcher = "slurm"` where the nodes do not see the data directory: copy the
    /// binary, the dataset and each worker's parts to `remote_dir` on every node with
    /// `sbcast` before the workers start (removed when the run ends).
    pub sbcast: bool,
    /// What the profile allows but is likely a slip (two `[[host]]` entries
    /// for one machine), for `train` and `cluster check` to print once.
    pub warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    cluster: Option<RawCluster>,
    #[serde(default)]
    host: Vec<RawHost>,
    cost: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    launcher: Option<LauncherKind>,
    remote_dir: Option<String>,
    data_dir: Option<String>,
    known_hosts: Option<String>,
    accept_new_host_keys: Option<bool>,
    binary: Option<String>,
    driver_bind: Option<SocketAddr>,
    connect_timeout: Option<u64>,
    sbcast: Option<bool>,
    encrypt: Option<bool>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    address: Option<String>,
    port: Option<u16>,
    user: Option<String>,
    identity: Option<String>,
    workers: Option<usize>,
    gpus: Option<usize>,
    spare: Option<bool>,
    // Accepted by the parser only to refuse them with a clear message.
    password: Option<toml::Value>,
    passphrase: Option<toml::Value>,
}

/// At most this many workers per host: a larger number is a typo, not a plan.
const MAX_WORKERS_PER_HOST: usize = 1024;

impl Profile {
    /// The built-in default: local worker processes.
    pub fn local() -> Self {
        Profile {
            path: None,
            launcher: LauncherKind::Local,
            remote_dir: "~/.leapgnn".into(),
            data_dir: "data".into(),
            known_hosts: home().map(|h| h.join(".ssh/known_hosts")).unwrap_or_else(|| ".ssh/known_hosts".into()),
            accept_new_host_keys: false,
            binary: None,
            driver_bind: None,
            connect_timeout: Duration::from_secs(10),
            env: vec![],
            encrypt: false,
            hosts: vec![],
            spares: vec![],
            cost: None,
            sbcast: false,
            warnings: vec![],
        }
    }

    /// `--cluster slurm` with no file: the allocation the driver runs in.
    pub fn slurm() -> Self {
        Profile { launcher: LauncherKind::Slurm, ..Profile::local() }
    }

    /// `--cluster slurm` (when no file of that name exists) or a profile file.
    /// A directory named `slurm` where the job is submitted (one holding the
    /// job scripts, say) is not a profile: `--cluster slurm` is the allocation.
    pub fn load_or_builtin(path: &Path) -> Result<Self, ProfileError> {
        if path == Path::new("slurm") && !path.is_file() {
            return Ok(Profile::slurm());
        }
        Self::load(path)
    }

    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ProfileError::Read { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text` as if read from `path` (relative paths are taken from its directory).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ProfileError> {
        let raw: RawProfile =
            toml::from_str(text).map_err(|source| ProfileError::Parse { path: path.to_path_buf(), source })?;
        let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let invalid = |key: &str, msg: String| ProfileError::Invalid { path: path.to_path_buf(), key: key.into(), msg };
        let local_path = |key: &str, s: &str| -> Result<PathBuf, ProfileError> {
            let p = expand_home(s).map_err(|m| invalid(key, m))?;
            Ok(if p.is_absolute() { p } else { base.join(p) })
        };

        let c = raw.cluster.unwrap_or_default();
        let mut p = Profile::local();
        p.path = Some(path.to_path_buf());
        p.cost = raw.cost;
        p.launcher = c.launcher.unwrap_or(LauncherKind::Local);
        if let Some(d) = c.remote_dir {
            if d.trim().is_empty() {
                return Err(invalid("cluster.remote_dir", "must not be empty".into()));
            }
            p.remote_dir = d;
        }
        if let Some(d) = c.data_dir {
            if d.trim().is_empty() {
                return Err(invalid("cluster.data_dir", "must not be empty".into()));
            }
            p.data_dir = d;
        }
        if let Some(k) = c.known_hosts {
            p.known_hosts = local_path("cluster.known_hosts", &k)?;
        }
        p.accept_new_host_keys = c.accept_new_host_keys.unwrap_or(false);
        p.encrypt = c.encrypt.unwrap_or(false);
        if let Some(b) = c.binary {
            let b = local_path("cluster.binary", &b)?;
            if !b.is_file() {
                return Err(invalid("cluster.binary", format!("{} is not a file", b.display())));
            }
            p.binary = Some(b);
        }
        p.driver_bind = c.driver_bind;
        p.sbcast = c.sbcast.unwrap_or(false);
        if p.sbcast && p.launcher != LauncherKind::Slurm {
            return Err(invalid(
                "cluster.sbcast",
                "ships with Slurm's sbcast, so it needs launcher = \"slurm\" (ssh profiles always ship over SFTP)"
                    .into(),
            ));
        }
        if p.sbcast && !Path::new(&p.remote_dir).is_absolute() {
            return Err(invalid(
                "cluster.remote_dir",
                format!(
                    "{:?}: with sbcast = true it is the directory on every node the files are copied to, and must be \
                     absolute (e.g. \"/tmp/leapgnn\"; the job id is appended)",
                    p.remote_dir
                ),
            ));
        }
        if let Some(t) = c.connect_timeout {
            if !(1..=600).contains(&t) {
                return Err(invalid("cluster.connect_timeout", format!("{t} s is outside 1..=600")));
            }
            p.connect_timeout = Duration::from_secs(t);
        }
        for (k, v) in c.env {
            let valid = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(invalid(&format!("cluster.env.{k}"), "not a valid environment variable name".into()));
            }
            p.env.push((k, v));
        }

        // `host[i]` key of each entry, in file order, for the warnings below.
        let mut keys: Vec<(String, String)> = Vec::new();
        for (i, h) in raw.host.into_iter().enumerate() {
            let key = |field: &str| format!("host[{i}].{field}");
            if h.password.is_some() || h.passphrase.is_some() {
                return Err(invalid(
                    &key(if h.password.is_some() { "password" } else { "passphrase" }),
                    "passwords are never read from a profile: use a key file (identity = ...) or the ssh agent".into(),
                ));
            }
            let address = h.address.unwrap_or_default();
            if address.is_empty() || address.chars().any(|c| c.is_whitespace() || c == '@') {
                return Err(invalid(&key("address"), format!("{address:?} is not a host name or IP address")));
            }
            let port = h.port.unwrap_or(22);
            if port == 0 {
                return Err(invalid(&key("port"), "must be 1..=65535".into()));
            }
            let user = match h.user.or_else(local_user) {
                Some(u) if !u.is_empty() && !u.chars().any(|c| c.is_whitespace() || c.is_control()) => u,
                Some(u) => return Err(invalid(&key("user"), format!("{u:?} is not a user name"))),
                None => return Err(invalid(&key("user"), "missing (and $USER is not set)".into())),
            };
            let identity = match h.identity {
                Some(s) => {
                    let f = local_path(&key("identity"), &s)?;
                    if !f.is_file() {
                        return Err(invalid(
                            &key("identity"),
                            format!("{} is not a file (omit identity to use the ssh agent)", f.display()),
                        ));
                    }
                    Some(f)
                }
                None => None,
            };
            // A host's GPUs and its workers are counts of the same range.
            let count = |name: &str, n: usize| {
                if (1..=MAX_WORKERS_PER_HOST).contains(&n) {
                    Ok(n)
                } else {
                    Err(invalid(&key(name), format!("{n} is outside 1..={MAX_WORKERS_PER_HOST}")))
                }
            };
            let gpus = h.gpus.map(|g| count("gpus", g)).transpose()?;
            let workers = count("workers", h.workers.or(gpus).unwrap_or(1))?;
            let spec = HostSpec { address, port, user, identity, workers, gpus };
            keys.push((format!("host[{i}]"), spec.label()));
            if h.spare.unwrap_or(false) { p.spares.push(spec) } else { p.hosts.push(spec) }
        }
        p.warnings = same_machine_warnings(&keys);
        match p.launcher {
            LauncherKind::Ssh if p.hosts.is_empty() => {
                Err(invalid("host", "launcher = \"ssh\" needs at least one [[host]] entry that is not a spare".into()))
            }
            LauncherKind::Local | LauncherKind::Slurm if !p.hosts.is_empty() || !p.spares.is_empty() => Err(invalid(
                "host",
                "[[host]] entries are only used with launcher = \"ssh\" (set it in [cluster])".into(),
            )),
            _ => Ok(p),
        }
    }

    /// Total worker slots (ssh); 0 for a local profile, whose size comes from `--workers`.
    pub fn world(&self) -> usize {
        self.hosts.iter().map(|h| h.workers).sum()
    }

    /// Rank -> index into `hosts`: host by host, `workers` consecutive ranks each.
    /// Rank r trains partition r, so a host owns a contiguous range of parts.
    pub fn assignment(&self) -> Vec<usize> {
        self.hosts.iter().enumerate().flat_map(|(i, h)| std::iter::repeat_n(i, h.workers)).collect()
    }

    /// `rank`'s place among its host's ranks (0 for the first).
    pub fn local_index(&self, rank: usize) -> Option<usize> {
        let slots = self.assignment();
        let host = *slots.get(rank)?;
        Some(slots[..rank].iter().filter(|&&i| i == host).count())
    }

    pub fn host_of(&self, rank: usize) -> Option<&HostSpec> {
        self.assignment().get(rank).map(|&i| &self.hosts[i])
    }

    /// "rank 3 on gnn@10.0.0.2:22" (or "rank 3 (local)").
    pub fn describe_rank(&self, rank: usize) -> String {
        match self.host_of(rank) {
            Some(h) => format!("rank {rank} on {}", h.label()),
            None => format!("rank {rank} (local)"),
        }
    }

    /// Where the driver's control listener should bind for this profile.
    pub fn driver_bind(&self) -> SocketAddr {
        self.driver_bind.unwrap_or_else(|| match self.launcher {
            LauncherKind::Local => SocketAddr::from(([127, 0, 0, 1], 0)),
            // Remote workers must reach it; the ssh launcher tells each worker the
            // driver's address on the interface that reaches that worker's host.
            LauncherKind::Ssh | LauncherKind::Slurm => SocketAddr::from(([0, 0, 0, 0], 0)),
        })
    }

    /// The keys of a local profile that set up its worker processes
    /// (`binary`, `[cluster.env]`): a worker run inside the driver (one
    /// worker) cannot apply them.
    pub fn local_worker_keys(&self) -> Vec<&'static str> {
        if self.launcher != LauncherKind::Local {
            return vec![];
        }
        [(self.binary.is_some(), "`binary`"), (!self.env.is_empty(), "`[cluster.env]`")]
            .into_iter()
            .filter_map(|(set, key)| set.then_some(key))
            .collect()
    }

    /// The file name for messages.
    pub fn name(&self) -> String {
        self.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(built-in local profile)".into())
    }
}

/// Entries that name one user@address:port. Allowed: one sshd standing in
/// for several hosts is how the tests (and a laptop rehearsal) run a
/// multi-host profile; but in a real profile it is usually a copy-paste slip
/// that doubles one machine's load, so it is said, once per machine.
fn same_machine_warnings(keys: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (_, label)) in keys.iter().enumerate() {
        if keys[..i].iter().any(|(_, l)| l == label) {
            continue;
        }
        let same: Vec<&str> = keys[i..].iter().filter(|(_, l)| l == label).map(|(k, _)| k.as_str()).collect();
        if same.len() < 2 {
            continue;
        }
        let names = match same.split_last() {
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => continue,
        };
        out.push(format!(
            "{names} are the same machine, {label}: their workers share it (fine for a test, a slip otherwise: give \
             each [[host]] its own address or port)"
        ));
    }
    out
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

fn local_user() -> Option<String> {
    std::env::var("USER").ok().or_else(|| std::env::var("LOGNAME").ok())
}

/// `~` and `~/x` become the driver user's home; `~other` is refused (ambiguous).
fn expand_home(s: &str) -> Result<PathBuf, String> {
    if s == "~" || s.starts_with("~/") {
        let h = home().ok_or_else(|| format!("{s:?} uses ~ but $HOME is not set"))?;
        return Ok(if s == "~" { h } else { h.join(&s[2..]) });
    }
    if s.starts_with('~') {
        return Err(format!("{s:?}: only ~ and ~/ are expanded (write the full path)"));
    }
    Ok(PathBuf::from(s))
}

/// Resolves a remote path as written in a profile against the remote `home`
/// (`~` or relative) or `base` (relative, when given).
pub fn resolve_remote(home: &Path, base: Option<&Path>, s: &str) -> PathBuf {
    if s == "~" {
        home.to_path_buf()
    } else if let Some(rest) = s.strip_prefix("~/") {
        home.join(rest)
    } else if Path::new(s).is_absolute() {
        PathBuf::from(s)
    } else {
        base.unwrap_or(home).join(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Profile, ProfileError> {
        Profile::parse(s, Path::new("/etc/lab.toml"))
    }

    #[test]
    fn shipped_profiles_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
        let local = Profile::load(&root.join("local.toml")).unwrap();
        assert_eq!(local.launcher, LauncherKind::Local);
        assert_eq!(local.world(), 0);
        // The lab example names key files that do not exist here: only that check may fail.
        let text = std::fs::read_to_string(root.join("lab-example.toml")).unwrap();
        let without_keys: String =
            text.lines().filter(|l| !l.trim_start().starts_with("identity")).fold(String::new(), |mut s, l| {
                s.push_str(l);
                s.push('\n');
                s
            });
        let lab = parse(&without_keys).unwrap();
        assert_eq!(lab.launcher, LauncherKind::Ssh);
        assert_eq!(lab.hosts.len(), 4);
        assert_eq!(lab.world(), lab.assignment().len());
    }

    #[test]
    fn gpus_give_each_host_its_workers_and_their_local_indices() {
        let p = parse(
            "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\ngpus = 2\n\
             [[host]]\naddress = \"b\"\nuser = \"u\"\nworkers = 3\ngpus = 2\n[[host]]\naddress = \"c\"\nuser = \"u\"\n",
        )
        .unwrap();
        // workers defaults to gpus; without gpus, to 1.
        assert_eq!(p.assignment(), vec![0, 0, 1, 1, 1, 2]);
        assert_eq!(p.hosts.iter().map(|h| h.gpus).collect::<Vec<_>>(), [Some(2), Some(2), None]);
        let local: Vec<_> = (0..7).map(|r| p.local_index(r)).collect();
        assert_eq!(local, [Some(0), Some(1), Some(0), Some(1), Some(2), Some(0), None]);
        let e = parse("[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\ngpus = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("host[0].gpus") && e.contains("outside 1..="), "{e}");
    }

    #[test]
    fn hosts_expand_to_contiguous_ranks() {
        let p = parse(
            "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nworkers = 2\n\
             [[host]]\naddress = \"b\"\nuser = \"u\"\nport = 2222\n[[host]]\naddress = \"c\"\nuser = \"u\"\nworkers = 3\n",
        )
        .unwrap();
        assert_eq!(p.assignment(), vec![0, 0, 1, 2, 2, 2]);
        assert_eq!(p.describe_rank(2), "rank 2 on u@b:2222");
        assert_eq!(p.host_of(6).map(|h| h.address.as_str()), None);
        assert_eq!(p.hosts[0].port, 22);
        assert_eq!(p.driver_bind().ip().to_string(), "0.0.0.0");
    }

    #[test]
    fn spare_hosts_take_no_ranks_and_a_profile_of_spares_only_is_refused() {
        let p = parse(
            "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nworkers = 2\n\
             [[host]]\naddress = \"s\"\nuser = \"u\"\nworkers = 2\nspare = true\n[[host]]\naddress = \"b\"\nuser = \"u\"\n",
        )
        .unwrap();
        assert_eq!(p.assignment(), vec![0, 0, 1]);
        assert_eq!(p.host_of(2).map(|h| h.address.as_str()), Some("b"));
        assert_eq!(p.spares.iter().map(|h| h.address.as_str()).collect::<Vec<_>>(), ["s"]);
        let only = parse("[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"s\"\nuser = \"u\"\nspare = true\n");
        assert!(only.unwrap_err().to_string().contains("not a spare"));
    }

    #[test]
    fn entries_for_one_machine_are_allowed_with_one_warning_naming_them() {
        let host = |a: &str, port: u16, extra: &str| {
            format!("[[host]]\naddress = \"{a}\"\nuser = \"u\"\nport = {port}\n{extra}")
        };
        let text = format!(
            "[cluster]\nlauncher = \"ssh\"\n{}{}{}{}{}",
            host("a", 22, ""),
            host("b", 22, ""),
            host("a", 22, ""),
            host("a", 2222, ""),
            host("a", 22, "spare = true\n")
        );
        let p = parse(&text).unwrap();
        assert_eq!(p.world(), 4);
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
        let w = &p.warnings[0];
        assert!(w.starts_with("host[0], host[2] and host[4] are the same machine, u@a:22:"), "{w}");
        assert!(w.contains("their workers share it") && w.contains("a slip otherwise"), "{w}");
        let distinct = format!("[cluster]\nlauncher = \"ssh\"\n{}{}", host("a", 22, ""), host("a", 2222, ""));
        assert_eq!(parse(&distinct).unwrap().warnings, Vec::<String>::new());
    }

    #[test]
    fn bad_profiles_name_file_and_key() {
        let cases = [
            ("[cluster]\nlauncher = \"ssh\"\n", "/etc/lab.toml: host: launcher = \"ssh\" needs"),
            (
                "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\npassword = \"x\"\n",
                "host[0].password",
            ),
            (
                "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nworkers = 0\n",
                "host[0].workers",
            ),
            ("[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"\"\n", "host[0].address"),
            (
                "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"-o X=1\"\n",
                "host[0].user: \"-o X=1\" is not a user name",
            ),
            (
                "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nidentity = \"/no/such/key\"\n",
                "/no/such/key is not a file",
            ),
            (
                "[cluster]\nlauncher = \"ssh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nidentity = \"~bob/k\"\n",
                "only ~ and ~/",
            ),
            ("[cluster]\nlauncher = \"scp\"\n", "unknown variant `scp`"),
            ("[cluster]\nremote_dirr = \"x\"\n", "unknown field `remote_dirr`"),
            ("[cluster]\nenv = { \"A-B\" = \"1\" }\n", "cluster.env.A-B"),
            ("[[host]]\naddress = \"a\"\nuser = \"u\"\n", "only used with launcher = \"ssh\""),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("/etc/lab.toml"), "{e}");
        }
    }

    #[test]
    fn paths_expand_locally_and_remotely() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "k").unwrap();
        let p = Profile::parse(
            "[cluster]\nlauncher = \"ssh\"\nknown_hosts = \"kh\"\n[[host]]\naddress = \"a\"\nuser = \"u\"\nidentity = \"key\"\n",
            &dir.path().join("p.toml"),
        )
        .unwrap();
        assert_eq!(p.known_hosts, dir.path().join("kh"));
        assert_eq!(p.hosts[0].identity.as_deref(), Some(dir.path().join("key").as_path()));
        let home = Path::new("/home/gnn");
        assert_eq!(resolve_remote(home, None, "~/.leapgnn"), Path::new("/home/gnn/.leapgnn"));
        assert_eq!(resolve_remote(home, None, "~"), home);
        assert_eq!(resolve_remote(home, None, "/srv/x"), Path::new("/srv/x"));
        assert_eq!(resolve_remote(home, Some(Path::new("/srv/x")), "data"), Path::new("/srv/x/data"));
        assert_eq!(resolve_remote(home, None, "rel"), Path::new("/home/gnn/rel"));
    }
}
