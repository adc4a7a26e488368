//! `numpy` arrays and dtypes as a pickle describes them, read from its values: the
//! protocol 5 form (`numpy._core.numeric._frombuffer(buffer, dtype, shape, order)`),
//! the older one (`numpy._core.multiarray._reconstruct` then a `BUILD` with the shape,
//! dtype, order and raw bytes or objects) and scalars (`multiarray.scalar(dtype,
//! bytes)`). Every size is checked against the bytes the file holds.

use super::pickle::{Id, Pickle};

/// What went wrong reading an array: the message names the array.
pub type Result<T> = std::result::Result<T, String>;

/// `numpy` under either of its module names (`numpy.core` before 2.0).
fn numpy_module(module: &str, sub: &str) -> bool {
    module
        .strip_prefix("numpy.core.")
        .or_else(|| module.strip_prefix("numpy._core."))
        == Some(sub)
}

/// A dtype: its kind (`f`, `i`, `u`, `b`, `O`, `U`, `S`, `V`), item size, byte order
/// and, for a structured dtype, its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct DType {
    pub kind: char,
    pub size: usize,
    pub big_endian: bool,
    pub fields: Vec<(String, DType, usize)>,
}

impl DType {
    /// The dtype object `id`: `numpy.dtype(str, align, copy)` with its `BUILD` state.
    pub fn read(p: &Pickle, id: Id) -> Result<DType> {
        let Some((Some(("numpy", "dtype")), args, state)) = p.object(id) else {
            return Err("a dtype that is not numpy.dtype(...)".into());
        };
        let spec = p
            .items(args)
            .and_then(|a| a.first())
            .and_then(|s| p.str(*s))
            .ok_or("a dtype with no type string")?;
        let mut chars = spec.chars();
        let kind = chars.next().ok_or("an empty dtype string")?;
        let digits = chars.as_str();
        let mut size = if digits.is_empty() {
            0
        } else {
            digits
                .parse::<usize>()
                .map_err(|_| format!("the dtype '{spec}'"))?
        };
        let mut big_endian = false;
        let mut fields = Vec::new();
        if let Some(state) = state.and_then(|s| p.items(s)) {
            if let Some(order) = state.get(1).and_then(|o| p.str(*o)) {
                big_endian = order == ">";
            }
            if let Some(elsize) = state.get(5).and_then(|e| p.int(*e)) {
                if elsize > 0 {
                    size = elsize as usize;
                }
            }
            if let Some(entries) = state.get(4).and_then(|f| p.entries(*f)) {
                for (name, spec) in entries {
                    let name = p
                        .str(*name)
                        .ok_or("a dtype field whose name is not a string")?;
                    let spec = p.items(*spec).ok_or("a dtype field with no type")?;
                    let (Some(dt), Some(offset)) =
                        (spec.first(), spec.get(1).and_then(|o| p.int(*o)))
                    else {
                        return Err(format!("the dtype field '{name}'"));
                    };
                    let dt = DType::read(p, *dt)?;
                    let offset =
                        usize::try_from(offset).map_err(|_| format!("the dtype field '{name}'"))?;
                    if offset.checked_add(dt.size).is_none_or(|end| end > size) {
                        return Err(format!("the dtype field '{name}' lies outside its record"));
                    }
                    fields.push((name.to_string(), dt, offset));
                }
            }
        }
        if !matches!(kind, 'f' | 'i' | 'u' | 'b' | 'O' | 'U' | 'S' | 'V') {
            return Err(format!("the dtype '{spec}'"));
        }
        if kind != 'O' && size == 0 {
            return Err(format!("the dtype '{spec}' of no size"));
        }
        Ok(DType {
            kind,
            size,
            big_endian,
            fields,
        })
    }

    fn field(&self, name: &str) -> Result<(&DType, usize)> {
        self.fields
            .iter()
            .find(|(n, ..)| n == name)
            .map(|(_, d, o)| (d, *o))
            .ok_or_else(|| format!("a record with no field '{name}'"))
    }
}

/// One number of `dtype` from `b` (its `size` bytes).
fn number(dtype: &DType, b: &[u8]) -> Option<f64> {
    let mut a = [0u8; 8];
    let n = dtype.size;
    if n > 8 || b.len() < n {
        return None;
    }
    a[..n].copy_from_slice(&b[..n]);
    if dtype.big_endian {
        a[..n].reverse();
    }
    Some(match (dtype.kind, n) {
        ('f', 8) => f64::from_le_bytes(a),
        ('f', 4) => f64::from(f32::from_le_bytes([a[0], a[1], a[2], a[3]])),
        ('i', 1) => f64::from(a[0] as i8),
        ('i', 2) => f64::from(i16::from_le_bytes([a[0], a[1]])),
        ('i', 4) => f64::from(i32::from_le_bytes([a[0], a[1], a[2], a[3]])),
        ('i', 8) => i64::from_le_bytes(a) as f64,
        ('u' | 'b', 1) => f64::from(a[0]),
        ('u', 2) => f64::from(u16::from_le_bytes([a[0], a[1]])),
        ('u', 4) => f64::from(u32::from_le_bytes([a[0], a[1], a[2], a[3]])),
        ('u', 8) => u64::from_le_bytes(a) as f64,
        _ => return None,
    })
}

/// An array's data: raw bytes, or the objects of an object array.
#[derive(Debug, Clone, Copy)]
pub enum Data<'p> {
    Raw(&'p [u8]),
    Objects(&'p [Id]),
}

/// An array a pickle holds.
#[derive(Debug, Clone)]
pub struct Array<'p> {
    pub dtype: DType,
    pub shape: Vec<usize>,
    fortran: bool,
    data: Data<'p>,
}

impl<'p> Array<'p> {
    /// The array (or numpy scalar) `id`; `None` when `id` is no array at all.
    pub fn read(p: &'p Pickle, id: Id) -> Option<Result<Array<'p>>> {
        let (Some((module, name)), args, state) = p.object(id)? else {
            return None;
        };
        let args = p.items(args)?;
        if numpy_module(module, "numeric") && name == "_frombuffer" {
            return Some((|| {
                let [buf, dtype, shape, order] = args else {
                    return Err("_frombuffer with other than 4 arguments".to_string());
                };
                let raw = p.bytes(*buf).ok_or("an array buffer that is not bytes")?;
                Array::checked(
                    DType::read(p, *dtype)?,
                    shape_of(p, *shape)?,
                    p.str(*order) == Some("F"),
                    Data::Raw(raw),
                )
            })());
        }
        if numpy_module(module, "multiarray") && name == "_reconstruct" {
            return Some((|| {
                let state = state
                    .and_then(|s| p.items(s))
                    .ok_or("an array with no state")?;
                let [_version, shape, dtype, fortran, raw] = state else {
                    return Err("an array state of other than 5 items".to_string());
                };
                let dtype = DType::read(p, *dtype)?;
                let data = match (p.bytes(*raw), p.items(*raw)) {
                    (Some(b), _) => Data::Raw(b),
                    (None, Some(objects)) if dtype.kind == 'O' => Data::Objects(objects),
                    _ => return Err("an array whose data is neither bytes nor objects".into()),
                };
                Array::checked(
                    dtype,
                    shape_of(p, *shape)?,
                    p.int(*fortran) == Some(1),
                    data,
                )
            })());
        }
        if numpy_module(module, "multiarray") && name == "scalar" {
            return Some((|| {
                let [dtype, raw, ..] = args else {
                    return Err("a numpy scalar with no value".to_string());
                };
                let raw = p.bytes(*raw).ok_or("a numpy scalar that is not bytes")?;
                Array::checked(DType::read(p, *dtype)?, Vec::new(), false, Data::Raw(raw))
            })());
        }
        None
    }

    fn checked(
        dtype: DType,
        shape: Vec<usize>,
        fortran: bool,
        data: Data<'p>,
    ) -> Result<Array<'p>> {
        let count = shape
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .ok_or("an array of more elements than fit in memory")?;
        let ok = match data {
            Data::Raw(b) => count.checked_mul(dtype.size) == Some(b.len()),
            Data::Objects(o) => o.len() == count,
        };
        if !ok {
            return Err(format!(
                "an array of shape {shape:?} whose data does not hold that many {} values",
                dtype.kind
            ));
        }
        Ok(Array {
            dtype,
            shape,
            fortran,
            data,
        })
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row-major position `i`'s index in the stored order.
    fn stored(&self, i: usize) -> usize {
        if !self.fortran || self.shape.len() < 2 {
            return i;
        }
        // Row-major coordinates, then column-major offset.
        let mut rest = i;
        let mut coords = vec![0usize; self.shape.len()];
        for (c, d) in coords.iter_mut().zip(&self.shape).rev() {
            *c = rest % d;
            rest /= d;
        }
        let mut offset = 0;
        let mut stride = 1;
        for (c, d) in coords.iter().zip(&self.shape) {
            offset += c * stride;
            stride *= d;
        }
        offset
    }

    /// The values as `f64`, row-major: numbers and booleans only.
    pub fn f64s(&self) -> Result<Vec<f64>> {
        let Data::Raw(raw) = self.data else {
            return Err("an object array where numbers were expected".into());
        };
        let s = self.dtype.size;
        (0..self.len())
            .map(|i| {
                let at = self.stored(i) * s;
                number(&self.dtype, &raw[at..at + s]).ok_or_else(|| {
                    format!(
                        "an array of {}{} where numbers were expected",
                        self.dtype.kind, s
                    )
                })
            })
            .collect()
    }

    /// Field `name` of every record of a structured array, as `f64`.
    pub fn field_f64s(&self, name: &str) -> Result<Vec<f64>> {
        let Data::Raw(raw) = self.data else {
            return Err("an object array where records were expected".into());
        };
        let (dt, offset) = self.dtype.field(name)?;
        let s = self.dtype.size;
        (0..self.len())
            .map(|i| {
                let at = self.stored(i) * s + offset;
                number(dt, &raw[at..at + dt.size])
                    .ok_or_else(|| format!("the field '{name}' is not numeric"))
            })
            .collect()
    }

    /// Whether a structured array's records have field `name`.
    pub fn has_field(&self, name: &str) -> bool {
        self.dtype.field(name).is_ok()
    }

    /// The objects of an object array, row-major.
    pub fn objects(&self) -> Result<Vec<Id>> {
        let Data::Objects(o) = self.data else {
            return Err("a numeric array where objects were expected".into());
        };
        Ok((0..self.len()).map(|i| o[self.stored(i)]).collect())
    }

    /// The strings of a `U` array.
    pub fn strings(&self) -> Result<Vec<String>> {
        let Data::Raw(raw) = self.data else {
            return Err("an object array where strings were expected".into());
        };
        if self.dtype.kind != 'U' || !self.dtype.size.is_multiple_of(4) {
            return Err("an array that is not of strings".into());
        }
        let s = self.dtype.size;
        (0..self.len())
            .map(|i| {
                let at = self.stored(i) * s;
                raw[at..at + s]
                    .chunks_exact(4)
                    .map(|c| {
                        let mut a = [c[0], c[1], c[2], c[3]];
                        if self.dtype.big_endian {
                            a.reverse();
                        }
                        u32::from_le_bytes(a)
                    })
                    .take_while(|c| *c != 0)
                    .map(|c| {
                        char::from_u32(c).ok_or_else(|| "a string that is not Unicode".to_string())
                    })
                    .collect()
            })
            .collect()
    }
}

/// A shape tuple.
fn shape_of(p: &Pickle, id: Id) -> Result<Vec<usize>> {
    p.items(id)
        .ok_or("an array shape that is not a tuple")?
        .iter()
        .map(|d| {
            p.int(*d)
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| "an array dimension that is not a count".to_string())
        })
        .collect()
}
