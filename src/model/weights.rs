//! Reading `model.safetensors`: the file ([`WeightsFile`]), its tensors by HF key ([`Tensors`]),
//! and the parameters every family is built of ([`Linear`], [`LayerNorm`], [`Table`]).
//!
//! A family (`crate::families`) owns its key names: each of its layers is built by one
//! `load(&Tensors, prefix, &config)`; the math (`engine`) never sees the file format.

use std::sync::OnceLock;

use half::{bf16, f16};
use ndarray::{s, ArcArray1, ArcArray2, ArcArrayD, Array1, ArrayD, IxDyn};
use safetensors::{Dtype, SafeTensorError, SafeTensors};

use super::limits::{file_too_big, MAX_SAFETENSORS_HEADER_BYTES, MAX_WEIGHTS_BYTES};
use super::quant::{FastMatrix, QuantMatrix};
use crate::error::{Error, Result};
use crate::linalg::gemm::PackedB;

/// The bytes of a `model.safetensors` file, kept in 4-byte-aligned storage so that its
/// little-endian f32 tensors are read in place: a model's matrices are views into this one
/// buffer (shared and reference-counted, like candle's memory-mapped safetensors), not copies
/// of it (f16, bf16 and unaligned tensors are converted into arrays of their own). The CLI reads
/// the file straight into it, and the browser's worker writes a cached file into it chunk by
/// chunk as Cache Storage hands it over.
#[derive(Clone)]
pub struct WeightsFile {
    /// The file's bytes, padded to whole words with zeros.
    words: ArcArray1<f32>,
    len: usize,
}

impl WeightsFile {
    /// A file of `len` zero bytes, to be filled through [`WeightsFile::bytes_mut`]; `file`
    /// names it in the error when `len` is over [`MAX_WEIGHTS_BYTES`] (nothing is allocated then).
    pub fn zeroed(len: usize, file: &str) -> Result<Self> {
        if len > MAX_WEIGHTS_BYTES {
            return Err(Error::Safetensors {
                file: file.into(),
                msg: file_too_big(len as u64, MAX_WEIGHTS_BYTES),
            });
        }
        // an allocation that fails (wasm memory has a ceiling) is an error, not an abort
        let words = try_zeros(len.div_ceil(4)).ok_or_else(|| Error::Safetensors {
            file: file.into(),
            msg: format!("cannot allocate {len} bytes to hold the file"),
        })?;
        Ok(Self {
            words: ArcArray1::from_vec(words),
            len,
        })
    }

    /// A copy of `bytes` (the size checked as by [`WeightsFile::zeroed`]).
    pub fn from_bytes(bytes: &[u8], file: &str) -> Result<Self> {
        let mut w = Self::zeroed(bytes.len(), file)?;
        w.bytes_mut().copy_from_slice(bytes);
        Ok(w)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> &[u8] {
        let words = self.words.as_slice().expect("one contiguous buffer");
        &bytemuck::cast_slice(words)[..self.len]
    }

    /// The bytes to write the file into. A model loaded from this file shares its storage, so
    /// this copies the storage first if one does (it never should: fill, then load).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let words = self.words.as_slice_mut().expect("one contiguous buffer");
        &mut bytemuck::cast_slice_mut(words)[..self.len]
    }

    /// `count` f32 values starting `offset` bytes into the file, shared with it, when the
    /// offset is word-aligned and the machine little-endian (as safetensors stores them).
    fn f32_view(&self, offset: usize, count: usize) -> Option<ArcArray1<f32>> {
        let aligned = offset.is_multiple_of(4) && offset + 4 * count <= self.len;
        (aligned && cfg!(target_endian = "little")).then(|| {
            let first = offset / 4;
            self.words.clone().slice_move(s![first..first + count])
        })
    }
}

/// The file's bytes, lent to the matrices of a GGUF file read from it ([`QuantMatrix`]).
impl AsRef<[u8]> for WeightsFile {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

/// `n` zeros, or `None` when the allocator has no room for them. Zeroed by the allocator, which
/// takes fresh pages from the system already zeroed rather than writing them.
fn try_zeros(n: usize) -> Option<Vec<f32>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(n).ok()?;
    // SAFETY: the layout has a non-zero size; a non-null pointer `alloc_zeroed` returns for it
    // holds `n` initialised f32s (all-zero bits are 0.0) that a `Vec` of capacity `n` may own
    // and free with the global allocator.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<f32>();
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
}

/// The tensors of one safetensors file, read by key.
pub struct Tensors<'a> {
    st: SafeTensors<'a>,
    source: &'a WeightsFile,
    file: String,
}

impl<'a> Tensors<'a> {
    /// Parses a safetensors file; `file` names it in errors. Its size and its header's are
    /// checked against [`MAX_WEIGHTS_BYTES`] and [`MAX_SAFETENSORS_HEADER_BYTES`] first, and
    /// the header must describe the file exactly: no bytes missing, none trailing.
    pub fn new(source: &'a WeightsFile, file: &str) -> Result<Self> {
        let bytes = source.bytes();
        let bad = |msg: String| Error::Safetensors {
            file: file.into(),
            msg,
        };
        if bytes.len() > MAX_WEIGHTS_BYTES {
            return Err(bad(file_too_big(bytes.len() as u64, MAX_WEIGHTS_BYTES)));
        }
        let Some(len) = bytes.first_chunk::<8>() else {
            return Err(bad(format!(
                "the file is {} bytes, too short for the 8-byte header length",
                bytes.len()
            )));
        };
        let header_len = u64::from_le_bytes(*len);
        if header_len > MAX_SAFETENSORS_HEADER_BYTES as u64 {
            return Err(bad(format!(
                "the header claims {header_len} bytes, over the limit of {MAX_SAFETENSORS_HEADER_BYTES}"
            )));
        }
        let after = bytes.len() as u64 - 8;
        if header_len > after {
            return Err(bad(format!(
                "the header claims {header_len} bytes but only {after} follow its length (the file is truncated)"
            )));
        }
        let st = SafeTensors::deserialize(bytes).map_err(|e| match e {
            SafeTensorError::MetadataIncompleteBuffer => {
                bad(size_mismatch(bytes, header_len as usize))
            }
            SafeTensorError::TensorInvalidInfo
            | SafeTensorError::ValidationOverflow
            | SafeTensorError::MisalignedSlice => {
                bad(misdescribed_tensor(&bytes[8..8 + header_len as usize])
                    .unwrap_or_else(|| e.to_string()))
            }
            e => bad(e.to_string()),
        })?;
        Ok(Self {
            st,
            source,
            file: file.into(),
        })
    }

    /// The file's name, as errors give it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The shortest prefix under which the file holds `anchor` (`""`, or a model prefix such as
    /// `bert.` in `BertForSequenceClassification` or `transformer.` in `GPT2LMHeadModel`), or an
    /// error naming `anchor` as the missing tensor.
    pub fn prefix_of(&self, anchor: &str) -> Result<String> {
        self.st
            .names()
            .into_iter()
            .filter_map(|k| k.strip_suffix(anchor))
            .min_by_key(|p| p.len())
            .map(str::to_owned)
            .ok_or_else(|| Error::MissingTensor {
                file: self.file.clone(),
                key: anchor.into(),
            })
    }

    /// The shape of tensor `key`, when the file holds it.
    pub fn shape(&self, key: &str) -> Option<Vec<usize>> {
        self.st.tensor(key).ok().map(|v| v.shape().to_vec())
    }

    /// Refuses a file holding fewer values than `needed`, the parameters the config implies
    /// (`sizes` names the config's sizes in the message), before any tensor is read.
    pub fn check_holds(&self, needed: u128, sizes: &str) -> Result<()> {
        let held = self.value_count();
        if held < needed {
            return Err(Error::Safetensors {
                file: self.file.clone(),
                msg: format!(
                    "the config implies {needed} parameters ({sizes}) but the file's tensors hold {held} values"
                ),
            });
        }
        Ok(())
    }

    /// The number of values all tensors of the file hold, whatever their names.
    fn value_count(&self) -> u128 {
        self.st
            .tensors()
            .iter()
            .map(|(_, v)| v.shape().iter().map(|&n| n as u128).product::<u128>())
            .sum()
    }

    /// Whether the file holds tensor `key`.
    pub fn has(&self, key: &str) -> bool {
        self.st.tensor(key).is_ok()
    }

    /// Reads `key` (a full key, without the model prefix added) as f32 with the expected shape:
    /// a view into the file where it holds aligned f32 values, else converted into a new array.
    fn read(&self, key: &str, expected: &[usize]) -> Result<ArcArrayD<f32>> {
        let view = self.st.tensor(key).map_err(|_| Error::MissingTensor {
            file: self.file.clone(),
            key: key.into(),
        })?;
        if view.shape() != expected {
            return Err(Error::TensorShape {
                file: self.file.clone(),
                key: key.into(),
                expected: expected.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let offset = data.as_ptr() as usize - self.source.bytes().as_ptr() as usize;
        let values: Vec<f32> = match view.dtype() {
            Dtype::F32 => match self.source.f32_view(offset, data.len() / 4) {
                Some(shared) => {
                    return Ok(shared
                        .into_shape_with_order(IxDyn(expected))
                        .expect("the safetensors crate checked the shape against the bytes"))
                }
                // an unaligned tensor (or a big-endian machine): one copy of its bytes (a memcpy)
                None => {
                    let mut v = vec![0f32; data.len() / 4];
                    bytemuck::cast_slice_mut::<f32, u8>(&mut v).copy_from_slice(data);
                    if cfg!(target_endian = "big") {
                        v.iter_mut()
                            .for_each(|x| *x = f32::from_bits(x.to_bits().swap_bytes()));
                    }
                    v
                }
            },
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(Error::TensorDtype {
                    file: self.file.clone(),
                    key: key.into(),
                    dtype: format!("{other:?}"),
                })
            }
        };
        ArrayD::from_shape_vec(IxDyn(expected), values)
            .map(ArrayD::into_shared)
            .map_err(|_| Error::TensorShape {
                file: self.file.clone(),
                key: key.into(),
                expected: expected.to_vec(),
                found: vec![data.len()],
            })
    }

    /// A vector (a bias, a LayerNorm's scale or shift): a copy of its own, a few hundred values.
    pub fn read1(&self, key: &str, n: usize) -> Result<Array1<f32>> {
        Ok(self
            .read(key, &[n])?
            .to_owned()
            .into_dimensionality()
            .expect("shape checked"))
    }

    /// A matrix, shared with the file where it can be.
    pub fn read2(&self, key: &str, rows: usize, cols: usize) -> Result<ArcArray2<f32>> {
        Ok(self
            .read(key, &[rows, cols])?
            .into_dimensionality()
            .expect("shape checked"))
    }
}

/// The header of a safetensors file, parsed loosely to explain what the safetensors crate refused.
type RawHeader = serde_json::Map<String, serde_json::Value>;

/// The first tensor whose shape and dtype do not make the byte span its `data_offsets` give,
/// e.g. a header claiming a huge shape over a few bytes, described with its key and shape.
fn misdescribed_tensor(header: &[u8]) -> Option<String> {
    let header: RawHeader = serde_json::from_slice(header).ok()?;
    header.iter().find_map(|(key, info)| {
        let dtype: Dtype = serde_json::from_value(info.get("dtype")?.clone()).ok()?;
        let shape: Vec<u128> = serde_json::from_value(info.get("shape")?.clone()).ok()?;
        let offsets: [u128; 2] = serde_json::from_value(info.get("data_offsets")?.clone()).ok()?;
        let bits = shape
            .iter()
            .try_fold(dtype.bitsize() as u128, |a, &n| a.checked_mul(n));
        let span = offsets[1].checked_sub(offsets[0]);
        (bits.map(|b| b.div_ceil(8)) != span).then(|| {
            let bytes = bits.map_or("more than 2^128 bits".into(), |b| {
                format!("{} bytes", b.div_ceil(8))
            });
            format!(
                "tensor `{key}` has shape {shape:?} of {dtype:?} ({bytes}) but its data_offsets \
                 {offsets:?} span {}",
                span.map_or("a negative range".into(), |n| format!("{n} bytes"))
            )
        })
    })
}

/// Why a safetensors file whose header parsed does not match its length: how many bytes of
/// tensor data the header describes and how many the file holds after it.
fn size_mismatch(bytes: &[u8], header_len: usize) -> String {
    let data = bytes.len() - 8 - header_len;
    // The header parsed before the check failed, so it is JSON with valid offsets.
    let described = serde_json::from_slice::<RawHeader>(&bytes[8..8 + header_len])
        .ok()
        .and_then(|header| {
            header
                .values()
                .filter_map(|info| info.get("data_offsets")?.get(1)?.as_u64())
                .max()
        })
        .unwrap_or(0) as usize;
    if data > described {
        format!(
            "the header describes {described} bytes of tensor data but {data} follow it \
             ({} trailing bytes)",
            data - described
        )
    } else {
        format!(
            "the header describes {described} bytes of tensor data but only {data} follow it \
             (the file is truncated)"
        )
    }
}

/// A matrix of parameters: f32 values (a view into the checkpoint's [`WeightsFile`] where
/// they were read from one), or a GGUF file's values kept in their ggml type ([`QuantMatrix`],
/// quantized ones block by block), never expanded into an f32 copy of their own.
///
/// # Shapes
/// * `(rows, cols)`, as PyTorch stores it
#[derive(Debug, Clone)]
pub enum Matrix {
    F32(ArcArray2<f32>),
    Quantized(QuantMatrix),
}

impl Matrix {
    pub fn nrows(&self) -> usize {
        self.dim().0
    }

    pub fn ncols(&self) -> usize {
        self.dim().1
    }

    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        match self {
            Self::F32(w) => w.dim(),
            Self::Quantized(q) => q.dim(),
        }
    }

    /// The f32 values, when the matrix holds them as such.
    pub fn as_f32(&self) -> Option<&ArcArray2<f32>> {
        match self {
            Self::F32(w) => Some(w),
            Self::Quantized(_) => None,
        }
    }

    /// Its rows `rows` (within [`Matrix::nrows`]), sharing its values.
    pub fn row_range(&self, rows: std::ops::Range<usize>) -> Matrix {
        match self {
            Self::F32(w) => Self::F32(w.clone().slice_move(ndarray::s![rows, ..])),
            Self::Quantized(q) => Self::Quantized(q.row_range(rows)),
        }
    }

    /// Rows `ids` (each below [`Matrix::nrows`]), as f32.
    ///
    /// # Shapes
    /// * `ids`: `(n,)` → `(n, cols)`
    pub fn rows_of(&self, ids: &[usize]) -> ndarray::Array2<f32> {
        match self {
            Self::F32(w) => w.select(ndarray::Axis(0), ids),
            Self::Quantized(q) => {
                let mut out = ndarray::Array2::zeros((ids.len(), q.cols()));
                for (mut row, &id) in out.rows_mut().into_iter().zip(ids) {
                    let row = row
                        .as_slice_mut()
                        .expect("a new array's rows are contiguous");
                    q.dequantize_row(id, row);
                }
                out
            }
        }
    }
}

impl PartialEq for Matrix {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::F32(a), Self::F32(b)) => a == b,
            (Self::Quantized(a), Self::Quantized(b)) => {
                (a.ty(), a.dim()) == (b.ty(), b.dim()) && a.data() == b.data()
            }
            _ => false,
        }
    }
}

/// A dense layer `y = x·Wᵀ + b`.
///
/// The CPU engine multiplies by an f32 `Wᵀ` packed once, here, into the column panels of its
/// matrix product ([`PackedB`]), and by a quantized `W` block by block
/// ([`QuantMatrix::matmul_t`]); `weight` stays as the file stores it, for the GPU upload and
/// the views. Build one with [`Linear::new`] (or [`Linear::load`]) so the two agree.
///
/// # Shapes
/// * `weight`: `(out, in)` as stored by PyTorch's `nn.Linear`
/// * `bias`: `(out,)`
#[derive(Debug, Clone)]
pub struct Linear {
    pub id: ParamId,
    pub weight: Matrix,
    pub bias: Array1<f32>,
    /// `Wᵀ` packed: when the layer is built, or on the CPU engine's first use of a tied one.
    packed: OnceLock<PackedB>,
    /// `W` laid out for the fast numerics, on their first use ([`Linear::fast`]).
    fast: OnceLock<Option<FastMatrix>>,
    /// The embedding table whose rows are this layer's weights (an LM head tied to the token
    /// embeddings): an engine that copies the table may use its copy.
    pub tied: Option<ParamId>,
}

impl Linear {
    /// # Shapes
    /// * `weight`: `(out, in)`, `bias`: `(out,)`
    pub fn new(weight: impl Into<ArcArray2<f32>>, bias: Array1<f32>) -> Self {
        let weight = weight.into();
        let packed = PackedB::from_transposed(weight.view());
        Self {
            id: ParamId::new(),
            weight: Matrix::F32(weight),
            bias,
            packed: OnceLock::from(packed),
            fast: OnceLock::new(),
            tied: None,
        }
    }

    /// A layer whose weight a GGUF file holds in its ggml type: kept so, the CPU engine
    /// multiplying block by block.
    ///
    /// # Shapes
    /// * `weight`: `(out, in)`, `bias`: `(out,)`
    pub fn quantized(weight: QuantMatrix, bias: Array1<f32>) -> Self {
        Self {
            id: ParamId::new(),
            weight: Matrix::Quantized(weight),
            bias,
            packed: OnceLock::new(),
            fast: OnceLock::new(),
            tied: None,
        }
    }

    /// A layer stored as GPT-2's `Conv1D` stores it, `(in, out)`: `y = x·W + b`. `weight` is
    /// then a transposed view of it (no copy), and `W` is packed as it is.
    ///
    /// # Shapes
    /// * `w_in_out`: `(in, out)`, `bias`: `(out,)`
    pub fn from_conv1d(w_in_out: ArcArray2<f32>, bias: Array1<f32>) -> Self {
        let packed = PackedB::from_matrix(w_in_out.view());
        Self {
            id: ParamId::new(),
            weight: Matrix::F32(w_in_out.reversed_axes()),
            bias,
            packed: OnceLock::from(packed),
            fast: OnceLock::new(),
            tied: None,
        }
    }

    /// `y = x·Eᵀ + b`: an LM head whose weights are the rows of the embedding table `E` (GPT-2's
    /// with no bias, `b = 0`; Marian's with its `final_logits_bias`). Nothing is copied until
    /// the CPU engine first uses it (a GPU engine uses its copy of the table).
    ///
    /// # Shapes
    /// * `table.weight`: `(V, D)` → `(D → V)`; `bias`: `(V,)`
    pub fn tied(table: &Table, bias: Option<Array1<f32>>) -> Self {
        Self {
            id: ParamId::new(),
            weight: table.weight.clone(),
            bias: bias.unwrap_or_else(|| Array1::zeros(table.weight.nrows())),
            packed: OnceLock::new(),
            fast: OnceLock::new(),
            tied: Some(table.id),
        }
    }

    /// `{prefix}.weight` `(output, input)` and `{prefix}.bias` `(output,)`.
    pub fn load(t: &Tensors, prefix: &str, input: usize, output: usize) -> Result<Self> {
        Ok(Self::new(
            t.read2(&format!("{prefix}.weight"), output, input)?,
            t.read1(&format!("{prefix}.bias"), output)?,
        ))
    }

    /// An f32 `Wᵀ`, packed for the CPU engine's matrix product; `None` for a quantized `W`.
    pub fn packed(&self) -> Option<&PackedB> {
        let w = self.weight.as_f32()?;
        Some(
            self.packed
                .get_or_init(|| PackedB::from_transposed(w.view())),
        )
    }

    /// A 4-bit `W` laid out for the fast numerics ([`FastMatrix`], made on the first call);
    /// `None` for any other.
    pub fn fast(&self) -> Option<&FastMatrix> {
        let Matrix::Quantized(q) = &self.weight else {
            return None;
        };
        self.fast.get_or_init(|| FastMatrix::of(q)).as_ref()
    }
}

/// Which normalisation a [`Norm`] computes over each row `x` of `D` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// LayerNorm: `(x − mean)/√(var + eps)·weight + bias` (BERT, GPT-2, Marian).
    Layer,
    /// RMSNorm: `x/√(mean(x²) + eps)·weight`, no mean subtracted and no bias (Llama, Qwen2).
    Rms,
}

/// A normalisation over the last axis: LayerNorm or RMSNorm ([`NormKind`]). Old TF-converted
/// checkpoints name a LayerNorm's tensors `gamma`/`beta`. An RMSNorm's `bias` is zero.
///
/// # Shapes
/// * `weight`, `bias`: `(hidden,)`
#[derive(Debug, Clone)]
pub struct Norm {
    pub id: ParamId,
    pub kind: NormKind,
    pub weight: Array1<f32>,
    pub bias: Array1<f32>,
    pub eps: f32,
}

impl Norm {
    /// A LayerNorm.
    pub fn new(weight: Array1<f32>, bias: Array1<f32>, eps: f32) -> Self {
        Self {
            id: ParamId::new(),
            kind: NormKind::Layer,
            weight,
            bias,
            eps,
        }
    }

    /// An RMSNorm (its bias zero).
    pub fn rms(weight: Array1<f32>, eps: f32) -> Self {
        Self {
            id: ParamId::new(),
            kind: NormKind::Rms,
            bias: Array1::zeros(weight.len()),
            weight,
            eps,
        }
    }

    /// A LayerNorm: `{prefix}.weight` and `{prefix}.bias` (or `gamma` and `beta`), each `(n,)`.
    pub fn load(t: &Tensors, prefix: &str, n: usize, eps: f64) -> Result<Self> {
        let (w, b) = if t.has(&format!("{prefix}.gamma")) {
            ("gamma", "beta")
        } else {
            ("weight", "bias")
        };
        Ok(Self::new(
            t.read1(&format!("{prefix}.{w}"), n)?,
            t.read1(&format!("{prefix}.{b}"), n)?,
            eps as f32,
        ))
    }

    /// An RMSNorm: `{prefix}.weight`, `(n,)`.
    pub fn load_rms(t: &Tensors, prefix: &str, n: usize, eps: f64) -> Result<Self> {
        Ok(Self::rms(
            t.read1(&format!("{prefix}.weight"), n)?,
            eps as f32,
        ))
    }
}

/// An embedding table: row `i` is the vector of id `i` (a token, a position, a token type).
///
/// # Shapes
/// * `weight`: `(rows, D)` ([`Matrix`]: a view into the checkpoint's [`WeightsFile`] where it
///   can be, or a GGUF file's quantized rows)
#[derive(Debug, Clone)]
pub struct Table {
    pub id: ParamId,
    pub weight: Matrix,
    /// What every row is multiplied by when it is looked up (Marian's `√d_model` with
    /// `scale_embedding`; 1 elsewhere).
    pub scale: f32,
}

impl Table {
    pub fn new(weight: impl Into<ArcArray2<f32>>) -> Self {
        Self {
            id: ParamId::new(),
            weight: Matrix::F32(weight.into()),
            scale: 1.0,
        }
    }

    /// A table a GGUF file holds in its ggml type, its rows dequantized as they are looked up.
    pub fn quantized(weight: QuantMatrix) -> Self {
        Self {
            id: ParamId::new(),
            weight: Matrix::Quantized(weight),
            scale: 1.0,
        }
    }

    /// The same table (the same values, no copy), its rows multiplied by `scale` when looked up.
    pub fn scaled(&self, scale: f32) -> Self {
        Self {
            scale,
            ..self.clone()
        }
    }

    /// `key`, `(rows, cols)`.
    pub fn load(t: &Tensors, key: &str, rows: usize, cols: usize) -> Result<Self> {
        Ok(Self::new(t.read2(key, rows, cols)?))
    }
}

/// Names one parameter of a loaded model for as long as the process runs: an engine that
/// copies parameters elsewhere (the GPU's buffers) finds its copy by this id. A clone of a
/// parameter keeps its id (it holds the same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(usize);

impl ParamId {
    /// A new id, never given before.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}
