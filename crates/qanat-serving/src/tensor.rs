//! A request tensor's elements, read one at a time from what the client sent: JSON
//! values (flat or nested), or raw little-endian bytes (Triton's binary tensor
//! extension and gRPC). Raw tensors stay as their bytes until a model's column or
//! matrix is built from them, so a tensor of single bytes is never one JSON value
//! (32 bytes and an allocation) per byte.

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

use crate::{Error, Result};

/// How a raw element is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    Bf16,
    F32,
    F64,
    /// Each element a 4-byte little-endian length, then that many bytes.
    Bytes,
}

impl Kind {
    fn of(name: &str, datatype: &str) -> Result<Kind> {
        Ok(match datatype {
            "BOOL" => Kind::Bool,
            "UINT8" => Kind::U8,
            "INT8" => Kind::I8,
            "UINT16" => Kind::U16,
            "INT16" => Kind::I16,
            "UINT32" => Kind::U32,
            "INT32" => Kind::I32,
            "UINT64" => Kind::U64,
            "INT64" => Kind::I64,
            "FP16" => Kind::F16,
            "BF16" => Kind::Bf16,
            "FP32" => Kind::F32,
            "FP64" => Kind::F64,
            "BYTES" => Kind::Bytes,
            other => {
                return Err(Error::Invalid(format!(
                    "input '{name}' has datatype {other}, which is not one of the protocol's"
                )))
            }
        })
    }

    /// Bytes an element takes (0: length-prefixed).
    fn width(self) -> usize {
        match self {
            Kind::Bool | Kind::U8 | Kind::I8 => 1,
            Kind::U16 | Kind::I16 | Kind::F16 | Kind::Bf16 => 2,
            Kind::U32 | Kind::I32 | Kind::F32 => 4,
            Kind::U64 | Kind::I64 | Kind::F64 => 8,
            Kind::Bytes => 0,
        }
    }

    fn decode(self, b: &[u8]) -> Elem<'_> {
        let le = |n: usize| {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(&b[..n]);
            a
        };
        let u16_ = || u16::from_le_bytes([b[0], b[1]]);
        match self {
            Kind::Bool => Elem::Bool(b[0] != 0),
            Kind::U8 => Elem::UInt(u64::from(b[0])),
            Kind::I8 => Elem::Int(i64::from(b[0] as i8)),
            Kind::U16 => Elem::UInt(u64::from(u16_())),
            Kind::I16 => Elem::Int(i64::from(u16_() as i16)),
            Kind::U32 => Elem::UInt(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            Kind::I32 => Elem::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            Kind::U64 => Elem::UInt(u64::from_le_bytes(le(8))),
            Kind::I64 => Elem::Int(i64::from_le_bytes(le(8))),
            Kind::F16 => Elem::Float(f64::from(half(u16_()))),
            // BF16: the top half of an f32.
            Kind::Bf16 => Elem::Float(f64::from(f32::from_bits(u32::from(u16_()) << 16))),
            Kind::F32 => Elem::Float(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            Kind::F64 => Elem::Float(f64::from_le_bytes(le(8))),
            Kind::Bytes => Elem::Text(String::from_utf8_lossy(b)),
        }
    }
}

/// IEEE half precision to f32.
pub(crate) fn half(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f32::from(h & 0x3ff);
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

/// A tensor's raw bytes, checked to be whole elements of its datatype.
#[derive(Debug, Clone)]
pub struct Raw {
    kind: Kind,
    bytes: Vec<u8>,
    count: usize,
}

impl Raw {
    /// `bytes` as the elements of input `name`'s `datatype`; refused when they are not
    /// whole elements (a cut BYTES length prefix or element, a partial number).
    pub fn new(name: &str, datatype: &str, bytes: Vec<u8>) -> Result<Raw> {
        let kind = Kind::of(name, datatype)?;
        let count = match kind.width() {
            0 => {
                let mut count = 0;
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let Some((len, after)) = rest.split_first_chunk::<4>() else {
                        return Err(Error::Invalid(format!(
                            "input '{name}': a BYTES element is cut short in its length prefix"
                        )));
                    };
                    let len = u32::from_le_bytes(*len) as usize;
                    if len > after.len() {
                        return Err(Error::Invalid(format!(
                            "input '{name}': a BYTES element of {len} bytes is cut short"
                        )));
                    }
                    rest = &after[len..];
                    count += 1;
                }
                count
            }
            w if bytes.len().is_multiple_of(w) => bytes.len() / w,
            _ => {
                return Err(Error::Invalid(format!(
                    "input '{name}': {} bytes are not whole {datatype} values",
                    bytes.len()
                )))
            }
        };
        Ok(Raw { kind, bytes, count })
    }

    /// The elements it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// One element of a request tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Elem<'a> {
    /// JSON `null`, or a JSON number too large for any of the number variants.
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// NaN stands for a missing value.
    Float(f64),
    Text(Cow<'a, str>),
    /// A JSON object where an element was expected.
    Other(&'a Value),
}

impl<'a> Elem<'a> {
    fn of_json(v: &'a Value) -> Elem<'a> {
        match v {
            Value::Null => Elem::Null,
            Value::Bool(b) => Elem::Bool(*b),
            Value::Number(n) => n
                .as_i64()
                .map(Elem::Int)
                .or_else(|| n.as_u64().map(Elem::UInt))
                .or_else(|| n.as_f64().map(Elem::Float))
                .unwrap_or(Elem::Null),
            Value::String(s) => Elem::Text(Cow::Borrowed(s)),
            other => Elem::Other(other),
        }
    }

    /// The element as a number, if it is one.
    pub fn number(&self) -> Option<f64> {
        match *self {
            Elem::Int(i) => Some(i as f64),
            Elem::UInt(u) => Some(u as f64),
            Elem::Float(x) => Some(x),
            _ => None,
        }
    }

    /// The element as the JSON value a client would have sent (NaN and infinities as
    /// `null`, since JSON has no number for them).
    pub fn to_json(&self) -> Value {
        match self {
            Elem::Null => Value::Null,
            Elem::Bool(b) => Value::from(*b),
            Elem::Int(i) => Value::from(*i),
            Elem::UInt(u) => Value::from(*u),
            Elem::Float(x) => Value::from(*x),
            Elem::Text(s) => Value::from(s.as_ref()),
            Elem::Other(v) => (*v).clone(),
        }
    }
}

impl fmt::Display for Elem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_json().fmt(f)
    }
}

/// The elements of a tensor, in row-major order.
pub struct Elements<'a>(Inner<'a>);

enum Inner<'a> {
    /// A flat array (or one value): walked in place.
    Flat(std::slice::Iter<'a, Value>),
    /// Nested arrays, flattened first.
    Json(std::vec::IntoIter<&'a Value>),
    Fixed(Kind, std::slice::ChunksExact<'a, u8>),
    Bytes(&'a [u8]),
}

impl<'a> Elements<'a> {
    pub(crate) fn of(data: &'a Value, raw: Option<&'a Raw>) -> Elements<'a> {
        match raw {
            Some(r) if r.kind == Kind::Bytes => Elements(Inner::Bytes(&r.bytes)),
            Some(r) => Elements(Inner::Fixed(r.kind, r.bytes.chunks_exact(r.kind.width()))),
            // The common case, walked where it lies: no list of references is made (a
            // request's every input is read this way two or three times).
            None => match data {
                Value::Array(items) if !items.iter().any(Value::is_array) => {
                    Elements(Inner::Flat(items.iter()))
                }
                Value::Array(_) => {
                    let mut flat = Vec::new();
                    flatten(data, &mut flat);
                    Elements(Inner::Json(flat.into_iter()))
                }
                one => Elements(Inner::Flat(std::slice::from_ref(one).iter())),
            },
        }
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        match &mut self.0 {
            Inner::Flat(it) => it.next().map(Elem::of_json),
            Inner::Json(it) => it.next().map(Elem::of_json),
            Inner::Fixed(kind, it) => it.next().map(|b| kind.decode(b)),
            Inner::Bytes(rest) => {
                // Whole elements: checked when the Raw was made.
                let (len, after) = rest.split_first_chunk::<4>()?;
                let len = u32::from_le_bytes(*len) as usize;
                let (text, next) = after.split_at(len.min(after.len()));
                *rest = next;
                Some(Kind::Bytes.decode(text))
            }
        }
    }
}

/// Flattens row-major `data` (flat or nested) into `out`.
pub(crate) fn flatten<'a>(data: &'a Value, out: &mut Vec<&'a Value>) {
    match data {
        Value::Array(items) => {
            for v in items {
                flatten(v, out);
            }
        }
        v => out.push(v),
    }
}

/// How many elements row-major JSON `data` (flat or nested) holds.
pub(crate) fn json_count(data: &Value) -> usize {
    match data {
        Value::Array(items) => items.iter().map(json_count).sum(),
        _ => 1,
    }
}

/// Elements of a JSON value (the shape the inference log and monitors read).
pub fn json_elements(data: &Value) -> Elements<'_> {
    Elements::of(data, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_and_json_give_the_same_elements() {
        let mut bytes = Vec::new();
        for x in [1.5f32, -2.0, f32::NAN] {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let raw = Raw::new("a", "FP32", bytes).expect("whole");
        assert_eq!(raw.len(), 3);
        let got: Vec<Value> = Elements::of(&Value::Null, Some(&raw))
            .map(|e| e.to_json())
            .collect();
        assert_eq!(got, vec![json!(1.5), json!(-2.0), Value::Null]);
        let json = json!([[1.5], [-2.0], [null]]);
        let got: Vec<Value> = json_elements(&json).map(|e| e.to_json()).collect();
        assert_eq!(json_count(&json), 3);
        assert_eq!(got, vec![json!(1.5), json!(-2.0), Value::Null]);

        let mut text = Vec::new();
        for s in ["hi", "", "né"] {
            text.extend_from_slice(&(s.len() as u32).to_le_bytes());
            text.extend_from_slice(s.as_bytes());
        }
        let raw = Raw::new("b", "BYTES", text).expect("whole");
        let got: Vec<String> = Elements::of(&Value::Null, Some(&raw))
            .map(|e| e.to_string())
            .collect();
        assert_eq!(got, vec!["\"hi\"", "\"\"", "\"né\""]);

        let raw = Raw::new("c", "INT8", vec![0xff, 3]).expect("whole");
        let got: Vec<Elem> = Elements::of(&Value::Null, Some(&raw)).collect();
        assert_eq!(got, vec![Elem::Int(-1), Elem::Int(3)]);
        let raw = Raw::new("d", "FP16", vec![0x00, 0x3c]).expect("whole");
        assert_eq!(
            Elements::of(&Value::Null, Some(&raw)).next(),
            Some(Elem::Float(1.0))
        );
    }

    #[test]
    fn json_elements_walked_in_place_are_those_flattening_gives() {
        for data in [
            json!([1, 2.5, null, "x", true, -3]),
            json!([[1], [2.5]]),
            json!([[1, [2]], 3, []]),
            json!(7),
            json!(null),
            json!([]),
            json!([[]]),
            json!({"a": 1}),
            json!([{"a": 1}, 18446744073709551615u64]),
        ] {
            let mut flat = Vec::new();
            flatten(&data, &mut flat);
            let want: Vec<Elem> = flat.into_iter().map(Elem::of_json).collect();
            assert_eq!(json_elements(&data).collect::<Vec<_>>(), want, "{data}");
            assert_eq!(json_count(&data), want.len(), "{data}");
        }
    }

    #[test]
    fn partial_elements_are_refused() {
        let e = Raw::new("a", "FP32", vec![0; 7]).expect_err("7 bytes");
        assert!(e.to_string().contains("not whole FP32"), "{e}");
        let e = Raw::new("b", "BYTES", vec![5, 0, 0, 0, b'x']).expect_err("cut");
        assert!(e.to_string().contains("cut short"), "{e}");
        let e = Raw::new("b", "BYTES", vec![5, 0]).expect_err("cut prefix");
        assert!(e.to_string().contains("length prefix"), "{e}");
        let e = Raw::new("c", "FP8", vec![]).expect_err("no such type");
        assert!(e.to_string().contains("not one of the protocol's"), "{e}");
    }

    #[test]
    fn half_precision() {
        assert_eq!(half(0x3c00), 1.0);
        assert_eq!(half(0xc000), -2.0);
        assert!(half(0x7e00).is_nan());
        assert_eq!(half(0x7c00), f32::INFINITY);
    }
}
