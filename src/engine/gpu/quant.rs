//! ggml's blocks laid out for the GPU: a GGUF file's matrices stay in their type on the device,
//! and `shaders/quant.wgsl` multiplies by them (and gathers a table's rows) group by group,
//! dequantizing in registers and workgroup memory.
//!
//! Every ggml type maps exactly onto one layout, [`Packed`]: each row's values in groups of
//! [`GROUP`], each value an unsigned integer `q` of `bits` bits, and a value is
//!
//! * `x = d·(q − zero) + m` (the block types), with `d` and `m` the scales of its run of 16 or 32
//!   values, computed in f32 from the file's f16 bits as ggml computes them;
//! * `q` read as an f16 (`F16`), or as an f32's top 16 bits (`BF16`).
//!
//! | type   | `bits` | `zero` | scales per row                                          | bytes per weight (file) |
//! |--------|--------|--------|---------------------------------------------------------|-------------------------|
//! | `F16`, `BF16` | 16 | –  | none                                                    | 2 (2)                   |
//! | `Q8_0` | 8      | 128    | `d` (f16) per 32, two to a word                         | 1.0625 (1.0625)         |
//! | `Q4_0` | 4      | 8      | `d` per 32, two to a word                               | 0.5625 (0.5625)         |
//! | `Q4_1` | 4      | 0      | `d`, `m` (f16) per 32, a word                           | 0.625 (0.625)           |
//! | `Q5_0` | 5      | 16     | `d` per 32, two to a word                               | 0.6875 (0.6875)         |
//! | `Q5_1` | 5      | 0      | `d`, `m` per 32, a word                                 | 0.75 (0.75)             |
//! | `Q2_K` | 2      | 0      | `d`, `dmin` (f16) per 256, a word; `sc`, `m` (4 bits) per 16, four to a word: `d·sc`, `−dmin·m` | 0.328 (0.328) |
//! | `Q3_K` | 3      | 4      | `d` per 256, a word; `sc − 32` (`i8`) per 16, four to a word: `d·sc` | 0.453 (0.430) |
//! | `Q4_K` | 4      | 0      | `d`, `dmin` (f16) per 256, a word; `sc`, `m` (6 bits) per 32, two to a word: `d·sc`, `−dmin·m` | 0.578 (0.5625) |
//! | `Q5_K` | 5      | 0      | as `Q4_K`                                                | 0.703 (0.6875)          |
//! | `Q6_K` | 6      | 32     | `d` per 256, a word; `sc` (`i8`) per 16, four to a word: `d·sc` | 0.828 (0.820)   |
//!
//! A K-quant's `d·sc` and `dmin·m` are products of an f16 and an integer of at most 8 bits,
//! exact in f32, so the shader's products are ggml's. `F32` matrices are not packed: they stay f32 rows
//! (4 bytes a weight) and go through `matmul.wgsl`.
//!
//! The words are laid out group-major: word `j` of group `g` of row `r` is word
//! `(g·bits + j)·rows + r`, so that the invocations of a workgroup, which take consecutive rows,
//! read consecutive words; a value `i` of a group is bits `i·bits ..` of its group's words (a
//! 3-, 5- or 6-bit value may straddle two). The scales follow the integers, group-major too.

use crate::error::{Error, Result};
use crate::model::quant::{block_integers, row_bytes, GgmlType, QuantMatrix};

/// Values per packed group: every ggml block is a whole number of groups.
pub const GROUP: usize = 32;

/// How a packed integer becomes a value (`decode` in `quant.wgsl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decode {
    /// `d·(q − zero) + m`.
    Affine = 0,
    /// `q` is an f16's bits.
    F16 = 1,
    /// `q` is a bf16's bits (an f32's top 16).
    Bf16 = 2,
}

/// Where a packed matrix's scales are and what they hold (`scales` in `quant.wgsl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scales {
    /// None (`F16`, `BF16`).
    None = 0,
    /// `d` (f16) per group, two groups to a word (`Q8_0`, `Q4_0`, `Q5_0`).
    D = 1,
    /// `d` and `m` (f16) per group, one word each (`Q4_1`, `Q5_1`).
    DM = 2,
    /// `Q4_K`, `Q5_K`: `d` and `dmin` (f16) per 256 values, a word; a 6-bit `sc` and `m` per
    /// group, two groups to a word: `d·sc` and `−dmin·m`.
    K4 = 3,
    /// `Q6_K`, `Q3_K`: `d` (f16) per 256 values, a word; an `i8` `sc` per 16 values, four to a
    /// word: `d·sc`.
    K6 = 4,
    /// `Q2_K`: `d` and `dmin` (f16) per 256 values, a word; a 4-bit `sc` and `m` per 16 values
    /// (`sc | m << 4`, the file's byte), four to a word: `d·sc` and `−dmin·m`.
    K2 = 5,
}

/// How a ggml type is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockFormat {
    pub bits: u32,
    pub zero: u32,
    pub decode: Decode,
    pub scales: Scales,
}

impl BlockFormat {
    /// The layout of `ty`; `None` for `F32`, which stays f32.
    pub fn of(ty: GgmlType) -> Option<Self> {
        let (bits, zero, decode, scales) = match ty {
            GgmlType::F32 => return None,
            GgmlType::F16 => (16, 0, Decode::F16, Scales::None),
            GgmlType::BF16 => (16, 0, Decode::Bf16, Scales::None),
            GgmlType::Q8_0 => (8, 128, Decode::Affine, Scales::D),
            GgmlType::Q4_0 => (4, 8, Decode::Affine, Scales::D),
            GgmlType::Q4_1 => (4, 0, Decode::Affine, Scales::DM),
            GgmlType::Q5_0 => (5, 16, Decode::Affine, Scales::D),
            GgmlType::Q5_1 => (5, 0, Decode::Affine, Scales::DM),
            GgmlType::Q2_K => (2, 0, Decode::Affine, Scales::K2),
            GgmlType::Q3_K => (3, 4, Decode::Affine, Scales::K6),
            GgmlType::Q4_K => (4, 0, Decode::Affine, Scales::K4),
            GgmlType::Q5_K => (5, 0, Decode::Affine, Scales::K4),
            GgmlType::Q6_K => (6, 32, Decode::Affine, Scales::K6),
        };
        Some(Self {
            bits,
            zero,
            decode,
            scales,
        })
    }
}

/// A matrix in the GPU's layout (see the module's doc): `rows × cols` values, the rows padded
/// with zeros to whole groups.
///
/// # Shapes
/// * `words`: the integers `(groups·bits·rows,)` from word 0, then the scales from
///   `scales_at` (the per-256 words of a K-quant, then its per-group ones from `sub_at`)
#[derive(Debug)]
pub struct Packed {
    pub format: BlockFormat,
    pub rows: u32,
    pub cols: u32,
    pub scales_at: u32,
    pub sub_at: u32,
    pub words: Vec<u32>,
}

impl Packed {
    /// The rows of `parts`, one after another, as one packed matrix: all of one type (that
    /// [`BlockFormat::of`] packs) and width, which the caller checks; `what` names them in the
    /// error when they are too large for 32-bit indices.
    pub fn new(what: &str, parts: &[&QuantMatrix]) -> Result<Self> {
        let Some(first) = parts.first() else {
            return Err(Error::Engine(format!("{what}: no matrix to pack")));
        };
        let (ty, cols) = (first.ty(), first.cols());
        let format = BlockFormat::of(ty)
            .ok_or_else(|| Error::Engine(format!("{what}: {ty} matrices stay f32 rows")))?;
        if let Some(other) = parts.iter().find(|p| (p.ty(), p.cols()) != (ty, cols)) {
            return Err(Error::Engine(format!(
                "{what}: a {ty} matrix of {cols} columns and a {} one of {} packed together",
                other.ty(),
                other.cols()
            )));
        }
        let rows: usize = parts.iter().map(|p| p.rows()).sum();
        let groups = cols.div_ceil(GROUP);
        let bits = format.bits as usize;
        let supers = cols / 256;
        let integers = groups * bits * rows;
        let (per_super, sub) = match format.scales {
            Scales::None => (0, 0),
            Scales::D => (0, (groups * rows).div_ceil(2)),
            Scales::DM => (0, groups * rows),
            Scales::K4 => (supers * rows, (groups * rows).div_ceil(2)),
            Scales::K6 | Scales::K2 => (supers * rows, (2 * groups * rows).div_ceil(4)),
        };
        let total = integers + per_super + sub;
        let index = |n: usize| u32::try_from(n).ok();
        let (Some(_), Some(rows32), Some(cols32)) = (index(total), index(rows), index(cols)) else {
            return Err(Error::Engine(format!(
                "{what}: {rows} rows of {cols} {ty} values take {total} words on the GPU, past \
                 32-bit indices"
            )));
        };
        let mut p = Self {
            format,
            rows: rows32,
            cols: cols32,
            scales_at: integers as u32,
            sub_at: (integers + per_super) as u32,
            words: vec![0; total],
        };
        let mut r = 0;
        for part in parts {
            if cols > 0 {
                let bytes =
                    row_bytes(ty, cols).map_err(|e| Error::Engine(format!("{what}: {e}")))?;
                for row in part.data().chunks_exact(bytes) {
                    p.put_row(ty, r, row);
                    r += 1;
                }
            }
        }
        Ok(p)
    }

    /// The most words a row of `cols` values takes in `format`: its integers, its scales per
    /// 256 values and per group, and a word of rounding.
    pub fn row_words_at_most(format: BlockFormat, cols: usize) -> usize {
        let groups = cols.div_ceil(GROUP);
        groups * format.bits as usize + cols / 256 + groups + 1
    }

    /// Row `r` from its ggml bytes.
    fn put_row(&mut self, ty: GgmlType, r: usize, bytes: &[u8]) {
        if let Decode::F16 | Decode::Bf16 = self.format.decode {
            for (k, b) in bytes.as_chunks::<2>().0.iter().enumerate() {
                self.put(r, k, u32::from(u16::from_le_bytes(*b)));
            }
            return;
        }
        let len = ty.block_len();
        let mut q = [0u8; 256];
        let mut scales = Vec::with_capacity(18);
        for (i, block) in bytes.chunks_exact(ty.block_bytes()).enumerate() {
            scales.clear();
            block_integers(ty, block, &mut q[..len], &mut scales);
            for (j, &v) in q[..len].iter().enumerate() {
                self.put(r, i * len + j, u32::from(v));
            }
            self.put_scales(r, i, &scales);
        }
    }

    /// Value `k` of row `r`.
    fn put(&mut self, r: usize, k: usize, v: u32) {
        let (rows, bits) = (self.rows as usize, self.format.bits as usize);
        let (g, bit) = (k / GROUP, (k % GROUP) * bits);
        let (j, s) = (g * bits + bit / 32, bit % 32);
        self.words[j * rows + r] |= v << s;
        if s + bits > 32 {
            self.words[(j + 1) * rows + r] |= v >> (32 - s);
        }
    }

    /// The scales of block `i` of row `r`, as [`block_integers`] gives them.
    fn put_scales(&mut self, r: usize, i: usize, s: &[u16]) {
        let rows = self.rows as usize;
        let (at, sub) = (self.scales_at as usize, self.sub_at as usize);
        let w = &mut self.words;
        // entry `e` of `width` bits, `32 / width` to a word, from word `from`
        fn pack(w: &mut [u32], from: usize, e: usize, width: usize, v: u16) {
            let per = 32 / width;
            w[from + e / per] |= u32::from(v) << (width * (e % per));
        }
        match self.format.scales {
            Scales::None => {}
            // block i is group i
            Scales::D => pack(w, at, i * rows + r, 16, s[0]),
            Scales::DM => w[at + i * rows + r] = u32::from(s[0]) | u32::from(s[1]) << 16,
            // block i is super-block i: 8 groups of 32 (K4), 16 runs of 16 (K6, K2)
            Scales::K4 => {
                w[at + i * rows + r] = u32::from(s[0]) | u32::from(s[1]) << 16;
                for (j, &v) in s[2..10].iter().enumerate() {
                    pack(w, sub, (8 * i + j) * rows + r, 16, v);
                }
            }
            Scales::K6 => {
                w[at + i * rows + r] = u32::from(s[0]);
                for (j, &v) in s[1..17].iter().enumerate() {
                    pack(w, sub, (16 * i + j) * rows + r, 8, v);
                }
            }
            Scales::K2 => {
                w[at + i * rows + r] = u32::from(s[0]) | u32::from(s[1]) << 16;
                for (j, &v) in s[2..18].iter().enumerate() {
                    pack(w, sub, (16 * i + j) * rows + r, 8, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::quant::bytes_for;
    use std::sync::Arc;

    /// The bytes a weight of the module's table: the file's for every type but the K-quants
    /// from `Q3_K` up, whose per-256 scales take a word where the file's take 4 (`Q4_K`, `Q5_K`)
    /// or 2 (`Q3_K`, `Q6_K`) bytes, and whose 6-bit scales (and mins) of `Q3_K`, `Q4_K` and
    /// `Q5_K` take a byte each where the file packs them into 12 bytes (`Q2_K`'s take the
    /// file's 84 bytes: its `d` and `dmin` a word, its scales' bytes as they are).
    #[test]
    fn a_packed_matrix_takes_about_its_files_bytes() {
        let (rows, cols) = (64, 512);
        for ty in GgmlType::ALL {
            let file = bytes_for(ty, rows, cols).unwrap();
            let m = QuantMatrix::new(ty, rows, cols, Arc::new(vec![0u8; file]), 0).unwrap();
            let Some(_) = BlockFormat::of(ty) else {
                assert_eq!(ty, GgmlType::F32);
                assert!(Packed::new("f32", &[&m]).is_err());
                continue;
            };
            let packed = 4 * Packed::new("m", &[&m]).unwrap().words.len();
            let per_weight = packed as f64 / (rows * cols) as f64;
            let want = match ty {
                GgmlType::Q4_K => 148.0 / 256.0,
                GgmlType::Q5_K => 180.0 / 256.0,
                GgmlType::Q3_K => 116.0 / 256.0,
                GgmlType::Q6_K => 212.0 / 256.0,
                _ => file as f64 / (rows * cols) as f64,
            };
            assert_eq!(per_weight, want, "{ty}");
        }
    }
}
