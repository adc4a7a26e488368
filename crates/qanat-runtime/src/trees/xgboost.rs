//! XGBoost's model files (`save_model`, JSON or UBJSON — the `model.ubj`/`model.json`
//! of `mlflow.xgboost`) as a [`Forest`].
//!
//! The booster's trees (`gbtree`, or `dart` with each tree's weight), the objective's
//! link and its base score in margin space, and `tree_info` for each tree's output
//! group. A split sends `x < split_condition` left, NaN the `default_left` way; a
//! leaf's value is its `split_condition`. Sums are `f32`, tree by tree, as XGBoost's
//! CPU predictor keeps them. Categorical splits, vector leaves and linear boosters are
//! refused with the reason.

use serde_json::Value;

use super::{number, Forest, ForestSpec, Link, Missing, Split, Sum, TreeNode};
use crate::Error;

/// What an XGBoost model file holds besides its forest.
#[derive(Debug, Clone)]
pub struct XgbModel {
    pub forest: Forest,
    /// The feature names it was trained with, if any.
    pub feature_names: Vec<String>,
    /// The objective's name (`binary:logistic`, `reg:squarederror`, …).
    pub objective: String,
    /// The sklearn estimator type the wrapper recorded (`classifier`, `regressor`).
    pub estimator_type: Option<String>,
    /// The best iteration early stopping recorded, if any.
    pub best_iteration: Option<usize>,
    /// Trees per boosting iteration.
    pub trees_per_iteration: usize,
}

impl XgbModel {
    /// Keeps the trees up to the best iteration early stopping recorded (what the
    /// scikit-learn wrapper's `predict` uses).
    pub fn to_best_iteration(&mut self) {
        if let Some(b) = self.best_iteration {
            self.forest
                .truncate((b + 1).saturating_mul(self.trees_per_iteration));
        }
    }
}

/// Reads a model file: UBJSON when it starts with `{` followed by a UBJSON key
/// length marker, else JSON.
pub fn read(bytes: &[u8]) -> Result<XgbModel, Error> {
    let bad = |e: String| Error::invalid(format!("not an XGBoost model file: {e}"));
    let doc: Value = if bytes.first() == Some(&b'{')
        && matches!(bytes.get(1), Some(b'i' | b'U' | b'I' | b'l' | b'L' | b'}'))
    {
        super::ubjson::parse(bytes).map_err(bad)?
    } else {
        serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?
    };
    from_document(&doc)
}

fn field<'a>(v: &'a Value, path: &[&str]) -> Result<&'a Value, Error> {
    let mut at = v;
    for p in path {
        at = at.get(p).ok_or_else(|| {
            Error::invalid(format!("the XGBoost model has no '{}'", path.join(".")))
        })?;
    }
    Ok(at)
}

fn count(v: &Value, path: &[&str]) -> Result<usize, Error> {
    let n = number(field(v, path)?)
        .filter(|n| *n >= 0.0 && n.fract() == 0.0 && *n < 1e9)
        .ok_or_else(|| {
            Error::invalid(format!(
                "the XGBoost model's '{}' is not a count",
                path.join(".")
            ))
        })?;
    Ok(n as usize)
}

fn array<'a>(tree: &'a Value, name: &str, i: usize) -> Result<&'a [Value], Error> {
    tree.get(name)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| Error::invalid(format!("XGBoost tree {i} has no '{name}' array")))
}

/// How an objective's base score (a probability, a mean) becomes a margin.
type ToMargin = fn(f64) -> f64;

/// The link and the map from base score to margin of an objective.
fn objective(name: &str) -> Result<(Link, ToMargin), Error> {
    let identity: ToMargin = |b| b;
    let logit: ToMargin = |b| -(1.0 / b - 1.0).ln();
    let ln: ToMargin = f64::ln;
    Ok(match name {
        "reg:squarederror"
        | "reg:linear"
        | "reg:squaredlogerror"
        | "reg:pseudohubererror"
        | "reg:absoluteerror"
        | "reg:quantileerror"
        | "rank:pairwise"
        | "rank:ndcg"
        | "rank:map" => (Link::Identity, identity),
        "reg:logistic" | "binary:logistic" => (Link::Sigmoid { scale: 1.0 }, logit),
        "binary:logitraw" => (Link::Identity, identity),
        "binary:hinge" => (Link::Step, identity),
        "count:poisson" | "reg:gamma" | "reg:tweedie" | "survival:cox" | "survival:aft" => {
            (Link::Exp, ln)
        }
        "multi:softprob" => (Link::Softmax, identity),
        "multi:softmax" => (Link::ArgMax, identity),
        other => {
            return Err(Error::invalid(format!(
                "the XGBoost objective '{other}' is not served natively"
            )))
        }
    })
}

/// The base scores `"5E-1"`, `"[5E-1]"` or `"[1E-1,2E-1]"`.
fn base_scores(v: &Value) -> Result<Vec<f64>, Error> {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|p| {
            p.trim().parse::<f32>().map(f64::from).map_err(|_| {
                Error::invalid(format!(
                    "the XGBoost model's base score '{s}' is not a number"
                ))
            })
        })
        .collect()
}

fn from_document(doc: &Value) -> Result<XgbModel, Error> {
    let learner = field(doc, &["learner"])?;
    let objective_name = field(learner, &["objective", "name"])?
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (link, to_margin) = objective(&objective_name)?;
    let params = field(learner, &["learner_model_param"])?;
    let features = count(params, &["num_feature"])?;
    let classes = count(params, &["num_class"])?;
    let targets = params
        .get("num_target")
        .map(|_| count(params, &["num_target"]))
        .transpose()?
        .unwrap_or(1);
    let groups = classes.max(targets).max(1);
    let mut base = base_scores(field(params, &["base_score"])?)?;
    if base.len() == 1 && groups > 1 {
        base = vec![base[0]; groups];
    }
    if base.len() != groups {
        return Err(Error::invalid(format!(
            "the XGBoost model has {} base scores for {groups} outputs",
            base.len()
        )));
    }
    let base: Vec<f64> = base
        .into_iter()
        .map(|b| f64::from(to_margin(b) as f32))
        .collect();
    let booster = field(learner, &["gradient_booster"])?;
    let kind = field(booster, &["name"])?.as_str().unwrap_or_default();
    let (model, weights) = match kind {
        "gbtree" => (field(booster, &["model"])?, None),
        "dart" => {
            let w: Vec<f64> = field(booster, &["weight_drop"])?
                .as_array()
                .map(|a| a.iter().filter_map(number).collect())
                .unwrap_or_default();
            (field(booster, &["gbtree", "model"])?, Some(w))
        }
        other => {
            return Err(Error::invalid(format!(
                "the XGBoost booster '{other}' is not served natively (tree boosters are)"
            )))
        }
    };
    let trees = field(model, &["trees"])?
        .as_array()
        .ok_or_else(|| Error::invalid("the XGBoost model's 'trees' is not a list"))?;
    let info = field(model, &["tree_info"])?
        .as_array()
        .ok_or_else(|| Error::invalid("the XGBoost model's 'tree_info' is not a list"))?;
    if info.len() != trees.len() || weights.as_ref().is_some_and(|w| w.len() != trees.len()) {
        return Err(Error::invalid(format!(
            "the XGBoost model has {} trees, {} tree groups{}",
            trees.len(),
            info.len(),
            weights
                .as_ref()
                .map(|w| format!(" and {} tree weights", w.len()))
                .unwrap_or_default()
        )));
    }
    let parallel = model
        .get("gbtree_model_param")
        .and_then(|p| p.get("num_parallel_tree"))
        .and_then(number)
        .unwrap_or(1.0)
        .max(1.0) as usize;
    let mut read = Vec::with_capacity(trees.len());
    for (i, (tree, group)) in trees.iter().zip(info).enumerate() {
        let group = number(group)
            .filter(|g| *g >= 0.0 && g.fract() == 0.0)
            .ok_or_else(|| Error::invalid(format!("XGBoost tree {i} has no output group")))?
            as usize;
        let weight = weights.as_ref().map_or(1.0, |w| w[i]) as f32;
        read.push((read_tree(tree, i, weight)?, group));
    }
    let forest = Forest::new(
        ForestSpec {
            features,
            groups,
            base,
            divisor: 1.0,
            sum: Sum::F32,
            link,
        },
        read,
    )?;
    let attributes = learner.get("attributes");
    let estimator_type = attributes
        .and_then(|a| a.get("scikit_learn"))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| {
            v.get("_estimator_type")
                .and_then(Value::as_str)
                .map(String::from)
        });
    let best_iteration = attributes
        .and_then(|a| a.get("best_iteration"))
        .and_then(number)
        .filter(|b| *b >= 0.0)
        .map(|b| b as usize);
    let feature_names = learner
        .get("feature_names")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Ok(XgbModel {
        forest,
        feature_names,
        objective: objective_name,
        estimator_type,
        best_iteration,
        trees_per_iteration: parallel * groups,
    })
}

fn read_tree(tree: &Value, i: usize, weight: f32) -> Result<Vec<TreeNode>, Error> {
    if let Some(n) = tree
        .get("tree_param")
        .and_then(|p| p.get("size_leaf_vector"))
        .and_then(number)
    {
        if n > 1.0 {
            return Err(Error::invalid(format!(
                "XGBoost tree {i} has vector leaves (a multi-output tree), which are not served natively"
            )));
        }
    }
    if let Some(types) = tree.get("split_type").and_then(Value::as_array) {
        if types.iter().any(|t| number(t).is_some_and(|t| t != 0.0)) {
            return Err(Error::invalid(format!(
                "XGBoost tree {i} has categorical splits, which are not served natively"
            )));
        }
    }
    let left = array(tree, "left_children", i)?;
    let right = array(tree, "right_children", i)?;
    let feature = array(tree, "split_indices", i)?;
    let cond = array(tree, "split_conditions", i)?;
    let default_left = array(tree, "default_left", i)?;
    let n = left.len();
    if [right.len(), feature.len(), cond.len(), default_left.len()]
        .iter()
        .any(|l| *l != n)
    {
        return Err(Error::invalid(format!(
            "XGBoost tree {i}'s node arrays differ in length"
        )));
    }
    let bad = |what: &str, j: usize| Error::invalid(format!("XGBoost tree {i} node {j}: {what}"));
    let index = |v: &Value, j: usize| -> Result<i64, Error> {
        number(v)
            .filter(|x| x.fract() == 0.0 && x.abs() < 1e12)
            .map(|x| x as i64)
            .ok_or_else(|| bad("an index that is not an integer", j))
    };
    let mut nodes = Vec::with_capacity(n);
    for j in 0..n {
        let value = number(&cond[j]).ok_or_else(|| bad("no split condition", j))? as f32;
        let l = index(&left[j], j)?;
        if l == -1 {
            nodes.push(TreeNode::Leaf(f64::from(weight * value)));
            continue;
        }
        let r = index(&right[j], j)?;
        let f = index(&feature[j], j)?;
        if l < 0 || r < 0 || f < 0 {
            return Err(bad("a negative child or feature", j));
        }
        nodes.push(TreeNode::Split(Split {
            feature: f as usize,
            threshold: value,
            missing: Missing::Nan {
                left: number(&default_left[j]).is_some_and(|d| d != 0.0),
            },
            left: l as usize,
            right: r as usize,
        }));
    }
    Ok(nodes)
}
