//! The model's parameters in a fixed order, with PyTorch-style names
//! (`layers.0.lin_l.weight`, weights `[out, in]`), seeded initialisation and
//! flat views for all-reduce and the optimizer.

use crate::util::rng::stream;
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Result, Shape, Tensor, Var};
use rand::Rng as _;
use std::collections::HashMap;

pub struct Param {
    pub name: String,
    pub var: Var,
}

/// Parameters in creation order (a `VarMap` is a hash map: its order, and so any
/// flat buffer built from it, would differ from run to run).
#[derive(Default)]
pub struct Params {
    entries: Vec<Param>,
    /// State that is saved with the weights but never trained (BatchNorm's
    /// statistics): outside the flat buffers the optimizer and all-reduce see.
    buffers: Vec<Param>,
    seed: u64,
}

impl Params {
    pub fn new(seed: u64) -> Self {
        Params { entries: Vec::new(), buffers: Vec::new(), seed }
    }

    fn add(&mut self, name: &str, t: Tensor) -> Result<Tensor> {
        assert!(self.entries.iter().chain(&self.buffers).all(|p| p.name != name), "parameter {name} added twice");
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        self.entries.push(Param { name: name.to_string(), var });
        Ok(out)
    }

    /// Glorot-uniform values drawn from the stream named after the parameter, so
    /// a parameter's initial value depends on (seed, name) only.
    pub fn glorot(
        &mut self,
        name: &str,
        shape: impl Into<Shape>,
        fan_in: usize,
        fan_out: usize,
        dev: &Device,
    ) -> Result<Tensor> {
        let shape: Shape = shape.into();
        let limit = (6.0 / (fan_in + fan_out) as f64).sqrt() as f32;
        let mut rng = stream(self.seed, &format!("init:{name}"));
        let vals: Vec<f32> = (0..shape.elem_count()).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * limit).collect();
        self.add(name, Tensor::from_vec(vals, shape, dev)?)
    }

    pub fn zeros(&mut self, name: &str, shape: impl Into<Shape>, dev: &Device) -> Result<Tensor> {
        self.add(name, Tensor::zeros(shape, DType::F32, dev)?)
    }

    pub fn ones(&mut self, name: &str, shape: impl Into<Shape>, dev: &Device) -> Result<Tensor> {
        self.add(name, Tensor::ones(shape, DType::F32, dev)?)
    }

    /// The parameters whose names start with `prefix`, in order, sharing their
    /// storage with these (setting one sets the other): a view that trains
    /// part of a model with its own flat buffers and optimizer.
    pub fn subset(&self, prefix: &str) -> Params {
        self.subset_where(|name| name.starts_with(prefix))
    }

    /// `subset` of the parameters (and buffers) whose names `keep` accepts.
    pub fn subset_where(&self, keep: impl Fn(&str) -> bool) -> Params {
        let pick = |list: &[Param]| -> Vec<Param> {
            list.iter().filter(|p| keep(&p.name)).map(|p| Param { name: p.name.clone(), var: p.var.clone() }).collect()
        };
        Params { entries: pick(&self.entries), buffers: pick(&self.buffers), seed: self.seed }
    }

    /// Registers an untrained state tensor `name` (saved with the weights)
    /// and returns it; `Var::set` on it updates what the checkpoint holds.
    pub fn buffer(&mut self, name: &str, init: Tensor) -> Result<Var> {
        assert!(self.entries.iter().chain(&self.buffers).all(|p| p.name != name), "buffer {name} added twice");
        let var = Var::from_tensor(&init)?;
        self.buffers.push(Param { name: name.to_string(), var: var.clone() });
        Ok(var)
    }

    /// The buffers, named, for the weights file.
    pub fn buffers_named(&self) -> Result<Vec<(String, Tensor)>> {
        self.buffers.iter().map(|b| Ok((b.name.clone(), b.var.as_tensor().to_device(&Device::Cpu)?))).collect()
    }

    /// Every buffer's values concatenated in order (a stage's BatchNorm
    /// statistics travel with its weights).
    pub fn flat_buffers(&self) -> Result<Vec<f32>> {
        values_of(&self.buffers)
    }

    /// Overwrites every buffer from a flat buffer (as `flat_buffers` lays it out).
    pub fn set_flat_buffers(&self, flat: &[f32]) -> Result<()> {
        set_values(&self.buffers, flat, "buffer")
    }

    /// Whether `name` is one of the buffers.
    pub fn is_buffer(&self, name: &str) -> bool {
        self.buffers.iter().any(|b| b.name == name)
    }

    /// Sets every buffer from `tensors` (each must be present with its shape).
    pub fn set_buffers(&self, tensors: &HashMap<String, Tensor>) -> std::result::Result<(), String> {
        for b in &self.buffers {
            let t = tensors.get(&b.name).ok_or_else(|| format!("tensor `{}` is missing", b.name))?;
            if t.dims() != b.var.dims() {
                return Err(format!(
                    "tensor `{}` has shape {:?}, the model needs {:?}",
                    b.name,
                    t.dims(),
                    b.var.dims()
                ));
            }
            let t = t.to_dtype(DType::F32).and_then(|t| t.to_device(b.var.device())).map_err(|e| e.to_string())?;
            b.var.set(&t).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.entries.iter()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Total number of scalars.
    pub fn numel(&self) -> usize {
        numel_of(&self.entries)
    }

    /// Total number of buffer scalars (what `flat_buffers` returns).
    pub fn buffers_numel(&self) -> usize {
        numel_of(&self.buffers)
    }

    /// (name, shape) of each parameter, in flat-buffer order.
    pub fn layout(&self) -> Vec<(String, Vec<usize>)> {
        self.entries.iter().map(|p| (p.name.clone(), p.var.dims().to_vec())).collect()
    }

    /// Where parameter `name` lies in the flat buffers (`flat_values`, `flat_grads`).
    pub fn flat_range(&self, name: &str) -> Option<std::ops::Range<usize>> {
        let mut start = 0;
        for p in &self.entries {
            let n = p.var.elem_count();
            if p.name == name {
                return Some(start..start + n);
            }
            start += n;
        }
        None
    }

    /// All values concatenated in order.
    pub fn flat_values(&self) -> Result<Vec<f32>> {
        values_of(&self.entries)
    }

    /// Overwrites every parameter from a flat buffer (as `flat_values` lays it out).
    pub fn set_flat(&self, flat: &[f32]) -> Result<()> {
        set_values(&self.entries, flat, "parameter")
    }

    /// Gradients concatenated in parameter order; zeros for parameters the loss did not reach.
    pub fn flat_grads(&self, grads: &GradStore) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(self.numel());
        for p in &self.entries {
            match grads.get(p.var.as_tensor()) {
                Some(g) => out.extend(g.flatten_all()?.to_vec1::<f32>()?),
                None => out.extend(std::iter::repeat_n(0.0, p.var.elem_count())),
            }
        }
        Ok(out)
    }

    /// Named tensors for safetensors files (weights, or optimizer slots of the same shapes).
    pub fn named(&self, flat: &[f32], prefix: &str) -> Result<Vec<(String, Tensor)>> {
        let mut off = 0;
        let mut out = Vec::with_capacity(self.entries.len());
        for p in &self.entries {
            let n = p.var.elem_count();
            out.push((
                format!("{prefix}{}", p.name),
                Tensor::from_slice(&flat[off..off + n], p.var.shape(), &Device::Cpu)?,
            ));
            off += n;
        }
        Ok(out)
    }

    /// A flat buffer from named tensors: every parameter must be present with its shape.
    pub fn flat_from(&self, tensors: &HashMap<String, Tensor>, prefix: &str) -> std::result::Result<Vec<f32>, String> {
        let mut out = Vec::with_capacity(self.numel());
        for p in &self.entries {
            let key = format!("{prefix}{}", p.name);
            let t = tensors.get(&key).ok_or_else(|| format!("tensor `{key}` is missing"))?;
            if t.dims() != p.var.dims() {
                return Err(format!("tensor `{key}` has shape {:?}, the model needs {:?}", t.dims(), p.var.dims()));
            }
            let vals =
                t.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).map_err(|e| e.to_string())?;
            out.extend(vals);
        }
        if tensors.keys().filter(|k| k.starts_with(prefix)).count() != self.entries.len() {
            return Err(format!("the file holds tensors this model does not have (expected {:?})", self.layout()));
        }
        Ok(out)
    }
}

fn numel_of(list: &[Param]) -> usize {
    list.iter().map(|p| p.var.elem_count()).sum()
}

/// The values of `list` concatenated in order.
fn values_of(list: &[Param]) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(numel_of(list));
    for p in list {
        out.extend(p.var.flatten_all()?.to_vec1::<f32>()?);
    }
    Ok(out)
}

/// Overwrites `list` from `flat` (as `values_of` lays it out).
fn set_values(list: &[Param], flat: &[f32], what: &str) -> Result<()> {
    let total = numel_of(list);
    if flat.len() != total {
        candle_core::bail!("flat {what} buffer has {} values, the model has {total}", flat.len());
    }
    let mut off = 0;
    for p in list {
        let n = p.var.elem_count();
        p.var.set(&Tensor::from_slice(&flat[off..off + n], p.var.shape(), p.var.device())?)?;
        off += n;
    }
    Ok(())
}
