//! A large synthetic table for benchmarks: `cargo run --release -p qanat-train
//! --example synth -- ROWS FEATURES OUT.csv [SEED]` writes `x0..x{F-1}` (standard
//! normal, 1% missing) and a binary `label` from a fixed random linear rule plus noise,
//! so that a model has something to learn. Seeded: the same arguments, the same file.

use std::io::Write;

use qanat_model::prep::Rng;

fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn normal(rng: &mut Rng) -> f64 {
    let u = unit(rng).max(1e-300);
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * unit(rng)).cos()
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: synth ROWS FEATURES OUT.csv [SEED]";
    let (Some(rows), Some(features), Some(out)) = (
        args.get(1).and_then(|a| a.parse::<usize>().ok()),
        args.get(2).and_then(|a| a.parse::<usize>().ok()),
        args.get(3),
    ) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let seed = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut rng = Rng::new(seed);
    let w: Vec<f64> = (0..features).map(|_| normal(&mut rng)).collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(out)?);
    let header: Vec<String> = (0..features).map(|i| format!("x{i}")).collect();
    writeln!(f, "{},label", header.join(","))?;
    let mut line = String::new();
    for _ in 0..rows {
        line.clear();
        let mut z = 0.0;
        for wi in &w {
            let x = normal(&mut rng);
            z += wi * x;
            if unit(&mut rng) >= 0.01 {
                line.push_str(&format!("{x:.5}"));
            }
            line.push(',');
        }
        let label = u8::from(z + normal(&mut rng) * 2.0 > 0.0);
        writeln!(f, "{line}{label}")?;
    }
    f.flush()
}
