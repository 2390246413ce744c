//! Reading a program in any form xthunk takes — the schema's text (`.txtpb`) or binary
//! (`.pb`) encoding, or StableHLO text (`.mlir`, as JAX prints it) imported through
//! `xthunk-stablehlo` and lowered by `xthunk-tensor` — the one place the CLI's commands, the C
//! ABI and the Python package read a program file. A StableHLO program that cannot be read,
//! is refused or cannot be lowered gives [`ProtoError::Import`], one line with its position.
//!
//! StableHLO portable artifacts load too, told by their content whatever the extension:
//! MLIR bytecode of VHLO (`ML\xefR`, what `jax.export`'s `mlir_module_serialized` holds)
//! and `jax.export`'s whole serialization (`Exported.serialize()`, a FlatBuffers table
//! holding one) — see `xthunk_stablehlo::vhlo` and `xthunk_stablehlo::jax_export`.

use std::path::Path;
use xthunk_core::executor::Program;
use xthunk_core::ir::Executable;
use xthunk_proto::ProtoError;
pub use xthunk_stablehlo::import::SpmdInfo;

/// The name [`ProtoError::Import`] gives StableHLO programs.
const FORMAT: &str = "StableHLO";

/// Whether `path` names a StableHLO text file (extension `.mlir`, any case).
pub fn is_mlir_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("mlir"))
}

/// Whether `text` is MLIR rather than the schema's text format: its first line that is
/// neither blank nor a `//` comment starts a module (`module`, `"builtin.module"`), a
/// function (`func.func`) or a location alias (`#loc… = `); a text program starts with a
/// field name or a `#` comment.
pub fn looks_like_mlir(text: &str) -> bool {
    let Some(first) = text
        .lines()
        .map(str::trim_start)
        .find(|l| !l.is_empty() && !l.starts_with("//"))
    else {
        return false;
    };
    let after_module = first.strip_prefix("module");
    after_module.is_some_and(|r| r.starts_with([' ', '@', '{', '\t']) || r.is_empty())
        || first.starts_with("\"builtin.module\"")
        || first.starts_with("func.func")
        || (first.starts_with("#loc") && first.contains(" = loc("))
}

/// Imports and lowers StableHLO text into a validated program.
pub fn program_from_mlir(text: &str) -> Result<Executable, ProtoError> {
    Ok(import_mlir(text)?.0)
}

/// Whether `bytes` are a StableHLO portable artifact: MLIR bytecode, or a `jax.export`
/// serialization holding it (a FlatBuffers table whose module is MLIR bytecode).
pub fn is_portable(bytes: &[u8]) -> bool {
    xthunk_stablehlo::bytecode::is_bytecode(bytes)
        || matches!(
            xthunk_stablehlo::jax_export::read(bytes),
            Ok(_) | Err(xthunk_stablehlo::bytecode::BytecodeError::Unsupported { .. })
        )
}

/// Imports and lowers a StableHLO portable artifact (VHLO bytecode, or `jax.export`'s
/// serialized bytes) into a validated program.
pub fn program_from_portable(bytes: &[u8]) -> Result<Executable, ProtoError> {
    Ok(import_portable(bytes)?.0)
}

/// [`program_from_portable`], and JAX's names of the program's parameters and results.
pub fn import_portable(bytes: &[u8]) -> Result<(Executable, JaxNames), ProtoError> {
    import_portable_here(bytes).map(|(e, n, _)| (e, n))
}

fn import_portable_here(bytes: &[u8]) -> Result<Loaded, ProtoError> {
    on_import_thread(|| {
        // Bytecode has no line:column: the importer's `0:0: ` position is left out.
        let imported = xthunk_stablehlo::import::import_portable(bytes).map_err(|e| {
            let text = e.to_string();
            ProtoError::Import {
                format: FORMAT,
                message: text.strip_prefix("0:0: ").unwrap_or(&text).to_string(),
            }
        })?;
        lower_imported(Ok(imported))
    })
}

/// [`program_from_mlir`], and JAX's names of the program's parameters and results. The
/// lowering recurses once per nested region (and the reader and importer once per nesting
/// level): all of it runs on a thread with `xthunk_stablehlo::STACK` bytes of stack, so a
/// program a hundred `while`/`case` levels deep loads from any caller's thread.
fn import_mlir(text: &str) -> Result<Loaded, ProtoError> {
    on_import_thread(|| lower_imported(xthunk_stablehlo::import::import_text(text)))
}

/// What an import gives: the program, JAX's names, and a sharded program's SPMD facts.
type Loaded = (Executable, JaxNames, Option<SpmdInfo>);

fn on_import_thread(
    f: impl FnOnce() -> Result<Loaded, ProtoError> + Send,
) -> Result<Loaded, ProtoError> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("xthunk-import".into())
            .stack_size(xthunk_stablehlo::STACK)
            .spawn_scoped(s, f)
            .map_err(|e| ProtoError::Import {
                format: FORMAT,
                message: format!("could not start the import thread: {e}"),
            })?
            .join()
            .unwrap_or_else(|_| {
                Err(ProtoError::Import {
                    format: FORMAT,
                    message: "the import thread panicked (a bug: please report it)".into(),
                })
            })
    })
}

fn lower_imported(
    imported: Result<xthunk_stablehlo::import::Imported, xthunk_stablehlo::import::ImportError>,
) -> Result<Loaded, ProtoError> {
    let fail = |message: String| ProtoError::Import {
        format: FORMAT,
        message,
    };
    let imported = imported.map_err(|e| fail(e.to_string()))?;
    let mut lowered =
        xthunk_tensor::lower::lower(&imported.graph).map_err(|e| fail(e.to_string()))?;
    if !imported.aliases.is_empty() {
        lowered.executable.aliases = imported
            .aliases
            .iter()
            .map(|&(output, parameter)| xthunk_core::ir::IoAlias { output, parameter })
            .collect();
        xthunk_core::verify(&lowered.executable)?;
    }
    let mut names = vec![];
    for (i, attrs) in imported.arg_info.iter().enumerate() {
        if !attrs.is_empty() {
            let text: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            names.push((format!("arg{i}"), text.join(", ")));
        }
    }
    for (i, info) in imported.result_info.iter().enumerate() {
        if let Some(info) = info {
            names.push((format!("out{i}"), info.clone()));
        }
    }
    Ok((lowered.executable, names, imported.spmd))
}

/// JAX's own names of a StableHLO program's parameters and results: per `argN` its
/// attributes (`jax.arg_info = x`, …), per `outN` its `jax.result_info` (`result['b1']`);
/// pairs of xthunk's name and JAX's.
pub type JaxNames = Vec<(String, String)>;

fn read_mlir(path: &Path) -> Result<Loaded, ProtoError> {
    let bytes = std::fs::read(path).map_err(|source| ProtoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if is_portable(&bytes) {
        return import_portable_here(&bytes);
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| ProtoError::Import {
        format: FORMAT,
        message: format!("byte {}: the file is not valid UTF-8", e.valid_up_to()),
    })?;
    import_mlir(text)
}

/// Whether `path` holds StableHLO: a `.mlir` name, or a portable artifact by its content
/// (MLIR bytecode or a `jax.export` serialization, whatever the name).
pub fn is_stablehlo_file(path: &Path) -> bool {
    is_mlir_path(path) || portable_file(path)
}

/// Whether the file's content is a portable artifact (read only when it starts like one).
fn portable_file(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let mut head = [0u8; 4];
    if f.read_exact(&mut head).is_err() {
        return false;
    }
    if xthunk_stablehlo::bytecode::is_bytecode(&head) {
        return true;
    }
    // A FlatBuffers file starts with the offset of its root table: small, 4-aligned.
    let root = u32::from_le_bytes(head);
    if root % 4 != 0 || root < 8 {
        return false;
    }
    std::fs::read(path).is_ok_and(|b| is_portable(&b))
}

/// What a portable artifact file declares (producer, bytecode version, `jax.export`'s
/// fields), one line; `None` for any other file or one that cannot be read.
pub fn portable_description(path: &Path) -> Option<String> {
    if !portable_file(path) {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    xthunk_stablehlo::vhlo::describe(&bytes).ok()
}

/// Reads, converts (imports) and validates a program file: `.mlir` is StableHLO text, a
/// portable artifact (any name) StableHLO bytecode, any other as `xthunk_proto::load_file`
/// takes it.
pub fn load_file(path: impl AsRef<Path>) -> Result<Executable, ProtoError> {
    let path = path.as_ref();
    if is_stablehlo_file(path) {
        Ok(read_mlir(path)?.0)
    } else {
        xthunk_proto::load_file(path)
    }
}

/// [`load_file`] as a [`Program`], what the executor loads (verified once, here).
pub fn load_program(path: impl AsRef<Path>) -> Result<Program, ProtoError> {
    let path = path.as_ref();
    if is_stablehlo_file(path) {
        Ok(Program::new(read_mlir(path)?.0)?)
    } else {
        xthunk_proto::load_program(path)
    }
}

/// [`load_program`], and for a StableHLO SPMD program the ranks it runs on and whether its
/// inputs and outputs are global values (a `shard_map` or `pmap` program: every rank takes
/// the same global inputs and gives the same global outputs); `None` for other programs.
pub fn load_program_spmd(
    path: impl AsRef<Path>,
) -> Result<(Program, Option<SpmdInfo>), ProtoError> {
    let path = path.as_ref();
    if is_stablehlo_file(path) {
        let (exe, _, spmd) = read_mlir(path)?;
        Ok((Program::new(exe)?, spmd))
    } else {
        Ok((xthunk_proto::load_program(path)?, None))
    }
}

/// [`load_file`], with JAX's names of a StableHLO program's parameters and results (empty
/// for other formats, or when JAX named nothing); one import.
pub fn load_file_with_names(path: impl AsRef<Path>) -> Result<(Executable, JaxNames), ProtoError> {
    let path = path.as_ref();
    if is_stablehlo_file(path) {
        read_mlir(path).map(|(e, n, _)| (e, n))
    } else {
        Ok((xthunk_proto::load_file(path)?, vec![]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VHLO: &[u8] = include_bytes!("../stablehlo/tests/fixtures/portable/add.vhlo");
    const EXPORTED: &[u8] = include_bytes!("../stablehlo/tests/fixtures/portable/add.jaxexport");

    #[test]
    #[allow(clippy::expect_used)]
    fn portable_artifacts_are_told_by_content_and_load() {
        assert!(is_portable(VHLO) && is_portable(EXPORTED));
        assert!(!is_portable(b"module {\n}") && !is_portable(b"name: \"x\"") && !is_portable(&[]));
        let a = program_from_portable(VHLO).expect("bytecode");
        let b = crate::embed::program_from_bytes(EXPORTED).expect("jax.export bytes");
        assert_eq!(a, b);
        assert_eq!(a.signature.parameters.len(), 2);
        let dir = std::env::temp_dir().join(format!("xthunk-portable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("model.bin");
        std::fs::write(&path, EXPORTED).expect("write");
        assert!(is_stablehlo_file(&path));
        assert_eq!(load_file(&path).expect("load"), a);
        let d = portable_description(&path).expect("description");
        assert!(
            d.contains("StableHLO_v1.15.0") && d.contains("calling convention version 10"),
            "{d}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        // A truncated artifact is an import error, not a panic.
        let e = program_from_portable(&VHLO[..VHLO.len() / 2]).expect_err("truncated");
        assert!(matches!(e, ProtoError::Import { .. }), "{e}");
    }

    #[test]
    fn mlir_is_told_from_text_programs() {
        assert!(looks_like_mlir("module @jit_f attributes {} {\n}"));
        assert!(looks_like_mlir("// c\n\nmodule {\n}"));
        assert!(looks_like_mlir("\"builtin.module\"() ({\n})"));
        assert!(looks_like_mlir("#loc1 = loc(\"x.py\":1:2)\nmodule {}"));
        assert!(looks_like_mlir("func.func @main() {\n}"));
        assert!(!looks_like_mlir("name: \"mlp\"\nmodules {}"));
        assert!(!looks_like_mlir("# a comment\nname: \"x\""));
        assert!(!looks_like_mlir("modules {\n}"));
        assert!(!looks_like_mlir(""));
    }
}
