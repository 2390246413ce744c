module @jit_mlp_train_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<32xf32>, %arg1: tensor<32xf32>, %arg2: tensor<4xf32>, %arg3: tensor<16x32xf32>, %arg4: tensor<32x32xf32>, %arg5: tensor<32x4xf32>, %arg6: tensor<8x16xf32>, %arg7: tensor<8x4xf32>, %arg8: tensor<f32>) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<32xf32> {jax.result_info = "result[1]['b1']"}, tensor<32xf32> {jax.result_info = "result[1]['b2']"}, tensor<4xf32> {jax.result_info = "result[1]['b3']"}, tensor<16x32xf32> {jax.result_info = "result[1]['w1']"}, tensor<32x32xf32> {jax.result_info = "result[1]['w2']"}, tensor<32x4xf32> {jax.result_info = "result[1]['w3']"}) {
    %0 = stablehlo.dot_general %arg6, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<32xf32>) -> tensor<1x32xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<8x32xf32>
    %3 = stablehlo.add %0, %2 : tensor<8x32xf32>
    %4 = stablehlo.tanh %3 : tensor<8x32xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %6 = stablehlo.subtract %5, %4 : tensor<8x32xf32>
    %7 = stablehlo.dot_general %4, %arg4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %8 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<32xf32>) -> tensor<1x32xf32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1] : (tensor<1x32xf32>) -> tensor<8x32xf32>
    %10 = stablehlo.add %7, %9 : tensor<8x32xf32>
    %11 = call @relu(%10) : (tensor<8x32xf32>) -> tensor<8x32xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %13 = stablehlo.compare GT, %10, %12, FLOAT : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xi1>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %15 = stablehlo.dot_general %11, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<32x4xf32>) -> tensor<8x4xf32>
    %16 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<4xf32>) -> tensor<1x4xf32>
    %17 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<1x4xf32>) -> tensor<8x4xf32>
    %18 = stablehlo.add %15, %17 : tensor<8x4xf32>
    %19 = stablehlo.subtract %18, %arg7 : tensor<8x4xf32>
    %20 = stablehlo.multiply %19, %19 : tensor<8x4xf32>
    %cst_2 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %21 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %22 = stablehlo.multiply %21, %19 : tensor<8x4xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %23 = stablehlo.reduce(%20 init: %cst_3) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x4xf32>, tensor<f32>) -> tensor<f32>
    %cst_4 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %24 = stablehlo.divide %23, %cst_4 : tensor<f32>
    %cst_5 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_6 = stablehlo.constant dense<3.200000e+01> : tensor<f32>
    %25 = stablehlo.divide %cst_5, %cst_6 : tensor<f32>
    %26 = stablehlo.broadcast_in_dim %25, dims = [] : (tensor<f32>) -> tensor<8x4xf32>
    %27 = stablehlo.multiply %26, %22 : tensor<8x4xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %28 = stablehlo.reduce(%27 init: %cst_7) applies stablehlo.add across dimensions = [0] : (tensor<8x4xf32>, tensor<f32>) -> tensor<4xf32>
    %29 = stablehlo.reshape %28 : (tensor<4xf32>) -> tensor<1x4xf32>
    %cst_8 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %30 = stablehlo.reduce(%29 init: %cst_8) applies stablehlo.add across dimensions = [0] : (tensor<1x4xf32>, tensor<f32>) -> tensor<4xf32>
    %31 = stablehlo.dot_general %27, %11, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<8x32xf32>) -> tensor<4x32xf32>
    %32 = stablehlo.transpose %31, dims = [1, 0] : (tensor<4x32xf32>) -> tensor<32x4xf32>
    %33 = stablehlo.dot_general %27, %arg5, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<8x4xf32>, tensor<32x4xf32>) -> tensor<8x32xf32>
    %cst_9 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %34 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %35 = stablehlo.select %13, %33, %34 : tensor<8x32xi1>, tensor<8x32xf32>
    %cst_10 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %36 = stablehlo.reduce(%35 init: %cst_10) applies stablehlo.add across dimensions = [0] : (tensor<8x32xf32>, tensor<f32>) -> tensor<32xf32>
    %37 = stablehlo.reshape %36 : (tensor<32xf32>) -> tensor<1x32xf32>
    %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %38 = stablehlo.reduce(%37 init: %cst_11) applies stablehlo.add across dimensions = [0] : (tensor<1x32xf32>, tensor<f32>) -> tensor<32xf32>
    %39 = stablehlo.dot_general %35, %4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<32x32xf32>
    %40 = stablehlo.transpose %39, dims = [1, 0] : (tensor<32x32xf32>) -> tensor<32x32xf32>
    %41 = stablehlo.dot_general %35, %arg4, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<32x32xf32>) -> tensor<8x32xf32>
    %42 = stablehlo.multiply %41, %6 : tensor<8x32xf32>
    %43 = stablehlo.multiply %42, %4 : tensor<8x32xf32>
    %44 = stablehlo.add %42, %43 : tensor<8x32xf32>
    %cst_12 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %45 = stablehlo.reduce(%44 init: %cst_12) applies stablehlo.add across dimensions = [0] : (tensor<8x32xf32>, tensor<f32>) -> tensor<32xf32>
    %46 = stablehlo.reshape %45 : (tensor<32xf32>) -> tensor<1x32xf32>
    %cst_13 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %47 = stablehlo.reduce(%46 init: %cst_13) applies stablehlo.add across dimensions = [0] : (tensor<1x32xf32>, tensor<f32>) -> tensor<32xf32>
    %48 = stablehlo.dot_general %44, %arg6, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<8x32xf32>, tensor<8x16xf32>) -> tensor<32x16xf32>
    %49 = stablehlo.transpose %48, dims = [1, 0] : (tensor<32x16xf32>) -> tensor<16x32xf32>
    %50 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<32xf32>
    %51 = stablehlo.multiply %50, %47 : tensor<32xf32>
    %52 = stablehlo.subtract %arg0, %51 : tensor<32xf32>
    %53 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<32xf32>
    %54 = stablehlo.multiply %53, %38 : tensor<32xf32>
    %55 = stablehlo.subtract %arg1, %54 : tensor<32xf32>
    %56 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<4xf32>
    %57 = stablehlo.multiply %56, %30 : tensor<4xf32>
    %58 = stablehlo.subtract %arg2, %57 : tensor<4xf32>
    %59 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<16x32xf32>
    %60 = stablehlo.multiply %59, %49 : tensor<16x32xf32>
    %61 = stablehlo.subtract %arg3, %60 : tensor<16x32xf32>
    %62 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<32x32xf32>
    %63 = stablehlo.multiply %62, %40 : tensor<32x32xf32>
    %64 = stablehlo.subtract %arg4, %63 : tensor<32x32xf32>
    %65 = stablehlo.broadcast_in_dim %arg8, dims = [] : (tensor<f32>) -> tensor<32x4xf32>
    %66 = stablehlo.multiply %65, %32 : tensor<32x4xf32>
    %67 = stablehlo.subtract %arg5, %66 : tensor<32x4xf32>
    return %24, %52, %55, %58, %61, %64, %67 : tensor<f32>, tensor<32xf32>, tensor<32xf32>, tensor<4xf32>, tensor<16x32xf32>, tensor<32x32xf32>, tensor<32x4xf32>
  }
  func.func private @relu(%arg0: tensor<8x32xf32>) -> tensor<8x32xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<8x32xf32>
    return %1 : tensor<8x32xf32>
  }
}
