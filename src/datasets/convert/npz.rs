//! The gnn-benchmark `.npz` layout (shchur/gnn-benchmark): the adjacency as
//! CSR arrays `adj_data/adj_indices/adj_indptr/adj_shape` (directed as
//! stored: symmetrised here), features as CSR `attr_*` (or a dense
//! `attr_matrix`, or none), and `labels` per node. No split ships with it:
//! the seeded Planetoid protocol is used (20 per class, 500 val, 1000 test).

use super::ConvertOptions;
use super::build::{Dense, Raw};
use super::npy::Npy;
use super::split::PLANETOID;
use crate::datasets::DatasetError;
use crate::datasets::source::Source;
use std::path::Path;

pub fn read(path: &Path, _opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    let mut src = Source::open(path)?;
    let (n, ncols, indptr, indices, _) = read_csr(&mut src, "adj")?;
    if n != ncols {
        return Err(DatasetError::invalid(
            src.display(&src.require("adj_shape.npy")?),
            format!("the adjacency is {n} x {ncols}, not square"),
        ));
    }
    let mut edges = Vec::with_capacity(indices.len());
    for v in 0..n {
        for &u in &indices[indptr[v]..indptr[v + 1]] {
            edges.push((v as u32, u));
        }
    }

    let features = if src.find("attr_indptr.npy").is_some() {
        let (rows, dim, indptr, indices, data) = read_csr(&mut src, "attr")?;
        if rows != n {
            return Err(DatasetError::invalid(
                path.display().to_string(),
                format!("{rows} feature rows for {n} nodes"),
            ));
        }
        let len = u32::try_from(dim).map_err(|e| e.to_string()).and_then(|d| super::build::dense_len(n, d));
        let mut values = vec![0f32; len.map_err(|m| DatasetError::invalid(path.display().to_string(), m))?];
        for v in 0..n {
            for k in indptr[v]..indptr[v + 1] {
                values[v * dim + indices[k] as usize] = data[k];
            }
        }
        Some(Dense { dim: dim as u32, values })
    } else if let Some(name) = src.find("attr_matrix.npy").map(str::to_owned) {
        let shown = src.display(&name);
        let bytes = src.read_part(&name)?;
        let a = Npy::parse(&bytes, &shown)?;
        match a.shape[..] {
            [rows, dim] if rows as usize == n => Some(Dense { dim: dim as u32, values: a.to_f32() }),
            _ => return Err(DatasetError::invalid(shown, format!("shape {:?}, expected ({n}, dim)", a.shape))),
        }
    } else {
        None
    };

    let labels = match src.find("labels.npy").map(str::to_owned) {
        Some(name) => {
            let shown = src.display(&name);
            let bytes = src.read_part(&name)?;
            let a = Npy::parse(&bytes, &shown)?;
            if a.shape != [n as u64] {
                return Err(DatasetError::invalid(shown, format!("shape {:?}, expected ({n},)", a.shape)));
            }
            let l = a.to_i64(&shown)?;
            if let Some(bad) = l.iter().find(|&&x| x < -1 || x > i32::MAX as i64) {
                return Err(DatasetError::invalid(shown, format!("label {bad} is not a class id")));
            }
            Some(l.into_iter().map(|x| x as i32).collect())
        }
        None if src.find("labels_indptr.npy").is_some() => {
            return Err(DatasetError::invalid(
                path.display().to_string(),
                "multi-label targets (labels_* CSR) are not supported",
            ));
        }
        None => None,
    };
    Ok(Raw { num_nodes: n, edges, features, labels, num_classes: 0, split: PLANETOID })
}

type Csr = (usize, usize, Vec<usize>, Vec<u32>, Vec<f32>);

/// `{prefix}_shape/indptr/indices/data` as (rows, cols, indptr, indices, data), fully range-checked.
fn read_csr(src: &mut Source, prefix: &str) -> Result<Csr, DatasetError> {
    let mut load = |part: &str| -> Result<(String, Vec<u8>), DatasetError> {
        let name = src.require(&format!("{prefix}_{part}.npy"))?;
        let shown = src.display(&name);
        Ok((shown.clone(), src.read_part(&name)?))
    };
    let (shape_f, shape_b) = load("shape")?;
    let (indptr_f, indptr_b) = load("indptr")?;
    let (indices_f, indices_b) = load("indices")?;
    let (data_f, data_b) = load("data")?;
    let shape = Npy::parse(&shape_b, &shape_f)?.to_i64(&shape_f)?;
    let [rows, cols] = shape[..] else {
        return Err(DatasetError::invalid(shape_f, format!("{shape:?} is not a 2-d shape")));
    };
    if rows < 0 || cols < 0 || rows > u32::MAX as i64 || cols > u32::MAX as i64 {
        return Err(DatasetError::invalid(shape_f, format!("shape ({rows}, {cols}) is out of range")));
    }
    let (rows, cols) = (rows as usize, cols as usize);
    let indptr = Npy::parse(&indptr_b, &indptr_f)?.to_i64(&indptr_f)?;
    let indices = Npy::parse(&indices_b, &indices_f)?.to_i64(&indices_f)?;
    let data = Npy::parse(&data_b, &data_f)?.to_f32();
    if indptr.len() != rows + 1 || indptr[0] != 0 || indptr.windows(2).any(|w| w[0] > w[1]) {
        return Err(DatasetError::invalid(indptr_f, format!("not {} monotone offsets starting at 0", rows + 1)));
    }
    if indptr[rows] as usize != indices.len() || data.len() != indices.len() {
        return Err(DatasetError::invalid(
            indices_f,
            format!("{} indices and {} values, the offsets end at {}", indices.len(), data.len(), indptr[rows]),
        ));
    }
    if let Some(bad) = indices.iter().find(|&&c| c < 0 || c as usize >= cols) {
        return Err(DatasetError::invalid(indices_f, format!("column {bad} is outside 0..{cols}")));
    }
    Ok((
        rows,
        cols,
        indptr.into_iter().map(|x| x as usize).collect(),
        indices.into_iter().map(|x| x as u32).collect(),
        data,
    ))
}
