//! Universal Binary JSON (the format of XGBoost's `.ubj` model files) read into a
//! [`serde_json::Value`], so one reader serves both of XGBoost's formats.
//!
//! Markers: `Z` null, `N` no-op, `T`/`F`, `i` `U` `I` `l` `L` integers (big-endian),
//! `d` `D` floats, `H` a number as text, `C` a character, `S` a string (its length an
//! integer, then UTF-8), `[` and `{` containers, optionally typed (`$` and a marker)
//! and counted (`#` and a count); uncounted ones end with `]` / `}`. The input is
//! untrusted: nesting is bounded, and no count is believed past the bytes left.

use serde_json::{Map, Number, Value};

/// The deepest nesting read (XGBoost's files nest about 8 deep).
const MAX_DEPTH: usize = 64;

pub(crate) fn parse(bytes: &[u8]) -> Result<Value, String> {
    let mut r = Reader { bytes, at: 0 };
    let v = r.value(0)?;
    Ok(v)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("UBJSON at byte {}: {what}", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.bytes.len() - self.at < n {
            return self.fail(&format!("{n} bytes wanted, the file ends"));
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn marker(&mut self) -> Result<u8, String> {
        loop {
            let m = self.take(1)?[0];
            if m != b'N' {
                return Ok(m);
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// An integer of marker `m`, if `m` is one.
    fn int(&mut self, m: u8) -> Result<Option<i64>, String> {
        Ok(Some(match m {
            b'i' => i64::from(i8::from_be_bytes(self.array()?)),
            b'U' => i64::from(self.take(1)?[0]),
            b'I' => i64::from(i16::from_be_bytes(self.array()?)),
            b'l' => i64::from(i32::from_be_bytes(self.array()?)),
            b'L' => i64::from_be_bytes(self.array()?),
            _ => return Ok(None),
        }))
    }

    /// A length or count: an integer, not negative.
    fn length(&mut self) -> Result<usize, String> {
        let m = self.marker()?;
        match self.int(m)? {
            Some(n) if n >= 0 => usize::try_from(n).or_else(|_| self.fail("a length too large")),
            Some(n) => self.fail(&format!("a negative length {n}")),
            None => self.fail(&format!("a length of type '{}'", char::from(m))),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.length()?;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).or_else(|_| self.fail("a string that is not UTF-8"))
    }

    /// The value of marker `m`.
    fn typed(&mut self, m: u8, depth: usize) -> Result<Value, String> {
        if let Some(i) = self.int(m)? {
            return Ok(Value::from(i));
        }
        Ok(match m {
            b'Z' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'd' => float(f64::from(f32::from_be_bytes(self.array()?))),
            b'D' => float(f64::from_be_bytes(self.array()?)),
            b'H' => {
                let s = self.string()?;
                match s.parse::<f64>() {
                    Ok(f) => float(f),
                    Err(_) => return self.fail(&format!("a high-precision number '{s}'")),
                }
            }
            b'C' => Value::String(char::from(self.take(1)?[0]).to_string()),
            b'S' => Value::String(self.string()?),
            b'[' => self.container(depth, false)?,
            b'{' => self.container(depth, true)?,
            other => return self.fail(&format!("an unknown marker '{}'", char::from(other))),
        })
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        let m = self.marker()?;
        self.typed(m, depth)
    }

    fn container(&mut self, depth: usize, object: bool) -> Result<Value, String> {
        if depth >= MAX_DEPTH {
            return self.fail("nesting deeper than 64");
        }
        let mut of: Option<u8> = None;
        if self.peek() == Some(b'$') {
            self.at += 1;
            let t = self.take(1)?[0];
            // A typed container of a payload-less type would hold any number of values
            // in a few bytes (XGBoost never writes one).
            if matches!(t, b'Z' | b'T' | b'F' | b'N') {
                return self.fail(&format!(
                    "a container typed '{}', whose values take no bytes",
                    char::from(t)
                ));
            }
            of = Some(t);
            if self.peek() != Some(b'#') {
                return self.fail("a typed container without a count");
            }
        }
        let mut count: Option<usize> = None;
        if self.peek() == Some(b'#') {
            self.at += 1;
            let n = self.length()?;
            // Each element takes at least a byte: a count past the end is a lie.
            if n > self.bytes.len() - self.at {
                return self.fail(&format!("a count of {n} past the end of the file"));
            }
            count = Some(n);
        }
        let item = |r: &mut Reader| -> Result<Value, String> {
            match of {
                Some(t) => r.typed(t, depth + 1),
                None => r.value(depth + 1),
            }
        };
        let end = if object { b'}' } else { b']' };
        let done = |r: &mut Reader, i: usize| -> Result<bool, String> {
            Ok(match count {
                Some(n) => i >= n,
                None => {
                    while r.peek() == Some(b'N') {
                        r.at += 1;
                    }
                    if r.peek() == Some(end) {
                        r.at += 1;
                        true
                    } else {
                        false
                    }
                }
            })
        };
        let mut i = 0;
        if object {
            let mut map = Map::new();
            while !done(self, i)? {
                let key = self.string()?;
                let v = item(self)?;
                map.insert(key, v);
                i += 1;
            }
            Ok(Value::Object(map))
        } else {
            let mut items = Vec::with_capacity(count.unwrap_or(0).min(1 << 20));
            while !done(self, i)? {
                items.push(item(self)?);
                i += 1;
            }
            Ok(Value::Array(items))
        }
    }
}

/// A float as JSON: non-finite values (which JSON cannot hold) as null.
fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_typed_counted_and_open_containers() {
        // {"a": [1.5f32, 2.5f32] (typed, counted), "b": "hi", "c": [T, Z, i-3] (open)}
        let mut b = vec![b'{', b'i', 1, b'a', b'[', b'$', b'd', b'#', b'i', 2];
        b.extend(1.5f32.to_be_bytes());
        b.extend(2.5f32.to_be_bytes());
        b.extend([b'i', 1, b'b', b'S', b'i', 2, b'h', b'i']);
        b.extend([b'i', 1, b'c', b'[', b'T', b'Z', b'i', 0xfd, b']']);
        b.push(b'}');
        let v = parse(&b).expect("valid UBJSON");
        assert_eq!(
            v,
            serde_json::json!({"a": [1.5, 2.5], "b": "hi", "c": [true, null, -3]})
        );
    }

    #[test]
    fn hostile_files_are_refused() {
        for (bytes, why) in [
            (
                vec![b'[', b'$', b'd', b'#', b'l', 0x7f, 0, 0, 0],
                "past the end",
            ),
            (vec![b'S', b'i', 0xff], "negative length"),
            (vec![b'['; 100], "deeper"),
            (vec![b'S', b'i', 5, b'a'], "the file ends"),
            (vec![b'X'], "unknown marker"),
            (
                vec![b'[', b'$', b'Z', b'#', b'l', 0x7f, 0, 0, 0],
                "take no bytes",
            ),
        ] {
            let e = parse(&bytes).expect_err("refused");
            assert!(e.contains(why), "{e}");
        }
    }
}
