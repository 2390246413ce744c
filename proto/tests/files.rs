//! Program files: format by extension, missing files, and saves that never leave a partial
//! output behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, BufferAllocation, Executable, MemorySpace, MemsetPattern,
    Signature, Slice, Thunk,
};
use xthunk_proto::{Format, ProtoError, load_file, save_file};

fn program() -> Executable {
    Executable {
        abi_version: ABI_VERSION,
        name: "files".into(),
        allocations: vec![BufferAllocation {
            index: 0,
            size: 256,
            alignment: 64,
            kind: AllocationKind::Temp,
            memory_space: MemorySpace::Unified,
        }],
        modules: vec![],
        entry: vec![
            Thunk::Memset {
                dst: Slice::new(0, 0, 128),
                pattern: MemsetPattern::U16(0xBEEF),
            },
            Thunk::Sequence(vec![Thunk::Copy {
                src: Slice::new(0, 0, 128),
                dst: Slice::new(0, 128, 128),
            }]),
        ],
        signature: Signature::default(),
    }
}

/// A fresh, empty directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("proto-files-{name}"));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn entries(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn format_by_extension() {
    for (name, want) in [
        ("a.txtpb", Some(Format::Text)),
        ("a.textproto", Some(Format::Text)),
        ("a.pbtxt", Some(Format::Text)),
        ("dir.d/A.TXTPB", Some(Format::Text)),
        ("a.pb", Some(Format::Binary)),
        ("a.binpb", Some(Format::Binary)),
        ("a.PB", Some(Format::Binary)),
        ("a.json", None),
        ("a", None),
        ("a.pb.bak", None),
        (".pb", None),
    ] {
        let got = Format::from_path(Path::new(name)).ok();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn save_and_load_every_extension() {
    let d = dir("every");
    let exe = program();
    for ext in ["txtpb", "textproto", "pbtxt", "pb", "binpb"] {
        let p = d.join(format!("prog.{ext}"));
        save_file(&p, &exe).unwrap();
        assert_eq!(load_file(&p).unwrap(), exe, "{ext}");
        let bytes = fs::read(&p).unwrap();
        let is_text = bytes
            .starts_with(b"# proto-file: xthunk.proto\n# proto-message: xthunk.v1.Executable\n");
        assert_eq!(
            is_text,
            Format::from_path(&p).unwrap() == Format::Text,
            "{ext}"
        );
    }
    // Overwriting works, and no temporary file is left.
    save_file(d.join("prog.pb"), &exe).unwrap();
    assert_eq!(
        entries(&d),
        [
            "prog.binpb",
            "prog.pb",
            "prog.pbtxt",
            "prog.textproto",
            "prog.txtpb"
        ]
    );
}

#[test]
fn text_file_is_readable() {
    let d = dir("readable");
    let p = d.join("prog.txtpb");
    save_file(&p, &program()).unwrap();
    let text = fs::read_to_string(&p).unwrap();
    assert!(text.contains("abi_version: 1\n"), "{text}");
    assert!(text.contains("width: MEMSET_WIDTH_U16"), "{text}");
    assert!(
        text.contains("memory_space: MEMORY_SPACE_UNIFIED"),
        "{text}"
    );
}

#[test]
fn missing_file_names_the_path() {
    let p = dir("missing").join("nope.txtpb");
    let e = load_file(&p).unwrap_err();
    assert!(
        matches!(&e, ProtoError::Io { path, .. } if *path == p),
        "{e}"
    );
    assert!(e.to_string().contains("nope.txtpb"), "{e}");
}

#[test]
fn unknown_extension() {
    let d = dir("unknown");
    let p = d.join("prog.json");
    let e = save_file(&p, &program()).unwrap_err();
    assert!(matches!(e, ProtoError::UnknownFormat { .. }), "{e}");
    assert!(e.to_string().contains("prog.json"), "{e}");
    assert!(entries(&d).is_empty());
    fs::write(&p, "{}").unwrap();
    assert!(matches!(
        load_file(&p),
        Err(ProtoError::UnknownFormat { .. })
    ));
}

#[test]
fn load_errors_by_format() {
    let d = dir("load-errors");
    let p = d.join("bad.txtpb");
    fs::write(&p, b"abi_version: 1\nname: \"x\xff\"\n").unwrap();
    let e = load_file(&p).unwrap_err();
    assert!(
        matches!(
            e,
            ProtoError::TextParse {
                line: 2,
                col: 9,
                ..
            }
        ),
        "{e}"
    );
    let p = d.join("bad.pb");
    fs::write(&p, b"\x0a\x05ab").unwrap();
    assert!(matches!(load_file(&p), Err(ProtoError::Decode { .. })));
    // A text file with a binary extension is not silently accepted.
    let p = d.join("text.pb");
    fs::write(&p, "abi_version: 1\n").unwrap();
    assert!(load_file(&p).is_err());
}

#[test]
fn failed_save_leaves_no_partial_file() {
    let d = dir("partial");

    // The directory does not exist.
    let p = d.join("no-such-dir").join("prog.pb");
    let e = save_file(&p, &program()).unwrap_err();
    assert!(
        matches!(&e, ProtoError::Io { path, .. } if *path == p),
        "{e}"
    );
    assert!(entries(&d).is_empty());

    // The target is a directory: the rename fails and the temporary file is removed.
    let target = d.join("taken.pb");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("keep"), "x").unwrap();
    assert!(save_file(&target, &program()).is_err());
    assert_eq!(entries(&d), ["taken.pb"]);
    assert_eq!(entries(&target), ["keep"]);

    // The program cannot be written as text (nested too deeply): an existing file keeps its
    // old content.
    let p = d.join("old.txtpb");
    save_file(&p, &program()).unwrap();
    let before = fs::read(&p).unwrap();
    let mut deep = Thunk::Sequence(vec![]);
    for _ in 0..80 {
        deep = Thunk::Sequence(vec![deep]);
    }
    let mut exe = program();
    exe.entry.push(deep);
    assert!(save_file(&p, &exe).is_err());
    assert_eq!(fs::read(&p).unwrap(), before);
    assert_eq!(entries(&d), ["old.txtpb", "taken.pb"]);
}
