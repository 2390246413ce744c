//! `.npy` files for `xthunk run`: reading parameters (checked against the signature) and
//! writing outputs. The header is handled by `npyz`; the data is raw little-endian bytes, as
//! the runtime stores tensors.
//!
//! | xthunk | numpy dtype |
//! |---|---|
//! | pred | `\|b1` |
//! | i8, u8 | `\|i1`, `\|u1` |
//! | i32, i64 | `<i4`, `<i8` |
//! | f16, f32, f64 | `<f2`, `<f4`, `<f8` |
//! | bf16 | no numpy dtype: the raw bits, `<u2` (or a 2-byte void `V2`) on input, `<u2` on output |
//!
//! Big-endian arrays (`>f4`, ...) are accepted and byte-swapped. Fortran-order arrays are
//! accepted only when their memory layout equals C order (at most one dimension above 1).

use super::error::{CliError, CliResult};
use npyz::{Endianness, NpyHeader, TypeChar, TypeStr, WriteOptions, WriterBuilder};
use std::path::{Path, PathBuf};
use xthunk::ir::{DType, TensorSpec};

/// The numpy type string written for an xthunk element type.
pub fn type_str(dtype: DType) -> &'static str {
    match dtype {
        DType::Pred => "|b1",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// True when a numpy element type (type character and size) holds `dtype`.
fn accepts(dtype: DType, ty: &TypeStr) -> bool {
    let size = ty.size_field();
    match (dtype, ty.type_char()) {
        (DType::Pred, TypeChar::Bool) => size == 1,
        (DType::I8, TypeChar::Int) => size == 1,
        (DType::U8, TypeChar::Uint) => size == 1,
        (DType::I32, TypeChar::Int) => size == 4,
        (DType::I64, TypeChar::Int) => size == 8,
        (DType::F16, TypeChar::Float) => size == 2,
        (DType::F32, TypeChar::Float) => size == 4,
        (DType::F64, TypeChar::Float) => size == 8,
        // bfloat16 has no numpy dtype: raw bits as uint16 or a 2-byte void.
        (DType::BF16, TypeChar::Uint | TypeChar::RawData) => size == 2,
        _ => false,
    }
}

fn shape_str(dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("[{}]", d.join(","))
}

/// What a parameter needs, e.g. `f32[64,512] (numpy '<f4')`.
fn wanted(spec: &TensorSpec) -> String {
    let extra = if spec.dtype == DType::BF16 {
        ", raw bfloat16 bits"
    } else {
        ""
    };
    format!(
        "{}{} (numpy '{}'{extra})",
        spec.dtype,
        shape_str(&spec.dims),
        type_str(spec.dtype)
    )
}

/// The placeholder of a per-rank `--input` pattern (`x=shard{rank}.npy`).
pub const RANK_PLACEHOLDER: &str = "{rank}";

/// Reads the input of `rank` from `pattern`: the file itself, or, when the pattern holds
/// `{rank}`, the file it names for that rank (checked like any input; an error names the
/// rank and the pattern).
pub fn read_rank_input(spec: &TensorSpec, pattern: &Path, rank: usize) -> CliResult<Vec<u8>> {
    let text = pattern.to_string_lossy();
    if !text.contains(RANK_PLACEHOLDER) {
        return read_input(spec, pattern);
    }
    let path = PathBuf::from(text.replace(RANK_PLACEHOLDER, &rank.to_string()));
    read_input(spec, &path).map_err(|e| match e {
        CliError::Npy {
            name,
            path,
            message,
        } => CliError::Npy {
            message: format!(
                "{message} (the file of rank {rank}, from --input {name}={})",
                pattern.display()
            ),
            name,
            path,
        },
        other => other,
    })
}

/// Reads `path` as the value of parameter `spec`: checks dtype and shape and returns the
/// little-endian bytes.
pub fn read_input(spec: &TensorSpec, path: &Path) -> CliResult<Vec<u8>> {
    let fail = |message: String| CliError::Npy {
        name: spec.name.clone(),
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read the file: {e}")))?;
    let mut reader: &[u8] = &bytes;
    let header = NpyHeader::from_reader(&mut reader)
        .map_err(|e| fail(format!("not a valid .npy file: {e}")))?;
    let data = reader;
    let npyz::DType::Plain(ty) = header.dtype() else {
        return Err(fail(format!(
            "structured dtype {} is not supported; the parameter is {}",
            header.dtype().descr(),
            wanted(spec)
        )));
    };
    if !accepts(spec.dtype, &ty) {
        return Err(fail(format!(
            "dtype '{ty}' does not match the parameter, which is {}",
            wanted(spec)
        )));
    }
    if header.shape() != spec.dims.as_slice() {
        return Err(fail(format!(
            "shape {} does not match the parameter, which is {}",
            shape_str(header.shape()),
            wanted(spec)
        )));
    }
    if header.order() == npyz::Order::Fortran
        && header.shape().iter().filter(|d| **d > 1).count() > 1
    {
        return Err(fail(
            "Fortran-order arrays are not supported; save np.ascontiguousarray(a)".into(),
        ));
    }
    let expected = spec
        .byte_size()
        .ok_or_else(|| fail("the parameter's byte size overflows".into()))?;
    if data.len() as u64 != expected {
        let what = if (data.len() as u64) < expected {
            "truncated"
        } else {
            "has trailing bytes"
        };
        return Err(fail(format!(
            "the file is {what}: the data holds {} bytes, {} are needed",
            data.len(),
            expected
        )));
    }
    let mut out = data.to_vec();
    let width = spec.dtype.size();
    if ty.endianness() == Endianness::Big && width > 1 {
        for chunk in out.chunks_exact_mut(width) {
            chunk.reverse();
        }
    }
    if spec.dtype == DType::Pred {
        if let Some(i) = out.iter().position(|b| *b > 1) {
            return Err(fail(format!(
                "element {i} of the bool array is {} (must be 0 or 1)",
                out[i]
            )));
        }
    }
    Ok(out)
}

/// The complete `.npy` file of a tensor: an `npyz` header, then `data` (little-endian).
pub fn encode(dtype: DType, dims: &[u64], data: &[u8]) -> std::io::Result<Vec<u8>> {
    let ty: TypeStr = type_str(dtype)
        .parse()
        .map_err(|e| std::io::Error::other(format!("numpy type string: {e}")))?;
    let mut out = Vec::with_capacity(data.len() + 128);
    WriteOptions::new_header_only()
        .dtype(npyz::DType::Plain(ty))
        .shape(dims)
        .writer(&mut out)
        .write_header_only()?;
    out.extend_from_slice(data);
    Ok(out)
}

/// Reads back a file written by [`encode`] (for tests): header and data bytes.
#[cfg(test)]
pub fn decode(bytes: &[u8]) -> std::io::Result<(String, Vec<u64>, Vec<u8>)> {
    use std::io::Read;
    let mut reader = bytes;
    let header = NpyHeader::from_reader(&mut reader)?;
    let mut data = vec![];
    reader.read_to_end(&mut data)?;
    Ok((header.dtype().descr(), header.shape().to_vec(), data))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn spec(dtype: DType, dims: &[u64]) -> TensorSpec {
        TensorSpec {
            name: "x".into(),
            dtype,
            dims: dims.to_vec(),
            allocation: 0,
        }
    }

    fn write_tmp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("xthunk-npy-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn every_dtype_round_trips() {
        for dt in DType::ALL {
            let data: Vec<u8> = (0..6 * dt.size()).map(|i| (i % 2) as u8).collect();
            let file = encode(dt, &[2, 3], &data).unwrap();
            let (descr, shape, back) = decode(&file).unwrap();
            assert_eq!(descr, format!("'{}'", type_str(dt)));
            assert_eq!(shape, vec![2, 3]);
            assert_eq!(back, data);
            let p = write_tmp(&format!("rt_{dt}.npy"), &file);
            assert_eq!(read_input(&spec(dt, &[2, 3]), &p).unwrap(), data);
        }
    }

    #[test]
    fn wrong_dtype_shape_and_truncation_are_named() {
        let file = encode(DType::F64, &[4], &[0; 32]).unwrap();
        let p = write_tmp("f64.npy", &file);
        let e = read_input(&spec(DType::F32, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("input `x`") && e.contains("'<f8'"), "{e}");
        let e = read_input(&spec(DType::F64, &[2, 2]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shape [4]"), "{e}");
        let p = write_tmp("short.npy", &file[..file.len() - 3]);
        let e = read_input(&spec(DType::F64, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
        let p = write_tmp("garbage.npy", b"not numpy");
        let e = read_input(&spec(DType::F64, &[4]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid .npy"), "{e}");
    }

    #[test]
    fn big_endian_is_swapped_and_bf16_takes_u2() {
        let ty = ">i4";
        let mut file = encode(DType::I32, &[1], &[0, 0, 0, 7]).unwrap();
        // Patch the header's dtype to big-endian (same length).
        let pos = file.windows(3).position(|w| w == b"<i4").unwrap();
        file[pos..pos + 3].copy_from_slice(ty.as_bytes());
        let p = write_tmp("be.npy", &file);
        assert_eq!(
            read_input(&spec(DType::I32, &[1]), &p).unwrap(),
            vec![7, 0, 0, 0]
        );
        let file = encode(DType::BF16, &[2], &[1, 2, 3, 4]).unwrap();
        let p = write_tmp("bf16.npy", &file);
        assert!(read_input(&spec(DType::BF16, &[2]), &p).is_ok());
        let e = read_input(&spec(DType::F16, &[2]), &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("'<u2'"), "{e}");
    }
}
