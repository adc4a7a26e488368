//! Seeded random weights and inputs for the tests.

use crate::native::{Layer, NativeMlp};

/// splitmix64: small, seeded, good enough for test data.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    pub(crate) fn normals(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let u = self.uniform().max(1e-12);
                let v = self.uniform();
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect()
    }

    /// An int8 value in [-127, 127], as the kernels hold it.
    pub(crate) fn int8(&mut self) -> i16 {
        (self.next() % 255) as i16 - 127
    }
}

/// An MLP of the given widths with He-initialized weights and small biases.
pub(crate) fn random_mlp(g: &mut Rng, widths: &[usize]) -> NativeMlp {
    let layers = widths
        .windows(2)
        .map(|w| {
            let std = (2.0 / w[0] as f32).sqrt();
            let weight = g.normals(w[0] * w[1]).iter().map(|v| v * std).collect();
            let bias = g.normals(w[1]).iter().map(|v| v * 0.1).collect();
            Layer::f32(w[0], weight, bias).expect("shapes agree")
        })
        .collect();
    NativeMlp::new(layers).expect("layers chain")
}
