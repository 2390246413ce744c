//! `xthunk inspect`: a readable listing of a program.
//!
//! The thunk tree is walked generically ([`Thunk::nested`] gives the children of any kind,
//! with the field name used in paths); the one-line description of a thunk is its kind's
//! ([`xthunk::ir::ThunkKind::describe`], in the kind's home in the IR), to which custom calls
//! add what each registered handler does with them.

use super::error::{CliError, CliResult};
use std::fmt::Write as _;
use std::path::PathBuf;
use xthunk::ir::{AllocationKind, Executable, Thunk, ThunkPath};

/// `xthunk inspect` as parsed (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The program file (.txtpb, .pb, or StableHLO: .mlir text or a portable artifact —
    /// VHLO bytecode or jax.export's serialized bytes, told by content —, JAX's names listed
    /// too).
    pub program: PathBuf,
    /// A custom-call plugin whose handlers' traits the listing shows (repeatable; with
    /// `XTHUNK_PLUGINS`).
    #[arg(long = "plugin", value_name = "PATH")]
    pub plugins: Vec<PathBuf>,
}

/// Reads the program and prints its listing on `out`.
pub fn inspect(args: &InspectArgs, out: &mut dyn std::io::Write) -> CliResult<()> {
    let program = &args.program;
    xthunk::plugins::load_plugins(&args.plugins).map_err(xthunk::Error::from)?;
    let (exe, names) = xthunk::program_file::load_file_with_names(program)
        .map_err(|e| CliError::program(program, e))?;
    out.write_all(listing(&exe).as_bytes())?;
    if let Some(d) = xthunk::program_file::portable_description(program) {
        out.write_all(format!("\n{d}\n").as_bytes())?;
    }
    if !names.is_empty() {
        let mut s = String::from("\nJAX names:\n");
        for (ours, theirs) in names {
            let _ = writeln!(s, "  {ours}  {theirs}");
        }
        out.write_all(s.as_bytes())?;
    }
    Ok(())
}

/// The whole listing.
pub fn listing(exe: &Executable) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "program {}  (ABI version {}, {} thunks, {} allocations, {} modules)",
        exe.name,
        exe.abi_version,
        exe.thunk_count(),
        exe.allocations.len(),
        exe.modules.len()
    );

    s.push_str("\nsignature:\n");
    let rows: Vec<[String; 4]> = [
        ("parameter", &exe.signature.parameters),
        ("output", &exe.signature.outputs),
    ]
    .into_iter()
    .flat_map(|(what, list)| {
        list.iter().enumerate().map(move |(i, t)| {
            [
                format!("{what} {i}"),
                t.name.clone(),
                super::tensor::type_text(t.dtype, &t.dims),
                format!("%{}", t.allocation),
            ]
        })
    })
    .collect();
    table(&mut s, &rows);
    if !exe.aliases.is_empty() {
        s.push_str("\naliases (an output that may reuse a parameter's buffer):\n");
        let rows: Vec<[String; 3]> = exe
            .aliases
            .iter()
            .map(|a| {
                let name = |list: &[xthunk::ir::TensorSpec], n: u32| {
                    list.get(n as usize)
                        .map(|t| t.name.clone())
                        .unwrap_or_default()
                };
                [
                    format!(
                        "output {} {}",
                        a.output,
                        name(&exe.signature.outputs, a.output)
                    ),
                    "<-".into(),
                    format!(
                        "parameter {} {}",
                        a.parameter,
                        name(&exe.signature.parameters, a.parameter)
                    ),
                ]
            })
            .collect();
        table(&mut s, &rows);
    }

    s.push_str("\nallocations:\n");
    let rows: Vec<[String; 6]> = exe
        .allocations
        .iter()
        .map(|a| {
            let kind = match &a.kind {
                AllocationKind::Parameter(n) => format!("parameter({n})"),
                AllocationKind::Output(n) => format!("output({n})"),
                AllocationKind::Temp => "temp".into(),
                AllocationKind::Constant(b) => format!("constant({} bytes inline)", b.len()),
            };
            let name = exe
                .signature
                .parameters
                .iter()
                .chain(&exe.signature.outputs)
                .find(|t| t.allocation == a.index)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            [
                format!("%{}", a.index),
                kind,
                format!("size={}", a.size),
                format!("align={}", a.alignment),
                a.memory_space.to_string(),
                name,
            ]
        })
        .collect();
    table(&mut s, &rows);

    temp_plan(&mut s, exe);

    s.push_str("\nmodules:\n");
    for m in &exe.modules {
        let images: Vec<String> = m.images.iter().map(|i| i.describe()).collect();
        let _ = writeln!(s, "  {}: {}", m.name, images.join(", "));
    }
    if exe.modules.is_empty() {
        s.push_str("  (none)\n");
    }

    s.push_str("\nthunks:\n");
    for (i, t) in exe.entry.iter().enumerate() {
        tree(&mut s, t, &ThunkPath::entry(i), 1, false);
    }
    if exe.entry.is_empty() {
        s.push_str("  (none)\n");
    }
    s
}

/// The temp memory plan the default schedule gives: peak bytes against the sum, and where
/// each temp lives.
fn temp_plan(s: &mut String, exe: &Executable) {
    use xthunk::core::executor::{ExecutorConfig, plan_temps};
    s.push_str("\ntemp plan (default schedule):\n");
    let plan = match plan_temps(exe, &ExecutorConfig::default()) {
        Ok(p) => p,
        Err(e) => {
            let _ = writeln!(s, "  (not planned: {e})");
            return;
        }
    };
    let _ = writeln!(s, "  {}", plan.summary());
    let _ = writeln!(
        s,
        "  scratch: on a device with a stream-ordered memory pool, the device arenas are taken \
         from it when each execution starts and given back when it ends; elsewhere they stay \
         with the pooled execution state"
    );
    let rows: Vec<[String; 3]> = plan
        .placements
        .iter()
        .map(|p| {
            let size = exe
                .allocations
                .get(p.allocation as usize)
                .map_or(0, |a| a.size);
            [
                format!("%{}", p.allocation),
                format!("arena {}", p.arena),
                format!("[{}..+{size}]", p.offset),
            ]
        })
        .collect();
    if !rows.is_empty() {
        table(s, &rows);
    }
}

/// Left-aligned columns, two spaces apart, indented by two.
fn table<const N: usize>(s: &mut String, rows: &[[String; N]]) {
    if rows.is_empty() {
        s.push_str("  (none)\n");
        return;
    }
    let mut widths = [0usize; N];
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (w, c) in widths.iter().zip(r) {
            let _ = write!(line, "  {c:<w$}");
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
}

fn tree(s: &mut String, t: &Thunk, path: &ThunkPath, depth: usize, in_cb: bool) {
    let line = match t.as_custom_call() {
        Some(c) => super::custom_call::describe(c, in_cb),
        None => t.as_kind().describe(),
    };
    let _ = writeln!(s, "{}{path}  {line}", "  ".repeat(depth));
    let in_cb = in_cb || t.as_kind().records();
    for (name, list) in t.nested() {
        for (i, c) in list.iter().enumerate() {
            tree(s, c, &path.in_list(&name, i), depth + 1, in_cb);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use xthunk::builder::ExecutableBuilder;
    use xthunk::ir::{
        AsyncDoneThunk, AsyncStartThunk, ConditionalThunk, DType, MemsetThunk, WhileThunk,
    };

    #[test]
    fn lists_every_section_and_nested_paths() {
        let mut b = ExecutableBuilder::new("demo");
        let x = b.parameter("x", DType::F32, &[4]);
        let y = b.output("y", DType::F32, &[4]);
        let m = b.standard_module();
        b.begin_sequence();
        b.copy(x.slice(), y.slice());
        b.kernel(&m, "scale_f32", 4, vec![y.rw(), 2.0f32.into(), 4i64.into()]);
        b.end_sequence();
        let exe = b.build().unwrap();
        let l = listing(&exe);
        assert!(l.contains("program demo  (ABI version 1, 3 thunks"), "{l}");
        assert!(l.contains("parameter 0  x  f32[4]  %0"), "{l}");
        assert!(l.contains("%1  output(0)"), "{l}");
        assert!(l.contains("std: standard"), "{l}");
        assert!(
            l.contains("temp plan (default schedule):\n  0 temps: 0 bytes planned of 0 bytes"),
            "{l}"
        );
        assert!(l.contains("entry[0]  sequence (2 thunks)"), "{l}");
        assert!(
            l.contains("entry[0].thunks[0]  copy %0[0..+16] -> %1[0..+16]"),
            "{l}"
        );
        assert!(
            l.contains("entry[0].thunks[1]  kernel std.scale_f32 grid=(1,1,1) block=(256,1,1) args=[%1[0..+16] rw, f32:2, i64:4]"),
            "{l}"
        );
    }

    #[test]
    fn control_flow_and_async_list_their_bodies() {
        use xthunk::ir::{AsyncKind, MemsetPattern, Slice};
        let mut b = ExecutableBuilder::new("cf");
        let x = b.output("x", DType::I32, &[4]);
        let set: Thunk = MemsetThunk {
            dst: x.slice(),
            pattern: MemsetPattern::U32(1),
        }
        .into();
        b.push(
            WhileThunk {
                cond: vec![],
                pred: Slice::new(0, 0, 1),
                body: vec![set.clone()],
                trip_count: Some(3),
            }
            .into(),
        );
        b.push(
            ConditionalThunk {
                index: Slice::new(0, 0, 4),
                index_type: DType::I32,
                branches: vec![vec![], vec![set.clone()]],
            }
            .into(),
        );
        b.push(
            AsyncStartThunk {
                id: 7,
                kind: AsyncKind::Communication,
                body: vec![set],
            }
            .into(),
        );
        b.push(AsyncDoneThunk { id: 7 }.into());
        let l = listing(&b.build_unchecked());
        for needle in [
            "entry[0]  while trip_count=3 pred=%0[0..+1] r (body 1 thunks)",
            "entry[0].body[0]  memset %0[0..+16] pattern=u32:0x00000001",
            "entry[1]  conditional index=%0[0..+4] r (i32) (2 branches)",
            "entry[1].branches[1].thunks[0]  memset",
            "entry[2]  async_start id=7 on communication stream (1 thunks)",
            "entry[2].body[0]  memset",
            "entry[3]  async_done id=7",
        ] {
            assert!(l.contains(needle), "`{needle}` not in:\n{l}");
        }
    }
}
