//! The dataset registry: `datasets.toml` (built into the binary), or another
//! file named by `--registry` / `LEAPGNN_REGISTRY`.

use super::DatasetError;
use super::convert::{ConvertOptions, Format};
use super::synthetic::SyntheticSpec;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The registry compiled into the binary, so every subcommand works from any directory.
pub const BUILTIN: &str = include_str!("../../datasets.toml");
/// Environment variable naming another registry file.
pub const REGISTRY_ENV: &str = "LEAPGNN_REGISTRY";

#[derive(Debug, Clone)]
pub struct Registry {
    /// Where it was read from (`None` = built in).
    pub file: Option<PathBuf>,
    entries: BTreeMap<String, Entry>,
}

/// One `[NAME]` table.
#[derive(Debug, Clone, Deserialize)]
pub struct Entry {
    #[serde(skip)]
    pub name: String,
    pub format: Format,
    #[serde(default)]
    pub urls: Vec<String>,
    pub sha256: Option<String>,
    /// Exact bytes of the download.
    pub size: Option<u64>,
    /// Approximate download size, for `--list`.
    pub download_size: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub expect: Expect,
    #[serde(skip)]
    pub options: ConvertOptions,
    #[serde(skip)]
    table: toml::Table,
}

/// What a correct conversion of the entry gives.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub nodes: Option<u64>,
    pub edges: Option<u64>,
    pub feature_dim: Option<u32>,
    pub classes: Option<u32>,
}

impl Registry {
    pub fn builtin() -> Registry {
        Registry::parse(BUILTIN, None).expect("the built-in datasets.toml is valid (tested)")
    }

    /// `flag` if given, else `$LEAPGNN_REGISTRY`, else the built-in registry.
    pub fn resolve(flag: Option<&Path>) -> Result<Registry, DatasetError> {
        let from_env = std::env::var_os(REGISTRY_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
        match flag.map(Path::to_path_buf).or(from_env) {
            Some(p) => Registry::load(&p),
            None => Ok(Registry::builtin()),
        }
    }

    /// A file that cannot be read as text is the user's to fix, as a typo in
    /// it is: refused as bad input, with what the flag wants.
    pub fn load(path: &Path) -> Result<Registry, DatasetError> {
        let unreadable = |why: String| {
            DatasetError::invalid(
                path.display().to_string(),
                format!(
                    "cannot read it as a dataset registry ({why}); give --registry (or ${REGISTRY_ENV}) a TOML file \
                     of [NAME] tables like the built-in datasets.toml, or neither to use the built-in one"
                ),
            )
        };
        let bytes = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|e| unreadable(format!("not UTF-8 text: {e}")))?;
        Registry::parse(&text, Some(path))
    }

    pub fn parse(text: &str, file: Option<&Path>) -> Result<Registry, DatasetError> {
        let shown = file.map_or_else(|| "built-in datasets.toml".to_owned(), |p| p.display().to_string());
        let bad = |m: String| DatasetError::invalid(&shown, m);
        let root: toml::Table = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let mut entries = BTreeMap::new();
        for (name, value) in root {
            let toml::Value::Table(table) = value else {
                return Err(bad(format!("`{name}` must be a table ([{name}])")));
            };
            let mut entry: Entry = keyed(&name, &table).map_err(bad)?;
            entry.options = keyed(&name, &table).map_err(bad)?;
            if let Some(h) = &entry.sha256
                && (h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(bad(format!("[{name}]: sha256 must be 64 hex digits")));
            }
            for url in &entry.urls {
                check_url(url).map_err(|why| bad(format!("[{name}]: url `{}` {why}", super::fetch::shown_url(url))))?;
            }
            entry.name = name.clone();
            entry.table = table;
            let spec = match entry.format {
                Format::Synthetic => Some(entry.synthetic_spec().map_err(|e| bad(e.to_string()))?),
                _ => None,
            };
            check_keys(&entry, spec.as_ref()).map_err(bad)?;
            entries.insert(name, entry);
        }
        Ok(Registry { file: file.map(Path::to_path_buf), entries })
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Like `get`, but an unknown name is an error that says what to do.
    pub fn require(&self, name: &str) -> Result<&Entry, DatasetError> {
        self.get(name).ok_or_else(|| {
            DatasetError::input(format!(
                "no dataset `{name}` in the registry ({}); `leapgnn download --list` shows them, or import a local copy with `leapgnn download {name} --from PATH --format FORMAT`",
                self.file.as_ref().map_or_else(|| "built-in".to_owned(), |p| p.display().to_string())
            ))
        })
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }
}

/// `T` from the entry `[name]`; a wrong value is put to its key, as the file
/// writes it (serde's own words named neither entry nor value).
fn keyed<T: serde::de::DeserializeOwned>(name: &str, table: &toml::Table) -> Result<T, String> {
    crate::util::keyed::deserialize(table.clone()).map_err(|(key, e): (_, toml::de::Error)| {
        let why = e.message().trim_end();
        match key.and_then(|k| table.get(&k).map(|v| (k, v))) {
            Some((k, v)) => format!("[{name}]: {k} = {v}: {why}; correct it in the file"),
            None => format!("[{name}]: {why}"),
        }
    })
}

/// Keys of an entry read by `Entry` itself; the converter's and the
/// generator's keys come from their own types.
const ENTRY_KEYS: [&str; 7] = ["format", "urls", "sha256", "size", "download_size", "description", "expect"];

/// Refuses a key nothing reads: the entry shares its table with the
/// converter options (and the generator's spec), so no one type can deny
/// unknown fields, and a misspelt `symetrize` or `feature_dims` would
/// otherwise convert quietly without it.
fn check_keys(entry: &Entry, spec: Option<&SyntheticSpec>) -> Result<(), String> {
    let keys_of = |v: serde_json::Value| match v {
        serde_json::Value::Object(m) => m.into_iter().map(|(k, _)| k).collect(),
        _ => Vec::new(),
    };
    let mut known: Vec<String> = ENTRY_KEYS.iter().map(|k| k.to_string()).collect();
    known.extend(keys_of(serde_json::to_value(ConvertOptions::default()).expect("options serialise")));
    if let Some(spec) = spec {
        known.extend(keys_of(serde_json::to_value(spec).expect("a synthetic spec serialises")));
    }
    match entry.table.keys().find(|k| !known.contains(k)) {
        None => Ok(()),
        Some(k) => {
            known.sort();
            known.dedup();
            Err(format!(
                "[{}]: unknown key `{k}`; the keys of an entry are {} (see the comment at the top of the built-in \
                 datasets.toml)",
                entry.name,
                known.join(", ")
            ))
        }
    }
}

/// A mirror the downloader can use: http or https, a host, and a path that
/// ends in a file name. Refused when the registry is read, so a typo is
/// named at once rather than retried as a network failure.
fn check_url(url: &str) -> Result<(), String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("is not a URL ({e}); give http://HOST/PATH/FILE"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("uses `{}`; leapgnn downloads over http and https only", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("names no host".into());
    }
    super::fetch::url_file_name(url).map(drop).map_err(|_| "does not end in a file name".into())
}

impl Entry {
    /// The generator parameters of a synthetic entry.
    pub fn synthetic_spec(&self) -> Result<SyntheticSpec, DatasetError> {
        SyntheticSpec::deserialize(self.table.clone())
            .map_err(|e| DatasetError::input(format!("[{}]: not a valid synthetic spec: {e}", self.name)))
    }

    /// Differences between a converted dataset and `expect`, as warnings.
    pub fn check_expected(&self, nodes: u64, edges: u64, feature_dim: u32, classes: u32) -> Vec<String> {
        let e = &self.expect;
        let checks = [
            ("nodes", e.nodes, nodes),
            ("edges", e.edges, edges),
            ("feature_dim", e.feature_dim.map(u64::from), feature_dim as u64),
            ("classes", e.classes.map(u64::from), classes as u64),
        ];
        checks
            .iter()
            .filter_map(|&(what, want, got)| {
                want.filter(|&w| w != got)
                    .map(|w| format!("{}: expected {w} {what}, the conversion gave {got}", self.name))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Blame;

    #[test]
    fn builtin_registry_parses_and_names_the_required_datasets() {
        let r = Registry::builtin();
        for name in [
            "synthetic-small",
            "synthetic-arxiv",
            "synthetic-products",
            "ogbn-arxiv",
            "ogbn-products",
            "ogbn-papers100M",
            "cora",
            "citeseer",
            "pubmed",
            "amazon-computers",
            "amazon-photo",
            "coauthor-cs",
            "slashdot",
            "facebook",
            "cora-planetoid",
            "citeseer-planetoid",
        ] {
            assert!(r.get(name).is_some(), "{name} missing");
        }
        let small = r.get("synthetic-small").unwrap().synthetic_spec().unwrap();
        assert_eq!((small.nodes, small.feature_dim, small.classes), (20_000, 64, 10));
        let sd = r.get("slashdot").unwrap();
        assert_eq!(
            (sd.format, sd.options.symmetrize, sd.options.generated_classes),
            (Format::Edgelist, Some(true), Some(60))
        );
    }

    #[test]
    fn synthetic_entries_match_the_built_in_presets() {
        let r = Registry::builtin();
        for name in [
            "synthetic-small",
            "synthetic-arxiv",
            "synthetic-arxiv-easy",
            "synthetic-products",
            "synthetic-products-easy",
        ] {
            let spec = r.get(name).unwrap().synthetic_spec().unwrap();
            assert_eq!(Some(spec), crate::datasets::synthetic::preset(name), "{name}");
        }
    }

    #[test]
    fn bad_registries_are_rejected_with_the_entry_named() {
        let e = Registry::parse("[x]\nformat = \"zip\"\n", None).unwrap_err().to_string();
        assert!(e.contains("[x]") && e.contains("zip"), "{e}");
        let e = Registry::parse("[x]\nformat = \"npz\"\nsha256 = \"abc\"\n", None).unwrap_err().to_string();
        assert!(e.contains("64 hex"), "{e}");
        let e = Registry::parse("x = 3\n", Some(Path::new("r.toml"))).unwrap_err().to_string();
        assert!(e.starts_with("r.toml:"), "{e}");
        assert!(Registry::builtin().require("nope").unwrap_err().is_bad_input());
    }
}
