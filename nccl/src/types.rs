//! xthunk element types and reduction operators as NCCL's `ncclDataType_t` and `ncclRedOp_t`.

use crate::sys;
use crate::version::{BF16_SINCE, NcclVersion};
use xthunk_core::collectives::ReduceOp;
use xthunk_core::ir::DType;
use xthunk_core::{Error, Result};

/// The `ncclDataType_t` for `dtype` on a library of `version`. `pred` travels as `ncclUint8`
/// (one byte, 0 or 1). `bf16` needs 2.10 or later; anything else is `Unsupported`.
pub fn nccl_dtype(
    dtype: DType,
    version: NcclVersion,
    library: &str,
) -> Result<sys::ncclDataType_t> {
    Ok(match dtype {
        DType::Pred | DType::U8 => sys::ncclUint8,
        DType::I8 => sys::ncclInt8,
        DType::I32 => sys::ncclInt32,
        DType::I64 => sys::ncclInt64,
        DType::F16 => sys::ncclFloat16,
        DType::BF16 if version >= BF16_SINCE => sys::ncclBfloat16,
        DType::BF16 => {
            return Err(Error::Unsupported {
                backend: library.into(),
                feature: format!(
                    "bf16 collectives ({library} {version} is older than {BF16_SINCE})"
                ),
            });
        }
        DType::F32 => sys::ncclFloat32,
        DType::F64 => sys::ncclFloat64,
        DType::U32 => sys::ncclUint32,
        DType::U64 => sys::ncclUint64,
        DType::I16 | DType::U16 => {
            return Err(Error::Unsupported {
                backend: library.into(),
                feature: format!("{dtype} collectives (NCCL and RCCL have no 16-bit integers)"),
            });
        }
        DType::C64 | DType::C128 | DType::F8E4M3FN | DType::F8E5M2 => {
            return Err(Error::Unsupported {
                backend: library.into(),
                feature: format!(
                    "{dtype} collectives (xthunk's collectives take no complex or 8-bit \
                     float types yet)"
                ),
            });
        }
    })
}

/// The `ncclRedOp_t` for `op` over `dtype`. On `pred` (0 or 1 in a byte), `max` is a logical
/// or, `min` and `prod` a logical and; `sum` is not a `pred` (it counts past 1) and is
/// `Unsupported`.
pub fn nccl_op(op: ReduceOp, dtype: DType, library: &str) -> Result<sys::ncclRedOp_t> {
    if dtype == DType::Pred && op == ReduceOp::Sum {
        return Err(Error::Unsupported {
            backend: library.into(),
            feature: "sum over pred (use max for a logical or)".into(),
        });
    }
    Ok(match op {
        ReduceOp::Sum => sys::ncclSum,
        ReduceOp::Prod => sys::ncclProd,
        ReduceOp::Min => sys::ncclMin,
        ReduceOp::Max => sys::ncclMax,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_maps_on_a_current_library() {
        let v = NcclVersion::new(2, 32, 3);
        let want = [
            (DType::Pred, sys::ncclUint8),
            (DType::I8, sys::ncclInt8),
            (DType::U8, sys::ncclUint8),
            (DType::I32, sys::ncclInt32),
            (DType::I64, sys::ncclInt64),
            (DType::F16, sys::ncclFloat16),
            (DType::BF16, sys::ncclBfloat16),
            (DType::F32, sys::ncclFloat32),
            (DType::F64, sys::ncclFloat64),
            (DType::U32, sys::ncclUint32),
            (DType::U64, sys::ncclUint64),
        ];
        // NCCL has no 16-bit integer type: those two are refused, every other type maps.
        // Nor are complex and the 8-bit floats (not collective types in xthunk yet).
        let none = [
            DType::I16,
            DType::U16,
            DType::C64,
            DType::C128,
            DType::F8E4M3FN,
            DType::F8E5M2,
        ];
        assert_eq!(want.len() + none.len(), DType::ALL.len());
        for (d, t) in want {
            assert_eq!(nccl_dtype(d, v, "nccl").ok(), Some(t), "{d}");
        }
        for d in none {
            let e = nccl_dtype(d, v, "nccl");
            assert!(matches!(e, Err(Error::Unsupported { .. })), "{d}: {e:?}");
        }
    }

    #[test]
    fn bf16_is_gated_on_the_version() {
        let e = nccl_dtype(DType::BF16, NcclVersion::new(2, 9, 9), "rccl");
        assert!(matches!(e, Err(Error::Unsupported { .. })), "{e:?}");
        assert!(nccl_dtype(DType::BF16, NcclVersion::new(2, 10, 3), "nccl").is_ok());
    }

    #[test]
    fn ops_map_to_the_header_values() {
        assert_eq!(nccl_op(ReduceOp::Sum, DType::F32, "nccl").ok(), Some(0));
        assert_eq!(nccl_op(ReduceOp::Prod, DType::F32, "nccl").ok(), Some(1));
        assert_eq!(nccl_op(ReduceOp::Max, DType::F32, "nccl").ok(), Some(2));
        assert_eq!(nccl_op(ReduceOp::Min, DType::F32, "nccl").ok(), Some(3));
        assert!(nccl_op(ReduceOp::Sum, DType::Pred, "nccl").is_err());
        assert!(nccl_op(ReduceOp::Max, DType::Pred, "nccl").is_ok());
    }
}
