//! `xthunk compile`: ahead-of-time compilation of every portable kernel module for GPU targets,
//! stored in the program beside the portable source, so GPU nodes need no compiler at run
//! time and load the matching image directly.

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
    #[arg(long = "target", required = true)]
    pub targets: Vec<String>,
    /// The program to write (.pb or .txtpb).
    #[arg(short, long)]
    pub output: PathBuf,
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
    let (input, targets, output) = (args.program.as_path(), &args.targets, args.output.as_path());
    // Usage errors (exit 2) before anything is read.
    xthunk::proto::Format::from_path(output).map_err(|e| CliError::program(output, e))?;
    for t in targets {
        if vendor_of(t).is_none() {
            return Err(CliError::CommandLine(format!(
                "unknown target `{t}` (expected sm_NN or compute_NN for CUDA, gfxNNN for AMD)"
            )));
        }
    }
    let mut exe = xthunk::proto::load_file(input).map_err(|e| CliError::program(input, e))?;
    let mut added = 0usize;
    let bar = super::progress::bar(
        (exe.modules.len() as u64).saturating_mul(targets.len() as u64),
        "compile",
    );
    for m in &mut exe.modules {
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
                Some("cuda") => xthunk::compile_cuda(source, t)?,
                _ => xthunk::compile_rocm(source, t)?,
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
