//! Tree ensembles — gradient-boosted trees and random forests — read from the files
//! XGBoost and LightGBM save ([`xgboost`], [`lightgbm`]) and predicted here, with no
//! library of theirs loaded: predictions equal the library's own on the same rows (to
//! within the last bit of an `f32` output; the compatibility suite checks 1e-6).
//!
//! Every tree becomes nodes of one flat array ([`Forest`]): a split sends a row left
//! when its feature is below the node's `f32` threshold, a missing value (NaN) the way
//! the library sends it. A library that compares `x <= t` on `f64` thresholds
//! (LightGBM, scikit-learn) gets the `f32` threshold that takes every `f32` input the
//! same way, so rows are carried as `f32` (as XGBoost itself converts them).
//!
//! Model files are untrusted input: every index is checked in bounds, every child
//! comes after its parent (so a walk ends within the tree's size), and nothing is
//! sized by a count the file states beyond what it holds.

pub mod lightgbm;
mod ubjson;
pub mod xgboost;

use crate::Error;

/// A node is a leaf.
const LEAF: u32 = 1 << 31;
/// A missing value (NaN) goes left.
const NAN_LEFT: u32 = 1 << 30;
/// A value within ±1e-35 counts as missing and goes the default way (LightGBM's
/// `missing_type=Zero`).
const ZERO_MISSING: u32 = 1 << 29;
/// The default way, for [`ZERO_MISSING`], is left.
const ZERO_LEFT: u32 = 1 << 28;
/// The feature index's bits.
const FEATURE: u32 = (1 << 28) - 1;

/// One node: a split (`feature`'s value below `threshold` goes to `left`, else to
/// `right`) or a leaf, whose `f64` value is held in `left` (high bits) and `right`
/// (low bits), in the node's own cache line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Node {
    /// The feature index and the flags above.
    bits: u32,
    threshold: f32,
    left: u32,
    right: u32,
}

/// How a node sends a missing value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// NaN goes left (`true`) or right.
    Nan { left: bool },
    /// NaN and values within ±1e-35 go the default way.
    ZeroOrNan { left: bool },
}

/// A split as the readers describe it: go left when `x < threshold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub feature: usize,
    pub threshold: f32,
    pub missing: Missing,
    pub left: usize,
    pub right: usize,
}

/// A node as the readers give it (indices are the tree's own, from 0 at the root).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TreeNode {
    Split(Split),
    Leaf(f64),
}

/// The largest `f32` not above `t`: for every `f32` x, `x <= t` exactly when
/// `x < next_up(floor_f32(t))` (what [`le_threshold`] returns).
fn floor_f32(t: f64) -> f32 {
    let f = t as f32;
    if f64::from(f) > t {
        f.next_down()
    } else {
        f
    }
}

/// The `f32` threshold `s` with `x < s` ⇔ `x <= t` for every `f32` `x`, for the
/// libraries that compare `x <= t` on `f64` (LightGBM, scikit-learn).
pub fn le_threshold(t: f64) -> f32 {
    if t.is_nan() {
        // No value is `<=` NaN: nothing goes left.
        return f32::NEG_INFINITY;
    }
    floor_f32(t).next_up()
}

/// How per-group sums become a row's outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Link {
    /// The sums themselves.
    Identity,
    /// `1 / (1 + exp(-scale·s))` per group.
    Sigmoid { scale: f64 },
    /// The groups' softmax.
    Softmax,
    /// `exp(s)` per group (Poisson, gamma, Tweedie).
    Exp,
    /// `ln(1 + exp(s))` (LightGBM's `cross_entropy_lambda`).
    Softplus,
    /// `sign(s)·s²` (LightGBM's `regression` with `sqrt`).
    SignedSquare,
    /// 1 when the sum is above 0, else 0 (XGBoost's `binary:hinge`).
    Step,
    /// The index of the largest group (XGBoost's `multi:softmax`): one output.
    ArgMax,
}

/// The precision sums are kept in, as the library keeps them: the answer then equals
/// its own to the last bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sum {
    /// XGBoost: `f32`, tree by tree from the base margin.
    F32,
    /// LightGBM, scikit-learn: `f64`.
    F64,
}

/// A tree ensemble ready to predict.
#[derive(Debug, Clone)]
pub struct Forest {
    features: usize,
    groups: usize,
    /// Every tree's nodes; leaves hold their value, a tree's weight applied.
    nodes: Vec<Node>,
    roots: Vec<u32>,
    /// Each tree's output group.
    tree_group: Vec<u32>,
    /// The margin each group starts from.
    base: Vec<f64>,
    /// Sums are divided by this before the link (LightGBM's random forests average
    /// their trees).
    divisor: f64,
    sum: Sum,
    link: Link,
}

/// What [`Forest::new`] takes besides the trees.
#[derive(Debug, Clone)]
pub struct ForestSpec {
    pub features: usize,
    pub groups: usize,
    pub base: Vec<f64>,
    pub divisor: f64,
    pub sum: Sum,
    pub link: Link,
}

/// The deepest a tree may be walked (also bounded by its size).
const MAX_NODES_PER_TREE: usize = 1 << 26;

impl Forest {
    /// A forest of `trees` (each its nodes, root first, and its group), checked.
    pub fn new(spec: ForestSpec, trees: Vec<(Vec<TreeNode>, usize)>) -> Result<Forest, Error> {
        let ForestSpec {
            features,
            groups,
            base,
            divisor,
            sum,
            link,
        } = spec;
        if groups == 0 || base.len() != groups {
            return Err(Error::invalid(format!(
                "a tree ensemble with {groups} output groups and {} base scores",
                base.len()
            )));
        }
        if features == 0 || features > FEATURE as usize {
            return Err(Error::invalid(format!(
                "a tree ensemble over {features} features"
            )));
        }
        if !(divisor.is_finite() && divisor > 0.0) {
            return Err(Error::invalid("a tree ensemble averaged over no trees"));
        }
        let total: usize = trees.iter().map(|(t, _)| t.len()).sum();
        if total >= u32::MAX as usize {
            return Err(Error::invalid("a tree ensemble with over 4 billion nodes"));
        }
        let mut nodes = Vec::with_capacity(total);
        let mut roots = Vec::with_capacity(trees.len());
        let mut tree_group = Vec::with_capacity(trees.len());
        for (i, (tree, group)) in trees.into_iter().enumerate() {
            let bad = |why: String| Error::invalid(format!("tree {i}: {why}"));
            if tree.is_empty() || tree.len() > MAX_NODES_PER_TREE {
                return Err(bad(format!("{} nodes", tree.len())));
            }
            if group >= groups {
                return Err(bad(format!(
                    "output group {group} of a model with {groups}"
                )));
            }
            let offset = nodes.len();
            let len = tree.len();
            for (n, node) in tree.into_iter().enumerate() {
                match node {
                    TreeNode::Leaf(v) => {
                        if !v.is_finite() {
                            return Err(bad(format!("leaf {n} has the value {v}")));
                        }
                        let b = v.to_bits();
                        nodes.push(Node {
                            bits: LEAF,
                            threshold: 0.0,
                            left: (b >> 32) as u32,
                            right: b as u32,
                        });
                    }
                    TreeNode::Split(s) => {
                        if s.feature >= features {
                            return Err(bad(format!(
                                "node {n} splits on feature {} of {features}",
                                s.feature
                            )));
                        }
                        // Children after their parent: every walk ends.
                        for c in [s.left, s.right] {
                            if c <= n || c >= len {
                                return Err(bad(format!(
                                    "node {n} has child {c} (a tree of {len} nodes, children after their parent)"
                                )));
                            }
                        }
                        let mut bits = s.feature as u32;
                        match s.missing {
                            Missing::Nan { left } => {
                                if left {
                                    bits |= NAN_LEFT;
                                }
                            }
                            Missing::ZeroOrNan { left } => {
                                bits |= ZERO_MISSING;
                                if left {
                                    bits |= NAN_LEFT | ZERO_LEFT;
                                }
                            }
                        }
                        nodes.push(Node {
                            bits,
                            threshold: s.threshold,
                            left: (offset + s.left) as u32,
                            right: (offset + s.right) as u32,
                        });
                    }
                }
            }
            roots.push(offset as u32);
            tree_group.push(group as u32);
        }
        Ok(Forest {
            features,
            groups,
            nodes,
            roots,
            tree_group,
            base,
            divisor,
            sum,
            link,
        })
    }

    /// Values per input row.
    pub fn features(&self) -> usize {
        self.features
    }

    /// Sums per row before the link (classes of a multi-class model, else 1).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Values per output row.
    pub fn outputs(&self) -> usize {
        match self.link {
            Link::ArgMax => 1,
            _ => self.groups,
        }
    }

    pub fn trees(&self) -> usize {
        self.roots.len()
    }

    pub fn link(&self) -> Link {
        self.link
    }

    /// Keeps the first `n` trees (a library's best iteration).
    pub fn truncate(&mut self, n: usize) {
        self.roots.truncate(n);
        self.tree_group.truncate(n);
    }

    /// The node a split sends value `x` to.
    #[inline(always)]
    fn next(n: Node, x: f32) -> usize {
        let left = if x.is_nan() {
            n.bits & NAN_LEFT != 0
        } else if n.bits & ZERO_MISSING != 0 && x.abs() <= ZERO {
            n.bits & ZERO_LEFT != 0
        } else {
            x < n.threshold
        };
        if left {
            n.left as usize
        } else {
            n.right as usize
        }
    }

    /// A leaf's value.
    #[inline(always)]
    fn value(n: Node) -> f64 {
        f64::from_bits(u64::from(n.left) << 32 | u64::from(n.right))
    }

    /// The values of the leaves `rows` rows of `x` reach from `root`, into `out`.
    /// Rows walk the tree eight at a time, in step: their chains of dependent loads
    /// overlap instead of waiting on each other.
    fn walk(&self, x: &[f32], rows: usize, root: u32, out: &mut [f64]) {
        const LANES: usize = 8;
        let nodes = &self.nodes[..];
        let f = self.features;
        let mut r = 0;
        while r + LANES <= rows {
            let lanes = &x[r * f..(r + LANES) * f];
            let mut at = [root as usize; LANES];
            loop {
                let mut moved = false;
                for (k, i) in at.iter_mut().enumerate() {
                    let n = nodes[*i];
                    if n.bits & LEAF == 0 {
                        *i = Self::next(n, lanes[k * f + (n.bits & FEATURE) as usize]);
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
            for (o, i) in out[r..r + LANES].iter_mut().zip(at) {
                *o = Self::value(nodes[i]);
            }
            r += LANES;
        }
        for (o, row) in out[r..rows].iter_mut().zip(x[r * f..].chunks_exact(f)) {
            let mut i = root as usize;
            while nodes[i].bits & LEAF == 0 {
                let n = nodes[i];
                i = Self::next(n, row[(n.bits & FEATURE) as usize]);
            }
            *o = Self::value(nodes[i]);
        }
    }

    /// The per-group sums of `rows` rows of `x` (row-major, [`Forest::features`]
    /// values each), the divisor applied, before the link: `rows × groups`.
    pub fn margins(&self, x: &[f32], rows: usize) -> Result<Vec<f64>, Error> {
        if x.len() != rows * self.features {
            return Err(Error::invalid(format!(
                "{} values for {rows} rows of {} features",
                x.len(),
                self.features
            )));
        }
        let g = self.groups;
        let mut out = vec![0.0f64; rows * g];
        // Rows in blocks, tree by tree within a block: a tree's nodes stay in cache
        // while the block's rows walk it.
        const BLOCK: usize = 64;
        // The accumulator of the forest's precision only.
        let width = |s: Sum| if self.sum == s { BLOCK * g } else { 0 };
        let mut acc32 = vec![0.0f32; width(Sum::F32)];
        let mut acc64 = vec![0.0f64; width(Sum::F64)];
        let mut leaves = [0.0f64; BLOCK];
        for start in (0..rows).step_by(BLOCK) {
            let n = BLOCK.min(rows - start);
            let block = &x[start * self.features..(start + n) * self.features];
            match self.sum {
                Sum::F32 => {
                    for r in 0..n {
                        for k in 0..g {
                            acc32[r * g + k] = self.base[k] as f32;
                        }
                    }
                    for (&root, &group) in self.roots.iter().zip(&self.tree_group) {
                        self.walk(block, n, root, &mut leaves);
                        for (r, v) in leaves[..n].iter().enumerate() {
                            acc32[r * g + group as usize] += *v as f32;
                        }
                    }
                    for (o, a) in out[start * g..(start + n) * g].iter_mut().zip(&acc32) {
                        *o = f64::from(*a) / self.divisor;
                    }
                }
                Sum::F64 => {
                    for r in 0..n {
                        acc64[r * g..(r + 1) * g].copy_from_slice(&self.base);
                    }
                    for (&root, &group) in self.roots.iter().zip(&self.tree_group) {
                        self.walk(block, n, root, &mut leaves);
                        for (r, v) in leaves[..n].iter().enumerate() {
                            acc64[r * g + group as usize] += *v;
                        }
                    }
                    for (o, a) in out[start * g..(start + n) * g].iter_mut().zip(&acc64) {
                        *o = *a / self.divisor;
                    }
                }
            }
        }
        Ok(out)
    }

    /// The outputs of `rows` rows of `x`: the margins through the link, `rows ×`
    /// [`Forest::outputs`].
    pub fn predict(&self, x: &[f32], rows: usize) -> Result<Vec<f32>, Error> {
        let m = self.margins(x, rows)?;
        let g = self.groups;
        let single = self.sum == Sum::F32;
        Ok(match self.link {
            Link::Identity => m.iter().map(|v| *v as f32).collect(),
            Link::Sigmoid { scale } => m
                .iter()
                .map(|v| {
                    if single {
                        // As XGBoost computes it, in f32.
                        let z = *v as f32;
                        1.0 / (1.0 + (-z).exp())
                    } else {
                        (1.0 / (1.0 + (-scale * v).exp())) as f32
                    }
                })
                .collect(),
            Link::Exp => m
                .iter()
                .map(|v| {
                    if single {
                        (*v as f32).exp()
                    } else {
                        v.exp() as f32
                    }
                })
                .collect(),
            Link::Softplus => m.iter().map(|v| v.exp().ln_1p() as f32).collect(),
            Link::SignedSquare => m.iter().map(|v| (v.signum() * v * v) as f32).collect(),
            Link::Step => m.iter().map(|v| if *v > 0.0 { 1.0 } else { 0.0 }).collect(),
            Link::Softmax => m
                .chunks(g)
                .flat_map(|z| {
                    if single {
                        softmax_f32(z)
                    } else {
                        softmax_f64(z)
                    }
                })
                .collect(),
            Link::ArgMax => m
                .chunks(g)
                .map(|z| {
                    // The first largest, as the libraries pick.
                    let mut best = 0;
                    for (i, v) in z.iter().enumerate() {
                        if *v > z[best] {
                            best = i;
                        }
                    }
                    best as f32
                })
                .collect(),
        })
    }
}

/// LightGBM's zero: values within this of 0 are zero (its `kZeroThreshold`, the
/// `f32` literal `1e-35f`).
const ZERO: f32 = 1.0e-35;

fn softmax_f32(z: &[f64]) -> Vec<f32> {
    let z: Vec<f32> = z.iter().map(|v| *v as f32).collect();
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = z.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

pub(crate) fn softmax_f64(z: &[f64]) -> Vec<f32> {
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| (v / s) as f32).collect()
}

/// A number in a model file, as a number or as the string XGBoost writes parameters
/// as.
pub(crate) fn number(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        serde_json::Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(feature: usize, threshold: f32, left: usize, right: usize) -> TreeNode {
        TreeNode::Split(Split {
            feature,
            threshold,
            missing: Missing::Nan { left: true },
            left,
            right,
        })
    }

    fn spec(groups: usize, sum: Sum, link: Link) -> ForestSpec {
        ForestSpec {
            features: 2,
            groups,
            base: vec![0.5; groups],
            divisor: 1.0,
            sum,
            link,
        }
    }

    #[test]
    fn rows_walk_to_their_leaves_and_sum_per_group() {
        let t0 = vec![
            split(0, 1.0, 1, 2),
            TreeNode::Leaf(1.0),
            TreeNode::Leaf(2.0),
        ];
        let t1 = vec![
            split(1, 0.0, 1, 2),
            TreeNode::Leaf(10.0),
            TreeNode::Leaf(20.0),
        ];
        let f = Forest::new(
            spec(2, Sum::F64, Link::Identity),
            vec![(t0.clone(), 0), (t1.clone(), 1), (t0, 1)],
        )
        .expect("a valid forest");
        let x = [0.0, -1.0, 5.0, 5.0, f32::NAN, f32::NAN];
        let m = f.margins(&x, 3).expect("a valid forest");
        assert_eq!(m, vec![1.5, 11.5, 2.5, 22.5, 1.5, 11.5]);
        let p = Forest::new(
            spec(1, Sum::F32, Link::Sigmoid { scale: 1.0 }),
            vec![(vec![TreeNode::Leaf(-0.5)], 0)],
        )
        .expect("a valid forest");
        assert_eq!(
            p.predict(&[0.0, 0.0], 1).expect("a valid forest"),
            vec![0.5]
        );
    }

    #[test]
    fn le_thresholds_take_every_f32_the_same_way() {
        for t in [
            0.1f64, -0.1, 1.0, 0.0, -0.0, 1e-40, 3.4e38, 1e300, -1e300, 2.5,
        ] {
            let s = le_threshold(t);
            let f = t as f32;
            for x in [
                f.next_down(),
                f,
                f.next_up(),
                f32::INFINITY,
                f32::NEG_INFINITY,
            ] {
                assert_eq!(f64::from(x) <= t, x < s, "x {x} t {t}");
            }
        }
    }

    #[test]
    fn hostile_trees_are_refused() {
        let cycle = vec![split(0, 1.0, 0, 1), TreeNode::Leaf(1.0)];
        let beyond = vec![split(0, 1.0, 1, 7), TreeNode::Leaf(1.0)];
        let feature = vec![
            split(9, 1.0, 1, 2),
            TreeNode::Leaf(1.0),
            TreeNode::Leaf(1.0),
        ];
        let nan = vec![TreeNode::Leaf(f64::NAN)];
        for (t, why) in [
            (cycle, "child 0"),
            (beyond, "child 7"),
            (feature, "feature 9"),
            (nan, "NaN"),
            (vec![], "0 nodes"),
        ] {
            let e = Forest::new(spec(1, Sum::F64, Link::Identity), vec![(t, 0)])
                .expect_err("refused")
                .to_string();
            assert!(e.contains(why), "{e}");
        }
        let e = Forest::new(
            spec(1, Sum::F64, Link::Identity),
            vec![(vec![TreeNode::Leaf(1.0)], 3)],
        )
        .expect_err("refused")
        .to_string();
        assert!(e.contains("group 3"), "{e}");
    }
}
