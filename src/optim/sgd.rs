use super::{OptimState, Optimizer, take_slot};

/// SGD with momentum and L2 weight decay (PyTorch `SGD`: the first step sets the buffer to the gradient).
pub struct Sgd {
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    step: u64,
    buf: Vec<f32>,
}

impl Sgd {
    pub fn new(numel: usize, lr: f32, momentum: f32, weight_decay: f32) -> Self {
        Sgd { lr, momentum, weight_decay, step: 0, buf: vec![0.0; numel] }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut [f32], grads: &[f32]) {
        assert_eq!(params.len(), self.buf.len(), "parameter count changed");
        assert_eq!(grads.len(), self.buf.len(), "gradient count differs from parameter count");
        let first = self.step == 0;
        self.step += 1;
        for ((w, &g), b) in params.iter_mut().zip(grads).zip(&mut self.buf) {
            let g = g + self.weight_decay * *w;
            *b = if first { g } else { self.momentum * *b + g };
            *w -= self.lr * *b;
        }
    }

    fn state(&self) -> OptimState {
        OptimState { step: self.step, slots: vec![("momentum_buffer".into(), self.buf.clone())] }
    }

    fn load_state(&mut self, mut s: OptimState) -> Result<(), String> {
        self.buf = take_slot(&mut s, "momentum_buffer", self.buf.len())?;
        self.step = s.step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn momentum_matches_the_closed_form_and_converges() {
        let mut opt = Sgd::new(1, 0.1, 0.9, 0.0);
        let mut w = [0.0f32];
        opt.step(&mut w, &[1.0]);
        opt.step(&mut w, &[1.0]);
        // buf: 1, then 0.9 + 1 = 1.9; w = -0.1 - 0.19.
        assert!((w[0] + 0.29).abs() < 1e-6, "{w:?}");
        let mut opt = Sgd::new(1, 0.05, 0.9, 0.0);
        let mut w = [0.0f32];
        for _ in 0..500 {
            let g = [2.0 * (w[0] - 1.5)];
            opt.step(&mut w, &g);
        }
        assert!((w[0] - 1.5).abs() < 1e-3, "{w:?}");
    }
}
