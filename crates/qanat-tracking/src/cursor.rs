//! Page tokens of a runs search. A token says where the next page starts: after the
//! sort key of the last row shown (a keyset), so that reading page 2,000 costs what
//! page 1 does; no row is skipped or shown twice while runs are added to the front.
//! Offset tokens (`{"offset": N}`, what earlier versions and the other searches hand
//! out) are still taken.
//!
//! A token is base64 of JSON: `{"in": "all"|"valued"|"nan"|"missing", "after": [...]}`,
//! one value per sort column: integers as numbers, floats and text as strings (a
//! float as its shortest exact decimal, so it is read back bit for bit), NULL as null.
//! It comes from the client, so it is read as hostile input: bounded in size, and
//! every value must have its column's kind.

use base64::Engine;

use crate::search::{KeyKind, KeyValue, Term};
use crate::{Error, Result};

/// The longest page token taken, in bytes (a sort key may hold a param or tag value).
pub(crate) const MAX_TOKEN: usize = 64 * 1024;

/// Which rows of a search a statement reads (see `store::Part`): a search ordered by a
/// metric first reads the runs with a value of it, then those whose value is NaN, then
/// those without one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Part {
    All,
    Valued,
    Nan,
    Missing,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::All => "all",
            Part::Valued => "valued",
            Part::Nan => "nan",
            Part::Missing => "missing",
        }
    }
}

/// Where a page starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cursor {
    /// The first page.
    Start,
    /// After this many rows (an offset token).
    Offset(i64),
    /// After the row with this sort key, in this part.
    After {
        part: Part,
        key: Vec<serde_json::Value>,
    },
}

fn invalid(t: &str) -> Error {
    let shown: String = t.chars().take(64).collect();
    Error::invalid(format!(
        "invalid page token '{shown}{}': pass the next_page_token of the previous page unchanged",
        if shown.len() < t.len() { "…" } else { "" }
    ))
}

impl Cursor {
    /// Reads a page token; an empty one is the first page.
    pub(crate) fn parse(token: Option<&str>) -> Result<Cursor> {
        let Some(t) = token.filter(|t| !t.is_empty()) else {
            return Ok(Cursor::Start);
        };
        if t.len() > MAX_TOKEN {
            return Err(Error::invalid(format!(
                "a page token is at most {MAX_TOKEN} bytes; this one is {}",
                t.len()
            )));
        }
        let v: serde_json::Value = base64::engine::general_purpose::STANDARD
            .decode(t)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| invalid(t))?;
        if let Some(o) = v.get("offset") {
            return o
                .as_i64()
                .filter(|o| *o >= 0)
                .map(Cursor::Offset)
                .ok_or_else(|| invalid(t));
        }
        let part = match v.get("in").and_then(|p| p.as_str()) {
            Some("all") => Part::All,
            Some("valued") => Part::Valued,
            Some("nan") => Part::Nan,
            Some("missing") => Part::Missing,
            _ => return Err(invalid(t)),
        };
        let key = v
            .get("after")
            .and_then(|a| a.as_array())
            .cloned()
            .ok_or_else(|| invalid(t))?;
        Ok(Cursor::After { part, key })
    }

    /// The token of the page after a row whose sort key is `key`.
    pub(crate) fn token(part: Part, key: &[KeyValue]) -> String {
        let after: Vec<serde_json::Value> = key
            .iter()
            .map(|v| match v {
                KeyValue::Int(i) => serde_json::Value::from(*i),
                KeyValue::Float(f) => serde_json::Value::from(format!("{f:?}")),
                KeyValue::Text(s) => serde_json::Value::from(s.as_str()),
                KeyValue::Null => serde_json::Value::Null,
            })
            .collect();
        let v = serde_json::json!({"in": part.name(), "after": after});
        base64::engine::general_purpose::STANDARD.encode(v.to_string())
    }
}

/// The refusal of a token made by a search with another order.
pub(crate) fn other_order() -> Error {
    Error::invalid(
        "this page token belongs to a search with another order: pass the token of the previous page of the same search",
    )
}

/// A token's sort key read against the columns it must fit: one value per column,
/// each of that column's kind (or null).
pub(crate) fn key_values(key: &[serde_json::Value], terms: &[Term]) -> Result<Vec<KeyValue>> {
    if key.len() != terms.len() {
        return Err(other_order());
    }
    key.iter()
        .zip(terms)
        .map(|(v, t)| {
            if v.is_null() {
                return Ok(KeyValue::Null);
            }
            match t.kind {
                KeyKind::Int => v.as_i64().map(KeyValue::Int),
                KeyKind::Float => v
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(KeyValue::Float),
                KeyKind::Text => v.as_str().map(|s| KeyValue::Text(s.to_string())),
            }
            .ok_or_else(other_order)
        })
        .collect()
}

/// The SELECT list entries that return a row's sort key (`k0`, `k1`, …).
pub(crate) fn key_columns(terms: &[Term]) -> String {
    terms
        .iter()
        .enumerate()
        .map(|(i, t)| format!(", {} AS k{i}", t.expr))
        .collect()
}

/// A row's sort key, read from the columns [`key_columns`] added.
pub(crate) fn row_key(row: &sqlx::any::AnyRow, terms: &[Term]) -> Result<Vec<KeyValue>> {
    use sqlx::Row;
    terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let col = format!("k{i}");
            Ok(match t.kind {
                KeyKind::Int => row
                    .try_get::<Option<i64>, _>(col.as_str())?
                    .map_or(KeyValue::Null, KeyValue::Int),
                // SQLite may hand back a whole float as an integer.
                KeyKind::Float => match row.try_get::<Option<f64>, _>(col.as_str()) {
                    Ok(v) => v.map_or(KeyValue::Null, KeyValue::Float),
                    Err(_) => row
                        .try_get::<Option<i64>, _>(col.as_str())?
                        .map_or(KeyValue::Null, |i| KeyValue::Float(i as f64)),
                },
                KeyKind::Text => row
                    .try_get::<Option<String>, _>(col.as_str())?
                    .map_or(KeyValue::Null, KeyValue::Text),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(kind: KeyKind) -> Term {
        Term {
            expr: "x".into(),
            kind,
            ascending: true,
        }
    }

    #[test]
    fn a_token_carries_its_key_exactly() {
        let key = vec![
            KeyValue::Int(0),
            KeyValue::Float(0.1 + 0.2),
            KeyValue::Float(f64::INFINITY),
            KeyValue::Float(-1e-308),
            KeyValue::Text("a \"quoted\" ünïcode".into()),
            KeyValue::Null,
            KeyValue::Int(i64::MIN),
        ];
        let terms = [
            KeyKind::Int,
            KeyKind::Float,
            KeyKind::Float,
            KeyKind::Float,
            KeyKind::Text,
            KeyKind::Text,
            KeyKind::Int,
        ]
        .map(term);
        let token = Cursor::token(Part::Valued, &key);
        let Cursor::After { part, key: raw } = Cursor::parse(Some(&token)).expect("parse") else {
            panic!("not a keyset token");
        };
        assert_eq!(part, Part::Valued);
        assert_eq!(key_values(&raw, &terms).expect("fits"), key);
        // Bit for bit, which serde_json's own float parsing does not promise.
        let KeyValue::Float(f) = key_values(&raw, &terms).expect("fits")[1] else {
            panic!("not a float");
        };
        assert_eq!(f.to_bits(), (0.1f64 + 0.2).to_bits());
    }

    #[test]
    fn tokens_that_do_not_fit_are_refused() {
        assert_eq!(Cursor::parse(None).expect("none"), Cursor::Start);
        assert_eq!(Cursor::parse(Some("")).expect("empty"), Cursor::Start);
        assert_eq!(
            Cursor::parse(Some(&crate::store::next_page_token(150))).expect("offset"),
            Cursor::Offset(150)
        );
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        for bad in [
            "not base64!".to_string(),
            b64("not json"),
            b64(r#"{"offset": -1}"#),
            b64(r#"{"offset": "3"}"#),
            b64(r#"{"in": "elsewhere", "after": []}"#),
            b64(r#"{"in": "all"}"#),
            "A".repeat(MAX_TOKEN + 4),
        ] {
            assert!(Cursor::parse(Some(&bad)).is_err(), "{bad:.80}");
        }
        let terms = [KeyKind::Int, KeyKind::Float].map(term);
        for after in [
            serde_json::json!([1]),
            serde_json::json!([1, "0.5", 2]),
            serde_json::json!(["1", "0.5"]),
            serde_json::json!([1, 0.5]),
            serde_json::json!([1, "half"]),
            serde_json::json!([1.5, "0.5"]),
        ] {
            let raw = after.as_array().expect("array").clone();
            assert!(key_values(&raw, &terms).is_err(), "{after}");
        }
    }
}
