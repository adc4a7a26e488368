//! Adam (Kingma & Ba), with L2 weight decay added to the gradient as `torch.optim.Adam`
//! does. Its state is burn's `AdamState`, so checkpoints hold what burn's Adam holds.
//!
//! On the CPU backend the update of a parameter is one pass over its values, its
//! gradient and its two moments in plain Rust. burn's Adam runs a dozen whole-tensor
//! operations per parameter, each a pass that allocates its result; on the benchmark's
//! MLP that was 10% of a CPU training step (perf, 2026-11). Other backends (CUDA) run the
//! same formula as tensor operations on the device.

use std::any::TypeId;

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamState, AdaptiveMomentumState, LearningRate, SimpleOptimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, Tensor, TensorData};

use crate::fit::Cpu;

/// Adam's hyperparameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adam {
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    /// The L2 penalty added to the gradient (`weight_decay`); 0 for none.
    pub weight_decay: f32,
}

impl Default for Adam {
    /// PyTorch's defaults.
    fn default() -> Self {
        Adam {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl Adam {
    /// The optimizer of a module's parameters.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(self) -> OptimizerAdaptor<Adam, M, B> {
        OptimizerAdaptor::from(self)
    }

    /// The update as one pass on the host (the caller checked the values are float32).
    fn step_host<B: Backend, const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<AdamState<B, D>>,
    ) -> (Tensor<B, D>, AdamState<B, D>) {
        let device = tensor.device();
        let shape = tensor.shape();
        let host = |t: Tensor<B, D>| {
            t.into_data()
                .into_vec::<f32>()
                .expect("float32 values (checked before)")
        };
        let mut p = host(tensor);
        let g = host(grad);
        let (time, mut m, mut v) = match state {
            Some(s) => (
                s.momentum.time + 1,
                host(s.momentum.moment_1),
                host(s.momentum.moment_2),
            ),
            None => (1, vec![0.0; p.len()], vec![0.0; p.len()]),
        };
        let (b1, b2) = (self.beta_1, self.beta_2);
        let t = i32::try_from(time).unwrap_or(i32::MAX);
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        let (f1, f2) = (1.0 - b1, 1.0 - b2);
        let lr = lr as f32;
        let wd = self.weight_decay;
        for (((p, g), m), v) in p.iter_mut().zip(&g).zip(&mut m).zip(&mut v) {
            let g = if wd > 0.0 { *g + *p * wd } else { *g };
            *m = *m * b1 + g * f1;
            *v = *v * b2 + g * g * f2;
            *p -= (*m / c1) / ((*v / c2).sqrt() + self.epsilon) * lr;
        }
        let back =
            |x: Vec<f32>| Tensor::<B, D>::from_data(TensorData::new(x, shape.clone()), &device);
        let state = AdamState::new(AdaptiveMomentumState::new(time, back(m), back(v)));
        (back(p), state)
    }
}

impl<B: Backend> SimpleOptimizer<B> for Adam {
    type State<const D: usize> = AdamState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        mut grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let f32s = |t: &Tensor<B, D>| t.dtype() == DType::F32;
        if TypeId::of::<B>() == TypeId::of::<Cpu>()
            && f32s(&tensor)
            && f32s(&grad)
            && state
                .as_ref()
                .is_none_or(|s| f32s(&s.momentum.moment_1) && f32s(&s.momentum.moment_2))
        {
            let (t, s) = self.step_host(lr, tensor, grad, state);
            return (t, Some(s));
        }
        if self.weight_decay > 0.0 {
            grad = grad + tensor.clone().mul_scalar(self.weight_decay);
        }
        let (b1, b2) = (self.beta_1, self.beta_2);
        let (time, m, v) = match state {
            Some(s) => (
                s.momentum.time + 1,
                s.momentum.moment_1.mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1),
                s.momentum.moment_2.mul_scalar(b2) + grad.square().mul_scalar(1.0 - b2),
            ),
            None => (
                1,
                grad.clone().mul_scalar(1.0 - b1),
                grad.square().mul_scalar(1.0 - b2),
            ),
        };
        let t = i32::try_from(time).unwrap_or(i32::MAX);
        let step = m
            .clone()
            .div_scalar(1.0 - b1.powi(t))
            .div(
                v.clone()
                    .div_scalar(1.0 - b2.powi(t))
                    .sqrt()
                    .add_scalar(self.epsilon),
            )
            .mul_scalar(lr);
        (
            tensor - step,
            Some(AdamState::new(AdaptiveMomentumState::new(time, m, v))),
        )
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;

    /// The host pass and the tensor operations compute the same steps.
    #[test]
    fn the_cpu_pass_follows_the_tensor_formula() {
        type F64 = NdArray<f64>;
        let adam = Adam {
            weight_decay: 0.01,
            ..Adam::default()
        };
        let dev = Default::default();
        let values = [0.5f32, -1.0, 2.0, 0.0, 3.0, -0.25];
        let grads = [
            [0.1f32, -0.2, 0.3, 0.0, -1.5, 2.0],
            [0.3, 0.1, -0.4, 0.2, 0.0, -1.0],
        ];
        let cpu = |x: &[f32]| Tensor::<Cpu, 1>::from_floats(x, &dev);
        let other = |x: &[f32]| {
            Tensor::<F64, 1>::from_data(
                TensorData::new(x.iter().map(|v| f64::from(*v)).collect::<Vec<f64>>(), [6]),
                &dev,
            )
        };
        let (mut a, mut sa) = (cpu(&values), None);
        let (mut b, mut sb) = (other(&values), None);
        for g in &grads {
            (a, sa) = SimpleOptimizer::<Cpu>::step(&adam, 0.01, a, cpu(g), sa);
            (b, sb) = SimpleOptimizer::<F64>::step(&adam, 0.01, b, other(g), sb);
        }
        let a = a.into_data().to_vec::<f32>().expect("f32");
        let b = b.into_data().to_vec::<f64>().expect("f64");
        assert_ne!(a, values.to_vec(), "no step was taken");
        for (x, y) in a.iter().zip(&b) {
            assert!((f64::from(*x) - y).abs() < 1e-6, "{x} vs {y}");
        }
        assert_eq!(sa.map(|s| s.momentum.time), Some(2));
    }

    /// Adam's first step moves each value by the learning rate against its gradient's sign.
    #[test]
    fn a_first_step_moves_by_the_learning_rate() {
        let dev = Default::default();
        let p = Tensor::<Cpu, 1>::from_floats([1.0, 1.0, 1.0], &dev);
        let g = Tensor::<Cpu, 1>::from_floats([0.5, -3.0, 0.0], &dev);
        let (p, _) = SimpleOptimizer::<Cpu>::step(&Adam::default(), 0.1, p, g, None);
        let p = p.into_data().to_vec::<f32>().expect("f32");
        for (x, want) in p.iter().zip([0.9, 1.1, 1.0]) {
            assert!((x - want).abs() < 1e-6, "{p:?}");
        }
    }
}
