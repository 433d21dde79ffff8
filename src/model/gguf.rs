//! Reading a GGUF file (llama.cpp's format, versions 2 and 3) from its bytes: the metadata, the
//! tensors' names, shapes and types, and where each tensor's data lies. The data stays where it
//! is; [`GgufFile::matrix`] makes a [`QuantMatrix`] over it.
//!
//! The layout (`ggml/src/gguf.cpp`), every number little-endian:
//!
//! ```text
//! "GGUF"  version: u32  tensor_count: u64  kv_count: u64
//! kv_count × { key: string  type: u32  value }
//! tensor_count × { name: string  n_dims: u32  ne: [u64; n_dims]  type: u32  offset: u64 }
//! padding to general.alignment (32 unless the metadata says)
//! data: each tensor at data start + offset (a multiple of the alignment)
//! ```
//!
//! A string is a `u64` length and that many UTF-8 bytes; an array a `u32` element type, a `u64`
//! count and the elements. A tensor's `ne[0]` is its row length, the fastest axis: a linear
//! layer's weight `(out, in)` in PyTorch is `ne = [in, out]` here.
//!
//! The bytes may come from anyone, so no count in them decides an allocation: each is checked
//! against the bytes left (and its limit in [`super::limits`]) before anything is made of it,
//! and every error names the file and the key or tensor at fault.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Range;

use super::limits::{
    MAX_GGUF_ARRAY_DEPTH, MAX_GGUF_ARRAY_LEN, MAX_GGUF_DIMS, MAX_GGUF_HEADER_BYTES, MAX_GGUF_KEYS,
    MAX_GGUF_METADATA_BYTES, MAX_GGUF_NAME_BYTES, MAX_GGUF_TENSORS,
};
use super::quant::{bytes_for, ggml_type_name, GgmlType, QuantMatrix, SharedBytes};
use crate::error::{Error, Result};

/// The first four bytes of every GGUF file.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// The key whose `u32` value aligns the data section and every tensor in it.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The alignment when the metadata does not set one (`GGUF_DEFAULT_ALIGNMENT`).
pub const DEFAULT_ALIGNMENT: usize = 32;

/// The type of a metadata value (`enum gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    fn from_code(code: u32) -> Option<Self> {
        use ValueType::*;
        Some(match code {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The fewest bytes a value of this type takes in the file: what a count of them is
    /// checked against before anything is allocated.
    fn min_bytes(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 => 8,
            // a length
            String => 8,
            // an element type and a count
            Array => 12,
        }
    }

    /// Its name in messages: Rust's, as the getters name what they expect.
    fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Array),
}

/// A metadata array: its elements, all of one type, stored as that type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
}

impl Array {
    /// The elements' type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F32(_) => ValueType::F32,
            Array::F64(_) => ValueType::F64,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
        }
    }

    /// An integer of any width and sign, as `i128` (which holds them all).
    fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// What it is, for messages: `u32 7`, `string "llama"`, `array of 32000 string`.
    fn describe(&self) -> String {
        match self {
            Value::String(s) if s.len() <= 40 => format!("string {s:?}"),
            Value::String(s) => format!("string of {} bytes", s.len()),
            Value::Array(a) => format!("array of {} {}", a.len(), a.element_type()),
            Value::F32(v) => format!("f32 {v}"),
            Value::F64(v) => format!("f64 {v}"),
            Value::Bool(v) => format!("bool {v}"),
            v => format!(
                "{} {}",
                v.value_type(),
                v.as_integer().expect("the rest are integers")
            ),
        }
    }
}

/// A tensor as the file lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml's `ne`, fastest axis first: `[cols, rows, …]` (PyTorch's shape reversed).
    pub shape: Vec<usize>,
    pub ty: GgmlType,
    /// From the data section's start, as the file stores it.
    pub offset: usize,
    /// Its bytes in the file.
    pub range: Range<usize>,
}

impl TensorInfo {
    /// Values in a row, `ne[0]`.
    pub fn cols(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }

    /// Rows, the product of `ne[1..]`.
    pub fn rows(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    /// Its shape as PyTorch gives it, slowest axis first.
    pub fn torch_shape(&self) -> Vec<usize> {
        self.shape.iter().rev().copied().collect()
    }
}

/// A parsed GGUF file: its metadata and tensor list; the data stays in the caller's bytes.
#[derive(Debug, Clone)]
pub struct GgufFile {
    /// Names the file in errors.
    pub file: String,
    /// 2 or 3.
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    /// In the file's order.
    pub tensors: Vec<TensorInfo>,
    pub alignment: usize,
    /// Where the data section starts in the file.
    pub data_start: usize,
}

impl GgufFile {
    /// Parses the whole file's `bytes`; `file` names it in errors. Every tensor's data must lie
    /// inside `bytes`.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Self> {
        let head = &bytes[..bytes.len().min(MAX_GGUF_HEADER_BYTES)];
        Self::parse_header(head, bytes.len(), file)
    }

    /// Parses the header (metadata and tensor list) of a file of `len` bytes from its first
    /// bytes, `head`, before the rest is read: `head` must hold the header, which is at most
    /// [`MAX_GGUF_HEADER_BYTES`] long (`len` and that, whichever is less, is enough). Every
    /// tensor's data must lie inside the `len` bytes. What is parsed costs at most
    /// [`MAX_GGUF_METADATA_BYTES`] of memory, whatever the file claims.
    pub fn parse_header(head: &[u8], len: usize, file: &str) -> Result<Self> {
        Self::parse_header_so_far(head, len, file)?.ok_or_else(|| Error::Gguf {
            file: file.into(),
            msg: runs_past(head.len()),
        })
    }

    /// [`GgufFile::parse_header`] of the bytes read so far, while a file comes in: `None` when
    /// the header runs past `head` and more of the file could hold it (`head` is shorter than
    /// `len` and the header's limit), so the reader reads on and asks again. A file its first
    /// bytes already refuse is refused then.
    pub fn parse_header_so_far(head: &[u8], len: usize, file: &str) -> Result<Option<Self>> {
        let mut r = Reader {
            bytes: head,
            len: len.max(head.len()),
            pos: 0,
            file,
            spent: 0,
            pos_wanted: 0,
        };
        let parsed = Self::read(&mut r);
        let whole = head.len() >= len.min(MAX_GGUF_HEADER_BYTES);
        match parsed {
            Err(_) if r.pos_wanted > head.len() && !whole => Ok(None),
            Err(_) if r.pos_wanted > head.len() => Err(r.error(runs_past(head.len()))),
            other => other.map(Some),
        }
    }

    fn read(r: &mut Reader) -> Result<Self> {
        let file = r.file;
        let magic = r.take(4, || "the header".into())?;
        if magic != MAGIC {
            return Err(r.error(format!(
                "it starts with {:?}, not \"GGUF\"",
                String::from_utf8_lossy(magic)
            )));
        }
        let version = r.u32(|| "the header".into())?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(r.error(
                    "GGUF version 1 (2023's first format) is not read: convert the model again \
                     with a current llama.cpp"
                        .into(),
                ))
            }
            v if (2..=3).contains(&v.swap_bytes()) => {
                return Err(r.error(format!(
                    "it is big-endian (version {}), which attnscope does not read",
                    v.swap_bytes()
                )))
            }
            v => return Err(r.error(format!("unknown GGUF version {v} (2 and 3 are read)"))),
        }
        let tensor_count = r.u64(|| "the header".into())?;
        let kv_count = r.u64(|| "the header".into())?;
        let kv_count = r.count(kv_count, MAX_GGUF_KEYS, 8 + 4 + 1, "metadata keys")?;
        let tensor_count = r.count(tensor_count, MAX_GGUF_TENSORS, 8 + 4 + 4 + 8, "tensors")?;

        let mut metadata = BTreeMap::new();
        for i in 0..kv_count {
            let key = r.name(|| format!("metadata key {i}'s name"))?;
            let what = || format!("metadata key `{key}`");
            let code = r.u32(what)?;
            let ty = ValueType::from_code(code)
                .ok_or_else(|| r.error(format!("{} has unknown value type {code}", what())))?;
            r.spend(std::mem::size_of::<Value>() + 64, &what)?; // its place in the map
            let value = r.value(ty, 0, &what)?;
            if metadata.contains_key(&key) {
                return Err(r.error(format!("{} appears twice", what())));
            }
            metadata.insert(key, value);
        }

        let alignment = match metadata.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => *a as usize,
            Some(v) => {
                return Err(r.error(format!(
                    "`{ALIGNMENT_KEY}` is {}, not a power of two as a u32",
                    v.describe()
                )))
            }
        };

        let mut infos = Vec::with_capacity(tensor_count);
        for i in 0..tensor_count {
            let name = r.name(|| format!("tensor {i}'s name"))?;
            let what = || format!("tensor `{name}`");
            let n_dims = r.u32(what)? as usize;
            if n_dims > MAX_GGUF_DIMS {
                return Err(r.error(format!(
                    "{} has {n_dims} dimensions, over ggml's {MAX_GGUF_DIMS}",
                    what()
                )));
            }
            let mut shape = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                let d = r.u64(what)?;
                shape.push(
                    usize::try_from(d)
                        .ok()
                        .filter(|&d| d > 0 && d <= i64::MAX as usize),
                );
            }
            let code = r.u32(what)?;
            let offset = r.u64(what)?;
            let Some(shape) = shape.into_iter().collect::<Option<Vec<usize>>>() else {
                return Err(r.error(format!(
                    "{} has a dimension that is 0 or too large to count",
                    what()
                )));
            };
            let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if elements.is_none_or(|e| e > i64::MAX as usize) {
                return Err(r.error(format!(
                    "{} has shape {shape:?}, more values than ggml counts",
                    what()
                )));
            }
            let ty = GgmlType::from_code(code).ok_or_else(|| {
                r.error(match ggml_type_name(code) {
                    Some(t) => format!(
                        "{} is {t}, a type attnscope does not read (it reads {})",
                        what(),
                        GgmlType::ALL.map(GgmlType::name).join(", ")
                    ),
                    None => format!("{} has unknown ggml type {code}", what()),
                })
            })?;
            infos.push((name, shape, ty, offset));
        }

        let mut names = HashSet::with_capacity(infos.len());
        if let Some((name, ..)) = infos.iter().find(|t| !names.insert(t.0.as_str())) {
            return Err(r.error(format!("tensor `{name}` appears twice")));
        }
        let data_start = r.pos.checked_next_multiple_of(alignment).ok_or_else(|| {
            r.error(format!(
                "the data section's start overflows at alignment {alignment}"
            ))
        })?;
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, shape, ty, offset) in infos {
            let t = TensorInfo {
                range: 0..0,
                offset: 0,
                name,
                shape,
                ty,
            };
            let size = bytes_for(ty, t.rows(), t.cols())
                .map_err(|e| r.error(format!("tensor `{}`: {e}", t.name)))?;
            if offset % alignment as u64 != 0 {
                return Err(r.error(format!(
                    "tensor `{}`'s offset {offset} is not a multiple of the alignment {alignment}",
                    t.name
                )));
            }
            let start = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(data_start));
            let range = start.and_then(|s| Some(s..s.checked_add(size)?));
            let Some(range) = range.filter(|range| range.end <= r.len) else {
                return Err(r.error(format!(
                    "tensor `{}` ({size} bytes of {ty}) at offset {offset} from the data \
                     section's start (byte {data_start}) runs past the end of the file \
                     ({} bytes)",
                    t.name, r.len
                )));
            };
            tensors.push(TensorInfo {
                offset: offset as usize,
                range,
                ..t
            });
        }
        Ok(Self {
            file: file.to_owned(),
            version,
            metadata,
            tensors,
            alignment,
            data_start,
        })
    }

    fn error(&self, msg: String) -> Error {
        Error::Gguf {
            file: self.file.clone(),
            msg,
        }
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Tensor `info` as a matrix of `rows()` × `cols()` over `bytes`, the file's bytes (as
    /// [`GgufFile::parse`] was given them, now shared).
    pub fn matrix(&self, info: &TensorInfo, bytes: SharedBytes) -> Result<QuantMatrix> {
        QuantMatrix::new(info.ty, info.rows(), info.cols(), bytes, info.range.start)
            .map_err(|e| self.error(format!("tensor `{}`: {e}", info.name)))
    }

    /// The value of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The value of `key` made a `T` by `cast`, or an error naming the key, what it holds and
    /// `expected`.
    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &str,
        cast: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let value = self
            .get(key)
            .ok_or_else(|| self.error(format!("missing metadata key `{key}`")))?;
        cast(value).ok_or_else(|| {
            self.error(format!(
                "metadata key `{key}` is {}, expected {expected}",
                value.describe()
            ))
        })
    }

    /// An integer key's value, of any integer type, when it fits a `u32`.
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.typed(key, "an integer that fits a u32", |v| {
            v.as_integer()?.try_into().ok()
        })
    }

    /// An integer key's value, of any integer type, when it fits a `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "an integer that fits a u64", |v| {
            v.as_integer()?.try_into().ok()
        })
    }

    /// An integer key's value, of any integer type, when it fits an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.typed(key, "an integer that fits an i64", |v| {
            v.as_integer()?.try_into().ok()
        })
    }

    /// A float key's value (an `f64` rounded to `f32`).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        self.typed(key, "an f32", |v| match *v {
            Value::F32(f) => Some(f),
            Value::F64(f) => Some(f as f32),
            _ => None,
        })
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        self.typed(key, "a bool", |v| match *v {
            Value::Bool(b) => Some(b),
            _ => None,
        })
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "a string", |v| match v {
            Value::String(s) => Some(s.as_str()),
            _ => None,
        })
    }

    pub fn get_array(&self, key: &str) -> Result<&Array> {
        self.typed(key, "an array", |v| match v {
            Value::Array(a) => Some(a),
            _ => None,
        })
    }

    pub fn get_str_array(&self, key: &str) -> Result<&[String]> {
        self.typed(key, "an array of string", |v| match v {
            Value::Array(Array::String(a)) => Some(a.as_slice()),
            _ => None,
        })
    }

    pub fn get_f32_array(&self, key: &str) -> Result<&[f32]> {
        self.typed(key, "an array of f32", |v| match v {
            Value::Array(Array::F32(a)) => Some(a.as_slice()),
            _ => None,
        })
    }

    pub fn get_i32_array(&self, key: &str) -> Result<&[i32]> {
        self.typed(key, "an array of i32", |v| match v {
            Value::Array(Array::I32(a)) => Some(a.as_slice()),
            _ => None,
        })
    }
}

/// Why a header read from its first `n` bytes was not read whole: it runs past them (and past
/// the limit of a header, where they are that many).
fn runs_past(n: usize) -> String {
    let limit = match n >= MAX_GGUF_HEADER_BYTES {
        true => format!(", the limit of a header ({MAX_GGUF_HEADER_BYTES} bytes)"),
        false => String::new(),
    };
    format!("its header runs past the {n} bytes read first{limit}")
}

/// A cursor over the file's first bytes (its header), in a file of `len` bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    len: usize,
    pos: usize,
    file: &'a str,
    /// The memory what was parsed holds, in bytes ([`MAX_GGUF_METADATA_BYTES`] at most).
    spent: usize,
    /// The end of the furthest read asked for: past `bytes`, the header did not fit them.
    pos_wanted: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, msg: String) -> Error {
        Error::Gguf {
            file: self.file.to_owned(),
            msg,
        }
    }

    /// The bytes left in the file.
    fn left(&self) -> usize {
        self.len - self.pos
    }

    /// The next `n` bytes; `what` names what they are when the file ends first.
    fn take(&mut self, n: usize, what: impl Fn() -> String) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(self.error(format!(
                "the file ends inside {} (at byte {}, {n} bytes needed, {} left)",
                what(),
                self.pos,
                self.left()
            )));
        }
        if n > self.bytes.len() - self.pos {
            self.pos_wanted = self.pos + n;
            return Err(self.error(format!("the header goes on past {}", what())));
        }
        let b = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    /// Counts `bytes` of memory for what is being parsed, before it is allocated.
    fn spend(&mut self, bytes: usize, what: &dyn Fn() -> String) -> Result<()> {
        self.spent = self.spent.saturating_add(bytes);
        if self.spent > MAX_GGUF_METADATA_BYTES {
            return Err(self.error(format!(
                "its metadata would take over {MAX_GGUF_METADATA_BYTES} bytes of memory (at {})",
                what()
            )));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: impl Fn() -> String) -> Result<[u8; N]> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: impl Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: impl Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of things each at least `min_bytes` long, checked against its `limit` and
    /// against the bytes left in the file.
    fn count(&self, n: u64, limit: usize, min_bytes: usize, what: &str) -> Result<usize> {
        match usize::try_from(n) {
            Ok(n) if n <= limit && n <= self.left() / min_bytes => Ok(n),
            _ if n > limit as u64 => {
                Err(self.error(format!("it claims {n} {what}, over the limit of {limit}")))
            }
            _ => Err(self.error(format!(
                "it claims {n} {what}, more than its {} bytes left (from byte {}) could hold",
                self.left(),
                self.pos
            ))),
        }
    }

    /// A string's bytes: its `u64` length checked against the bytes left before they are read.
    fn string_bytes(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(what)?;
        match usize::try_from(len) {
            Ok(len) if len <= self.left() => self.take(len, what),
            _ => Err(self.error(format!(
                "{} is a string of {len} bytes, more than the {} left in the file",
                what(),
                self.left()
            ))),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let b = self.string_bytes(what)?;
        // a String and its heap block (malloc's: 8 bytes of header, 16-byte steps, 32 at least)
        let heap = match b.len() {
            0 => 0,
            n => (n + 8).next_multiple_of(16).max(32),
        };
        self.spend(std::mem::size_of::<String>() + heap, what)?;
        String::from_utf8(b.to_vec())
            .map_err(|e| self.error(format!("{} is not UTF-8: {e}", what())))
    }

    /// A metadata key or tensor name, at most [`MAX_GGUF_NAME_BYTES`].
    fn name(&mut self, what: impl Fn() -> String) -> Result<String> {
        let at = self.pos;
        let len = self.u64(&what)?;
        if len > MAX_GGUF_NAME_BYTES as u64 {
            return Err(self.error(format!(
                "{} (at byte {at}) is {len} bytes long, over the limit of {MAX_GGUF_NAME_BYTES}",
                what()
            )));
        }
        self.pos = at;
        self.string(&what)
    }

    /// A value of type `ty` inside `depth` arrays, of `what` (a key).
    fn value(&mut self, ty: ValueType, depth: usize, what: &dyn Fn() -> String) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => Value::Bool(self.bool(what)?),
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => Value::Array(self.array_value(depth + 1, what)?),
        })
    }

    fn bool(&mut self, what: &dyn Fn() -> String) -> Result<bool> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.error(format!("{} holds bool byte {b}, neither 0 nor 1", what()))),
        }
    }

    /// An array, itself at nesting `depth` (1 for a key's array).
    fn array_value(&mut self, depth: usize, what: &dyn Fn() -> String) -> Result<Array> {
        if depth > MAX_GGUF_ARRAY_DEPTH {
            return Err(self.error(format!(
                "{} nests arrays {depth} deep, over the limit of {MAX_GGUF_ARRAY_DEPTH}",
                what()
            )));
        }
        let code = self.u32(what)?;
        let ty = ValueType::from_code(code).ok_or_else(|| {
            self.error(format!(
                "{} is an array of unknown value type {code}",
                what()
            ))
        })?;
        let n = self.u64(what)?;
        let n = self.count(
            n,
            MAX_GGUF_ARRAY_LEN,
            ty.min_bytes(),
            &format!("{} elements in {}", ty, what()),
        )?;
        // the array's own memory, before anything is allocated for it (each string counts its
        // own as it is read)
        let element = match ty {
            ValueType::String => 0,
            ValueType::Array => std::mem::size_of::<Array>(),
            other => other.min_bytes(),
        };
        self.spend(n.saturating_mul(element), what)?;
        /// `n` fixed-size numbers, little-endian.
        macro_rules! numbers {
            ($t:ty, $variant:ident) => {{
                const SIZE: usize = std::mem::size_of::<$t>();
                let b = self.take(n * SIZE, what)?;
                Array::$variant(
                    b.chunks_exact(SIZE)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("SIZE bytes")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n, what)?.to_vec()),
            ValueType::I8 => numbers!(i8, I8),
            ValueType::U16 => numbers!(u16, U16),
            ValueType::I16 => numbers!(i16, I16),
            ValueType::U32 => numbers!(u32, U32),
            ValueType::I32 => numbers!(i32, I32),
            ValueType::F32 => numbers!(f32, F32),
            ValueType::U64 => numbers!(u64, U64),
            ValueType::I64 => numbers!(i64, I64),
            ValueType::F64 => numbers!(f64, F64),
            ValueType::Bool => Array::Bool((0..n).map(|_| self.bool(what)).collect::<Result<_>>()?),
            ValueType::String => Array::String(
                (0..n)
                    .map(|i| self.string(&|| format!("element {i} of {}", what())))
                    .collect::<Result<_>>()?,
            ),
            ValueType::Array => Array::Array(
                (0..n)
                    .map(|_| self.array_value(depth + 1, what))
                    .collect::<Result<_>>()?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF file written by hand: `kvs` already encoded, then `tensors`, padded, then `data`.
    struct Gguf {
        version: u32,
        kvs: Vec<Vec<u8>>,
        tensors: Vec<Vec<u8>>,
        data: Vec<u8>,
        alignment: usize,
    }

    fn string(s: &str) -> Vec<u8> {
        let mut b = (s.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(s.as_bytes());
        b
    }

    fn kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
        let mut b = string(key);
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(value);
        b
    }

    fn tensor(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
        let mut b = string(name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        b
    }

    impl Gguf {
        fn new() -> Self {
            Gguf {
                version: 3,
                kvs: vec![],
                tensors: vec![],
                data: vec![],
                alignment: 32,
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let mut b = b"GGUF".to_vec();
            b.extend_from_slice(&self.version.to_le_bytes());
            b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
            b.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
            self.kvs.iter().for_each(|k| b.extend_from_slice(k));
            self.tensors.iter().for_each(|t| b.extend_from_slice(t));
            b.resize(b.len().next_multiple_of(self.alignment), 0);
            b.extend_from_slice(&self.data);
            b
        }
    }

    fn err(bytes: &[u8]) -> String {
        GgufFile::parse(bytes, "m.gguf").unwrap_err().to_string()
    }

    #[test]
    fn every_value_type_is_read() {
        let mut g = Gguf::new();
        g.kvs.push(kv("a.u8", 0, &[200]));
        g.kvs.push(kv("a.i8", 1, &[0xFF]));
        g.kvs.push(kv("a.u16", 2, &513u16.to_le_bytes()));
        g.kvs.push(kv("a.i16", 3, &(-2i16).to_le_bytes()));
        g.kvs.push(kv("a.u32", 4, &70000u32.to_le_bytes()));
        g.kvs.push(kv("a.i32", 5, &(-7i32).to_le_bytes()));
        g.kvs.push(kv("a.f32", 6, &1.5f32.to_le_bytes()));
        g.kvs.push(kv("a.bool", 7, &[1]));
        g.kvs.push(kv("a.str", 8, &string("héllo")));
        g.kvs.push(kv("a.u64", 10, &(1u64 << 40).to_le_bytes()));
        g.kvs.push(kv("a.i64", 11, &(-1i64 << 40).to_le_bytes()));
        g.kvs.push(kv("a.f64", 12, &0.25f64.to_le_bytes()));
        let mut strs = 8u32.to_le_bytes().to_vec();
        strs.extend_from_slice(&2u64.to_le_bytes());
        strs.extend(string("x"));
        strs.extend(string("yz"));
        g.kvs.push(kv("a.strs", 9, &strs));
        // [[1, 2], []] of i32
        let mut nested = 9u32.to_le_bytes().to_vec();
        nested.extend_from_slice(&2u64.to_le_bytes());
        nested.extend_from_slice(&5u32.to_le_bytes());
        nested.extend_from_slice(&2u64.to_le_bytes());
        nested.extend_from_slice(&1i32.to_le_bytes());
        nested.extend_from_slice(&2i32.to_le_bytes());
        nested.extend_from_slice(&5u32.to_le_bytes());
        nested.extend_from_slice(&0u64.to_le_bytes());
        g.kvs.push(kv("a.nested", 9, &nested));
        let f = GgufFile::parse(&g.bytes(), "m.gguf").unwrap();
        assert_eq!(f.get("a.u8"), Some(&Value::U8(200)));
        assert_eq!(f.get("a.i8"), Some(&Value::I8(-1)));
        assert_eq!(f.get_u32("a.u16").unwrap(), 513);
        assert_eq!(f.get_i64("a.i16").unwrap(), -2);
        assert_eq!(f.get_u32("a.u32").unwrap(), 70000);
        assert_eq!(f.get_i64("a.i32").unwrap(), -7);
        assert_eq!(f.get_f32("a.f32").unwrap(), 1.5);
        assert!(f.get_bool("a.bool").unwrap());
        assert_eq!(f.get_str("a.str").unwrap(), "héllo");
        assert_eq!(f.get_u64("a.u64").unwrap(), 1 << 40);
        assert_eq!(f.get_i64("a.i64").unwrap(), -1 << 40);
        assert_eq!(f.get_f32("a.f64").unwrap(), 0.25);
        assert_eq!(f.get_str_array("a.strs").unwrap(), ["x", "yz"]);
        assert_eq!(
            f.get_array("a.nested").unwrap(),
            &Array::Array(vec![Array::I32(vec![1, 2]), Array::I32(vec![])])
        );
        assert_eq!(f.alignment, 32);
        assert_eq!(
            f.get_u32("a.i32").unwrap_err().to_string(),
            "m.gguf: not a GGUF file attnscope reads: metadata key `a.i32` is i32 -7, expected \
             an integer that fits a u32"
        );
        assert!(f
            .get_str("a.strs")
            .unwrap_err()
            .to_string()
            .contains("metadata key `a.strs` is array of 2 string, expected a string"));
        assert!(f
            .get_u32("nope")
            .unwrap_err()
            .to_string()
            .contains("missing metadata key `nope`"));
    }

    #[test]
    fn tensors_are_found_at_their_aligned_offsets() {
        let mut g = Gguf::new();
        g.alignment = 64;
        g.kvs.push(kv(ALIGNMENT_KEY, 4, &64u32.to_le_bytes()));
        g.tensors.push(tensor("w", &[2, 3], 0, 0));
        g.tensors.push(tensor("v", &[32], 8, 64));
        g.data = vec![0; 64 + 34];
        let bytes = g.bytes();
        let f = GgufFile::parse(&bytes, "m.gguf").unwrap();
        assert_eq!(f.alignment, 64);
        assert_eq!(f.data_start % 64, 0);
        let w = f.tensor("w").unwrap();
        assert_eq!((w.cols(), w.rows(), w.torch_shape()), (2, 3, vec![3, 2]));
        assert_eq!(w.range, f.data_start..f.data_start + 24);
        let v = f.tensor("v").unwrap();
        assert_eq!((v.ty, v.range.len()), (GgmlType::Q8_0, 34));
        assert_eq!(v.range.end, bytes.len());
    }

    #[test]
    fn hostile_headers_are_refused() {
        let mut g = Gguf::new();
        g.version = 1;
        assert!(err(&g.bytes()).contains("GGUF version 1"));
        g.version = 3u32.swap_bytes();
        assert!(err(&g.bytes()).contains("big-endian"));
        g.version = 3;
        assert!(err(b"GGML\x03\0\0\0").contains("not \"GGUF\""));
        // a key nested too deep: arrays of arrays of …
        let mut deep = Vec::new();
        for _ in 0..10 {
            deep.extend_from_slice(&9u32.to_le_bytes());
            deep.extend_from_slice(&1u64.to_le_bytes());
        }
        deep.extend_from_slice(&[0; 16]);
        g.kvs = vec![kv("deep", 9, &deep)];
        assert!(
            err(&g.bytes()).contains("`deep` nests arrays 5 deep"),
            "{}",
            err(&g.bytes())
        );
        g.kvs = vec![kv("b", 7, &[2])];
        assert!(err(&g.bytes()).contains("`b` holds bool byte 2"));
        g.kvs = vec![kv("a", 4, &[0; 4]), kv("a", 4, &[0; 4])];
        assert!(err(&g.bytes()).contains("`a` appears twice"));
        g.kvs = vec![kv("t", 13, &[0; 4])];
        assert!(err(&g.bytes()).contains("`t` has unknown value type 13"));
        for bad in [0u32, 3, 48] {
            g.kvs = vec![kv(ALIGNMENT_KEY, 4, &bad.to_le_bytes())];
            assert!(err(&g.bytes()).contains("not a power of two"), "{bad}");
        }
        g.kvs = vec![kv(ALIGNMENT_KEY, 10, &32u64.to_le_bytes())];
        assert!(err(&g.bytes()).contains("is u64 32, not a power of two as a u32"));
    }

    #[test]
    fn hostile_tensors_are_refused() {
        let with = |t: Vec<u8>, data: usize| {
            let mut g = Gguf::new();
            g.tensors = vec![t];
            g.data = vec![0; data];
            err(&g.bytes())
        };
        assert!(with(tensor("q", &[256, 2], 20, 0), 1000).contains(
            "tensor `q` is IQ4_NL, a type attnscope does not read (it reads F32, F16, BF16, \
             Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"
        ));
        assert!(with(tensor("u", &[4], 99, 0), 64).contains("tensor `u` has unknown ggml type 99"));
        assert!(with(tensor("r", &[100, 2], 12, 0), 1000)
            .contains("tensor `r`: a Q4_K row is made of blocks of 256 values"));
        assert!(with(tensor("d", &[1, 1, 1, 1, 1], 0, 0), 64).contains("`d` has 5 dimensions"));
        assert!(with(tensor("z", &[4, 0], 0, 0), 64).contains("`z` has a dimension that is 0"));
        assert!(with(tensor("o", &[1 << 32, 1 << 32], 0, 0), 64).contains("`o` has shape"));
        assert!(with(tensor("f", &[1 << 31, 1 << 31], 0, 0), 64)
            .contains("tensor `f`: 2147483648 rows of 2147483648 F32 values are more bytes"));
        assert!(with(tensor("e", &[8], 0, 32), 40)
            .contains("tensor `e` (32 bytes of F32) at offset 32"));
        assert!(with(tensor("a", &[8], 0, 4), 64).contains("`a`'s offset 4 is not a multiple"));
        assert!(with(tensor("x", &[8], 0, u64::MAX - 31), 64).contains("runs past the end"));
        let mut g = Gguf::new();
        g.tensors = vec![tensor("w", &[1], 0, 0), tensor("w", &[1], 0, 32)];
        g.data = vec![0; 64];
        assert!(err(&g.bytes()).contains("tensor `w` appears twice"));
    }

    #[test]
    fn a_header_is_read_from_the_first_bytes_alone() {
        let mut g = Gguf::new();
        g.kvs = vec![kv("general.architecture", 8, &string("llama"))];
        g.tensors = vec![tensor("w", &[8], 0, 0), tensor("v", &[8], 0, 32)];
        g.data = vec![0; 64];
        let bytes = g.bytes();
        let whole = GgufFile::parse(&bytes, "m.gguf").unwrap();
        let at = whole.data_start;
        let head = GgufFile::parse_header(&bytes[..at], bytes.len(), "m.gguf").unwrap();
        assert_eq!(
            (head.tensors, head.metadata),
            (whole.tensors, whole.metadata)
        );
        // a header longer than the bytes given is said to be so, not taken for a short file
        let e = GgufFile::parse_header(&bytes[..at - 40], bytes.len(), "m.gguf").unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "its header runs past the {} bytes read first",
                at - 40
            )),
            "{e}"
        );
        // while the file comes in: not yet, at lengths short of the header's end; then the
        // header; and a file its first bytes refuse is refused from them
        for n in [0, 4, 23, at - 40] {
            let got = GgufFile::parse_header_so_far(&bytes[..n], bytes.len(), "m.gguf").unwrap();
            assert!(got.is_none(), "{n} bytes of a {at}-byte header");
        }
        let got = GgufFile::parse_header_so_far(&bytes[..at], bytes.len(), "m.gguf").unwrap();
        assert_eq!(
            got.unwrap().tensors,
            GgufFile::parse(&bytes, "m.gguf").unwrap().tensors
        );
        let mut bad = bytes.clone();
        bad[4] = 7; // version 7
        let e = GgufFile::parse_header_so_far(&bad[..8], bad.len(), "m.gguf").unwrap_err();
        assert!(e.to_string().contains("unknown GGUF version 7"), "{e}");
        // the tensors lie inside the file's length, not the bytes given
        let e = GgufFile::parse_header(&bytes[..at], bytes.len() - 1, "m.gguf").unwrap_err();
        assert!(
            e.to_string()
                .contains("tensor `v` (32 bytes of F32) at offset 32"),
            "{e}"
        );
    }

    #[test]
    fn metadata_that_would_take_too_much_memory_is_refused() {
        // 600,000 strings of one byte: 5.4 MB in the file, over 32 MiB as Strings
        let n = 600_000u64;
        let mut array = 8u32.to_le_bytes().to_vec();
        array.extend_from_slice(&n.to_le_bytes());
        for _ in 0..n {
            array.extend_from_slice(&string("a"));
        }
        let mut g = Gguf::new();
        g.kvs = vec![kv("tokenizer.ggml.tokens", 9, &array)];
        let e = err(&g.bytes());
        assert!(
            e.contains(&format!(
                "its metadata would take over {MAX_GGUF_METADATA_BYTES} bytes of memory (at \
                 element"
            )),
            "{e}"
        );
        // a tenth of it is read
        let mut array = 8u32.to_le_bytes().to_vec();
        array.extend_from_slice(&(n / 10).to_le_bytes());
        for _ in 0..n / 10 {
            array.extend_from_slice(&string("a"));
        }
        g.kvs = vec![kv("tokenizer.ggml.tokens", 9, &array)];
        let tokens = GgufFile::parse(&g.bytes(), "m.gguf").unwrap();
        assert_eq!(
            tokens.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
            60_000
        );
    }

    #[test]
    fn counts_are_checked_before_anything_is_allocated() {
        let header = |tensors: u64, kvs: u64| {
            let mut b = b"GGUF\x03\0\0\0".to_vec();
            b.extend_from_slice(&tensors.to_le_bytes());
            b.extend_from_slice(&kvs.to_le_bytes());
            b
        };
        assert!(err(&header(u64::MAX, 0))
            .contains("claims 18446744073709551615 tensors, over the limit"));
        assert!(err(&header(1000, 0)).contains("claims 1000 tensors, more than its 0 bytes left"));
        assert!(err(&header(0, 1 << 40)).contains("metadata keys, over the limit"));
        // a string length, an array count
        let mut b = header(0, 1);
        b.extend(kv("s", 8, &u64::MAX.to_le_bytes()));
        assert!(
            err(&b).contains("`s` is a string of 18446744073709551615 bytes"),
            "{}",
            err(&b)
        );
        let mut b = header(0, 1);
        let mut a = 4u32.to_le_bytes().to_vec();
        a.extend_from_slice(&(1u64 << 22).to_le_bytes());
        b.extend(kv("arr", 9, &a));
        assert!(
            err(&b).contains("4194304 u32 elements in metadata key `arr`, more than"),
            "{}",
            err(&b)
        );
        let mut b = header(0, 1);
        b.extend(string("k"));
        b.extend_from_slice(&[0; 16]);
        b[24..32].copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert!(
            err(&b).contains("metadata key 0's name (at byte 24) is 1048576 bytes long"),
            "{}",
            err(&b)
        );
    }
}
