//! A reader for NumPy `.npy` arrays of plain numbers (what npz sources hold).
//! Small enough to keep here rather than pull in a Python-literal parser
//! crate, and strict: every length is checked against the header, so a
//! truncated or doctored file is an error, never a panic.

use crate::datasets::DatasetError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Float,
    Int,
    Uint,
    Bool,
}

/// A parsed array: its shape and its raw element bytes.
#[derive(Debug)]
pub struct Npy<'a> {
    pub shape: Vec<u64>,
    kind: Kind,
    size: usize,
    big_endian: bool,
    data: &'a [u8],
}

impl<'a> Npy<'a> {
    /// Parses `bytes` (a whole `.npy` file); `file` names it in errors.
    pub fn parse(bytes: &'a [u8], file: &str) -> Result<Npy<'a>, DatasetError> {
        let bad = |m: String| DatasetError::invalid(file, m);
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(bad("not a .npy array (bad magic)".into()));
        }
        let (hlen, hstart): (usize, usize) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
            v => return Err(bad(format!(".npy format version {v} is not supported"))),
        };
        let header =
            bytes.get(hstart..hstart.saturating_add(hlen)).ok_or_else(|| bad("truncated .npy header".into()))?;
        let header = std::str::from_utf8(header).map_err(|_| bad("the .npy header is not text".into()))?;
        let descr = dict_value(header, "descr").ok_or_else(|| bad("no 'descr' in the .npy header".into()))?;
        let descr = descr.trim_matches(|c| c == '\'' || c == '"');
        let fortran = dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True"));
        let shape_s = dict_value(header, "shape").ok_or_else(|| bad("no 'shape' in the .npy header".into()))?;
        let shape: Vec<u64> = shape_s
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>().map_err(|_| bad(format!("bad shape {shape_s}"))))
            .collect::<Result<_, _>>()?;
        if fortran && shape.len() > 1 {
            return Err(bad("Fortran-ordered arrays are not supported".into()));
        }
        // The byte-order mark is one ASCII character; anything else fails the dtype checks below.
        let (order, code) = if descr.is_char_boundary(1) { descr.split_at(1) } else { ("", descr) };
        let big_endian = order == ">";
        let kind = match code.chars().next() {
            Some('f') => Kind::Float,
            Some('i') => Kind::Int,
            Some('u') => Kind::Uint,
            Some('b') => Kind::Bool,
            _ => {
                return Err(bad(format!(
                    "dtype {descr} is not a plain number (object and string arrays are not read)"
                )));
            }
        };
        let size: usize = code[1..].parse().map_err(|_| bad(format!("bad dtype {descr}")))?;
        let valid = match kind {
            Kind::Float => matches!(size, 2 | 4 | 8),
            Kind::Int | Kind::Uint => matches!(size, 1 | 2 | 4 | 8),
            Kind::Bool => size == 1,
        };
        if !valid || !matches!(order, "<" | ">" | "|" | "=") {
            return Err(bad(format!("dtype {descr} is not supported")));
        }
        let count =
            shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(|| bad("shape overflows".into()))?;
        let data = &bytes[hstart + hlen..];
        if (data.len() as u64) != count.saturating_mul(size as u64) {
            return Err(bad(format!(
                "holds {} data bytes, its shape {shape:?} of {descr} needs {}; the file is truncated or corrupt",
                data.len(),
                count.saturating_mul(size as u64)
            )));
        }
        Ok(Npy { shape, kind, size, big_endian, data })
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.size
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn bytes8(&self, chunk: &[u8]) -> [u8; 8] {
        let mut b = [0u8; 8];
        if self.big_endian {
            for (i, &x) in chunk.iter().rev().enumerate() {
                b[i] = x;
            }
        } else {
            b[..chunk.len()].copy_from_slice(chunk);
        }
        b
    }

    fn value(&self, chunk: &[u8]) -> f64 {
        let b = self.bytes8(chunk);
        match (self.kind, self.size) {
            (Kind::Float, 2) => f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
            (Kind::Float, 4) => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            (Kind::Float, _) => f64::from_le_bytes(b),
            (Kind::Int, _) => self.int(chunk) as f64,
            (Kind::Uint | Kind::Bool, _) => u64::from_le_bytes(b) as f64,
        }
    }

    /// Elements as f32 (any numeric dtype).
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.chunks_exact(self.size).map(|c| self.value(c) as f32).collect()
    }

    /// Elements as i64; an error names the first element that is not an integer.
    pub fn to_i64(&self, file: &str) -> Result<Vec<i64>, DatasetError> {
        self.data
            .chunks_exact(self.size)
            .enumerate()
            .map(|(i, c)| {
                let v = self.value(c);
                if self.kind != Kind::Float || (v.fract() == 0.0 && v.abs() < 9.0e15) {
                    Ok(if self.kind == Kind::Float { v as i64 } else { self.int(c) })
                } else {
                    Err(DatasetError::invalid(file, format!("element {i} is {v}, not an integer")))
                }
            })
            .collect()
    }

    /// Exact integer value (f64 would round 64-bit ids).
    fn int(&self, chunk: &[u8]) -> i64 {
        let b = self.bytes8(chunk);
        let bits = self.size as u32 * 8;
        let v = u64::from_le_bytes(b);
        match self.kind {
            Kind::Int if bits < 64 => ((v << (64 - bits)) as i64) >> (64 - bits),
            _ => v as i64,
        }
    }
}

/// The text after `'key':` up to the next top-level comma (tuples kept whole).
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header.find(&format!("'{key}'")).or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[at + key.len() + 2..].trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&rest[..=i]);
                }
            }
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

/// IEEE half to single precision (OGB papers100M stores features as float16).
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let frac = (h & 0x3ff) as u32;
    let bits = match (exp, frac) {
        (0, 0) => sign,
        (0, f) => {
            // Subnormal: renormalise.
            let mut e = 127 - 15 + 1;
            let mut f = f;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, f) => sign | 0x7f80_0000 | (f << 13),
        (e, f) => sign | ((e + 127 - 15) << 23) | (f << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend_from_slice(&(h.len() as u16).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        b.extend_from_slice(data);
        b
    }

    #[test]
    fn reads_numbers_of_each_width() {
        let b = npy("<i4", "(3,)", &[1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0]);
        let a = Npy::parse(&b, "a.npy").unwrap();
        assert_eq!((a.shape.clone(), a.to_i64("a").unwrap()), (vec![3], vec![1, -1, 7]));
        let b = npy("|i1", "(2,)", &[0xfe, 3]);
        assert_eq!(Npy::parse(&b, "b").unwrap().to_i64("b").unwrap(), vec![-2, 3]);
        let b = npy("<f4", "(1, 2)", &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
        let a = Npy::parse(&b, "c").unwrap();
        assert_eq!((a.shape.clone(), a.to_f32()), (vec![1, 2], vec![1.0, 2.0]));
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
    }

    #[test]
    fn truncated_or_odd_arrays_are_errors() {
        let b = npy("<i4", "(3,)", &[1, 0, 0, 0]);
        assert!(Npy::parse(&b, "t.npy").unwrap_err().to_string().contains("truncated"));
        let b = npy("|O", "(1,)", &[0; 8]);
        assert!(Npy::parse(&b, "o.npy").unwrap_err().to_string().contains("not a plain number"));
        // A multi-byte character where the byte-order mark goes (used to panic slicing it).
        let b = npy("é4", "(1,)", &[0; 4]);
        assert!(Npy::parse(&b, "u.npy").unwrap_err().to_string().contains("not"));
        for cut in 0..20 {
            let b = npy("<f8", "(2,)", &[0; 16]);
            assert!(Npy::parse(&b[..cut], "x").is_err());
        }
    }
}
