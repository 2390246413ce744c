//! Input–output aliases from `main`'s argument attributes: `tf.aliasing_output` and
//! `jax.buffer_donor` (what `jax.jit(f, donate_argnums=…)` prints), and the refusals.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use xthunk_stablehlo::import::import_text;

/// `jax.jit(lambda w, x: (x * 2, w - 0.5 * x), donate_argnums=(0,)).lower(a, a)` with
/// `a` f32[4], as JAX 0.4 prints it (`debug_info=False`).
const DONATED: &str = r#"module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>) -> (tensor<4xf32> {jax.result_info = "result[0]"}, tensor<4xf32> {jax.result_info = "result[1]"}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %1 = stablehlo.multiply %arg1, %0 : tensor<4xf32>
    %cst_0 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %3 = stablehlo.multiply %2, %arg1 : tensor<4xf32>
    %4 = stablehlo.subtract %arg0, %3 : tensor<4xf32>
    return %1, %4 : tensor<4xf32>, tensor<4xf32>
  }
}
"#;

const ATTR: &str = "{tf.aliasing_output = 0 : i32}";

#[test]
fn tf_aliasing_output_names_the_output() {
    let imported = import_text(DONATED).unwrap();
    assert_eq!(imported.aliases, vec![(0, 0)]);
    let both = DONATED.replace(
        "%arg1: tensor<4xf32>)",
        "%arg1: tensor<4xf32> {tf.aliasing_output = 1 : i32})",
    );
    assert_eq!(import_text(&both).unwrap().aliases, vec![(0, 0), (1, 1)]);
}

#[test]
fn a_buffer_donor_takes_the_first_free_output_of_its_type() {
    let donor = DONATED.replace(ATTR, "{jax.buffer_donor = true}");
    assert_eq!(import_text(&donor).unwrap().aliases, vec![(0, 0)]);
    // Output 0 is named by arg1, so the donor arg0 takes output 1.
    let both = donor.replace(
        "%arg1: tensor<4xf32>)",
        "%arg1: tensor<4xf32> {tf.aliasing_output = 0 : i32})",
    );
    assert_eq!(import_text(&both).unwrap().aliases, vec![(0, 1), (1, 0)]);
    // No donation without the attribute.
    let none = DONATED.replace(ATTR, "");
    assert!(import_text(&none).unwrap().aliases.is_empty());
}

#[test]
fn a_wrong_alias_is_refused_naming_the_parameter_and_the_result() {
    let e = import_text(&DONATED.replace(ATTR, "{tf.aliasing_output = 2 : i32}")).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("parameter 0: tf.aliasing_output"), "{e}");
    assert!(e.contains("names no result (`main` has 2)"), "{e}");
    let twice = DONATED.replace(
        "%arg1: tensor<4xf32>)",
        &format!("%arg1: tensor<4xf32> {ATTR})"),
    );
    let e = import_text(&twice).unwrap_err().to_string();
    assert!(
        e.contains("parameter 1: result 0 `out0` is aliased by two parameters"),
        "{e}"
    );
}
