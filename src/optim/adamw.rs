use super::{OptimState, Optimizer, take_slot};

/// Adam / AdamW with PyTorch's update rule and defaults (betas 0.9, 0.999, eps 1e-8).
pub struct AdamW {
    lr: f32,
    weight_decay: f32,
    /// Decoupled decay (AdamW) instead of L2 added to the gradient (Adam).
    decoupled: bool,
    beta1: f32,
    beta2: f32,
    eps: f32,
    step: u64,
    m: Vec<f32>,
    v: Vec<f32>,
}

impl AdamW {
    pub fn new(numel: usize, lr: f32, weight_decay: f32, decoupled: bool) -> Self {
        AdamW {
            lr,
            weight_decay,
            decoupled,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            step: 0,
            m: vec![0.0; numel],
            v: vec![0.0; numel],
        }
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, params: &mut [f32], grads: &[f32]) {
        assert_eq!(params.len(), self.m.len(), "parameter count changed");
        assert_eq!(grads.len(), self.m.len(), "gradient count differs from parameter count");
        self.step += 1;
        let (b1, b2) = (self.beta1, self.beta2);
        let bc1 = 1.0 - (b1 as f64).powi(self.step as i32);
        let bc2 = (1.0 - (b2 as f64).powi(self.step as i32)).sqrt();
        let step_size = (self.lr as f64 / bc1) as f32;
        let (bc2, eps, wd, lr) = (bc2 as f32, self.eps, self.weight_decay, self.lr);
        for (((w, &g), m), v) in params.iter_mut().zip(grads).zip(&mut self.m).zip(&mut self.v) {
            let g = if self.decoupled {
                *w *= 1.0 - lr * wd;
                g
            } else {
                g + wd * *w
            };
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *w -= step_size * *m / (v.sqrt() / bc2 + eps);
        }
    }

    fn state(&self) -> OptimState {
        OptimState {
            step: self.step,
            slots: vec![("exp_avg".into(), self.m.clone()), ("exp_avg_sq".into(), self.v.clone())],
        }
    }

    fn load_state(&mut self, mut s: OptimState) -> Result<(), String> {
        self.m = take_slot(&mut s, "exp_avg", self.m.len())?;
        self.v = take_slot(&mut s, "exp_avg_sq", self.v.len())?;
        self.step = s.step;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minimises sum (w - t)^2 and checks it gets there; with decay, w shrinks below t.
    #[test]
    fn converges_on_a_quadratic_and_decay_pulls_towards_zero() {
        let target = [3.0f32, -2.0, 0.5];
        for decoupled in [false, true] {
            let mut opt = AdamW::new(3, 0.05, 0.0, decoupled);
            let mut w = [0.0f32; 3];
            for _ in 0..2000 {
                let g: Vec<f32> = w.iter().zip(&target).map(|(w, t)| 2.0 * (w - t)).collect();
                opt.step(&mut w, &g);
            }
            for (a, b) in w.iter().zip(&target) {
                assert!((a - b).abs() < 1e-2, "{w:?}");
            }
        }
        let mut opt = AdamW::new(1, 0.05, 0.5, false);
        let mut w = [0.0f32];
        for _ in 0..3000 {
            let g = [2.0 * (w[0] - 3.0)];
            opt.step(&mut w, &g);
        }
        // L2: minimum of (w-3)^2 + 0.25 w^2 is at w = 2.4.
        assert!((w[0] - 2.4).abs() < 2e-2, "{w:?}");
    }

    /// The first Adam step moves every weight by lr in the direction against its gradient.
    #[test]
    fn first_step_is_lr_times_sign() {
        let mut opt = AdamW::new(2, 0.01, 0.0, true);
        let mut w = [1.0f32, 1.0];
        opt.step(&mut w, &[5.0, -0.1]);
        assert!((w[0] - 0.99).abs() < 1e-6 && (w[1] - 1.01).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn state_round_trip_continues_identically() {
        let grads = |i: usize| vec![(i as f32).sin(), (i as f32 * 0.3).cos(), 0.1];
        let mut a = AdamW::new(3, 0.01, 1e-2, true);
        let mut wa = [0.5f32, -0.5, 1.0];
        for i in 0..5 {
            a.step(&mut wa, &grads(i));
        }
        let mut b = AdamW::new(3, 0.01, 1e-2, true);
        b.load_state(a.state()).unwrap();
        let mut wb = wa;
        for i in 5..10 {
            a.step(&mut wa, &grads(i));
            b.step(&mut wb, &grads(i));
        }
        assert_eq!(wa, wb);
        assert!(b.load_state(OptimState { step: 1, slots: vec![("exp_avg".into(), vec![0.0])] }).is_err());
    }
}
