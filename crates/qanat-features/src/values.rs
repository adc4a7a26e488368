//! Feature values between their three forms: Arrow columns (sources, training sets),
//! JSON (the online store, `/push`, `/get-online-features`), and entity keys (one
//! canonical text per entity, the same whichever form it came from).

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType,
    UInt16Type, UInt32Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, TimeUnit};
use base64::Engine;
use serde_json::Value;

use crate::definitions::{FeatureDef, ValueType};

/// The JSON of row `i` of a column (null for a null).
pub(crate) fn json_at(col: &ArrayRef, i: usize) -> Result<Value, String> {
    if col.is_null(i) {
        return Ok(Value::Null);
    }
    Ok(match col.data_type() {
        DataType::Boolean => Value::Bool(col.as_boolean().value(i)),
        DataType::Int8 => Value::from(col.as_primitive::<Int8Type>().value(i)),
        DataType::Int16 => Value::from(col.as_primitive::<Int16Type>().value(i)),
        DataType::Int32 => Value::from(col.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => Value::from(col.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Value::from(col.as_primitive::<UInt8Type>().value(i)),
        DataType::UInt16 => Value::from(col.as_primitive::<UInt16Type>().value(i)),
        DataType::UInt32 => Value::from(col.as_primitive::<UInt32Type>().value(i)),
        // A float32 as the shortest decimal that reads back as it (0.65, not
        // 0.6499999761581421).
        DataType::Float32 => float(
            format!("{}", col.as_primitive::<Float32Type>().value(i))
                .parse()
                .unwrap_or(f64::NAN),
        ),
        DataType::Float64 => float(col.as_primitive::<Float64Type>().value(i)),
        DataType::Utf8 => Value::String(col.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Value::String(col.as_string::<i64>().value(i).to_string()),
        DataType::Binary => Value::String(
            base64::engine::general_purpose::STANDARD.encode(col.as_binary::<i32>().value(i)),
        ),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Value::String(rfc3339(
            col.as_primitive::<TimestampMicrosecondType>().value(i),
        )),
        other => return Err(format!("values of type {other} are not served")),
    })
}

fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// Microseconds as RFC 3339 in UTC, the way protobuf's JSON writes timestamps: no
/// fraction when it is zero, else 3, 6 digits.
pub(crate) fn rfc3339(micros: i64) -> String {
    let Some(t) = chrono::DateTime::from_timestamp_micros(micros) else {
        return "1970-01-01T00:00:00Z".into();
    };
    let sub = micros.rem_euclid(1_000_000);
    let format = if sub == 0 {
        chrono::SecondsFormat::Secs
    } else if sub % 1000 == 0 {
        chrono::SecondsFormat::Millis
    } else {
        chrono::SecondsFormat::Micros
    };
    t.to_rfc3339_opts(format, true)
}

/// A time sent as text: RFC 3339, or `YYYY-MM-DD HH:MM:SS[.f]` read as UTC (what
/// pandas writes).
pub(crate) fn parse_time(v: &Value) -> Result<i64, String> {
    let Some(s) = v.as_str() else {
        return Err(format!(
            "{v} is not a time: send RFC 3339 text, e.g. 2026-01-31T12:00:00Z"
        ));
    };
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_micros());
    }
    for f in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, f) {
            return Ok(t.and_utc().timestamp_micros());
        }
    }
    Err(format!(
        "'{s}' is not a time: send RFC 3339 text, e.g. 2026-01-31T12:00:00Z"
    ))
}

/// The canonical text of an entity key: its values, in the view's key order, as a
/// JSON array.
pub(crate) fn entity_key(values: &[Value]) -> String {
    serde_json::to_string(values).unwrap_or_default()
}

/// Writes row `i`'s entity key — the same text as [`entity_key`] of its values in
/// `cols`' order — into `buf` (cleared first), without building a JSON value for the
/// common key types. False, with `buf` unspecified, when a value is null (the row has
/// no entity).
pub(crate) fn write_entity_key_at(
    cols: &[&ArrayRef],
    i: usize,
    buf: &mut Vec<u8>,
) -> Result<bool, String> {
    buf.clear();
    buf.push(b'[');
    for (n, col) in cols.iter().enumerate() {
        if col.is_null(i) {
            return Ok(false);
        }
        if n > 0 {
            buf.push(b',');
        }
        let written = match col.data_type() {
            DataType::Int64 => {
                serde_json::to_writer(&mut *buf, &col.as_primitive::<Int64Type>().value(i))
            }
            DataType::Int32 => {
                serde_json::to_writer(&mut *buf, &col.as_primitive::<Int32Type>().value(i))
            }
            DataType::Utf8 => serde_json::to_writer(&mut *buf, col.as_string::<i32>().value(i)),
            DataType::LargeUtf8 => {
                serde_json::to_writer(&mut *buf, col.as_string::<i64>().value(i))
            }
            _ => serde_json::to_writer(&mut *buf, &json_at(col, i)?),
        };
        written.map_err(|e| format!("an entity key: {e}"))?;
    }
    buf.push(b']');
    Ok(true)
}

/// Checks a requested key value against its declared type; integers and strings are
/// not converted into each other.
pub(crate) fn key_value(v: &Value, t: ValueType) -> Result<Value, String> {
    let ok = match t {
        ValueType::Int32 | ValueType::Int64 => v.is_i64(),
        ValueType::String => v.is_string(),
        ValueType::Bool => v.is_boolean(),
        ValueType::Timestamp => return parse_time(v).map(Value::from),
        _ => false,
    };
    if ok {
        Ok(v.clone())
    } else {
        Err(format!("{v} is not a {t}"))
    }
}

/// Checks one pushed value against its feature's declaration: type (nothing is
/// converted: "0.5" is not a float), nullability, range, allowed values. Returns the
/// value as stored.
pub(crate) fn check_value(f: &FeatureDef, v: Option<&Value>) -> Result<Value, String> {
    let v = v.cloned().unwrap_or(Value::Null);
    if v.is_null() {
        return if f.nullable {
            Ok(Value::Null)
        } else {
            Err(format!(
                "{} is null, and it is declared not nullable",
                f.name
            ))
        };
    }
    let fits = match f.value_type {
        ValueType::Bool => v.is_boolean(),
        ValueType::Int32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        ValueType::Int64 => v.is_i64(),
        ValueType::Float32 | ValueType::Float64 => v.is_number(),
        ValueType::String => v.is_string(),
        ValueType::Bytes => v
            .as_str()
            .is_some_and(|s| base64::engine::general_purpose::STANDARD.decode(s).is_ok()),
        ValueType::Timestamp => parse_time(&v).is_ok(),
    };
    if !fits {
        return Err(format!("{} = {v} is not a {}", f.name, f.value_type));
    }
    if let (Some(r), Some(n)) = (&f.range, v.as_f64()) {
        if r.min.is_some_and(|lo| n < lo) || r.max.is_some_and(|hi| n > hi) {
            return Err(format!(
                "{} = {v} is outside its range [{}, {}]",
                f.name,
                r.min.map_or("-inf".into(), |x| x.to_string()),
                r.max.map_or("inf".into(), |x| x.to_string())
            ));
        }
    }
    if let Some(allowed) = &f.allowed {
        if !allowed.contains(&v) {
            return Err(format!("{} = {v} is not one of its allowed values", f.name));
        }
    }
    if f.value_type == ValueType::Timestamp {
        return parse_time(&v).map(|m| Value::String(rfc3339(m)));
    }
    Ok(v)
}

/// A column of checked JSON values (what [`check_value`] and [`key_value`] return) in
/// a declared type's Arrow form; the inverse of [`json_at`].
pub(crate) fn json_column(values: &[Value], t: ValueType) -> Result<ArrayRef, String> {
    use arrow_array::builder::{
        BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder,
        StringBuilder, TimestampMicrosecondBuilder,
    };
    use std::sync::Arc;
    let wrong = |v: &Value| format!("{v} is not a {t}");
    Ok(match t {
        ValueType::Bool => {
            let mut b = BooleanBuilder::with_capacity(values.len());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(v.as_bool().ok_or_else(|| wrong(v))?),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Int32 => {
            let mut b = Int32Builder::with_capacity(values.len());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(
                        v.as_i64()
                            .and_then(|n| i32::try_from(n).ok())
                            .ok_or_else(|| wrong(v))?,
                    ),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Int64 => {
            let mut b = Int64Builder::with_capacity(values.len());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(v.as_i64().ok_or_else(|| wrong(v))?),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Float32 => {
            let mut b = Float32Builder::with_capacity(values.len());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(v.as_f64().ok_or_else(|| wrong(v))? as f32),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Float64 => {
            let mut b = Float64Builder::with_capacity(values.len());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(v.as_f64().ok_or_else(|| wrong(v))?),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::String => {
            let mut b = StringBuilder::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(v.as_str().ok_or_else(|| wrong(v))?),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Bytes => {
            let mut b = BinaryBuilder::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    v => b.append_value(
                        v.as_str()
                            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                            .ok_or_else(|| wrong(v))?,
                    ),
                }
            }
            Arc::new(b.finish())
        }
        ValueType::Timestamp => {
            let mut b =
                TimestampMicrosecondBuilder::with_capacity(values.len()).with_timezone("UTC");
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    // Keys of this type are stored as microseconds, features as text.
                    Value::Number(n) => b.append_value(n.as_i64().ok_or_else(|| wrong(v))?),
                    v => b.append_value(parse_time(v)?),
                }
            }
            Arc::new(b.finish())
        }
    })
}

/// The text a value is pseudonymized from (the same for a value read from a table and
/// from JSON).
pub(crate) fn plain_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_protobuf_json_does() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_500_000), "1970-01-01T00:00:01.500Z");
        assert_eq!(rfc3339(1_000_001), "1970-01-01T00:00:01.000001Z");
        assert_eq!(
            parse_time(&Value::from("2026-01-01 10:00:00")),
            Ok(1_767_261_600_000_000)
        );
        assert!(parse_time(&Value::from("yesterday")).is_err());
    }

    #[test]
    fn pushed_values_are_checked_not_converted() {
        let f: FeatureDef = serde_json::from_value(serde_json::json!({
            "name": "rate", "type": "float32", "nullable": false, "range": {"min": 0, "max": 1}
        }))
        .expect("feature");
        assert_eq!(
            check_value(&f, Some(&Value::from(0.5))),
            Ok(Value::from(0.5))
        );
        assert!(check_value(&f, Some(&Value::from("0.5")))
            .expect_err("refused")
            .contains("is not a float32"));
        assert!(check_value(&f, Some(&Value::from(2)))
            .expect_err("refused")
            .contains("outside its range"));
        assert!(check_value(&f, None)
            .expect_err("refused")
            .contains("not nullable"));
        assert!(key_value(&Value::from("1001"), ValueType::Int64).is_err());
    }

    #[test]
    fn checked_values_become_columns_and_read_back_the_same() {
        let cases = [
            (ValueType::Int64, vec![Value::from(7), Value::Null]),
            (ValueType::Float32, vec![Value::from(0.65), Value::Null]),
            (ValueType::String, vec![Value::from("dxb"), Value::Null]),
            (ValueType::Bool, vec![Value::from(true), Value::Null]),
            (
                ValueType::Timestamp,
                vec![Value::from("2026-01-01T10:00:00Z"), Value::Null],
            ),
        ];
        for (t, values) in cases {
            let col = json_column(&values, t).expect("column");
            let back: Vec<Value> = (0..values.len())
                .map(|i| json_at(&col, i).expect("json"))
                .collect();
            assert_eq!(back, values, "{t}");
        }
        assert!(json_column(&[Value::from("x")], ValueType::Int64).is_err());
    }

    #[test]
    fn entity_keys_written_in_place_are_those_of_the_json_values() {
        use arrow_array::{BooleanArray, Int32Array, Int64Array, LargeStringArray, StringArray};
        use std::sync::Arc;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![
                Some(i64::MIN),
                Some(-1),
                Some(0),
                None,
                Some(i64::MAX),
            ])),
            Arc::new(Int32Array::from(vec![
                Some(7),
                Some(i32::MIN),
                None,
                Some(3),
                Some(0),
            ])),
            Arc::new(StringArray::from(vec![
                Some("dxb"),
                Some("qu\"ote\\ \u{1} \u{e9}"),
                Some(""),
                Some("x"),
                None,
            ])),
            Arc::new(LargeStringArray::from(vec![
                Some("a\nb"),
                Some("\u{1F600}"),
                Some("z"),
                Some("y"),
                Some("w"),
            ])),
            Arc::new(BooleanArray::from(vec![
                Some(true),
                Some(false),
                Some(true),
                None,
                Some(false),
            ])),
            json_column(
                &[
                    Value::from("2026-01-01T10:00:00Z"),
                    Value::from("2026-01-01T10:00:00.5Z"),
                    Value::from("1970-01-01T00:00:00Z"),
                    Value::from("2026-01-01T10:00:00Z"),
                    Value::Null,
                ],
                ValueType::Timestamp,
            )
            .expect("column"),
        ];
        let mut buf = Vec::new();
        // Every pair of columns, in both orders, and each alone: the same text as the
        // JSON values', or no key where one is null.
        for a in 0..cols.len() {
            for b in 0..=cols.len() {
                let picked: Vec<&ArrayRef> = std::iter::once(&cols[a])
                    .chain((b < cols.len()).then(|| &cols[b]))
                    .collect();
                for i in 0..5 {
                    let values: Vec<Value> = picked
                        .iter()
                        .map(|c| json_at(c, i).expect("json"))
                        .collect();
                    let written = write_entity_key_at(&picked, i, &mut buf).expect("key");
                    if values.iter().any(Value::is_null) {
                        assert!(!written, "row {i} of columns {a}, {b}");
                    } else {
                        assert!(written, "row {i} of columns {a}, {b}");
                        assert_eq!(
                            String::from_utf8(buf.clone()).expect("utf-8"),
                            entity_key(&values),
                            "row {i} of columns {a}, {b}"
                        );
                    }
                }
            }
        }
    }
}
