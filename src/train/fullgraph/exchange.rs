//! The differentiable row exchange of the full-graph engine. Forward: every
//! worker sends each peer the rows of its `[owned, d]` layer output that the
//! peer holds as halo, and receives its own halo rows. Backward: the gradient
//! of the received rows goes back to their owners, who add it to their own
//! rows' gradient. Both are one all-to-all billed as `activations`: exactly
//! rows x k x 4 bytes of payload per peer plus the mesh's framing, where k is
//! the columns sent: d, or fewer under VARCO's compression (the first k of
//! each row; the receiver pads the rest with zeros).

use super::HaloPlan;
use crate::comm::{Category, add_from_le};
use crate::train::{Collective, TrainError};

/// Packs the first `k` columns of `rows` (positions into `x`, `d` wide) into
/// one little-endian message.
fn pack(x: &[f32], rows: impl Iterator<Item = usize>, (d, k): (usize, usize), cap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(cap * k * 4);
    for r in rows {
        out.extend_from_slice(bytemuck::cast_slice::<f32, u8>(&x[r * d..r * d + k]));
    }
    out
}

/// `msg` (little-endian f32) as `rows` rows of `d`, or why not.
pub(super) fn decode_rows(msg: &[u8], rows: usize, d: usize, peer: usize, what: &str) -> Result<Vec<f32>, TrainError> {
    check_len(msg.len(), rows, d, peer, what)?;
    let mut out = vec![0.0; rows * d];
    add_from_le(&mut out, msg);
    Ok(out)
}

pub(super) fn check_len(got: usize, rows: usize, d: usize, peer: usize, what: &str) -> Result<(), TrainError> {
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
    forward_columns(coll, plan, owned, (d, d))
}

/// `forward_rows` sending only the first `k` of the `d` columns of each row;
/// the halo rows come back zero beyond column `k`.
pub fn forward_columns(
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    owned: Vec<f32>,
    (d, k): (usize, usize),
) -> Result<Vec<f32>, TrainError> {
    let out: Vec<Vec<u8>> = (0..plan.world)
        .map(|p| pack(&owned, plan.send[p].iter().map(|&r| r as usize), (d, k), plan.send[p].len()))
        .collect();
    let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;
    let mut x = owned;
    x.resize(plan.rows() * d, 0.0);
    for (p, msg) in got.iter().enumerate() {
        if p == plan.rank || k == 0 {
            continue;
        }
        let rows = plan.halo_of(p);
        check_len(msg.len(), rows.len(), k, p, "halo rows")?;
        let first = plan.owned().len() + rows.start;
        for (i, row) in msg.chunks_exact(k * 4).enumerate() {
            let r = first + i;
            add_from_le(&mut x[r * d..r * d + k], row);
        }
    }
    Ok(x)
}

/// Backward: `grad` is the gradient of the `[owned + halo, d]` input; the halo
/// rows' part goes to their owners and what the peers send back is added to
/// the owned rows. Returns the `[owned, d]` gradient of this worker's output.
pub fn backward_rows(
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    grad: Vec<f32>,
    d: usize,
) -> Result<Vec<f32>, TrainError> {
    backward_columns(coll, plan, grad, (d, d))
}

/// `backward_rows` for an exchange that sent the first `k` columns: only
/// their gradients go back (the padded zeros depend on nothing).
pub fn backward_columns(
    coll: &mut dyn Collective,
    plan: &HaloPlan,
    mut grad: Vec<f32>,
    (d, k): (usize, usize),
) -> Result<Vec<f32>, TrainError> {
    let owned = plan.owned().len();
    let halo = &grad[owned * d..];
    let out: Vec<Vec<u8>> = (0..plan.world)
        .map(|p| {
            let r = plan.halo_of(p);
            pack(halo, r.clone(), (d, k), r.len())
        })
        .collect();
    let got = coll.all_to_all(out, Category::Activations).map_err(TrainError::Comm)?;
    grad.truncate(owned * d);
    for (p, msg) in got.iter().enumerate() {
        if p == plan.rank || k == 0 {
            continue;
        }
        check_len(msg.len(), plan.send[p].len(), k, p, "halo gradients")?;
        for (&r, row) in plan.send[p].iter().zip(msg.chunks_exact(k * 4)) {
            let r = r as usize;
            add_from_le(&mut grad[r * d..r * d + k], row);
        }
    }
    Ok(grad)
}
