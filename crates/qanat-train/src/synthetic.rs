//! A synthetic binary task for benchmarks and device checks: inputs uniform in
//! [-1, 1), the label `x0 > 0`. Seeded: the same arguments, the same rows.

use qanat_model::prep::{Encoded, Rng, Target};

/// `rows × inputs` encoded rows and the target they are labelled for.
pub fn binary(rows: usize, inputs: usize, seed: u64) -> (Encoded, Target) {
    let mut rng = Rng::new(seed);
    let x: Vec<f32> = (0..rows * inputs)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0)
        .collect();
    let y: Vec<f32> = (0..rows).map(|r| f32::from(x[r * inputs] > 0.0)).collect();
    let data = Encoded {
        x,
        width: inputs,
        y,
        weight: vec![1.0; rows],
    };
    let target = Target::Classification {
        name: "label".into(),
        classes: vec!["0".into(), "1".into()],
    };
    (data, target)
}
