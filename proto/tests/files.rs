//! Program files: format by extension, missing files, and saves that never leave a partial
//! output behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use xthunk_core::ir::{
    ABI_VERSION, AllocationKind, AsyncDoneThunk, AsyncStartThunk, BufferAllocation, CopyThunk,
    Executable, MemorySpace, MemsetPattern, MemsetThunk, Signature, Slice, Thunk, WhileThunk,
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
            Thunk::Memset(MemsetThunk {
                dst: Slice::new(0, 0, 128),
                pattern: MemsetPattern::U16(0xBEEF),
            }),
            Thunk::Sequence(vec![Thunk::Copy(CopyThunk {
                src: Slice::new(0, 0, 128),
                dst: Slice::new(0, 128, 128),
            })]),
        ],
        signature: Signature::default(),
        aliases: vec![],
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

/// The checked-in example `examples/while_async.txtpb`: ten SGD steps in a while loop with a
/// trip count, overlapped with an async compute scope.
fn while_async_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/while_async.txtpb")
}

#[test]
fn while_async_example_loads_and_validates() {
    use xthunk_core::ir::{AsyncKind, DType};
    use xthunk_core::verify;
    let exe = load_file(while_async_path()).unwrap();
    verify(&exe).unwrap();
    assert_eq!(exe.name, "while_async");
    let names = |v: &[xthunk_core::ir::TensorSpec]| -> Vec<(String, DType, Vec<u64>)> {
        v.iter()
            .map(|s| (s.name.clone(), s.dtype, s.dims.clone()))
            .collect()
    };
    let f32_256 = |n: &str| (n.to_string(), DType::F32, vec![256]);
    assert_eq!(
        names(&exe.signature.parameters),
        [f32_256("w0"), f32_256("target"), f32_256("x")]
    );
    assert_eq!(names(&exe.signature.outputs), [f32_256("w"), f32_256("y")]);
    let kinds: Vec<&str> = exe.entry.iter().map(Thunk::kind).collect();
    assert_eq!(
        kinds,
        ["copy", "memset", "async_start", "while", "async_done"]
    );
    let Thunk::AsyncStart(AsyncStartThunk { id, kind, body }) = &exe.entry[2] else {
        panic!()
    };
    assert_eq!((*id, *kind, body.len()), (1, AsyncKind::Compute, 2));
    assert_eq!(exe.entry[4], Thunk::AsyncDone(AsyncDoneThunk { id: 1 }));
    let Thunk::While(WhileThunk {
        cond,
        pred,
        body,
        trip_count,
    }) = &exe.entry[3]
    else {
        panic!()
    };
    assert_eq!((cond.len(), body.len(), *trip_count), (1, 2, Some(10)));
    assert_eq!((pred.allocation, pred.size), (6, 1));

    // Both encodings reproduce it, and the binary form loads back from a file.
    let d = dir("while-async");
    let pb = d.join("while_async.pb");
    save_file(&pb, &exe).unwrap();
    assert_eq!(load_file(&pb).unwrap(), exe);
    let txt = d.join("while_async.txtpb");
    save_file(&txt, &exe).unwrap();
    assert_eq!(load_file(&txt).unwrap(), exe);
}

#[test]
fn while_async_example_computes_sgd_steps() {
    // A quick check on the host backend, with and without the trip count (the `cond` path
    // must give the same ten steps), in order and on several streams.
    use xthunk_core::backend::Backend;
    use xthunk_core::executor::{ExecuteOptions, ExecutorConfig, LoadedExecutable};
    use xthunk_core::host::HostBackend;
    let exe = load_file(while_async_path()).unwrap();
    let mut no_trip = exe.clone();
    let Thunk::While(WhileThunk { trip_count, .. }) = &mut no_trip.entry[3] else {
        panic!()
    };
    *trip_count = None;
    let w0: Vec<f32> = (0..256).map(|i| (i as f32 - 128.0) / 16.0).collect();
    let target: Vec<f32> = (0..256)
        .map(|i| ((i * 37) % 256) as f32 / 64.0 - 2.0)
        .collect();
    let x: Vec<f32> = (0..256).map(|i| (i as f32 - 100.0) / 50.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let dev = HostBackend::new().device(0).unwrap();
    for program in [&exe, &no_trip] {
        for config in [ExecutorConfig::in_order(), ExecutorConfig::with_streams(2)] {
            let loaded =
                LoadedExecutable::load_with(dev.clone(), program.clone(), &config).unwrap();
            let out = loaded
                .run_with_host_data(
                    &[&bytes(&w0), &bytes(&target), &bytes(&x)],
                    &ExecuteOptions::default(),
                )
                .unwrap();
            let (w, y) = (floats(&out[0]), floats(&out[1]));
            for i in 0..256 {
                let want_w = target[i] as f64 + 0.75f64.powi(10) * (w0[i] - target[i]) as f64;
                assert!(
                    (w[i] as f64 - want_w).abs() <= 1e-5 * (1.0 + want_w.abs()),
                    "w[{i}] = {} want {want_w} ({config:?}, trip count {:?})",
                    w[i],
                    matches!(
                        &program.entry[3],
                        Thunk::While(WhileThunk {
                            trip_count: Some(_),
                            ..
                        })
                    )
                );
                let want_y = 2.0 * (x[i] as f64).tanh();
                assert!(
                    (y[i] as f64 - want_y).abs() <= 1e-6,
                    "y[{i}] = {} want {want_y}",
                    y[i]
                );
            }
        }
    }
}
