//! IR → protobuf: [`to_proto`], total (every IR value has a message).

use crate::pb;
use xthunk_core::ir::{
    Access, AllocationKind, BufferAllocation, DType, Dim3, Executable, MemorySpace, Module,
    ModuleImage, ModuleOptions, Scalar, Slice, TensorSpec,
};

/// Converts a program to its protobuf message. Total: every IR value has a message.
pub fn to_proto(exe: &Executable) -> pb::Executable {
    let signature = if exe.signature.parameters.is_empty() && exe.signature.outputs.is_empty() {
        None
    } else {
        Some(pb::Signature {
            parameters: exe.signature.parameters.iter().map(tensor_to).collect(),
            outputs: exe.signature.outputs.iter().map(tensor_to).collect(),
        })
    };
    pb::Executable {
        abi_version: exe.abi_version,
        name: exe.name.clone(),
        allocations: exe.allocations.iter().map(allocation_to).collect(),
        modules: exe.modules.iter().map(module_to).collect(),
        entry: super::thunk::list_to(&exe.entry),
        signature,
    }
}

pub(super) fn dtype_to(d: DType) -> pb::DType {
    match d {
        DType::Pred => pb::DType::DtypePred,
        DType::I8 => pb::DType::DtypeI8,
        DType::U8 => pb::DType::DtypeU8,
        DType::I32 => pb::DType::DtypeI32,
        DType::I64 => pb::DType::DtypeI64,
        DType::F16 => pb::DType::DtypeF16,
        DType::BF16 => pb::DType::DtypeBf16,
        DType::F32 => pb::DType::DtypeF32,
        DType::F64 => pb::DType::DtypeF64,
    }
}

fn tensor_to(t: &TensorSpec) -> pb::TensorSpec {
    pb::TensorSpec {
        name: t.name.clone(),
        dtype: dtype_to(t.dtype) as i32,
        dims: t.dims.clone(),
        allocation: t.allocation,
    }
}

fn allocation_to(a: &BufferAllocation) -> pb::BufferAllocation {
    use pb::buffer_allocation::Kind;
    let kind = match &a.kind {
        AllocationKind::Parameter(n) => Kind::Parameter(*n),
        AllocationKind::Output(n) => Kind::Output(*n),
        AllocationKind::Temp => Kind::Temp(pb::buffer_allocation::Temp {}),
        AllocationKind::Constant(bytes) => Kind::Constant(bytes.clone()),
    };
    let memory_space = match a.memory_space {
        // Device is the default: written as UNSPECIFIED so that text programs stay short.
        MemorySpace::Device => pb::MemorySpace::Unspecified,
        MemorySpace::HostPinned => pb::MemorySpace::HostPinned,
        MemorySpace::Unified => pb::MemorySpace::Unified,
        MemorySpace::Collective => pb::MemorySpace::Collective,
    };
    pb::BufferAllocation {
        index: a.index,
        size: a.size,
        alignment: a.alignment,
        kind: Some(kind),
        memory_space: memory_space as i32,
    }
}

fn module_to(m: &Module) -> pb::Module {
    use pb::module_image::Kind;
    let images = m
        .images
        .iter()
        .map(|img| {
            let kind = match img {
                ModuleImage::Standard => Kind::Standard(pb::StandardImage {}),
                ModuleImage::Source { code } => {
                    Kind::Source(pb::SourceImage { code: code.clone() })
                }
                ModuleImage::Ptx { code } => Kind::Ptx(pb::PtxImage { code: code.clone() }),
                ModuleImage::Cubin { arch, data } => Kind::Cubin(pb::BinaryImage {
                    arch: arch.clone(),
                    data: data.clone(),
                }),
                ModuleImage::Hsaco { arch, data } => Kind::Hsaco(pb::BinaryImage {
                    arch: arch.clone(),
                    data: data.clone(),
                }),
                ModuleImage::Host { library } => Kind::Host(pb::HostImage {
                    library: library.clone(),
                }),
            };
            pb::ModuleImage { kind: Some(kind) }
        })
        .collect();
    let o = &m.options;
    let options = (*o != ModuleOptions::default()).then(|| pb::ModuleOptions {
        defines: o.defines.clone(),
        fast_math: o.fast_math,
        headers: o
            .headers
            .iter()
            .map(|h| pb::HeaderSource {
                name: h.name.clone(),
                code: h.code.clone(),
            })
            .collect(),
    });
    pb::Module {
        name: m.name.clone(),
        images,
        options,
    }
}

pub(super) fn slice_to(s: &Slice) -> Option<pb::Slice> {
    Some(pb::Slice {
        allocation: s.allocation,
        offset: s.offset,
        size: s.size,
    })
}

pub(super) fn dim3_to(d: &Dim3) -> Option<pb::Dim3> {
    Some(pb::Dim3 {
        x: d.x,
        y: d.y,
        z: d.z,
    })
}

pub(super) fn access_to(a: Access) -> pb::Access {
    match a {
        Access::Read => pb::Access::Read,
        Access::Write => pb::Access::Write,
        Access::ReadWrite => pb::Access::ReadWrite,
    }
}

pub(super) fn scalar_to(s: &Scalar) -> pb::Scalar {
    use pb::scalar::Value;
    let value = match *s {
        Scalar::Pred(v) => Value::Pred(v),
        Scalar::I8(v) => Value::I8(i32::from(v)),
        Scalar::U8(v) => Value::U8(u32::from(v)),
        Scalar::I32(v) => Value::I32(v),
        Scalar::I64(v) => Value::I64(v),
        Scalar::F16(v) => Value::F16(u32::from(v)),
        Scalar::BF16(v) => Value::Bf16(u32::from(v)),
        Scalar::F32(v) if decimal_is_exact_f32(v) => Value::F32(v),
        Scalar::F32(v) => Value::F32Bits(v.to_bits()),
        Scalar::F64(v) if decimal_is_exact_f64(v) => Value::F64(v),
        Scalar::F64(v) => Value::F64Bits(v.to_bits()),
    };
    pb::Scalar { value: Some(value) }
}

/// True when the text format carries `v` exactly as a decimal: not a NaN (the text has one
/// `nan`, without sign or payload), and its decimal reads back as the same bits. The text
/// writer prints an f32 in its shortest form (or, when integral, exactly) and the reader
/// parses it as an f64 and rounds that to f32; for a few values the two roundings disagree
/// (0x15ae43fd prints as `0.00000000000000000000000007038531`, which reads back as
/// 0x15ae43fc), so those are written as bits too.
pub(crate) fn decimal_is_exact_f32(v: f32) -> bool {
    if v.is_nan() {
        return false;
    }
    if !v.is_finite() || v.fract() == 0.0 {
        // `inf`, `-inf`, and integral values printed in full (exact in an f64).
        return true;
    }
    // What the reader does: the decimal as an f64, then rounded to the nearest f32.
    v.to_string()
        .parse::<f64>()
        .is_ok_and(|d| (d as f32).to_bits() == v.to_bits())
}

/// True when the text format carries `v` exactly: every f64 but a NaN (the shortest decimal
/// of an f64 reads back as the same f64).
pub(crate) fn decimal_is_exact_f64(v: f64) -> bool {
    !v.is_nan()
}
