//! Protobuf → IR: [`from_proto`], which checks what the IR's types cannot express, then
//! validates.

use super::fields::{Loc, dtype_from};
use crate::{ProtoError, pb};
use xthunk_core::Program;
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, BufferAllocation, Executable, HeaderSource, IoAlias, MemorySpace,
    Module, ModuleImage, ModuleOptions, Signature, TensorSpec,
};
use xthunk_core::verify;

/// Converts a protobuf message to a program and validates it (field presence, enum values and
/// ranges here, then [`verify`]).
pub fn from_proto(msg: &pb::Executable) -> Result<Executable, ProtoError> {
    let exe = convert(msg)?;
    verify(&exe)?;
    Ok(exe)
}

/// [`from_proto`] as a [`Program`]: verified once, by [`Program::new`].
pub fn program_from_proto(msg: &pb::Executable) -> Result<Program, ProtoError> {
    Ok(Program::new(convert(msg)?)?)
}

/// The conversion of [`from_proto`], without [`verify`].
fn convert(msg: &pb::Executable) -> Result<Executable, ProtoError> {
    let root = Loc::Root;
    // Checked first: a program of another ABI version may use thunk kinds this build does not
    // know, and the version is the error to report.
    if msg.abi_version == 0 {
        return Err(root.invalid(
            "abi_version",
            format!("is missing (0); this build reads ABI version {ABI_VERSION}"),
        ));
    }
    if msg.abi_version != ABI_VERSION {
        return Err(root.invalid(
            "abi_version",
            format!(
                "program ABI version {} is not supported (this build reads version {ABI_VERSION})",
                msg.abi_version
            ),
        ));
    }

    let allocations = msg
        .allocations
        .iter()
        .enumerate()
        .map(|(i, a)| allocation_from(a, i))
        .collect::<Result<Vec<_>, _>>()?;
    let modules = msg
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| module_from(m, i))
        .collect::<Result<Vec<_>, _>>()?;
    let signature = match &msg.signature {
        None => Signature::default(),
        Some(s) => Signature {
            parameters: tensors_from(&s.parameters, "parameters")?,
            outputs: tensors_from(&s.outputs, "outputs")?,
        },
    };
    let entry = super::thunk::list_from(&msg.entry, &root, "entry")?;

    let exe = Executable {
        abi_version: msg.abi_version,
        name: msg.name.clone(),
        allocations,
        modules,
        entry,
        signature,
        aliases: msg
            .aliases
            .iter()
            .map(|a| IoAlias {
                output: a.output,
                parameter: a.parameter,
            })
            .collect(),
    };
    Ok(exe)
}

fn tensors_from(specs: &[pb::TensorSpec], list: &str) -> Result<Vec<TensorSpec>, ProtoError> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(TensorSpec {
                name: s.name.clone(),
                dtype: dtype_from(s.dtype, &Loc::Root, &format!("signature.{list}[{i}].dtype"))?,
                dims: s.dims.clone(),
                allocation: s.allocation,
            })
        })
        .collect()
}

fn allocation_from(a: &pb::BufferAllocation, i: usize) -> Result<BufferAllocation, ProtoError> {
    use pb::buffer_allocation::Kind;
    let root = Loc::Root;
    let kind = match &a.kind {
        Some(Kind::Parameter(n)) => AllocationKind::Parameter(*n),
        Some(Kind::Output(n)) => AllocationKind::Output(*n),
        Some(Kind::Temp(_)) => AllocationKind::Temp,
        Some(Kind::Constant(bytes)) => AllocationKind::Constant(bytes.clone()),
        None => {
            return Err(root.invalid(
                format!("allocations[{i}].kind"),
                "no kind is set (expected parameter, output, temp or constant)",
            ));
        }
    };
    let memory_space = match pb::MemorySpace::try_from(a.memory_space) {
        Ok(pb::MemorySpace::Unspecified | pb::MemorySpace::Device) => MemorySpace::Device,
        Ok(pb::MemorySpace::HostPinned) => MemorySpace::HostPinned,
        Ok(pb::MemorySpace::Unified) => MemorySpace::Unified,
        Ok(pb::MemorySpace::Collective) => MemorySpace::Collective,
        Err(_) => {
            return Err(root.invalid(
                format!("allocations[{i}].memory_space"),
                format!("unknown memory space value {}", a.memory_space),
            ));
        }
    };
    Ok(BufferAllocation {
        index: a.index,
        size: a.size,
        alignment: a.alignment,
        kind,
        memory_space,
    })
}

fn module_from(m: &pb::Module, i: usize) -> Result<Module, ProtoError> {
    use pb::module_image::Kind;
    let images = m
        .images
        .iter()
        .enumerate()
        .map(|(j, img)| {
            Ok(match &img.kind {
                Some(Kind::Standard(_)) => ModuleImage::Standard,
                Some(Kind::Source(s)) => ModuleImage::Source {
                    code: s.code.clone(),
                },
                Some(Kind::Ptx(p)) => ModuleImage::Ptx {
                    code: p.code.clone(),
                },
                Some(Kind::Cubin(b)) => ModuleImage::Cubin {
                    arch: b.arch.clone(),
                    data: b.data.clone(),
                },
                Some(Kind::Hsaco(b)) => ModuleImage::Hsaco {
                    arch: b.arch.clone(),
                    data: b.data.clone(),
                },
                Some(Kind::Host(h)) => ModuleImage::Host {
                    library: h.library.clone(),
                },
                None => {
                    return Err(Loc::Root.invalid(
                        format!("modules[{i}].images[{j}]"),
                        "no image kind is set (expected standard, source, ptx, cubin, hsaco or host)",
                    ));
                }
            })
        })
        .collect::<Result<Vec<_>, ProtoError>>()?;
    let options = m
        .options
        .as_ref()
        .map(|o| ModuleOptions {
            defines: o.defines.clone(),
            fast_math: o.fast_math,
            headers: o
                .headers
                .iter()
                .map(|h| HeaderSource {
                    name: h.name.clone(),
                    code: h.code.clone(),
                })
                .collect(),
        })
        .unwrap_or_default();
    Ok(Module {
        name: m.name.clone(),
        images,
        options,
    })
}
