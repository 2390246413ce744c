//! `xthunk compile`: ahead-of-time compilation of every portable kernel module for GPU targets,
//! stored in the program beside the portable source, so GPU nodes need no compiler at run
//! time and load the matching image directly.
//!
//! Before anything is compiled, every source module is checked against the portable subset
//! (`docs/kernels.md`) for every target alike: a vendor-only construct is refused naming the
//! module and the line, and every kernel the program launches from a source module must be
//! defined in it. `--check` does only that.

use super::error::{CliError, CliResult};
use std::io::Write;
use std::path::PathBuf;
use xthunk::ir::ModuleImage;

/// `xthunk compile` as parsed (its command-line arguments).
#[derive(Debug, clap::Args)]
pub struct CompileArgs {
    /// The program to read.
    pub program: PathBuf,
    /// A target (repeatable): sm_NN / compute_NN (CUDA) or gfxNNN (AMD).
    #[arg(long = "target", required_unless_present = "check")]
    pub targets: Vec<String>,
    /// The program to write (.pb or .txtpb).
    #[arg(short, long, required_unless_present = "check")]
    pub output: Option<PathBuf>,
    /// Only check the source modules against the portable subset (no compiler needed).
    #[arg(long)]
    pub check: bool,
}

/// Every (module, kernel) a list of thunks launches, nested lists included.
fn launches<'a>(thunks: &'a [xthunk::ir::Thunk], out: &mut Vec<(&'a str, &'a str)>) {
    for t in thunks {
        if let Some(k) = t.as_kernel() {
            out.push((k.module.as_str(), k.name.as_str()));
        }
        for (_, list) in t.nested() {
            launches(list, out);
        }
    }
}

/// The portable-subset check of every source module of `exe`: vendor-only constructs, and
/// kernels launched but not defined. One line per problem, naming the module and line.
pub fn check_program(exe: &xthunk::ir::Executable) -> Vec<String> {
    use xthunk::core::kernels::portable::scan;
    let mut uses = vec![];
    launches(&exe.entry, &mut uses);
    let mut problems = vec![];
    for m in &exe.modules {
        for img in &m.images {
            let ModuleImage::Source { code } = img else {
                continue;
            };
            let headers = &m.options.headers;
            for f in scan::vendor_constructs_in(code, headers) {
                problems.push(format!("module `{}`, {f}", m.name));
            }
            for h in headers {
                for f in scan::vendor_constructs_in(&h.code, headers) {
                    problems.push(format!("module `{}`, header `{}`, {f}", m.name, h.name));
                }
            }
            if !scan::structure_findings(code).is_empty() {
                // Reported above with its line; the kernels it defines cannot be told.
                continue;
            }
            let defined = scan::kernel_names(&scan::inline_headers(code, &m.name, headers));
            let mut missing: Vec<&str> = uses
                .iter()
                .filter(|(module, name)| *module == m.name && !defined.iter().any(|d| d == name))
                .map(|(_, name)| *name)
                .collect();
            missing.sort_unstable();
            missing.dedup();
            for name in missing {
                problems.push(format!(
                    "module `{}`: the program launches kernel `{name}`, which its source does not define (it defines: {})",
                    m.name,
                    if defined.is_empty() { "none".to_string() } else { defined.join(", ") }
                ));
            }
        }
    }
    problems
}

/// Every kernel thunk of a list of thunks, nested lists included.
fn kernel_thunks<'a>(thunks: &'a [xthunk::ir::Thunk], out: &mut Vec<&'a xthunk::ir::KernelThunk>) {
    for t in thunks {
        if let Some(k) = t.as_kernel() {
            out.push(k);
        }
        for (_, list) in t.nested() {
            kernel_thunks(list, out);
        }
    }
}

/// The widest warp of the supported targets (AMD CDNA).
const WIDEST_WARP: u64 = 64;

/// The warp-width hazards of `exe`'s source modules (`compile --check` prints them as
/// warnings; they do not fail the check): literal lane counts, offsets and masks in code that
/// shuffles, and kernels that shuffle launched with blocks smaller than the widest warp.
pub fn check_warnings(exe: &xthunk::ir::Executable) -> Vec<String> {
    use xthunk::core::kernels::portable::scan;
    let mut thunks = vec![];
    kernel_thunks(&exe.entry, &mut thunks);
    let mut out = vec![];
    for m in &exe.modules {
        for img in &m.images {
            let ModuleImage::Source { code } = img else {
                continue;
            };
            let headers = &m.options.headers;
            for w in scan::warp_width_warnings(code) {
                out.push(format!("module `{}`, {w}", m.name));
            }
            for h in headers {
                for w in scan::warp_width_warnings(&h.code) {
                    out.push(format!("module `{}`, header `{}`, {w}", m.name, h.name));
                }
            }
            let shuffling = scan::shuffling_kernels(&scan::inline_headers(code, &m.name, headers));
            let mut seen: Vec<(&str, u64)> = vec![];
            for k in thunks.iter().filter(|k| k.module == m.name) {
                let threads = u64::from(k.block.x) * u64::from(k.block.y) * u64::from(k.block.z);
                if threads >= WIDEST_WARP
                    || !shuffling.contains(&k.name)
                    || seen.contains(&(k.name.as_str(), threads))
                {
                    continue;
                }
                seen.push((k.name.as_str(), threads));
                out.push(format!(
                    "module `{}`: kernel `{}` shuffles across the warp and is launched with blocks of {threads} threads: a warp has {WIDEST_WARP} lanes on AMD CDNA (gfx90a), so there lanes {threads}..{} of each warp do not exist (launch blocks of a multiple of {WIDEST_WARP} threads, or shuffle within a cg::thread_block_tile<32>)",
                    m.name,
                    k.name,
                    WIDEST_WARP - 1
                ));
            }
        }
    }
    out
}

/// A compile target's vendor, as the vendor crates tell their target names apart: a CUDA SM
/// (`sm_90`, or `compute_90` for PTX) or an AMD gfx target.
fn vendor_of(target: &str) -> Option<&'static str> {
    if xthunk::CudaTarget::claims(target) {
        Some("cuda")
    } else if xthunk::RocmTarget::claims(target) {
        Some("rocm")
    } else {
        None
    }
}

/// Compiles the `Standard` and `Source` images of every module for every target and writes
/// the program (with the new images added, replacing older images for the same target).
pub fn compile(args: &CompileArgs, out: &mut dyn Write) -> CliResult<()> {
    let (input, targets) = (args.program.as_path(), &args.targets);
    let output = args.output.as_deref();
    // Usage errors (exit 2) before anything is read.
    if let Some(output) = output {
        xthunk::proto::Format::from_path(output).map_err(|e| CliError::program(output, e))?;
    }
    for t in targets {
        if vendor_of(t).is_none() {
            return Err(CliError::CommandLine(format!(
                "unknown target `{t}` (expected sm_NN or compute_NN for CUDA, gfxNNN for AMD)"
            )));
        }
    }
    let mut exe = xthunk::load_file(input).map_err(|e| CliError::program(input, e))?;
    let problems = check_program(&exe);
    if !problems.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: not portable (docs/kernels.md):\n  {}",
            input.display(),
            problems.join("\n  ")
        )));
    }
    for w in check_warnings(&exe) {
        writeln!(out, "warning: {w}")?;
    }
    let Some(output) = output else {
        writeln!(out, "{}: every source module is portable", input.display())?;
        return Ok(());
    };
    let mut added = 0usize;
    let bar = super::progress::bar(
        (exe.modules.len() as u64).saturating_mul(targets.len() as u64),
        "compile",
    );
    for m in &mut exe.modules {
        drop_stale_images(m, targets, out)?;
        let portable: Vec<ModuleImage> = m
            .images
            .iter()
            .filter(|i| matches!(i, ModuleImage::Standard | ModuleImage::Source { .. }))
            .cloned()
            .collect();
        let Some(source) = portable.first() else {
            continue;
        };
        for t in targets {
            bar.set_message(format!("{} for {t}", m.name));
            bar.inc(1);
            let start = std::time::Instant::now();
            let image = match vendor_of(t) {
                Some("cuda") => xthunk::compile_cuda_module(m, source, t)?,
                _ => xthunk::compile_rocm_module(m, source, t)?,
            };
            let Some(image) = image else { continue };
            m.images.retain(|i| !same_target(i, &image));
            writeln!(
                out,
                "module {}: {} ({} bytes, {:.1} s)",
                m.name,
                image.describe(),
                image_len(&image),
                start.elapsed().as_secs_f64()
            )?;
            m.images.push(image);
            added += 1;
        }
    }
    bar.finish_and_clear();
    xthunk::proto::save_file(output, &exe).map_err(|e| CliError::program(output, e))?;
    writeln!(out, "wrote {} ({added} images added)", output.display())?;
    Ok(())
}

fn same_target(a: &ModuleImage, b: &ModuleImage) -> bool {
    match (a, b) {
        (ModuleImage::Cubin { arch: x, .. }, ModuleImage::Cubin { arch: y, .. })
        | (ModuleImage::Hsaco { arch: x, .. }, ModuleImage::Hsaco { arch: y, .. }) => x == y,
        (ModuleImage::Ptx { .. }, ModuleImage::Ptx { .. }) => true,
        _ => false,
    }
}

fn image_len(i: &ModuleImage) -> usize {
    match i {
        ModuleImage::Cubin { data, .. } | ModuleImage::Hsaco { data, .. } => data.len(),
        ModuleImage::Ptx { code } | ModuleImage::Source { code } => code.len(),
        _ => 0,
    }
}

/// The function symbols of a compiled image (`None` for images that are not compiled code, or
/// that cannot be read).
fn image_symbols(image: &ModuleImage) -> Option<Vec<String>> {
    match image {
        ModuleImage::Cubin { data, .. } => {
            xthunk_cuda::image::inspect(data).ok().map(|i| i.functions)
        }
        ModuleImage::Ptx { code } => Some(
            xthunk::core::kernels::portable::stamp::ptx_entries(code)
                .into_iter()
                .map(String::from)
                .collect(),
        ),
        ModuleImage::Hsaco { data, .. } => {
            use xthunk_rocm::image::{CodeObject, unbundle};
            match unbundle(data).ok()? {
                Some(entries) => Some(
                    entries
                        .iter()
                        .filter_map(|e| CodeObject::parse(e.code).ok())
                        .flat_map(|c| c.kernels)
                        .collect(),
                ),
                None => CodeObject::parse(data).ok().map(|c| c.kernels),
            }
        }
        _ => None,
    }
}

/// Drops (with a warning) every compiled image of `m` not about to be rebuilt whose source
/// stamp differs from the module's source: an edited program keeps no image of its old source.
fn drop_stale_images(
    m: &mut xthunk::ir::Module,
    targets: &[String],
    out: &mut dyn Write,
) -> CliResult<()> {
    use xthunk::core::kernels::portable::stamp::{self, Stamp};
    let Some(expected) = stamp::expected_stamp(m) else {
        return Ok(());
    };
    let rebuilt = |img: &ModuleImage| match img {
        ModuleImage::Cubin { arch, .. } | ModuleImage::Hsaco { arch, .. } => {
            targets.iter().any(|t| t == arch)
        }
        ModuleImage::Ptx { .. } => targets.iter().any(|t| t.starts_with("compute_")),
        _ => false,
    };
    let mut keep = Vec::with_capacity(m.images.len());
    for img in std::mem::take(&mut m.images) {
        let Some(symbols) = image_symbols(&img).filter(|_| !rebuilt(&img)) else {
            keep.push(img);
            continue;
        };
        match stamp::check_stamp(&expected, symbols.iter().map(String::as_str)) {
            Stamp::Differs { found } => {
                let why = stamp::stale_message(&m.name, &img.describe(), &expected, &found);
                tracing::warn!("{why}");
                writeln!(out, "warning: dropped: {why}")?;
            }
            Stamp::Missing => {
                writeln!(
                    out,
                    "warning: module {}: the {} image records no source stamp (compiled by another tool?); kept unchecked",
                    m.name,
                    img.describe()
                )?;
                keep.push(img);
            }
            Stamp::Matches => keep.push(img),
        }
    }
    m.images = keep;
    Ok(())
}
