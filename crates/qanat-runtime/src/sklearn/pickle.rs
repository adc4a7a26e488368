//! Python's pickle format read as data, never run: the opcodes of protocols 0–5 build
//! a graph of values in an arena, and what Python would have called — a class, a
//! `numpy` constructor — stays a symbol ([`Value::Global`]) with the arguments and
//! state the file gave it ([`Value::Object`]). Whoever reads the graph decides which
//! symbols it knows; nothing in a file can make this code import, call or allocate
//! beyond the file's own size (every opcode adds at most one value, and the largest
//! value is a copy of bytes the file holds).
//!
//! Refused with the reason: persistent ids and extension codes (they name objects
//! outside the file), out-of-band buffers (protocol 5 with a buffer callback), and a
//! file that is truncated or whose stack does not add up.

use std::collections::HashMap;

/// A value's index in the [`Pickle`]'s arena.
pub type Id = usize;

/// A value the file built.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64` (kept as its little-endian two's complement bytes).
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    /// `module.name`, as `GLOBAL`/`STACK_GLOBAL` named it: never imported.
    Global {
        module: String,
        name: String,
    },
    /// What calling `callable(*args)` (`REDUCE`, `NEWOBJ`, `OBJ`, `INST`) would have
    /// made, with the state `BUILD` gave it and any items appended or set on it.
    Object {
        callable: Id,
        args: Id,
        state: Option<Id>,
        items: Vec<Id>,
        entries: Vec<(Id, Id)>,
    },
}

/// An object's callable (`module.name` when a global), arguments and state.
pub type ObjectParts<'a> = (Option<(&'a str, &'a str)>, Id, Option<Id>);

/// A read pickle: its values and the one it stopped at.
#[derive(Debug)]
pub struct Pickle {
    values: Vec<Value>,
    pub root: Id,
}

/// Why a file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickleError(pub String);

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a readable pickle: {}", self.0)
    }
}

fn bad<T>(why: impl Into<String>) -> Result<T, PickleError> {
    Err(PickleError(why.into()))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        match self.at.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            _ => bad(format!("it ends inside an opcode at byte {}", self.at)),
        }
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// A length that must fit in what is left of the file.
    fn len(&mut self, width: usize) -> Result<usize, PickleError> {
        let n = match width {
            1 => u64::from(self.u8()?),
            4 => u64::from(u32::from_le_bytes(self.le()?)),
            _ => u64::from_le_bytes(self.le()?),
        };
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            return bad(format!(
                "a length of {n} bytes at byte {} with {left} left",
                self.at
            ));
        }
        Ok(n as usize)
    }

    /// A text line (protocol 0), without its newline.
    fn line_bytes(&mut self) -> Result<&'a [u8], PickleError> {
        let rest = &self.bytes[self.at..];
        let Some(end) = rest.iter().position(|b| *b == b'\n') else {
            return bad("a text argument with no end of line");
        };
        self.at += end + 1;
        Ok(&rest[..end])
    }

    fn line(&mut self) -> Result<&'a str, PickleError> {
        std::str::from_utf8(self.line_bytes()?)
            .or_else(|_| bad("a text argument that is not UTF-8"))
    }
}

/// The largest stack or mark depth: far beyond any real model (scikit-learn nests a
/// few levels), small enough that nothing reading the graph recurses far.
const MAX_DEPTH: usize = 100_000;

/// The most values (and memo entries) a file may build: a forest of thousands of
/// trees needs a few hundred thousand; a file of one-byte opcodes must not grow the
/// arena past a few hundred MiB.
const MAX_VALUES: usize = 1 << 22;

impl Pickle {
    /// Reads `bytes` as one pickle.
    pub fn read(bytes: &[u8]) -> Result<Pickle, PickleError> {
        let mut r = Reader { bytes, at: 0 };
        let mut values: Vec<Value> = Vec::new();
        let mut stack: Vec<Id> = Vec::new();
        let mut marks: Vec<usize> = Vec::new();
        let mut memo: HashMap<u64, Id> = HashMap::new();
        let push = |values: &mut Vec<Value>, stack: &mut Vec<Id>, v: Value| {
            values.push(v);
            stack.push(values.len() - 1);
        };
        loop {
            if stack.len() > MAX_DEPTH || marks.len() > MAX_DEPTH {
                return bad(format!("a stack deeper than {MAX_DEPTH}"));
            }
            if values.len() > MAX_VALUES || memo.len() > MAX_VALUES {
                return bad(format!("more than {MAX_VALUES} values"));
            }
            let at = r.at;
            let op = r.u8()?;
            let pop = |stack: &mut Vec<Id>| {
                stack.pop().ok_or_else(|| {
                    PickleError(format!("opcode {op:#04x} at byte {at} on an empty stack"))
                })
            };
            let pop_mark = |stack: &mut Vec<Id>, marks: &mut Vec<usize>| {
                let m = marks.pop().ok_or_else(|| {
                    PickleError(format!("opcode {op:#04x} at byte {at} with no mark"))
                })?;
                if m > stack.len() {
                    return bad(format!(
                        "opcode {op:#04x} at byte {at}: the stack fell below its mark"
                    ));
                }
                Ok(stack.split_off(m))
            };
            match op {
                b'.' => {
                    let root = pop(&mut stack)?;
                    return Ok(Pickle { values, root });
                }
                0x80 => {
                    let p = r.u8()?;
                    if p > 5 {
                        return bad(format!("protocol {p}"));
                    }
                }
                0x95 => {
                    // FRAME: a length hint.
                    r.take(8)?;
                }
                b'(' => marks.push(stack.len()),
                b'0' => {
                    pop(&mut stack)?;
                }
                b'1' => {
                    pop_mark(&mut stack, &mut marks)?;
                }
                b'2' => {
                    let top = *stack
                        .last()
                        .ok_or_else(|| PickleError("DUP on an empty stack".into()))?;
                    stack.push(top);
                }
                b'N' => push(&mut values, &mut stack, Value::None),
                0x88 => push(&mut values, &mut stack, Value::Bool(true)),
                0x89 => push(&mut values, &mut stack, Value::Bool(false)),
                b'J' => push(
                    &mut values,
                    &mut stack,
                    Value::Int(i64::from(i32::from_le_bytes(r.le()?))),
                ),
                b'K' => push(&mut values, &mut stack, Value::Int(i64::from(r.u8()?))),
                b'M' => push(
                    &mut values,
                    &mut stack,
                    Value::Int(i64::from(u16::from_le_bytes(r.le()?))),
                ),
                0x8a | 0x8b => {
                    let n = r.len(if op == 0x8a { 1 } else { 4 })?;
                    let b = r.take(n)?;
                    push(&mut values, &mut stack, long(b));
                }
                b'I' | b'L' => {
                    let line = r.line()?;
                    let t = line.trim_end_matches('L');
                    let v = match t {
                        "00" if op == b'I' => Value::Bool(false),
                        "01" if op == b'I' => Value::Bool(true),
                        _ => match t.parse::<i64>() {
                            Ok(i) => Value::Int(i),
                            Err(_) => Value::BigInt(t.as_bytes().to_vec()),
                        },
                    };
                    push(&mut values, &mut stack, v);
                }
                b'F' => {
                    let v = r
                        .line()?
                        .trim()
                        .parse::<f64>()
                        .or_else(|_| bad(format!("FLOAT at byte {at} is not a number")))?;
                    push(&mut values, &mut stack, Value::Float(v));
                }
                b'G' => push(
                    &mut values,
                    &mut stack,
                    Value::Float(f64::from_be_bytes(r.le()?)),
                ),
                b'X' | 0x8c | 0x8d => {
                    let n = r.len(match op {
                        0x8c => 1,
                        b'X' => 4,
                        _ => 8,
                    })?;
                    let s = std::str::from_utf8(r.take(n)?)
                        .or_else(|_| bad(format!("a string at byte {at} that is not UTF-8")))?;
                    push(&mut values, &mut stack, Value::Str(s.to_string()));
                }
                b'V' => {
                    // raw-unicode-escape: Latin-1 bytes and `\u` escapes.
                    let latin1: String = r.line_bytes()?.iter().map(|b| char::from(*b)).collect();
                    let s = unescape_unicode(&latin1);
                    push(&mut values, &mut stack, Value::Str(s));
                }
                b'S' => {
                    let s = r.line()?.trim();
                    let inner = s
                        .strip_prefix('\'')
                        .and_then(|s| s.strip_suffix('\''))
                        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
                        .ok_or_else(|| PickleError(format!("STRING at byte {at} is not quoted")))?;
                    push(&mut values, &mut stack, Value::Bytes(unescape_bytes(inner)));
                }
                b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => {
                    let n = r.len(match op {
                        b'U' | b'C' => 1,
                        b'T' | b'B' => 4,
                        _ => 8,
                    })?;
                    let b = r.take(n)?.to_vec();
                    push(&mut values, &mut stack, Value::Bytes(b));
                }
                0x98 => {
                    // READONLY_BUFFER: the top stays what it is.
                    if stack.is_empty() {
                        return bad("READONLY_BUFFER on an empty stack");
                    }
                }
                0x97 => {
                    return bad("it keeps data in out-of-band buffers (pickle protocol 5 with a buffer callback), which are not in the file");
                }
                b'P' | b'Q' => return bad("it refers to persistent objects outside the file"),
                0x82..=0x84 => return bad("it uses the copyreg extension registry"),
                b')' => push(&mut values, &mut stack, Value::Tuple(Vec::new())),
                b']' => push(&mut values, &mut stack, Value::List(Vec::new())),
                b'}' => push(&mut values, &mut stack, Value::Dict(Vec::new())),
                0x8f => push(&mut values, &mut stack, Value::Set(Vec::new())),
                b't' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    push(&mut values, &mut stack, Value::Tuple(items));
                }
                b'l' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    push(&mut values, &mut stack, Value::List(items));
                }
                0x91 => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    push(&mut values, &mut stack, Value::Set(items));
                }
                b'd' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    let pairs = pairs(&items, at)?;
                    push(&mut values, &mut stack, Value::Dict(pairs));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if stack.len() < n {
                        return bad(format!(
                            "TUPLE{n} at byte {at} with {} on the stack",
                            stack.len()
                        ));
                    }
                    let items = stack.split_off(stack.len() - n);
                    push(&mut values, &mut stack, Value::Tuple(items));
                }
                b'a' => {
                    let v = pop(&mut stack)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("APPEND with no list".into()))?;
                    append(&mut values, target, vec![v], at)?;
                }
                b'e' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("APPENDS with no list".into()))?;
                    append(&mut values, target, items, at)?;
                }
                0x90 => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("ADDITEMS with no set".into()))?;
                    match &mut values[target] {
                        Value::Set(s) => s.extend(items),
                        _ => {
                            return bad(format!(
                                "ADDITEMS at byte {at} on a value that is not a set"
                            ))
                        }
                    }
                }
                b's' => {
                    let v = pop(&mut stack)?;
                    let k = pop(&mut stack)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("SETITEM with no dict".into()))?;
                    set_items(&mut values, target, vec![(k, v)], at)?;
                }
                b'u' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    let pairs = pairs(&items, at)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("SETITEMS with no dict".into()))?;
                    set_items(&mut values, target, pairs, at)?;
                }
                b'c' | b'i' => {
                    let module = r.line()?.to_string();
                    let name = r.line()?.to_string();
                    values.push(Value::Global { module, name });
                    let g = values.len() - 1;
                    if op == b'c' {
                        stack.push(g);
                    } else {
                        let args = pop_mark(&mut stack, &mut marks)?;
                        values.push(Value::Tuple(args));
                        let args = values.len() - 1;
                        push(&mut values, &mut stack, object(g, args));
                    }
                }
                0x93 => {
                    let name = pop(&mut stack)?;
                    let module = pop(&mut stack)?;
                    match (&values[module], &values[name]) {
                        (Value::Str(m), Value::Str(n)) => {
                            let v = Value::Global {
                                module: m.clone(),
                                name: n.clone(),
                            };
                            push(&mut values, &mut stack, v);
                        }
                        _ => {
                            return bad(format!(
                                "STACK_GLOBAL at byte {at} with names that are not strings"
                            ))
                        }
                    }
                }
                b'o' => {
                    let mut items = pop_mark(&mut stack, &mut marks)?;
                    if items.is_empty() {
                        return bad(format!("OBJ at byte {at} with no class"));
                    }
                    let class = items.remove(0);
                    values.push(Value::Tuple(items));
                    let args = values.len() - 1;
                    push(&mut values, &mut stack, object(class, args));
                }
                b'R' | 0x81 => {
                    let args = pop(&mut stack)?;
                    let callable = pop(&mut stack)?;
                    // Protocols before 3 write bytes as `_codecs.encode(text,
                    // 'latin1')`: decoded here as the bytes they are.
                    let v = latin1_bytes(&values, callable, args)
                        .map(Value::Bytes)
                        .unwrap_or_else(|| object(callable, args));
                    push(&mut values, &mut stack, v);
                }
                0x92 => {
                    // NEWOBJ_EX: cls, args, kwargs (kept beside the args).
                    let kwargs = pop(&mut stack)?;
                    let args = pop(&mut stack)?;
                    let callable = pop(&mut stack)?;
                    values.push(Value::Tuple(vec![args, kwargs]));
                    let both = values.len() - 1;
                    push(&mut values, &mut stack, object(callable, both));
                }
                b'b' => {
                    let state = pop(&mut stack)?;
                    let target = *stack
                        .last()
                        .ok_or_else(|| PickleError("BUILD with no object".into()))?;
                    match &mut values[target] {
                        Value::Object { state: s, .. } => *s = Some(state),
                        _ => {
                            return bad(format!(
                                "BUILD at byte {at} on a value that is not an object"
                            ))
                        }
                    }
                }
                b'p' | b'q' | b'r' | 0x94 => {
                    let key = match op {
                        b'p' => r
                            .line()?
                            .parse::<u64>()
                            .or_else(|_| bad(format!("PUT at byte {at} with no index")))?,
                        b'q' => u64::from(r.u8()?),
                        b'r' => u64::from(u32::from_le_bytes(r.le()?)),
                        _ => memo.len() as u64,
                    };
                    let top = *stack
                        .last()
                        .ok_or_else(|| PickleError("PUT on an empty stack".into()))?;
                    memo.insert(key, top);
                }
                b'g' | b'h' | b'j' => {
                    let key = match op {
                        b'g' => r
                            .line()?
                            .parse::<u64>()
                            .or_else(|_| bad(format!("GET at byte {at} with no index")))?,
                        b'h' => u64::from(r.u8()?),
                        _ => u64::from(u32::from_le_bytes(r.le()?)),
                    };
                    let v = *memo.get(&key).ok_or_else(|| {
                        PickleError(format!("GET at byte {at} of memo {key}, never put"))
                    })?;
                    stack.push(v);
                }
                other => return bad(format!("unknown opcode {other:#04x} at byte {at}")),
            }
        }
    }

    pub fn get(&self, id: Id) -> &Value {
        &self.values[id]
    }

    /// The `module.name` of a global, when `id` is one.
    pub fn global(&self, id: Id) -> Option<(&str, &str)> {
        match self.get(id) {
            Value::Global { module, name } => Some((module, name)),
            _ => None,
        }
    }

    /// An object's callable (as `module.name` when it is a global), arguments and
    /// state.
    pub fn object(&self, id: Id) -> Option<ObjectParts<'_>> {
        match self.get(id) {
            Value::Object {
                callable,
                args,
                state,
                ..
            } => Some((self.global(*callable), *args, *state)),
            _ => None,
        }
    }

    /// The items of a tuple or list.
    pub fn items(&self, id: Id) -> Option<&[Id]> {
        match self.get(id) {
            Value::Tuple(v) | Value::List(v) => Some(v),
            _ => None,
        }
    }

    pub fn str(&self, id: Id) -> Option<&str> {
        match self.get(id) {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn bytes(&self, id: Id) -> Option<&[u8]> {
        match self.get(id) {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    pub fn int(&self, id: Id) -> Option<i64> {
        match self.get(id) {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        }
    }

    pub fn float(&self, id: Id) -> Option<f64> {
        match self.get(id) {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }
    }

    pub fn is_none(&self, id: Id) -> bool {
        matches!(self.get(id), Value::None)
    }

    /// The value under string key `key` of a dict.
    pub fn lookup(&self, dict: Id, key: &str) -> Option<Id> {
        match self.get(dict) {
            Value::Dict(pairs) => pairs
                .iter()
                .rev()
                .find(|(k, _)| self.str(*k) == Some(key))
                .map(|(_, v)| *v),
            _ => None,
        }
    }

    /// The entries of a dict.
    pub fn entries(&self, dict: Id) -> Option<&[(Id, Id)]> {
        match self.get(dict) {
            Value::Dict(pairs) => Some(pairs),
            _ => None,
        }
    }
}

fn object(callable: Id, args: Id) -> Value {
    Value::Object {
        callable,
        args,
        state: None,
        items: Vec::new(),
        entries: Vec::new(),
    }
}

/// The bytes `_codecs.encode(text, 'latin1')` makes, when `callable(args)` is that.
fn latin1_bytes(values: &[Value], callable: Id, args: Id) -> Option<Vec<u8>> {
    let Value::Global { module, name } = &values[callable] else {
        return None;
    };
    let Value::Tuple(args) = &values[args] else {
        return None;
    };
    match (module.as_str(), name.as_str(), args.as_slice()) {
        ("_codecs", "encode", [text, codec]) => {
            let (Value::Str(text), Value::Str(codec)) = (&values[*text], &values[*codec]) else {
                return None;
            };
            if codec != "latin1" && codec != "latin-1" {
                return None;
            }
            text.chars()
                .map(|c| u8::try_from(u32::from(c)).ok())
                .collect()
        }
        _ => None,
    }
}

fn pairs(items: &[Id], at: usize) -> Result<Vec<(Id, Id)>, PickleError> {
    if !items.len().is_multiple_of(2) {
        return bad(format!("a dict at byte {at} with an odd number of items"));
    }
    Ok(items.chunks_exact(2).map(|p| (p[0], p[1])).collect())
}

fn append(values: &mut [Value], target: Id, new: Vec<Id>, at: usize) -> Result<(), PickleError> {
    match &mut values[target] {
        Value::List(l) => l.extend(new),
        Value::Object { items, .. } => items.extend(new),
        _ => return bad(format!("APPEND at byte {at} on a value that is not a list")),
    }
    Ok(())
}

fn set_items(
    values: &mut [Value],
    target: Id,
    new: Vec<(Id, Id)>,
    at: usize,
) -> Result<(), PickleError> {
    match &mut values[target] {
        Value::Dict(d) => d.extend(new),
        Value::Object { entries, .. } => entries.extend(new),
        _ => {
            return bad(format!(
                "SETITEM at byte {at} on a value that is not a dict"
            ))
        }
    }
    Ok(())
}

/// A little-endian two's complement integer.
fn long(b: &[u8]) -> Value {
    if b.is_empty() {
        return Value::Int(0);
    }
    if b.len() > 8 {
        return Value::BigInt(b.to_vec());
    }
    let fill = if b[b.len() - 1] & 0x80 != 0 { 0xff } else { 0 };
    let mut a = [fill; 8];
    a[..b.len()].copy_from_slice(b);
    Value::Int(i64::from_le_bytes(a))
}

/// Protocol 0's raw-unicode-escape: `\uXXXX` and `\UXXXXXXXX`, the rest as is.
fn unescape_unicode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let width = match chars.peek() {
                Some('u') => 4,
                Some('U') => 8,
                _ => 0,
            };
            if width > 0 {
                let hex: String = chars.clone().skip(1).take(width).collect();
                if let Some(ch) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    if hex.len() == width {
                        out.push(ch);
                        for _ in 0..=width {
                            chars.next();
                        }
                        continue;
                    }
                }
            }
        }
        out.push(c);
    }
    out
}

/// Protocol 0's quoted byte strings: Python's escapes.
fn unescape_bytes(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            let (v, step) = match b[i + 1] {
                b'n' => (b'\n', 2),
                b't' => (b'\t', 2),
                b'r' => (b'\r', 2),
                b'\\' => (b'\\', 2),
                b'\'' => (b'\'', 2),
                b'"' => (b'"', 2),
                b'x' if i + 4 <= b.len() => {
                    match std::str::from_utf8(&b[i + 2..i + 4])
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                    {
                        Some(v) => (v, 4),
                        None => (b'\\', 1),
                    }
                }
                _ => (b'\\', 1),
            };
            out.push(v);
            i += step;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_2_values_are_read() {
        // pickle.dumps({'a': [1, -2, 3.5, None, True], 'b': (b'xy', 'z')}, protocol=2)
        let bytes = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88eX\x01\x00\x00\x00bq\x03c_codecs\nencode\nq\x04X\x02\x00\x00\x00xyq\x05X\x06\x00\x00\x00latin1q\x06\x86q\x07Rq\x08X\x01\x00\x00\x00zq\t\x86q\nu.";
        let p = Pickle::read(bytes).expect("read");
        let a = p.lookup(p.root, "a").expect("a");
        let items = p.items(a).expect("list");
        assert_eq!(p.int(items[0]), Some(1));
        assert_eq!(p.int(items[1]), Some(-2));
        assert_eq!(p.float(items[2]), Some(3.5));
        assert!(p.is_none(items[3]));
        assert_eq!(p.get(items[4]), &Value::Bool(true));
        let b = p.items(p.lookup(p.root, "b").expect("b")).expect("tuple");
        // Protocol 2 writes bytes as `_codecs.encode(text, 'latin1')`: the bytes.
        assert_eq!(p.bytes(b[0]), Some(&b"xy"[..]));
        assert_eq!(p.str(b[1]), Some("z"));
    }

    #[test]
    fn protocol_0_text_opcodes_are_read() {
        // pickle.dumps([1, 'h\u00e9', 2.5, 12345678901234567890], protocol=0)
        let bytes = b"(lp0\nI1\naVh\xe9\np1\naF2.5\naL12345678901234567890L\na.";
        let p = Pickle::read(bytes).expect("read");
        let items = p.items(p.root).expect("list");
        assert_eq!(p.int(items[0]), Some(1));
        assert_eq!(p.str(items[1]), Some("h\u{e9}"));
        assert_eq!(p.float(items[2]), Some(2.5));
        assert!(matches!(p.get(items[3]), Value::BigInt(_)));
    }

    #[test]
    fn memo_references_share_one_value_and_build_reaches_all_of_them() {
        // An object memoized, fetched twice, then given state: both see it.
        let bytes = b"\x80\x04\x8c\x01m\x8c\x01C\x93)\x81\x94h\x00\x86}\x8c\x01kK\x07sb.";
        // STACK_GLOBAL m.C, NEWOBJ (), MEMOIZE 0, BINGET 0, TUPLE2 (obj, obj),
        // then BUILD on the tuple must fail: the tuple is not an object.
        let e = Pickle::read(bytes).expect_err("refused");
        assert!(e.0.contains("BUILD"), "{e}");
        let bytes = b"\x80\x04\x8c\x01m\x8c\x01C\x93)\x81\x94}\x8c\x01kK\x07sb0h\x00.";
        let p = Pickle::read(bytes).expect("read");
        let (callable, _, state) = p.object(p.root).expect("object");
        assert_eq!(callable, Some(("m", "C")));
        assert_eq!(
            state.and_then(|s| p.lookup(s, "k")).and_then(|v| p.int(v)),
            Some(7)
        );
    }

    #[test]
    fn hostile_and_broken_files_are_refused_with_the_reason() {
        let cases: [(&[u8], &str); 9] = [
            (b"", "ends inside"),
            (b"\x80\x05", "ends inside"),
            (b"\x80\x05\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", "length"),
            (b"\x80\x05h\x05.", "never put"),
            (b"\x80\x05Q.", "persistent"),
            (b"\x80\x05\x82\x01.", "extension"),
            (b"\x80\x05\x97.", "out-of-band"),
            (b"\x80\x05t.", "no mark"),
            (b"\x80\x05\xff", "unknown opcode"),
        ];
        for (bytes, why) in cases {
            let e = Pickle::read(bytes).expect_err("refused");
            assert!(e.0.contains(why), "{bytes:?}: {e}");
        }
        // A stack as deep as the file allows is refused past the limit, not a crash.
        let mut deep = vec![0x80, 0x05];
        deep.extend(std::iter::repeat_n(b'(', MAX_DEPTH + 2));
        deep.push(b'.');
        assert!(Pickle::read(&deep)
            .expect_err("refused")
            .0
            .contains("deeper"));
        // So are files of one-byte opcodes that would grow the arena or the memo
        // without bound.
        for op in [&b"N0"[..], &b"\x94"[..]] {
            let mut many = b"\x80\x05N".to_vec();
            many.extend(std::iter::repeat_n(op, MAX_VALUES + 2).flatten());
            many.push(b'.');
            let e = Pickle::read(&many).expect_err("refused");
            assert!(e.0.contains("values"), "{e}");
        }
    }

    #[test]
    fn longs_and_escapes_decode() {
        assert_eq!(long(&[0xff]), Value::Int(-1));
        assert_eq!(long(&[0x00, 0x01]), Value::Int(256));
        assert_eq!(long(&[]), Value::Int(0));
        assert!(matches!(long(&[1; 9]), Value::BigInt(_)));
        assert_eq!(unescape_bytes(r"a\x41\n\\"), b"aA\n\\".to_vec());
        assert_eq!(unescape_unicode(r"\u0041\U0001F600\q"), "A\u{1F600}\\q");
    }
}
