//! Mixed precision, a GPU option (`precision: bf16 | fp16`). The weights and Adam's
//! moments stay in float32 ("master weights"); a training step casts each layer's input,
//! weight and bias to the half type, so the products and activations are computed and
//! kept in it, and casts the model's output back to float32 for the loss. The casts are
//! differentiable: the gradients reach the float32 weights in float32.
//!
//! float16's range is narrow (smallest normal 6e-5), so small gradients would flush to
//! zero: with fp16 the loss is multiplied by a scale before the backward pass and the
//! gradients divided by it after; a step whose gradients overflowed is skipped and the
//! scale halved, and after [`LossScale::GROWTH_INTERVAL`] good steps in a row the scale
//! doubles (the policy of PyTorch's `GradScaler`). bfloat16 has float32's range and
//! needs no scale. Metrics, checkpoints and the exported model are float32.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, FloatDType, Int, Tensor};

use qanat_model::config::Precision;

/// fp16's dynamic loss scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScale {
    pub scale: f32,
    /// Steps in a row whose gradients were finite.
    pub good_steps: u32,
}

impl Default for LossScale {
    fn default() -> Self {
        LossScale {
            scale: Self::INITIAL,
            good_steps: 0,
        }
    }
}

impl LossScale {
    pub const INITIAL: f32 = 65_536.0;
    pub const GROWTH_INTERVAL: u32 = 2_000;

    /// Takes the outcome of a step's overflow check; says whether to apply the step.
    pub fn update(&mut self, finite: bool) -> bool {
        if finite {
            self.good_steps += 1;
            if self.good_steps >= Self::GROWTH_INTERVAL {
                self.good_steps = 0;
                let grown = self.scale * 2.0;
                if grown.is_finite() {
                    self.scale = grown;
                }
            }
        } else {
            self.good_steps = 0;
            self.scale = (self.scale * 0.5).max(1.0);
        }
        finite
    }
}

/// How a training step computes: the half type of the layers (none: float32) and, for
/// float16, the loss scale.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Mixed {
    pub half: Option<FloatDType>,
    pub scale: Option<LossScale>,
}

impl Mixed {
    pub fn new(precision: Precision) -> Mixed {
        match precision {
            Precision::Fp32 => Mixed::default(),
            Precision::Bf16 => Mixed {
                half: Some(FloatDType::BF16),
                scale: None,
            },
            Precision::Fp16 => Mixed {
                half: Some(FloatDType::F16),
                scale: Some(LossScale::default()),
            },
        }
    }
}

/// Multiplies every gradient of `model` in `grads` by `factor` (1 / the loss scale) and
/// says whether they are all finite (one read from the device per step).
pub fn unscale<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    grads: &mut GradientsParams,
    factor: f32,
) -> bool {
    let mut visitor = Unscale::<B> {
        grads,
        factor,
        bad: None,
    };
    model.visit(&mut visitor);
    visitor
        .bad
        .is_none_or(|b| b.into_scalar().elem::<i64>() == 0)
}

struct Unscale<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    factor: f32,
    /// The count of tensors with a NaN or an infinity so far.
    bad: Option<Tensor<B::InnerBackend, 1, Int>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) else {
            return;
        };
        let g = g.mul_scalar(self.factor);
        let bad = g.clone().is_finite().bool_not().any().int();
        self.bad = Some(match self.bad.take() {
            Some(b) => b + bad,
            None => bad,
        });
        self.grads.register::<B::InnerBackend, D>(param.id, g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adam::Adam;
    use crate::fit::{epoch_steps, CpuTrain, Mlp};
    use burn::module::Module;
    use qanat_model::prep::{Encoded, Rng, Target};

    // The CPU backend has no half types: float64 stands in for "the other type" to
    // check the path itself (casts in the graph, gradients back in float32, the loss
    // scale and skipped steps). The half kernels are burn's CUDA backend's.
    const OTHER: FloatDType = FloatDType::F64;

    fn data(rows: usize, y: impl Fn(&[f32]) -> f32) -> Encoded {
        let mut rng = Rng::new(5);
        let x: Vec<f32> = (0..rows * 3)
            .map(|_| (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0)
            .collect();
        let y = x.chunks(3).map(y).collect();
        Encoded {
            x,
            width: 3,
            y,
            weight: vec![1.0; rows],
        }
    }

    fn weights(model: &Mlp<CpuTrain>) -> Vec<f32> {
        model
            .layers
            .iter()
            .flat_map(|l| {
                let mut w = l.weight.val().into_data().to_vec::<f32>().expect("f32");
                w.extend(l.bias.as_ref().map_or(Vec::new(), |b| {
                    b.val().into_data().to_vec::<f32>().expect("f32")
                }));
                w
            })
            .collect()
    }

    // burn's CPU random generator is global (other tests draw from it too): each test
    // makes its initial model once and trains copies of it.
    fn initial() -> Mlp<CpuTrain> {
        Mlp::<CpuTrain>::new(3, &[8], 1, &Default::default())
    }

    fn train(
        mut model: Mlp<CpuTrain>,
        target: &Target,
        data: &Encoded,
        epochs: usize,
        mixed: &mut Mixed,
    ) -> Mlp<CpuTrain> {
        let device = Default::default();
        let mut optim = Adam::default().init::<CpuTrain, Mlp<CpuTrain>>();
        let order: Vec<usize> = (0..data.rows()).collect();
        for _ in 0..epochs {
            model = epoch_steps(
                model, &mut optim, target, data, &order, 16, 0.01, mixed, &device,
            );
        }
        model
    }

    #[test]
    fn a_mixed_step_learns_what_a_float32_step_learns() {
        let target = Target::Classification {
            name: "y".into(),
            classes: vec!["0".into(), "1".into()],
        };
        let d = data(64, |r| f32::from(r[0] + r[1] > 0.0));
        let start = initial();
        let full = weights(&train(
            start.clone(),
            &target,
            &d,
            20,
            &mut Mixed::default(),
        ));
        let mut mixed = Mixed {
            half: Some(OTHER),
            scale: Some(LossScale::default()),
        };
        let model = train(start.clone(), &target, &d, 20, &mut mixed);
        // The parameters are still float32, and every step was applied.
        assert_eq!(
            model.layers[0].weight.val().dtype(),
            burn::tensor::DType::F32
        );
        assert_eq!(mixed.scale.map(|s| s.good_steps), Some(80));
        let other = weights(&model);
        let far = full
            .iter()
            .zip(&other)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(far < 1e-3, "float32 and mixed weights differ by {far}");
        let untrained = weights(&start);
        assert_ne!(untrained, other, "the mixed steps changed nothing");
        assert_eq!(model.num_params(), 3 * 8 + 8 + 8 + 1);
    }

    #[test]
    fn unscaled_gradients_through_the_casts_are_the_float32_gradients() {
        let model = initial();
        let d = data(8, |_| 0.0);
        let x = || {
            Tensor::<CpuTrain, 2>::from_data(
                burn::tensor::TensorData::new(d.x.clone(), [8, 3]),
                &Default::default(),
            )
        };
        let grad = |g: &GradientsParams| {
            g.get::<crate::fit::Cpu, 2>(model.layers[0].weight.id)
                .expect("a gradient")
                .into_data()
                .to_vec::<f32>()
                .expect("f32")
        };
        let plain = GradientsParams::from_grads(model.forward(x()).sum().backward(), &model);
        let scaled = model.forward_as(x(), Some(OTHER)).sum().mul_scalar(1024.0);
        let mut g = GradientsParams::from_grads(scaled.backward(), &model);
        assert!(unscale(&model, &mut g, 1.0 / 1024.0));
        let (a, b) = (grad(&plain), grad(&g));
        assert!(a.iter().any(|v| *v != 0.0));
        for (a, b) in a.iter().zip(&b) {
            assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn an_overflowing_step_is_skipped_and_the_scale_halved() {
        let target = Target::Regression {
            name: "y".into(),
            mean: 0.0,
            std: 1.0,
        };
        // (p - 1e12)² scaled by 1e30 overflows float32 in the backward pass.
        let d = data(16, |_| 1e12);
        let start = initial();
        let before = weights(&start);
        let mut mixed = Mixed {
            half: Some(OTHER),
            scale: Some(LossScale {
                scale: 1e30,
                good_steps: 5,
            }),
        };
        let after = weights(&train(start, &target, &d, 1, &mut mixed));
        assert_eq!(before, after, "an overflowing step was applied");
        assert_eq!(
            mixed.scale,
            Some(LossScale {
                scale: 5e29,
                good_steps: 0
            })
        );
    }

    #[test]
    fn the_scale_halves_on_overflow_and_doubles_after_a_run_of_good_steps() {
        let mut s = LossScale::default();
        assert!(!s.update(false));
        assert_eq!(s.scale, LossScale::INITIAL / 2.0);
        for _ in 0..LossScale::GROWTH_INTERVAL - 1 {
            assert!(s.update(true));
        }
        assert_eq!(s.scale, LossScale::INITIAL / 2.0);
        assert!(s.update(true));
        assert_eq!((s.scale, s.good_steps), (LossScale::INITIAL, 0));
        let mut tiny = LossScale {
            scale: 1.0,
            good_steps: 7,
        };
        tiny.update(false);
        assert_eq!((tiny.scale, tiny.good_steps), (1.0, 0));
    }
}
