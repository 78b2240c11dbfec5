//! `train --config FILE`: every train flag from a file, the command line
//! overriding it. A TOML file holds `flag = value` pairs named as the long
//! flags (`batch-size = 64`, `no-tui = true`, `fanout = [10, 10]`, and
//! `dataset = "cora"` for the positional NAME); a run's own `config.json`
//! replays that run. Both become flags that go before the command line's, so
//! one parser, one set of checks and one set of defaults serve all three.

use super::{TrainConfig, TrainMode};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("--config {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--config {path}: {why}")]
    Parse { path: PathBuf, why: String },
    #[error(
        "--config {path}: unknown key `{key}`: keys are train's long flags without the dashes (see `leapgnn train --help`), and `dataset`"
    )]
    UnknownKey { path: PathBuf, key: String },
    #[error(
        "--config {path}: unknown key `{key}`: a run's config.json holds only the keys leapgnn writes there; remove it, or give the flags in a TOML file"
    )]
    UnknownJsonKey { path: PathBuf, key: String },
    #[error("--config {path}: `{key}`: {why}")]
    BadValue { path: PathBuf, key: String, why: String },
    /// A value its flag's parser refuses, shown as the file writes it.
    #[error("--config {path}: {key} = {shown}: {why}; correct it in the file")]
    WrongType { path: PathBuf, key: String, shown: String, why: String },
}

impl crate::error::Blame for ConfigFileError {
    fn is_bad_input(&self) -> bool {
        true
    }
}

/// What a flag of `train` takes, as its parser says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// `--no-tui`: present or not.
    Switch,
    /// `--epochs 3`.
    Value,
}

/// What the file's keys are checked against: train's flags, as its parser has them.
pub trait FlagParser {
    /// What the long flag `--name` takes (`None`: no such flag).
    fn kind(&self, name: &str) -> Option<FlagKind>;
    /// Whether `value` parses as `--name`'s value; `Err`: what is wrong with
    /// it, as "expected a whole number (as --epochs takes)".
    fn check(&self, name: &str, value: &str) -> Result<(), String>;
}

/// The flags `path` stands for, each value checked by its flag's parser here,
/// so a wrong one is put to its key in the file rather than to the flag it
/// became. The positional NAME comes back first, as a bare word, when the
/// file names one.
pub fn flags_from_file(path: &Path, flags: &dyn FlagParser) -> Result<Vec<String>, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read { path: path.into(), source })?;
    let parse = |why: String| ConfigFileError::Parse { path: path.into(), why };
    if path.extension().is_some_and(|e| e == "json") {
        return Ok(run_config(path, &text)?.to_flags());
    }
    let table: toml::Table = toml::from_str(&text).map_err(|e| parse(format!("not valid TOML: {e}")))?;
    let mut out = Vec::with_capacity(table.len() * 2);
    let mut positional = None;
    for (key, value) in &table {
        let bad = |why: &str| ConfigFileError::BadValue { path: path.into(), key: key.clone(), why: why.into() };
        let name = key.replace('_', "-");
        if name == "dataset" {
            positional = Some(scalar(value).ok_or_else(|| bad("expected a dataset name or path"))?);
            continue;
        }
        match flags.kind(&name) {
            None => return Err(ConfigFileError::UnknownKey { path: path.into(), key: key.clone() }),
            Some(FlagKind::Switch) => match value {
                toml::Value::Boolean(true) => out.push(format!("--{name}")),
                toml::Value::Boolean(false) => {}
                _ => return Err(bad("a switch: expected true or false")),
            },
            Some(FlagKind::Value) => {
                let v = match value {
                    // Flags that take on|off (--prefetch, --history) also take a TOML boolean.
                    toml::Value::Boolean(b) => if *b { "on" } else { "off" }.to_string(),
                    toml::Value::Array(items) => {
                        let words: Option<Vec<String>> = items.iter().map(scalar).collect();
                        words.ok_or_else(|| bad("expected a list of numbers or words"))?.join(",")
                    }
                    v => scalar(v).ok_or_else(|| bad("expected a number, a word or a list"))?,
                };
                flags.check(&name, &v).map_err(|why| ConfigFileError::WrongType {
                    path: path.into(),
                    key: key.clone(),
                    shown: value.to_string(),
                    why,
                })?;
                // One word `--flag=value`: as two, a value starting with `-`
                // (`lr = -0.1`, `run = "-x"`) would be read by clap as a flag.
                out.push(format!("--{name}={v}"));
            }
        }
    }
    Ok(positional.into_iter().chain(out).collect())
}

/// A run's `config.json`, held to what TOML files are: a key the config does not
/// have is refused (serde would skip it, and a replay would quietly differ from
/// what the file says), and a value of the wrong type is reported by its key
/// rather than by serde_json's line and column in a one-line file.
fn run_config(path: &Path, text: &str) -> Result<TrainConfig, ConfigFileError> {
    let parse = |e: &dyn std::fmt::Display| ConfigFileError::Parse {
        path: path.into(),
        why: format!("not a run's config.json ({e}); a config file of flags is TOML"),
    };
    let map = match serde_json::from_str::<serde_json::Value>(text).map_err(|e| parse(&e))? {
        serde_json::Value::Object(map) => map,
        other => return Err(parse(&format!("a JSON {}, not an object", json_kind(&other)))),
    };
    let unknown = |key: String| ConfigFileError::UnknownJsonKey { path: path.into(), key };
    let known = struct_fields::<TrainConfig>();
    if let Some(key) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(unknown(key.clone()));
    }
    for (key, fields) in [
        ("varco", struct_fields::<super::fullgraph::varco::VarcoConfig>()),
        ("gnnpipe", struct_fields::<super::fullgraph::gnnpipe::GnnPipeConfig>()),
    ] {
        if let Some(serde_json::Value::Object(inner)) = map.get(key)
            && let Some(k) = inner.keys().find(|k| !fields.contains(&k.as_str()))
        {
            return Err(unknown(format!("{key}.{k}")));
        }
    }
    crate::util::keyed::deserialize(map).map_err(|(at, e): (_, serde_json::Error)| match at {
        // A missing field is found after the last key and names itself.
        Some(key) if !e.to_string().starts_with("missing field") => {
            ConfigFileError::BadValue { path: path.into(), key, why: e.to_string() }
        }
        _ => parse(&e),
    })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// The field names a derived `Deserialize` for a struct accepts (its
/// `#[serde(rename)]`s included): serde hands them to `deserialize_struct`.
fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    struct Fields(std::cell::Cell<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for &Fields {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("only structs are asked for their fields"))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.set(fields);
            self.deserialize_any(visitor)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let f = Fields(std::cell::Cell::new(&[]));
    let _ = T::deserialize(&f);
    f.0.get()
}

fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

/// The word serde writes for a value (the names the flags parse).
fn word<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

impl TrainConfig {
    /// The `train` flags that give this config: `leapgnn train FLAGS`
    /// builds it again (how `--config runs/RUN/config.json` replays a run).
    pub fn to_flags(&self) -> Vec<String> {
        let mut f = vec![self.dataset.clone()];
        let mut push = |flag: &str, v: String| f.push(format!("--{flag}={v}"));
        push("strategy", self.strategy.to_string());
        push("workers", self.workers.to_string());
        push("parts", self.parts.to_string());
        push("model", word(&self.model));
        if self.eval == super::EvalMode::Sampled {
            // Layer-wise evaluation takes no batches, and refuses the flag.
            push("eval-batch-size", self.eval_batch_size.to_string());
        }
        push("hidden", self.hidden.to_string());
        push("heads", self.heads.to_string());
        if let Some(a) = self.aggr {
            push("aggr", a.to_string());
        }
        if let Some(t) = self.softmax_t {
            push("softmax-t", t.to_string());
        }
        if let Some(on) = self.self_loops {
            push("self-loops", if on { "on" } else { "off" }.into());
        }
        if let Some(h) = self.gat_heads {
            push("gat-heads", h.to_string());
        }
        match self.rounds {
            // A RETEXO run's length is its rounds per layer (--epochs is refused).
            Some(r) => push("rounds", r.to_string()),
            None => push("epochs", self.epochs.to_string()),
        }
        if let Some(on) = self.factored_grads {
            push("factored-grads", if on { "on" } else { "off" }.into());
        }
        push("lr", self.lr.to_string());
        push("weight-decay", self.weight_decay.to_string());
        push("dropout", self.dropout.to_string());
        push("optimizer", word(&self.optimizer));
        push("seed", self.seed.to_string());
        if self.checkpoint_every > 0 {
            push("checkpoint-every", self.checkpoint_every.to_string());
        }
        push("device", word(&self.device));
        push("normalize", word(&self.normalize));
        push("cache-mb", self.cache_mb.to_string());
        push("cache-policy", word(&self.cache_policy));
        push("eval", word(&self.eval));
        if let Some(p) = &self.partition {
            push("partition", p.clone());
        }
        if let Some(c) = &self.cluster {
            push("cluster", c.display().to_string());
        }
        if let Some(v) = &self.varco {
            push("compression", v.compression.to_string());
            push("max-ratio", v.max_ratio.to_string());
            push("min-ratio", v.min_ratio.to_string());
            push("slope", v.slope.to_string());
            if let Some(r) = v.ratio {
                push("ratio", r.to_string());
            }
        }
        if let Some(g) = &self.gnnpipe {
            push("chunks", g.chunks.to_string());
            push("history", if g.history { "on" } else { "off" }.into());
            push("history-smoothing", g.history_smoothing.to_string());
            push("pipeline-groups", g.groups.to_string());
        }
        match self.mode {
            // Every neighbour of every node: the sampling flags are refused there.
            TrainMode::FullGraph => {
                push("mode", self.mode.to_string());
                push("layers", self.fanouts.layers().to_string());
            }
            TrainMode::Minibatch => {
                push("fanout", self.fanouts.to_string());
                push("eval-fanout", self.eval_fanouts.to_string());
                push("batch-size", self.batch_size.to_string());
                // Only leapgnn's count is chosen; the others' follows --workers
                // (micrograph, pregather: one per worker; the rest: 1), so a
                // replay with another --workers or --strategy takes its own.
                if self.strategy == super::StrategyKind::Leapgnn {
                    push("time-steps", self.time_steps.map_or_else(|| "auto".into(), |t| t.to_string()));
                }
                push("migration", word(&self.migration));
                if let Some(p) = &self.merge_plan {
                    push("merge-plan", p.display().to_string());
                }
                push("prefetch", self.prefetch.to_string());
            }
        }
        f
    }
}
