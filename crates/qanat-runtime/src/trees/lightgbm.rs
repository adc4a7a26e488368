//! LightGBM's text model files (`Booster.save_model`, the `model.lgb` of
//! `mlflow.lightgbm`, and the string a scikit-learn wrapper keeps) as a [`Forest`].
//!
//! A header of `key=value` lines, then one `Tree=N` block per tree, then
//! `end of trees`. In a tree, internal nodes are numbered from 0 and a child below 0
//! is leaf `!child`; a split sends `x <= threshold` left, and a missing value as its
//! `decision_type` says (bit 1: default left; bits 2–3: none — NaN counts as 0 —,
//! zero, or NaN). Leaf values already carry the shrinkage. Tree `t` adds to class
//! `t % num_tree_per_iteration`; `average_output` (random forests) divides by the
//! iterations. Sums are `f64`, as LightGBM's. Categorical splits and linear trees are
//! refused with the reason.

use std::collections::HashMap;

use super::{le_threshold, Forest, ForestSpec, Link, Missing, Split, Sum, TreeNode};
use crate::Error;

/// What a LightGBM model file holds besides its forest.
#[derive(Debug, Clone)]
pub struct LgbModel {
    pub forest: Forest,
    pub feature_names: Vec<String>,
    /// The objective line (`binary sigmoid:1`, `multiclass num_class:3`, …).
    pub objective: String,
}

/// Reads a text model file.
pub fn read(text: &str) -> Result<LgbModel, Error> {
    let bad = |why: String| Error::invalid(format!("not a LightGBM model file: {why}"));
    let mut lines = text.lines().map(str::trim_end);
    if lines.next() != Some("tree") {
        return Err(bad("it does not start with 'tree'".into()));
    }
    // The header, up to the first tree.
    let mut header: HashMap<&str, &str> = HashMap::new();
    let mut flags: Vec<&str> = Vec::new();
    let mut pending: Option<&str> = None;
    for line in lines.by_ref() {
        if line.starts_with("Tree=") {
            pending = Some(line);
            break;
        }
        if line == "end of trees" {
            break;
        }
        match line.split_once('=') {
            Some((k, v)) => {
                header.insert(k, v);
            }
            None if !line.is_empty() => flags.push(line),
            None => {}
        }
    }
    let int = |k: &str| -> Result<usize, Error> {
        header
            .get(k)
            .ok_or_else(|| bad(format!("no '{k}'")))?
            .trim()
            .parse::<usize>()
            .map_err(|_| bad(format!("'{k}' is not a count")))
    };
    let classes = int("num_class")?.max(1);
    let per_iteration = int("num_tree_per_iteration")?.max(1);
    let features = int("max_feature_idx")? + 1;
    if per_iteration != classes {
        return Err(bad(format!(
            "{per_iteration} trees per iteration for {classes} classes"
        )));
    }
    let objective = header.get("objective").copied().unwrap_or("regression");
    let link = link(objective)?;
    let average = flags.contains(&"average_output");
    let feature_names = header
        .get("feature_names")
        .map(|s| s.split(' ').map(String::from).collect())
        .unwrap_or_default();

    // The trees, each a block of `key=value` lines.
    let mut trees = Vec::new();
    let mut block: HashMap<&str, &str> = HashMap::new();
    let mut in_tree = pending.is_some();
    let finish = |block: &mut HashMap<&str, &str>, trees: &mut Vec<(Vec<TreeNode>, usize)>| {
        let i = trees.len();
        let t = read_tree(block, i)?;
        trees.push((t, i % per_iteration));
        block.clear();
        Ok::<(), Error>(())
    };
    for line in lines {
        if line.starts_with("Tree=") || line == "end of trees" {
            if in_tree {
                finish(&mut block, &mut trees)?;
            }
            in_tree = line.starts_with("Tree=");
            if !in_tree {
                break;
            }
            continue;
        }
        if in_tree {
            if let Some((k, v)) = line.split_once('=') {
                block.insert(k, v);
            }
        }
    }
    if in_tree && !block.is_empty() {
        finish(&mut block, &mut trees)?;
    }
    if trees.is_empty() {
        return Err(bad("it holds no trees".into()));
    }
    let iterations = trees.len().div_ceil(per_iteration);
    let forest = Forest::new(
        ForestSpec {
            features,
            groups: classes,
            base: vec![0.0; classes],
            divisor: if average { iterations as f64 } else { 1.0 },
            sum: Sum::F64,
            link,
        },
        trees,
    )?;
    Ok(LgbModel {
        forest,
        feature_names,
        objective: objective.to_string(),
    })
}

/// The link of an objective line: its name, then `key:value` parameters.
fn link(objective: &str) -> Result<Link, Error> {
    let mut parts = objective.split_whitespace();
    let name = parts.next().unwrap_or("regression");
    let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once(':')).collect();
    let sqrt = objective.split_whitespace().any(|p| p == "sqrt");
    let scale = params
        .get("sigmoid")
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(1.0);
    Ok(match name {
        "regression"
        | "regression_l2"
        | "l2"
        | "mean_squared_error"
        | "mse"
        | "l2_root"
        | "root_mean_squared_error"
        | "rmse"
        | "huber"
        | "fair"
        | "quantile"
        | "mape"
        | "regression_l1"
        | "l1"
        | "mean_absolute_error"
        | "mae"
        | "lambdarank"
        | "rank_xendcg" => {
            if sqrt {
                Link::SignedSquare
            } else {
                Link::Identity
            }
        }
        "binary" | "multiclassova" | "cross_entropy" | "xentropy" => Link::Sigmoid { scale },
        "multiclass" | "softmax" => Link::Softmax,
        "poisson" | "gamma" | "tweedie" => Link::Exp,
        "cross_entropy_lambda" | "xentlambda" => Link::Softplus,
        other => {
            return Err(Error::invalid(format!(
                "the LightGBM objective '{other}' is not served natively"
            )))
        }
    })
}

fn numbers<T: std::str::FromStr>(
    block: &HashMap<&str, &str>,
    key: &str,
    i: usize,
    n: usize,
) -> Result<Vec<T>, Error> {
    let v: Vec<T> = block
        .get(key)
        .ok_or_else(|| Error::invalid(format!("LightGBM tree {i} has no '{key}'")))?
        .split(' ')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<T>())
        .collect::<Result<_, _>>()
        .map_err(|_| Error::invalid(format!("LightGBM tree {i}'s '{key}' is not numbers")))?;
    if v.len() != n {
        return Err(Error::invalid(format!(
            "LightGBM tree {i}'s '{key}' has {} values, not {n}",
            v.len()
        )));
    }
    Ok(v)
}

fn read_tree(block: &HashMap<&str, &str>, i: usize) -> Result<Vec<TreeNode>, Error> {
    let leaves: usize = block
        .get("num_leaves")
        .and_then(|s| s.trim().parse().ok())
        .filter(|n| *n >= 1 && *n < 1 << 26)
        .ok_or_else(|| Error::invalid(format!("LightGBM tree {i} has no 'num_leaves'")))?;
    if block.get("is_linear").is_some_and(|v| v.trim() != "0") {
        return Err(Error::invalid(format!(
            "LightGBM tree {i} is a linear tree, which is not served natively"
        )));
    }
    let values: Vec<f64> = numbers(block, "leaf_value", i, leaves)?;
    if leaves == 1 {
        return Ok(vec![TreeNode::Leaf(values[0])]);
    }
    let internal = leaves - 1;
    let feature: Vec<usize> = numbers(block, "split_feature", i, internal)?;
    let threshold: Vec<f64> = numbers(block, "threshold", i, internal)?;
    let decision: Vec<u8> = numbers(block, "decision_type", i, internal)?;
    let left: Vec<i64> = numbers(block, "left_child", i, internal)?;
    let right: Vec<i64> = numbers(block, "right_child", i, internal)?;
    // Internal nodes first, then the leaves: leaf l is node `internal + l`.
    let child = |c: i64, node: usize| -> Result<usize, Error> {
        let at = if c >= 0 {
            c as usize
        } else {
            internal + (!c) as usize
        };
        if (c >= 0 && at >= internal) || (c < 0 && (!c) as usize >= leaves) {
            return Err(Error::invalid(format!(
                "LightGBM tree {i} node {node} has child {c}, beyond the tree"
            )));
        }
        Ok(at)
    };
    let mut nodes = Vec::with_capacity(internal + leaves);
    for n in 0..internal {
        let d = decision[n];
        if d & 1 != 0 {
            return Err(Error::invalid(format!(
                "LightGBM tree {i} has categorical splits, which are not served natively"
            )));
        }
        let default_left = d & 2 != 0;
        let t = threshold[n];
        let missing = match (d >> 2) & 3 {
            // None: NaN counts as 0.
            0 => Missing::Nan { left: 0.0 <= t },
            1 => Missing::ZeroOrNan { left: default_left },
            2 => Missing::Nan { left: default_left },
            other => {
                return Err(Error::invalid(format!(
                    "LightGBM tree {i} node {n} has missing type {other}"
                )))
            }
        };
        nodes.push(TreeNode::Split(Split {
            feature: feature[n],
            threshold: le_threshold(t),
            missing,
            left: child(left[n], n)?,
            right: child(right[n], n)?,
        }));
    }
    nodes.extend(values.into_iter().map(TreeNode::Leaf));
    Ok(nodes)
}
