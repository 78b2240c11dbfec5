//! The first layer split by input column (P3's intra-layer model
//! parallelism): a worker holding columns `cols` of every input row computes
//! the first layer's pre-activation from its slice and the matching columns
//! of the first layer's weights; the partials of a column partition sum to
//! the full pre-activation, to which the batch's owner adds the bias, applies
//! the activation and runs the remaining layers.
//!
//! This needs a first layer that is linear in its input up to the bias and
//! non-linearity, with column-wise aggregation: GraphSAGE (mean or max) and
//! GCN; for deepgcn the encoder, whose output over every input row is the
//! partial (GENConv 0 then runs at the batch's owner). GAT's attention
//! scores and FiLM's modulation read whole rows of every source, so they
//! are refused (`ModelKind::splits_by_column`).

use super::dropout::{dropout_columns, vertex_row_key};
use super::{Input, Layer, LayerInput, Mode, Model, Prepared};
use candle_core::{Device, Result, Tensor};
use std::ops::Range;

impl Model {
    /// Whether the first layer can be computed from column slices of its input.
    pub fn splits_by_column(&self) -> bool {
        self.spec.kind.splits_by_column()
    }

    /// `input` for columns `cols` of the rows of `p`'s input nodes (`rows` is
    /// row-major, `cols.len()` wide): input dropout drops exactly the values
    /// the full rows would lose in these columns.
    pub fn input_columns(
        &self,
        p: &Prepared,
        mut rows: Vec<f32>,
        cols: Range<usize>,
        mode: Mode,
        dev: &Device,
    ) -> Result<Tensor> {
        let ids = p.blocks.input_nodes();
        let width = cols.len();
        if let (Mode::Train { key }, true) = (mode, self.spec.kind.drops_input()) {
            let site = Self::feature_site(key, 0);
            dropout_columns(&mut rows, cols, self.spec.dropout, |r| vertex_row_key(site, ids[r]));
        }
        Tensor::from_vec(rows, (ids.len(), width), &Device::Cpu)?.to_device(dev)
    }

    /// The first layer's output before bias and activation, `[num_dst, d_out]`,
    /// from `x` (made by `input_columns` for `cols`) and columns `cols` of the
    /// layer's weights; differentiable in those weights.
    pub fn first_layer_partial(&self, p: &Prepared, x: &Tensor, cols: Range<usize>) -> Result<Tensor> {
        let inp = LayerInput {
            x,
            graph: &p.graphs[0],
            ids: &p.blocks.layers[0].src,
            kernel: self.kernel,
            attention_dropout: None,
            activation: None,
        };
        match &self.layers[0] {
            Layer::Sage(s) => s.partial(&inp, cols),
            Layer::Gcn(c) => c.partial(&inp, cols),
            Layer::Deep(d) => d.encoder_partial(x, cols),
            Layer::Gat(_) | Layer::Film(_) => {
                candle_core::bail!("{}'s first layer cannot be split by feature column", self.spec.kind)
            }
        }
    }

    /// Logits from `pre`, the sum of every column slice's `first_layer_partial`:
    /// the first layer's bias and activation (with the dropout of the second
    /// layer's input), then the other layers, exactly as `forward` does.
    pub fn forward_from_first(&self, p: &Prepared, pre: &Tensor, mode: Mode) -> Result<Tensor> {
        let bias = match &self.layers[0] {
            Layer::Sage(s) => Some(s.bias()),
            Layer::Gcn(c) => c.bias(),
            Layer::Deep(d) => d.encoder_bias(),
            Layer::Gat(_) | Layer::Film(_) => {
                candle_core::bail!("{}'s first layer cannot be split by feature column", self.spec.kind)
            }
        };
        let y = match bias {
            Some(b) => pre.broadcast_add(b)?,
            None => pre.clone(),
        };
        if let Layer::Deep(d) = &self.layers[0] {
            let b = &p.blocks.layers[0];
            let y = d.forward_encoded(y, &self.deep_input(0, &p.graphs[0], (&b.src, b.dst()), mode))?;
            return if self.layers.len() == 1 { Ok(y) } else { self.forward_layers(p, 1, Input::Dense(y), mode) };
        }
        if self.layers.len() == 1 {
            return Ok(y);
        }
        let next = &p.blocks.layers[1].src;
        let (rate, site) = self.output_dropout(0, mode);
        let relu =
            super::dropout::ReluDropout::new(next.len(), self.spec.hidden, rate, |r| vertex_row_key(site, next[r]));
        self.forward_layers(p, 1, Input::Dense(relu.apply(&y)?), mode)
    }
}
