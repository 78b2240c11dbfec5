use super::csr_op::select_rows;
use candle_core::{D, Result, Tensor};

/// Sum over rows of -log softmax(logits)[label] (labels in `0..classes`).
/// Selected by row from the flattened log-probabilities (`select_rows`:
/// index_select on the CPU, whose backward is index_add; gather's is
/// scatter_add).
pub fn cross_entropy_sum(logits: &Tensor, labels: &[u32]) -> Result<Tensor> {
    let (n, c) = logits.dims2()?;
    if labels.len() != n {
        candle_core::bail!("{} labels for {n} rows of logits", labels.len());
    }
    let lp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let idx: Vec<u32> = labels.iter().enumerate().map(|(i, &y)| (i * c) as u32 + y).collect();
    select_rows(&lp.flatten_all()?, &idx)?.sum_all()?.neg()
}

/// How many rows' argmax equals their label.
pub fn count_correct(logits: &Tensor, labels: &[u32]) -> Result<usize> {
    let pred = logits.argmax(D::Minus1)?.to_vec1::<u32>()?;
    Ok(pred.iter().zip(labels).filter(|(p, y)| p == y).count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn matches_candle_cross_entropy_and_counts_argmax() {
        let logits = Tensor::new(&[[1.0f32, 2.0, 0.5], [0.0, -1.0, 3.0]], &Device::Cpu).unwrap();
        let labels = [1u32, 0];
        let ours = cross_entropy_sum(&logits, &labels).unwrap().to_scalar::<f32>().unwrap();
        let mean = candle_nn::loss::cross_entropy(&logits, &Tensor::new(&labels, &Device::Cpu).unwrap())
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!((ours - 2.0 * mean).abs() < 1e-5, "{ours} vs 2 x {mean}");
        assert_eq!(count_correct(&logits, &labels).unwrap(), 1);
    }
}
