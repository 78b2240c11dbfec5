//! The differentiable row exchange of the full-graph engine. Forward: every
//! worker sends each peer the rows of its `[owned, d]` layer output that the
//! peer holds as halo, and receives its own halo rows. Backward: the gradient
//! of the received rows goes back to their owners, who add it to their own
//! rows' gradient. Both are one all-to-all billed as `activations`: exactly
//! rows x d x 4 bytes of payload per peer plus the mesh's framing.

use super::HaloPlan;
use crate::comm::{Category, add_from_le};
use crate::train::{Collective, TrainError};

/// Packs `rows` (positions into `x`, `d` wide) into one little-endian message.
fn pack(x: &[f32], rows: impl Iterator<Item = usize>, d: usize, cap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(cap * d * 4);
    for r in rows {
        out.extend_from_slice(bytemuck::cast_slice::<f32, u8>(&x[r * d..(r + 1) * d]));
    }
    out
}

fn check_len(got: usize, rows: usize, d: usize, peer: usize, what: &str) -> Result<(), TrainError> {
    if got == rows * d * 4 {
        Ok(())
    } else {
        Err(TrainError::Comm(
            format!(
                "worker {peer} sent {got} bytes of {what}, expected {rows} rows of {d} f32 ({} bytes)",
                rows * d * 4
            )
            .into(),
        ))
    }
}

/// Forward: `owned` is this worker's `[owned, d]` output; returns the
/// `[owned + halo, d]` input of the next layer (owned rows first).
pub fn forward_rows(
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    owned: Vec<f32>,
    d: usize,
) -> Result<Vec<f32>, TrainError> {
    let out: Vec<Vec<u8>> = (0..plan.world)
        .map(|p| pack(&owned, plan.send[p].iter().map(|&r| r as usize), d, plan.send[p].len()))
        .collect();
    let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;
    let mut x = owned;
    x.reserve(plan.halo().len() * d);
    for (p, msg) in got.iter().enumerate() {
        if p == plan.rank {
            continue;
        }
        check_len(msg.len(), plan.halo_of(p).len(), d, p, "halo rows")?;
        let start = x.len();
        x.resize(start + msg.len() / 4, 0.0);
        add_from_le(&mut x[start..], msg);
    }
    Ok(x)
}

/// Backward: `grad` is the gradient of the `[owned + halo, d]` input; the halo
/// rows' part goes to their owners and what the peers send back is added to
/// the owned rows. Returns the `[owned, d]` gradient of this worker's output.
pub fn backward_rows(
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    mut grad: Vec<f32>,
    d: usize,
) -> Result<Vec<f32>, TrainError> {
    let owned = plan.owned().len();
    let halo = &grad[owned * d..];
    let out: Vec<Vec<u8>> = (0..plan.world)
        .map(|p| {
            let r = plan.halo_of(p);
            pack(halo, r.clone(), d, r.len())
        })
        .collect();
    let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;
    grad.truncate(owned * d);
    for (p, msg) in got.iter().enumerate() {
        if p == plan.rank {
            continue;
        }
        check_len(msg.len(), plan.send[p].len(), d, p, "halo gradients")?;
        for (&r, row) in plan.send[p].iter().zip(msg.chunks_exact(d * 4)) {
            let r = r as usize;
            add_from_le(&mut grad[r * d..(r + 1) * d], row);
        }
    }
    Ok(grad)
}
