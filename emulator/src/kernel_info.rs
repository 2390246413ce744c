//! What an image says about each of its kernels, as far as the emulator reads it: the
//! parameters (offset and size of each, in order), the launch bound (the most threads per
//! block the kernel was compiled for) and its static shared memory.
//!
//! - PTX: the `.param` list of each `.entry` (offsets by natural alignment, or `.align`), and
//!   `.maxntid` / `.reqntid`; static shared memory is not summed (`None`).
//! - cubins: `.nv.info.<kernel>` (`EIATTR_KPARAM_INFO`: ordinal, offset and size of each
//!   parameter; `EIATTR_MAX_THREADS`: the launch bound; `EIATTR_CBANK_PARAM_SIZE`), and the
//!   size of `.nv.shared.<kernel>`.
//! - AMD code objects: the `NT_AMDGPU_METADATA` note (MessagePack): `.args` without the
//!   hidden ones, `.max_flat_workgroup_size`, `.group_segment_fixed_size`.
//!
//! What an image does not say is `None`: the standard library's signature stands in for the
//! parameters, the device's limits for the rest. A malformed entry is skipped (`None` too),
//! never a panic.

use crate::msgpack::{self, Value};
use crate::section::Section;

/// Where one parameter lies in the kernel's parameter buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamSlot {
    pub offset: usize,
    pub size: usize,
}

/// What an image says about one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelInfo {
    /// The parameters, in order (hidden ones excluded).
    pub params: Option<Vec<ParamSlot>>,
    /// The most threads per block the kernel accepts (its launch bounds).
    pub max_threads: Option<u32>,
    /// Static shared memory of one block, in bytes.
    pub static_shared: Option<u32>,
}

/// The kernels of an image, by name.
pub type Kernels = Vec<(String, KernelInfo)>;

/// The alignment the C ABI gives a parameter of `size` bytes: its size for the scalar sizes,
/// at most 8 (the largest power of two dividing a struct's size, up to 8).
pub fn natural_align(size: usize) -> usize {
    if size == 0 {
        return 1;
    }
    1 << size.trailing_zeros().min(3)
}

/// Lays out parameters of `(size, alignment)` one after the other, each at the next multiple
/// of its alignment (as C packs a struct, and as the drivers pack a parameter buffer).
pub fn natural_layout(params: impl IntoIterator<Item = (usize, usize)>) -> Option<Vec<ParamSlot>> {
    let mut out = vec![];
    let mut off = 0usize;
    for (size, align) in params {
        off = off.checked_next_multiple_of(align.max(1))?;
        out.push(ParamSlot { offset: off, size });
        off = off.checked_add(size)?;
    }
    Some(out)
}

/// The size of a parameter buffer holding `params`: the end of the last one.
pub fn buffer_end(params: &[ParamSlot]) -> usize {
    params
        .iter()
        .map(|p| p.offset.saturating_add(p.size))
        .max()
        .unwrap_or(0)
}

// ---- PTX ------------------------------------------------------------------------------------

/// The size of a PTX fundamental type (`.u64`, `.f32`, `.b8`, …).
fn ptx_type_size(t: &str) -> Option<usize> {
    let bits: usize = t.get(2..)?.parse().ok()?;
    let kind = t.get(..2)?;
    (matches!(kind, ".u" | ".s" | ".b" | ".f") && matches!(bits, 8 | 16 | 32 | 64))
        .then_some(bits / 8)
}

/// `(size, alignment)` of one PTX parameter declaration (`.param .u64 name`, `.param .align
/// 8 .b8 name[16]`, `.param .u64 .ptr .global .align 4 name`).
fn ptx_param(decl: &str) -> Option<(usize, usize)> {
    let words: Vec<&str> = decl.split_whitespace().collect();
    if words.first() != Some(&".param") {
        return None;
    }
    let ty = words.iter().position(|w| ptx_type_size(w).is_some())?;
    let elem = ptx_type_size(words[ty])?;
    // `.align N` before the type aligns the parameter; after `.ptr` it describes the pointee.
    let align = words[..ty]
        .windows(2)
        .find(|w| w[0] == ".align")
        .and_then(|w| w[1].parse::<usize>().ok())
        .unwrap_or(elem);
    let name = words.last()?;
    let count = match (name.find('['), name.find(']')) {
        (Some(a), Some(b)) if a < b => name[a + 1..b].trim().parse::<usize>().ok()?,
        _ => 1,
    };
    Some((elem.checked_mul(count)?, align))
}

/// The product of the numbers of a `.maxntid 256, 1, 1` directive.
fn ptx_threads(args: &str) -> Option<u32> {
    let mut product = 1u32;
    for n in args.split(',') {
        let digits: String = n.trim().chars().take_while(char::is_ascii_digit).collect();
        product = product.checked_mul(digits.parse().ok()?)?;
    }
    Some(product)
}

/// The kernels of a PTX text.
pub fn from_ptx(text: &str) -> Kernels {
    let clean: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = vec![];
    let mut rest = clean.as_str();
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let after = rest.trim_start();
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        if name.is_empty() {
            continue;
        }
        let tail = after[name.len()..].trim_start();
        let body = tail.find('{').unwrap_or(tail.len());
        let mut info = KernelInfo::default();
        let directives = if tail.starts_with('(') {
            let Some(close) = tail.find(')') else {
                break;
            };
            let list = &tail[1..close];
            let decls: Option<Vec<(usize, usize)>> = list
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(ptx_param)
                .collect();
            info.params = decls.and_then(natural_layout);
            tail.get(close + 1..body.max(close + 1)).unwrap_or("")
        } else {
            info.params = Some(vec![]);
            &tail[..body]
        };
        for d in [".maxntid", ".reqntid"] {
            if let Some(i) = directives.find(d) {
                let args = directives[i + d.len()..].lines().next().unwrap_or("");
                info.max_threads = ptx_threads(args);
            }
        }
        out.push((name, info));
    }
    out
}

// ---- cubins ---------------------------------------------------------------------------------

const EIFMT_SVAL: u8 = 0x04;
const EIFMT_HVAL: u8 = 0x03;
const EIATTR_MAX_THREADS: u8 = 0x05;
const EIATTR_KPARAM_INFO: u8 = 0x17;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;

fn u16_at(d: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        d.get(o..o.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(d: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        d.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// One kernel's `.nv.info.<kernel>` attributes.
fn nv_info(d: &[u8]) -> Option<KernelInfo> {
    let mut params: Vec<(u16, ParamSlot)> = vec![];
    let mut cbank = None;
    let mut info = KernelInfo::default();
    let mut o = 0usize;
    while o + 4 <= d.len() {
        let (fmt, attr) = (d[o], d[o + 1]);
        if fmt != EIFMT_SVAL {
            if fmt == EIFMT_HVAL && attr == EIATTR_CBANK_PARAM_SIZE {
                cbank = Some(u16_at(d, o + 2)?);
            }
            o += 4;
            continue;
        }
        let len = usize::from(u16_at(d, o + 2)?);
        let p = d.get(o + 4..o + 4 + len)?;
        match attr {
            EIATTR_KPARAM_INFO if len >= 12 => {
                let flags = u32_at(p, 8)?;
                params.push((
                    u16_at(p, 4)?,
                    ParamSlot {
                        offset: usize::from(u16_at(p, 6)?),
                        size: ((flags >> 18) & 0x3fff) as usize,
                    },
                ));
            }
            EIATTR_MAX_THREADS if len >= 12 => {
                let (x, y, z) = (u32_at(p, 0)?, u32_at(p, 4)?, u32_at(p, 8)?);
                info.max_threads = x.checked_mul(y).and_then(|v| v.checked_mul(z));
            }
            _ => {}
        }
        o += 4 + len;
    }
    params.sort_by_key(|(ordinal, _)| *ordinal);
    let in_order = params
        .iter()
        .enumerate()
        .all(|(i, (ordinal, _))| usize::from(*ordinal) == i);
    let slots: Vec<ParamSlot> = params.into_iter().map(|(_, s)| s).collect();
    info.params = match cbank {
        _ if !in_order => None,
        Some(total) if buffer_end(&slots) <= usize::from(total) => Some(slots),
        None if !slots.is_empty() => Some(slots),
        _ => None,
    };
    Some(info)
}

/// The kernels of a cubin (`sections`: its section headers).
pub fn from_cubin(data: &[u8], sections: &[Section]) -> Kernels {
    let mut out: Kernels = sections
        .iter()
        .filter_map(|s| {
            let name = s.name.strip_prefix(".nv.info.")?;
            let info = s.bytes(data).and_then(nv_info).unwrap_or_default();
            Some((name.to_string(), info))
        })
        .collect();
    for s in sections {
        if let Some(name) = s.name.strip_prefix(".nv.shared.")
            && let Some((_, info)) = out.iter_mut().find(|(n, _)| n == name)
        {
            info.static_shared = u32::try_from(s.size).ok();
        }
    }
    out
}

// ---- AMD code objects -----------------------------------------------------------------------

/// `SHT_NOTE`, `NT_AMDGPU_METADATA`.
const SHT_NOTE: u32 = 7;
const NT_AMDGPU_METADATA: u32 = 32;

/// The kernels of an AMD code object's metadata note (`sections`: its section headers).
pub fn from_amdgpu(data: &[u8], sections: &[Section]) -> Kernels {
    for s in sections.iter().filter(|s| s.ty == SHT_NOTE) {
        let Some(notes) = s.bytes(data) else {
            continue;
        };
        let mut o = 0usize;
        while let (Some(namesz), Some(descsz), Some(ty)) =
            (u32_at(notes, o), u32_at(notes, o + 4), u32_at(notes, o + 8))
        {
            let name_at = o + 12;
            let desc_at = name_at.saturating_add((namesz as usize).next_multiple_of(4));
            let next = desc_at.saturating_add((descsz as usize).next_multiple_of(4));
            let name = notes.get(name_at..name_at.saturating_add(namesz as usize));
            let desc = notes.get(desc_at..desc_at.saturating_add(descsz as usize));
            if let (Some(name), Some(desc)) = (name, desc)
                && name.starts_with(b"AMDGPU")
                && ty == NT_AMDGPU_METADATA
            {
                return msgpack::decode(desc)
                    .map(|v| amdgpu_kernels(&v))
                    .unwrap_or_default();
            }
            if next <= o {
                break;
            }
            o = next;
        }
    }
    vec![]
}

fn amdgpu_kernels(meta: &Value) -> Kernels {
    let Some(kernels) = meta.get("amdhsa.kernels").and_then(Value::as_array) else {
        return vec![];
    };
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    kernels
        .iter()
        .filter_map(|k| {
            let name = k.get(".name")?.as_str()?.to_string();
            let params = k.get(".args").and_then(Value::as_array).and_then(|args| {
                args.iter()
                    .filter(|a| {
                        !a.get(".value_kind")
                            .and_then(Value::as_str)
                            .is_some_and(|v| v.starts_with("hidden_"))
                    })
                    .map(|a| {
                        Some(ParamSlot {
                            offset: usize::try_from(num(a, ".offset")?).ok()?,
                            size: usize::try_from(num(a, ".size")?).ok()?,
                        })
                    })
                    .collect::<Option<Vec<_>>>()
            });
            let info = KernelInfo {
                params,
                max_threads: num(k, ".max_flat_workgroup_size").and_then(|v| u32::try_from(v).ok()),
                static_shared: num(k, ".group_segment_fixed_size")
                    .and_then(|v| u32::try_from(v).ok()),
            };
            Some((name, info))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(v: &[(usize, usize)]) -> Option<Vec<ParamSlot>> {
        Some(
            v.iter()
                .map(|&(offset, size)| ParamSlot { offset, size })
                .collect(),
        )
    }

    #[test]
    fn ptx_parameters_and_launch_bounds() {
        let ptx = ".version 8.5\n.target sm_90\n// .entry commented(\n\
            .visible .entry small(\n\t.param .u64 small_param_0,\n\t.param .u16 small_param_1,\n\
            \t.param .u8 small_param_2,\n\t.param .u32 small_param_3\n)\n.maxntid 128, 2, 1\n{\n}\n\
            .visible .entry none()\n{\n}\n\
            .entry agg(.param .align 8 .b8 agg_param_0[12], .param .u64 .ptr .global .align 4 agg_param_1)\n.reqntid 64\n{}\n";
        let k = from_ptx(ptx);
        let names: Vec<&str> = k.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["small", "none", "agg"]);
        assert_eq!(k[0].1.params, slots(&[(0, 8), (8, 2), (10, 1), (12, 4)]));
        assert_eq!(k[0].1.max_threads, Some(256));
        assert_eq!(k[1].1.params, Some(vec![]));
        assert_eq!(k[1].1.max_threads, None);
        assert_eq!(k[2].1.params, slots(&[(0, 12), (16, 8)]));
        assert_eq!(k[2].1.max_threads, Some(64));
    }

    #[test]
    fn cubin_attributes() {
        // What NVRTC writes for `small(float*, short, char, int)` with __launch_bounds__(256):
        // KPARAM_INFO entries (last parameter first), MAX_THREADS, CBANK_PARAM_SIZE.
        let mut d = vec![];
        for (ordinal, offset, size) in [(3u16, 12u16, 4u32), (2, 10, 1), (1, 8, 2), (0, 0, 8)] {
            d.extend([EIFMT_SVAL, EIATTR_KPARAM_INFO, 12, 0, 0, 0, 0, 0]);
            d.extend(ordinal.to_le_bytes());
            d.extend(offset.to_le_bytes());
            d.extend(((size << 18) | 0xf000).to_le_bytes());
        }
        d.extend([0x03, 0x1b, 0xff, 0x00]); // MAXREG_COUNT (HVAL)
        d.extend([EIFMT_SVAL, EIATTR_MAX_THREADS, 12, 0]);
        for v in [256u32, 1, 1] {
            d.extend(v.to_le_bytes());
        }
        d.extend([EIFMT_HVAL, EIATTR_CBANK_PARAM_SIZE, 16, 0]);
        let info = nv_info(&d).unwrap_or_default();
        assert_eq!(info.params, slots(&[(0, 8), (8, 2), (10, 1), (12, 4)]));
        assert_eq!(info.max_threads, Some(256));
        // A parameter past the declared parameter size: not trusted.
        let mut bad = d.clone();
        let n = bad.len();
        bad[n - 2] = 8;
        assert_eq!(nv_info(&bad).unwrap_or_default().params, None);
        // Truncated: nothing.
        assert_eq!(nv_info(&d[..10]), None);
    }

    #[test]
    fn amdgpu_metadata() {
        // {"amdhsa.kernels": [{".name": "k", ".args": [{".offset": 0, ".size": 8,
        //  ".value_kind": "global_buffer"}, {".offset": 8, ".size": 4, ".value_kind":
        //  "by_value"}, {".offset": 16, ".size": 8, ".value_kind": "hidden_global_offset_x"}],
        //  ".max_flat_workgroup_size": 256, ".group_segment_fixed_size": 1200}]}
        let mut m = vec![0x81];
        let s = |m: &mut Vec<u8>, t: &str| {
            m.push(0xa0 | t.len() as u8);
            m.extend(t.bytes());
        };
        s(&mut m, "amdhsa.kernels");
        m.push(0x91);
        m.push(0x84);
        s(&mut m, ".name");
        s(&mut m, "k");
        s(&mut m, ".args");
        m.push(0x93);
        for (off, size, kind) in [
            (0u8, 8u8, "global_buffer"),
            (8, 4, "by_value"),
            (16, 8, "hidden_global_offset_x"),
        ] {
            m.push(0x83);
            s(&mut m, ".offset");
            m.push(off);
            s(&mut m, ".size");
            m.push(size);
            s(&mut m, ".value_kind");
            s(&mut m, kind);
        }
        s(&mut m, ".max_flat_workgroup_size");
        m.extend([0xcd, 0x01, 0x00]);
        s(&mut m, ".group_segment_fixed_size");
        m.extend([0xcd, 0x04, 0xb0]);
        let v = msgpack::decode(&m).unwrap_or(Value::Nil);
        let k = amdgpu_kernels(&v);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].0, "k");
        assert_eq!(k[0].1.params, slots(&[(0, 8), (8, 4)]));
        assert_eq!(k[0].1.max_threads, Some(256));
        assert_eq!(k[0].1.static_shared, Some(1200));
    }
}
