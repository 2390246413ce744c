//! IR → protobuf: [`to_proto`], total (every IR value has a message).

use super::fields::dtype_to;
use crate::pb;
use xthunk_core::ir::{
    AllocationKind, BufferAllocation, Executable, MemorySpace, Module, ModuleImage, ModuleOptions,
    TensorSpec,
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
        aliases: exe
            .aliases
            .iter()
            .map(|a| pb::InputOutputAlias {
                output: a.output,
                parameter: a.parameter,
            })
            .collect(),
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
