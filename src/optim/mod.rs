//! Optimizers over flat f32 buffers (the layout of `model::Params::flat_values`),
//! with their state exposed so it can be checkpointed and moved between
//! processes (candle's AdamW keeps its moments private).

mod adamw;
mod sgd;

pub use adamw::AdamW;
pub use sgd::Sgd;

use crate::model::Params;
use candle_core::{Device, Tensor};
use std::collections::HashMap;

pub trait Optimizer: Send {
    /// One update of `params` from `grads` (same flat layout).
    fn step(&mut self, params: &mut [f32], grads: &[f32]);
    fn state(&self) -> OptimState;
    /// Restores a state taken by `state` (same kind, same number of parameters).
    fn load_state(&mut self, state: OptimState) -> Result<(), String>;
}

/// An optimizer's full state: the step count and named flat slots
/// (`exp_avg`, `exp_avg_sq`, `momentum_buffer`, as PyTorch names them).
#[derive(Clone, Debug, PartialEq)]
pub struct OptimState {
    pub step: u64,
    pub slots: Vec<(String, Vec<f32>)>,
}

impl OptimState {
    /// As a safetensors file: one tensor per (slot, parameter), named
    /// `<slot>.<parameter name>`, and the step count in the metadata.
    pub fn to_safetensors(&self, params: &Params) -> candle_core::Result<Vec<u8>> {
        let mut named: Vec<(String, Tensor)> = Vec::new();
        for (slot, flat) in &self.slots {
            named.extend(params.named(flat, &format!("{slot}."))?);
        }
        let meta = HashMap::from([("step".to_string(), self.step.to_string())]);
        safetensors::tensor::serialize(named.iter().map(|(k, v)| (k.as_str(), v)), Some(meta))
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    /// The slots restricted to `ranges` (part of the parameters, in the flat
    /// layout), concatenated in order: a stage's own optimizer state.
    pub fn slice(&self, ranges: &[std::ops::Range<usize>]) -> OptimState {
        let take = |v: &[f32]| ranges.iter().flat_map(|r| v[r.clone()].iter().copied()).collect();
        OptimState { step: self.step, slots: self.slots.iter().map(|(n, v)| (n.clone(), take(v))).collect() }
    }

    /// `slice`'s inverse: this state of part of the parameters placed at
    /// `ranges` of `numel` flat values, zero elsewhere.
    pub fn placed(&self, ranges: &[std::ops::Range<usize>], numel: usize) -> OptimState {
        let place = |v: &[f32]| {
            let mut out = vec![0f32; numel];
            let mut at = 0;
            for r in ranges {
                out[r.clone()].copy_from_slice(&v[at..at + r.len()]);
                at += r.len();
            }
            out
        };
        OptimState { step: self.step, slots: self.slots.iter().map(|(n, v)| (n.clone(), place(v))).collect() }
    }

    /// Reads what `to_safetensors` wrote for the slots named in `slots`.
    pub fn from_safetensors(bytes: &[u8], params: &Params, slots: &[&str]) -> Result<OptimState, String> {
        let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| e.to_string())?;
        let step = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("step"))
            .and_then(|s| s.parse().ok())
            .ok_or("no `step` in the optimizer state's metadata")?;
        let tensors = candle_core::safetensors::load_buffer(bytes, &Device::Cpu).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for slot in slots {
            let prefix = format!("{slot}.");
            let only: HashMap<String, Tensor> =
                tensors.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(k, v)| (k.clone(), v.clone())).collect();
            out.push((slot.to_string(), params.flat_from(&only, &prefix)?));
        }
        Ok(OptimState { step, slots: out })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Adam with L2 weight decay added to the gradient (PyTorch `Adam(weight_decay=..)`,
    /// the PyG/DGL example protocol).
    Adam,
    /// Adam with decoupled weight decay (PyTorch `AdamW`).
    #[value(name = "adamw")]
    AdamW,
    /// SGD with momentum and L2 weight decay.
    Sgd,
}

crate::value_names!(OptimizerKind, "--optimizer");

impl OptimizerKind {
    /// The state slots this kind keeps.
    pub fn slots(self) -> &'static [&'static str] {
        match self {
            OptimizerKind::Adam | OptimizerKind::AdamW => &["exp_avg", "exp_avg_sq"],
            OptimizerKind::Sgd => &["momentum_buffer"],
        }
    }

    pub fn build(self, numel: usize, lr: f32, weight_decay: f32) -> Box<dyn Optimizer> {
        match self {
            OptimizerKind::Adam => Box::new(AdamW::new(numel, lr, weight_decay, false)),
            OptimizerKind::AdamW => Box::new(AdamW::new(numel, lr, weight_decay, true)),
            OptimizerKind::Sgd => Box::new(Sgd::new(numel, lr, 0.9, weight_decay)),
        }
    }
}

/// Checks a restored slot has the optimizer's length.
fn take_slot(state: &mut OptimState, name: &str, len: usize) -> Result<Vec<f32>, String> {
    let i =
        state.slots.iter().position(|(n, _)| n == name).ok_or_else(|| format!("optimizer state has no `{name}`"))?;
    let (_, v) = state.slots.swap_remove(i);
    if v.len() != len {
        return Err(format!("optimizer state `{name}` has {} values, the model has {len}", v.len()));
    }
    Ok(v)
}
