//! `ragged_all_to_all` on host devices through `run_spmd`: a worked example with JAX's
//! meaning of the offsets, and the errors bad offsets and sizes give (one line naming the
//! array and the member, on every rank, no hang), and the load-time refusals.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;
use xthunk_core::backend::{Backend, Device};
use xthunk_core::builder::ExecutableBuilder;
use xthunk_core::collectives::{CliqueProvider, Timeouts};
use xthunk_core::executor::spmd::{RankOutput, run_spmd};
use xthunk_core::executor::{ExecuteOptions, ExecutorConfig};
use xthunk_core::host::{HostBackend, HostCliqueProvider};
use xthunk_core::ir::{DType, Executable, RaggedAllToAllThunk};

/// 6 f32 in, 6 out, i32 index arrays of 2 entries; `row_elements` 1.
fn program(row_elements: u64, index_dtype: DType) -> Result<Executable, String> {
    let mut b = ExecutableBuilder::new("ragged");
    let x = b.parameter("x", DType::F32, &[6]);
    let ix: Vec<_> = [
        "input_offsets",
        "send_sizes",
        "output_offsets",
        "recv_sizes",
    ]
    .iter()
    .map(|n| b.parameter(n, index_dtype, &[2]))
    .collect();
    let y = b.output("y", DType::F32, &[6]);
    b.push(
        RaggedAllToAllThunk {
            operand: x.slice(),
            output: y.slice(),
            input_offsets: ix[0].slice(),
            send_sizes: ix[1].slice(),
            output_offsets: ix[2].slice(),
            recv_sizes: ix[3].slice(),
            dtype: DType::F32,
            index_dtype,
            row_elements,
            groups: vec![],
        }
        .into(),
    );
    b.build().map_err(|e| e.to_string())
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32s(v: [i32; 2]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Rank inputs: operand, then the four index arrays.
fn inputs(x: &[f32], ix: [[i32; 2]; 4]) -> Vec<Vec<u8>> {
    let mut v = vec![f32s(x)];
    v.extend(ix.iter().map(|a| i32s(*a)));
    v
}

fn run(inputs: &[Vec<Vec<u8>>]) -> xthunk_core::error::Result<Vec<RankOutput>> {
    let exe = program(1, DType::I32).map_err(xthunk_core::error::Error::InvalidArgument)?;
    let b = HostBackend::with_devices(inputs.len());
    let devs: Vec<Arc<dyn Device>> = (0..inputs.len())
        .map(|i| b.device(i))
        .collect::<Result<_, _>>()?;
    let t = Timeouts::new(Duration::from_secs(2), Duration::from_secs(10));
    let cliques: Arc<dyn CliqueProvider> = Arc::new(HostCliqueProvider::new(devs.clone(), t)?);
    run_spmd(
        &exe,
        &devs,
        cliques,
        inputs,
        1,
        &ExecutorConfig::default(),
        &ExecuteOptions::default(),
    )
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn rows_land_where_the_sender_says() {
    // Rank 0 keeps rows 0..1 (at its row 0) and sends rows 1..3 to rank 1's rows 4..6; rank 1
    // sends its rows 0..3 to rank 0's rows 2..5 and keeps row 5 at its row 0.
    let r0 = inputs(
        &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0],
        [[0, 1], [1, 2], [0, 4], [1, 3]],
    );
    let r1 = inputs(
        &[20.0, 21.0, 22.0, 23.0, 24.0, 25.0],
        [[0, 5], [3, 1], [2, 0], [2, 1]],
    );
    let out = run(&[r0, r1]).unwrap();
    let y0 = floats(&out[0].outputs[0]);
    let y1 = floats(&out[1].outputs[0]);
    assert_eq!(y0[0], 10.0);
    assert_eq!(&y0[2..5], &[20.0, 21.0, 22.0]);
    assert_eq!(y1[0], 25.0);
    assert_eq!(&y1[4..6], &[11.0, 12.0]);
}

#[test]
fn bad_offsets_and_sizes_fail_every_rank_with_the_array_named() {
    let x = [0.0f32; 6];
    // Consistent arrays: 3 rows each way, rank r's rows landing at row 3r of each receiver.
    let ok0 = [[0, 3], [3, 3], [0, 0], [3, 3]];
    let ok1 = [[0, 3], [3, 3], [3, 3], [3, 3]];
    run(&[inputs(&x, ok0), inputs(&x, ok1)]).unwrap();
    // Rank 1 reads rows 5..8 of a 6-row operand.
    let bad = [[0, 5], [3, 3], [3, 3], [3, 3]];
    let e = run(&[inputs(&x, ok0), inputs(&x, bad)]).unwrap_err();
    let text = format!("{e:#}");
    assert!(text.contains("ragged_all_to_all"), "{text}");
    // Rank 0 expects 2 rows from rank 1, which sends 3.
    let short = [[0, 3], [3, 3], [0, 0], [3, 2]];
    let e = run(&[inputs(&x, short), inputs(&x, ok1)]).unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.contains("recv_sizes[1] is 2 but member 1 sends 3"),
        "{text}"
    );
    // A negative size.
    let neg = [[0, 3], [-1, 3], [0, 0], [3, 3]];
    let e = run(&[inputs(&x, neg), inputs(&x, ok1)]).unwrap_err();
    assert!(format!("{e:#}").contains("negative"), "{e:#}");
}

#[test]
fn load_time_refusals() {
    let e = program(0, DType::I32).unwrap_err();
    assert!(e.contains("row_elements"), "{e}");
    let e = program(1, DType::F32).unwrap_err();
    assert!(e.contains("index_dtype"), "{e}");
    let e = program(4, DType::I32).unwrap_err();
    assert!(e.contains("whole rows"), "{e}");
}
