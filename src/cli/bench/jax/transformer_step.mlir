module @jit_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<1024xf32>, %arg1: tensor<256xf32>, %arg2: tensor<256xf32>, %arg3: tensor<256xf32>, %arg4: tensor<256xf32>, %arg5: tensor<256xf32>, %arg6: tensor<256x1024xf32>, %arg7: tensor<1024x256xf32>, %arg8: tensor<256x256xf32>, %arg9: tensor<256x256xf32>, %arg10: tensor<256x256xf32>, %arg11: tensor<256x256xf32>, %arg12: tensor<2x128x256xf32>, %arg13: tensor<2x128x256xf32>, %arg14: tensor<f32>) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<1024xf32> {jax.result_info = "result[1]['b1']"}, tensor<256xf32> {jax.result_info = "result[1]['b2']"}, tensor<256xf32> {jax.result_info = "result[1]['ln1_b']"}, tensor<256xf32> {jax.result_info = "result[1]['ln1_g']"}, tensor<256xf32> {jax.result_info = "result[1]['ln2_b']"}, tensor<256xf32> {jax.result_info = "result[1]['ln2_g']"}, tensor<256x1024xf32> {jax.result_info = "result[1]['w1']"}, tensor<1024x256xf32> {jax.result_info = "result[1]['w2']"}, tensor<256x256xf32> {jax.result_info = "result[1]['wk']"}, tensor<256x256xf32> {jax.result_info = "result[1]['wo']"}, tensor<256x256xf32> {jax.result_info = "result[1]['wq']"}, tensor<256x256xf32> {jax.result_info = "result[1]['wv']"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg12 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %cst_0 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %3 = stablehlo.divide %1, %2 : tensor<2x128x1xf32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %5 = stablehlo.subtract %arg12, %4 : tensor<2x128x256xf32>
    %6 = stablehlo.multiply %5, %5 : tensor<2x128x256xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.reduce(%6 init: %cst_1) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %8 = stablehlo.broadcast_in_dim %7, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %cst_2 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %10 = stablehlo.divide %8, %9 : tensor<2x128x1xf32>
    %11 = stablehlo.broadcast_in_dim %3, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %12 = stablehlo.subtract %arg12, %11 : tensor<2x128x256xf32>
    %cst_3 = stablehlo.constant dense<9.99999974E-6> : tensor<f32>
    %13 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %14 = stablehlo.add %10, %13 : tensor<2x128x1xf32>
    %15 = stablehlo.rsqrt %14 : tensor<2x128x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %17 = stablehlo.multiply %12, %16 : tensor<2x128x256xf32>
    %18 = stablehlo.broadcast_in_dim %arg3, dims = [2] : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %19 = stablehlo.broadcast_in_dim %18, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %20 = stablehlo.multiply %17, %19 : tensor<2x128x256xf32>
    %21 = stablehlo.broadcast_in_dim %arg2, dims = [2] : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %22 = stablehlo.broadcast_in_dim %21, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %23 = stablehlo.add %20, %22 : tensor<2x128x256xf32>
    %24 = stablehlo.dot_general %23, %arg10, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %25 = stablehlo.reshape %24 : (tensor<2x128x256xf32>) -> tensor<2x128x4x64xf32>
    %26 = stablehlo.transpose %25, dims = [0, 2, 1, 3] : (tensor<2x128x4x64xf32>) -> tensor<2x4x128x64xf32>
    %27 = stablehlo.dot_general %23, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %28 = stablehlo.reshape %27 : (tensor<2x128x256xf32>) -> tensor<2x128x4x64xf32>
    %29 = stablehlo.transpose %28, dims = [0, 2, 1, 3] : (tensor<2x128x4x64xf32>) -> tensor<2x4x128x64xf32>
    %30 = stablehlo.dot_general %23, %arg11, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %31 = stablehlo.reshape %30 : (tensor<2x128x256xf32>) -> tensor<2x128x4x64xf32>
    %32 = stablehlo.transpose %31, dims = [0, 2, 1, 3] : (tensor<2x128x4x64xf32>) -> tensor<2x4x128x64xf32>
    %33 = stablehlo.dot_general %26, %29, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x64xf32>, tensor<2x4x128x64xf32>) -> tensor<2x4x128x128xf32>
    %cst_4 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %34 = stablehlo.sqrt %cst_4 : tensor<f32>
    %35 = stablehlo.broadcast_in_dim %34, dims = [] : (tensor<f32>) -> tensor<2x4x128x128xf32>
    %36 = stablehlo.divide %33, %35 : tensor<2x4x128x128xf32>
    %c = stablehlo.constant dense<true> : tensor<i1>
    %37 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i1>) -> tensor<128x128xi1>
    %38 = call @tril(%37) : (tensor<128x128xi1>) -> tensor<128x128xi1>
    %cst_5 = stablehlo.constant dense<-1.000000e+30> : tensor<f32>
    %39:3 = call @_where(%38, %36, %cst_5) : (tensor<128x128xi1>, tensor<2x4x128x128xf32>, tensor<f32>) -> (tensor<2x4x128x128xf32>, tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>)
    %cst_6 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %40 = stablehlo.reduce(%39#0 init: %cst_6) applies stablehlo.maximum across dimensions = [3] : (tensor<2x4x128x128xf32>, tensor<f32>) -> tensor<2x4x128xf32>
    %41 = stablehlo.reshape %40 : (tensor<2x4x128xf32>) -> tensor<2x4x128x1xf32>
    %42 = stablehlo.broadcast_in_dim %41, dims = [0, 1, 2, 3] : (tensor<2x4x128x1xf32>) -> tensor<2x4x128x128xf32>
    %43 = stablehlo.compare EQ, %39#0, %42, FLOAT : (tensor<2x4x128x128xf32>, tensor<2x4x128x128xf32>) -> tensor<2x4x128x128xi1>
    %44 = stablehlo.convert %43 : (tensor<2x4x128x128xi1>) -> tensor<2x4x128x128xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %45 = stablehlo.reduce(%44 init: %cst_7) applies stablehlo.add across dimensions = [3] : (tensor<2x4x128x128xf32>, tensor<f32>) -> tensor<2x4x128xf32>
    %cst_8 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %46 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %47 = stablehlo.maximum %46, %40 : tensor<2x4x128xf32>
    %48 = stablehlo.compare EQ, %40, %47, FLOAT : (tensor<2x4x128xf32>, tensor<2x4x128xf32>) -> tensor<2x4x128xi1>
    %cst_9 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %49 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %cst_10 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %50 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %51 = stablehlo.select %48, %49, %50 : tensor<2x4x128xi1>, tensor<2x4x128xf32>
    %cst_11 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %52 = stablehlo.broadcast_in_dim %cst_11, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %53 = stablehlo.compare EQ, %52, %47, FLOAT : (tensor<2x4x128xf32>, tensor<2x4x128xf32>) -> tensor<2x4x128xi1>
    %cst_12 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %54 = stablehlo.broadcast_in_dim %cst_12, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %cst_13 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %55 = stablehlo.broadcast_in_dim %cst_13, dims = [] : (tensor<f32>) -> tensor<2x4x128xf32>
    %56 = stablehlo.select %53, %54, %55 : tensor<2x4x128xi1>, tensor<2x4x128xf32>
    %57 = stablehlo.divide %51, %56 : tensor<2x4x128xf32>
    %58 = stablehlo.broadcast_in_dim %47, dims = [0, 1, 2] : (tensor<2x4x128xf32>) -> tensor<2x4x128x1xf32>
    %59 = stablehlo.broadcast_in_dim %58, dims = [0, 1, 2, 3] : (tensor<2x4x128x1xf32>) -> tensor<2x4x128x128xf32>
    %60 = stablehlo.subtract %39#0, %59 : tensor<2x4x128x128xf32>
    %61 = stablehlo.exponential %60 : tensor<2x4x128x128xf32>
    %cst_14 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %62 = stablehlo.reduce(%61 init: %cst_14) applies stablehlo.add across dimensions = [3] : (tensor<2x4x128x128xf32>, tensor<f32>) -> tensor<2x4x128xf32>
    %63 = stablehlo.broadcast_in_dim %62, dims = [0, 1, 2] : (tensor<2x4x128xf32>) -> tensor<2x4x128x1xf32>
    %64 = stablehlo.broadcast_in_dim %63, dims = [0, 1, 2, 3] : (tensor<2x4x128x1xf32>) -> tensor<2x4x128x128xf32>
    %65 = stablehlo.divide %61, %64 : tensor<2x4x128x128xf32>
    %66 = stablehlo.multiply %63, %63 : tensor<2x4x128x1xf32>
    %cst_15 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %67 = stablehlo.broadcast_in_dim %cst_15, dims = [] : (tensor<f32>) -> tensor<2x4x128x1xf32>
    %68 = stablehlo.divide %67, %66 : tensor<2x4x128x1xf32>
    %69 = stablehlo.dot_general %65, %32, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x128xf32>, tensor<2x4x128x64xf32>) -> tensor<2x4x128x64xf32>
    %70 = stablehlo.transpose %69, dims = [0, 2, 1, 3] : (tensor<2x4x128x64xf32>) -> tensor<2x128x4x64xf32>
    %71 = stablehlo.reshape %70 : (tensor<2x128x4x64xf32>) -> tensor<2x128x256xf32>
    %72 = stablehlo.dot_general %71, %arg9, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %73 = stablehlo.add %arg12, %72 : tensor<2x128x256xf32>
    %cst_16 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %74 = stablehlo.reduce(%73 init: %cst_16) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %75 = stablehlo.broadcast_in_dim %74, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %cst_17 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %76 = stablehlo.broadcast_in_dim %cst_17, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %77 = stablehlo.divide %75, %76 : tensor<2x128x1xf32>
    %78 = stablehlo.broadcast_in_dim %77, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %79 = stablehlo.subtract %73, %78 : tensor<2x128x256xf32>
    %80 = stablehlo.multiply %79, %79 : tensor<2x128x256xf32>
    %cst_18 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %81 = stablehlo.broadcast_in_dim %cst_18, dims = [] : (tensor<f32>) -> tensor<2x128x256xf32>
    %82 = stablehlo.multiply %81, %79 : tensor<2x128x256xf32>
    %cst_19 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %83 = stablehlo.reduce(%80 init: %cst_19) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %84 = stablehlo.broadcast_in_dim %83, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %cst_20 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %85 = stablehlo.broadcast_in_dim %cst_20, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %86 = stablehlo.divide %84, %85 : tensor<2x128x1xf32>
    %87 = stablehlo.broadcast_in_dim %77, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %88 = stablehlo.subtract %73, %87 : tensor<2x128x256xf32>
    %cst_21 = stablehlo.constant dense<9.99999974E-6> : tensor<f32>
    %89 = stablehlo.broadcast_in_dim %cst_21, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %90 = stablehlo.add %86, %89 : tensor<2x128x1xf32>
    %91 = stablehlo.rsqrt %90 : tensor<2x128x1xf32>
    %92 = stablehlo.divide %91, %90 : tensor<2x128x1xf32>
    %cst_22 = stablehlo.constant dense<-5.000000e-01> : tensor<f32>
    %93 = stablehlo.broadcast_in_dim %cst_22, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %94 = stablehlo.multiply %93, %92 : tensor<2x128x1xf32>
    %95 = stablehlo.broadcast_in_dim %91, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %96 = stablehlo.multiply %88, %95 : tensor<2x128x256xf32>
    %97 = stablehlo.broadcast_in_dim %arg5, dims = [2] : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %98 = stablehlo.broadcast_in_dim %97, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %99 = stablehlo.multiply %96, %98 : tensor<2x128x256xf32>
    %100 = stablehlo.broadcast_in_dim %arg4, dims = [2] : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %101 = stablehlo.broadcast_in_dim %100, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %102 = stablehlo.add %99, %101 : tensor<2x128x256xf32>
    %103 = stablehlo.dot_general %102, %arg6, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x1024xf32>) -> tensor<2x128x1024xf32>
    %104 = stablehlo.broadcast_in_dim %arg0, dims = [2] : (tensor<1024xf32>) -> tensor<1x1x1024xf32>
    %105 = stablehlo.broadcast_in_dim %104, dims = [0, 1, 2] : (tensor<1x1x1024xf32>) -> tensor<2x128x1024xf32>
    %106 = stablehlo.add %103, %105 : tensor<2x128x1024xf32>
    %107 = stablehlo.multiply %106, %106 : tensor<2x128x1024xf32>
    %108 = stablehlo.multiply %107, %106 : tensor<2x128x1024xf32>
    %109 = stablehlo.multiply %106, %106 : tensor<2x128x1024xf32>
    %cst_23 = stablehlo.constant dense<3.000000e+00> : tensor<f32>
    %110 = stablehlo.broadcast_in_dim %cst_23, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %111 = stablehlo.multiply %110, %109 : tensor<2x128x1024xf32>
    %cst_24 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %112 = stablehlo.broadcast_in_dim %cst_24, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %113 = stablehlo.multiply %112, %108 : tensor<2x128x1024xf32>
    %114 = stablehlo.add %106, %113 : tensor<2x128x1024xf32>
    %cst_25 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %115 = stablehlo.broadcast_in_dim %cst_25, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %116 = stablehlo.multiply %115, %114 : tensor<2x128x1024xf32>
    %117 = stablehlo.tanh %116 : tensor<2x128x1024xf32>
    %cst_26 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %118 = stablehlo.broadcast_in_dim %cst_26, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %119 = stablehlo.subtract %118, %117 : tensor<2x128x1024xf32>
    %cst_27 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %120 = stablehlo.broadcast_in_dim %cst_27, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %121 = stablehlo.add %120, %117 : tensor<2x128x1024xf32>
    %cst_28 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %122 = stablehlo.broadcast_in_dim %cst_28, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %123 = stablehlo.multiply %122, %121 : tensor<2x128x1024xf32>
    %124 = stablehlo.multiply %106, %123 : tensor<2x128x1024xf32>
    %125 = stablehlo.dot_general %124, %arg7, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x128x1024xf32>, tensor<1024x256xf32>) -> tensor<2x128x256xf32>
    %126 = stablehlo.add %73, %125 : tensor<2x128x256xf32>
    %127 = stablehlo.broadcast_in_dim %arg1, dims = [2] : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %128 = stablehlo.broadcast_in_dim %127, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %129 = stablehlo.add %126, %128 : tensor<2x128x256xf32>
    %130 = stablehlo.subtract %129, %arg13 : tensor<2x128x256xf32>
    %131 = stablehlo.multiply %130, %130 : tensor<2x128x256xf32>
    %cst_29 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %132 = stablehlo.broadcast_in_dim %cst_29, dims = [] : (tensor<f32>) -> tensor<2x128x256xf32>
    %133 = stablehlo.multiply %132, %130 : tensor<2x128x256xf32>
    %cst_30 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %134 = stablehlo.reduce(%131 init: %cst_30) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<f32>
    %cst_31 = stablehlo.constant dense<6.553600e+04> : tensor<f32>
    %135 = stablehlo.divide %134, %cst_31 : tensor<f32>
    %cst_32 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_33 = stablehlo.constant dense<6.553600e+04> : tensor<f32>
    %136 = stablehlo.divide %cst_32, %cst_33 : tensor<f32>
    %137 = stablehlo.broadcast_in_dim %136, dims = [] : (tensor<f32>) -> tensor<2x128x256xf32>
    %138 = stablehlo.multiply %137, %133 : tensor<2x128x256xf32>
    %cst_34 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %139 = stablehlo.reduce(%138 init: %cst_34) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<256xf32>
    %140 = stablehlo.reshape %139 : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %cst_35 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %141 = stablehlo.reduce(%140 init: %cst_35) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x256xf32>, tensor<f32>) -> tensor<256xf32>
    %142 = stablehlo.dot_general %138, %124, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<2x128x1024xf32>) -> tensor<256x1024xf32>
    %143 = stablehlo.transpose %142, dims = [1, 0] : (tensor<256x1024xf32>) -> tensor<1024x256xf32>
    %144 = stablehlo.dot_general %138, %arg7, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<1024x256xf32>) -> tensor<2x128x1024xf32>
    %145 = stablehlo.multiply %106, %144 : tensor<2x128x1024xf32>
    %146 = stablehlo.multiply %144, %123 : tensor<2x128x1024xf32>
    %cst_36 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %147 = stablehlo.broadcast_in_dim %cst_36, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %148 = stablehlo.multiply %147, %145 : tensor<2x128x1024xf32>
    %149 = stablehlo.multiply %148, %119 : tensor<2x128x1024xf32>
    %150 = stablehlo.multiply %149, %117 : tensor<2x128x1024xf32>
    %151 = stablehlo.add %149, %150 : tensor<2x128x1024xf32>
    %cst_37 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %152 = stablehlo.broadcast_in_dim %cst_37, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %153 = stablehlo.multiply %152, %151 : tensor<2x128x1024xf32>
    %154 = stablehlo.add %146, %153 : tensor<2x128x1024xf32>
    %cst_38 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %155 = stablehlo.broadcast_in_dim %cst_38, dims = [] : (tensor<f32>) -> tensor<2x128x1024xf32>
    %156 = stablehlo.multiply %155, %153 : tensor<2x128x1024xf32>
    %157 = stablehlo.multiply %156, %111 : tensor<2x128x1024xf32>
    %158 = stablehlo.add %154, %157 : tensor<2x128x1024xf32>
    %cst_39 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %159 = stablehlo.reduce(%158 init: %cst_39) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %160 = stablehlo.reshape %159 : (tensor<1024xf32>) -> tensor<1x1x1024xf32>
    %cst_40 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %161 = stablehlo.reduce(%160 init: %cst_40) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x1024xf32>, tensor<f32>) -> tensor<1024xf32>
    %162 = stablehlo.dot_general %158, %102, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x1024xf32>, tensor<2x128x256xf32>) -> tensor<1024x256xf32>
    %163 = stablehlo.transpose %162, dims = [1, 0] : (tensor<1024x256xf32>) -> tensor<256x1024xf32>
    %164 = stablehlo.dot_general %158, %arg6, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x1024xf32>, tensor<256x1024xf32>) -> tensor<2x128x256xf32>
    %cst_41 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %165 = stablehlo.reduce(%164 init: %cst_41) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<256xf32>
    %166 = stablehlo.reshape %165 : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %cst_42 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %167 = stablehlo.reduce(%166 init: %cst_42) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x256xf32>, tensor<f32>) -> tensor<256xf32>
    %168 = stablehlo.multiply %96, %164 : tensor<2x128x256xf32>
    %cst_43 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %169 = stablehlo.reduce(%168 init: %cst_43) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<256xf32>
    %170 = stablehlo.reshape %169 : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %171 = stablehlo.broadcast_in_dim %97, dims = [0, 1, 2] : (tensor<1x1x256xf32>) -> tensor<2x128x256xf32>
    %172 = stablehlo.multiply %164, %171 : tensor<2x128x256xf32>
    %cst_44 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %173 = stablehlo.reduce(%170 init: %cst_44) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x256xf32>, tensor<f32>) -> tensor<256xf32>
    %174 = stablehlo.multiply %88, %172 : tensor<2x128x256xf32>
    %cst_45 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %175 = stablehlo.reduce(%174 init: %cst_45) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %176 = stablehlo.reshape %175 : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %177 = stablehlo.broadcast_in_dim %91, dims = [0, 1, 2] : (tensor<2x128x1xf32>) -> tensor<2x128x256xf32>
    %178 = stablehlo.multiply %172, %177 : tensor<2x128x256xf32>
    %179 = stablehlo.multiply %176, %94 : tensor<2x128x1xf32>
    %180 = stablehlo.negate %178 : tensor<2x128x256xf32>
    %cst_46 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %181 = stablehlo.reduce(%180 init: %cst_46) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %182 = stablehlo.reshape %181 : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %183 = stablehlo.add %138, %178 : tensor<2x128x256xf32>
    %cst_47 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %184 = stablehlo.broadcast_in_dim %cst_47, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %185 = stablehlo.divide %179, %184 : tensor<2x128x1xf32>
    %cst_48 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %186 = stablehlo.reduce(%185 init: %cst_48) applies stablehlo.add across dimensions = [2] : (tensor<2x128x1xf32>, tensor<f32>) -> tensor<2x128xf32>
    %187 = stablehlo.broadcast_in_dim %186, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x256xf32>
    %188 = stablehlo.multiply %187, %82 : tensor<2x128x256xf32>
    %189 = stablehlo.negate %188 : tensor<2x128x256xf32>
    %cst_49 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %190 = stablehlo.reduce(%189 init: %cst_49) applies stablehlo.add across dimensions = [2] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<2x128xf32>
    %191 = stablehlo.reshape %190 : (tensor<2x128xf32>) -> tensor<2x128x1xf32>
    %192 = stablehlo.add %183, %188 : tensor<2x128x256xf32>
    %193 = stablehlo.add %182, %191 : tensor<2x128x1xf32>
    %cst_50 = stablehlo.constant dense<2.560000e+02> : tensor<f32>
    %194 = stablehlo.broadcast_in_dim %cst_50, dims = [] : (tensor<f32>) -> tensor<2x128x1xf32>
    %195 = stablehlo.divide %193, %194 : tensor<2x128x1xf32>
    %cst_51 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %196 = stablehlo.reduce(%195 init: %cst_51) applies stablehlo.add across dimensions = [2] : (tensor<2x128x1xf32>, tensor<f32>) -> tensor<2x128xf32>
    %197 = stablehlo.broadcast_in_dim %196, dims = [0, 1] : (tensor<2x128xf32>) -> tensor<2x128x256xf32>
    %198 = stablehlo.add %192, %197 : tensor<2x128x256xf32>
    %199 = stablehlo.dot_general %198, %71, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<2x128x256xf32>) -> tensor<256x256xf32>
    %200 = stablehlo.transpose %199, dims = [1, 0] : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %201 = stablehlo.dot_general %198, %arg9, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %202 = stablehlo.reshape %201 : (tensor<2x128x256xf32>) -> tensor<2x128x4x64xf32>
    %203 = stablehlo.transpose %202, dims = [0, 2, 1, 3] : (tensor<2x128x4x64xf32>) -> tensor<2x4x128x64xf32>
    %204 = stablehlo.dot_general %203, %65, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x64xf32>, tensor<2x4x128x128xf32>) -> tensor<2x4x64x128xf32>
    %205 = stablehlo.transpose %204, dims = [0, 1, 3, 2] : (tensor<2x4x64x128xf32>) -> tensor<2x4x128x64xf32>
    %206 = stablehlo.dot_general %203, %32, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x64xf32>, tensor<2x4x128x64xf32>) -> tensor<2x4x128x128xf32>
    %207 = stablehlo.broadcast_in_dim %68, dims = [0, 1, 2, 3] : (tensor<2x4x128x1xf32>) -> tensor<2x4x128x128xf32>
    %208 = stablehlo.multiply %206, %207 : tensor<2x4x128x128xf32>
    %209 = stablehlo.multiply %208, %61 : tensor<2x4x128x128xf32>
    %cst_52 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %210 = stablehlo.reduce(%209 init: %cst_52) applies stablehlo.add across dimensions = [3] : (tensor<2x4x128x128xf32>, tensor<f32>) -> tensor<2x4x128xf32>
    %211 = stablehlo.reshape %210 : (tensor<2x4x128xf32>) -> tensor<2x4x128x1xf32>
    %212 = stablehlo.negate %211 : tensor<2x4x128x1xf32>
    %213 = stablehlo.broadcast_in_dim %63, dims = [0, 1, 2, 3] : (tensor<2x4x128x1xf32>) -> tensor<2x4x128x128xf32>
    %214 = stablehlo.divide %206, %213 : tensor<2x4x128x128xf32>
    %cst_53 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %215 = stablehlo.reduce(%212 init: %cst_53) applies stablehlo.add across dimensions = [3] : (tensor<2x4x128x1xf32>, tensor<f32>) -> tensor<2x4x128xf32>
    %216 = stablehlo.broadcast_in_dim %215, dims = [0, 1, 2] : (tensor<2x4x128xf32>) -> tensor<2x4x128x128xf32>
    %217 = stablehlo.add %214, %216 : tensor<2x4x128x128xf32>
    %218 = stablehlo.multiply %217, %61 : tensor<2x4x128x128xf32>
    %219 = call @_where_0(%39#1, %39#2, %218) : (tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>, tensor<2x4x128x128xf32>) -> tensor<2x4x128x128xf32>
    %220 = stablehlo.broadcast_in_dim %34, dims = [] : (tensor<f32>) -> tensor<2x4x128x128xf32>
    %221 = stablehlo.divide %219, %220 : tensor<2x4x128x128xf32>
    %222 = stablehlo.dot_general %221, %26, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x128xf32>, tensor<2x4x128x64xf32>) -> tensor<2x4x128x64xf32>
    %223 = stablehlo.dot_general %221, %29, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<2x4x128x128xf32>, tensor<2x4x128x64xf32>) -> tensor<2x4x128x64xf32>
    %224 = stablehlo.transpose %205, dims = [0, 2, 1, 3] : (tensor<2x4x128x64xf32>) -> tensor<2x128x4x64xf32>
    %225 = stablehlo.reshape %224 : (tensor<2x128x4x64xf32>) -> tensor<2x128x256xf32>
    %226 = stablehlo.dot_general %225, %23, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<2x128x256xf32>) -> tensor<256x256xf32>
    %227 = stablehlo.transpose %226, dims = [1, 0] : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %228 = stablehlo.dot_general %225, %arg11, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %229 = stablehlo.transpose %222, dims = [0, 2, 1, 3] : (tensor<2x4x128x64xf32>) -> tensor<2x128x4x64xf32>
    %230 = stablehlo.reshape %229 : (tensor<2x128x4x64xf32>) -> tensor<2x128x256xf32>
    %231 = stablehlo.dot_general %230, %23, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<2x128x256xf32>) -> tensor<256x256xf32>
    %232 = stablehlo.transpose %231, dims = [1, 0] : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %233 = stablehlo.dot_general %230, %arg8, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %234 = stablehlo.add %228, %233 : tensor<2x128x256xf32>
    %235 = stablehlo.transpose %223, dims = [0, 2, 1, 3] : (tensor<2x4x128x64xf32>) -> tensor<2x128x4x64xf32>
    %236 = stablehlo.reshape %235 : (tensor<2x128x4x64xf32>) -> tensor<2x128x256xf32>
    %237 = stablehlo.dot_general %236, %23, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<2x128x256xf32>) -> tensor<256x256xf32>
    %238 = stablehlo.transpose %237, dims = [1, 0] : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %239 = stablehlo.dot_general %236, %arg10, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x128x256xf32>, tensor<256x256xf32>) -> tensor<2x128x256xf32>
    %240 = stablehlo.add %234, %239 : tensor<2x128x256xf32>
    %cst_54 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %241 = stablehlo.reduce(%240 init: %cst_54) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<256xf32>
    %242 = stablehlo.reshape %241 : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %cst_55 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %243 = stablehlo.reduce(%242 init: %cst_55) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x256xf32>, tensor<f32>) -> tensor<256xf32>
    %244 = stablehlo.multiply %17, %240 : tensor<2x128x256xf32>
    %cst_56 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %245 = stablehlo.reduce(%244 init: %cst_56) applies stablehlo.add across dimensions = [0, 1] : (tensor<2x128x256xf32>, tensor<f32>) -> tensor<256xf32>
    %246 = stablehlo.reshape %245 : (tensor<256xf32>) -> tensor<1x1x256xf32>
    %cst_57 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %247 = stablehlo.reduce(%246 init: %cst_57) applies stablehlo.add across dimensions = [0, 1] : (tensor<1x1x256xf32>, tensor<f32>) -> tensor<256xf32>
    %248 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<1024xf32>
    %249 = stablehlo.multiply %248, %161 : tensor<1024xf32>
    %250 = stablehlo.subtract %arg0, %249 : tensor<1024xf32>
    %251 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %252 = stablehlo.multiply %251, %141 : tensor<256xf32>
    %253 = stablehlo.subtract %arg1, %252 : tensor<256xf32>
    %254 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %255 = stablehlo.multiply %254, %243 : tensor<256xf32>
    %256 = stablehlo.subtract %arg2, %255 : tensor<256xf32>
    %257 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %258 = stablehlo.multiply %257, %247 : tensor<256xf32>
    %259 = stablehlo.subtract %arg3, %258 : tensor<256xf32>
    %260 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %261 = stablehlo.multiply %260, %167 : tensor<256xf32>
    %262 = stablehlo.subtract %arg4, %261 : tensor<256xf32>
    %263 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %264 = stablehlo.multiply %263, %173 : tensor<256xf32>
    %265 = stablehlo.subtract %arg5, %264 : tensor<256xf32>
    %266 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256x1024xf32>
    %267 = stablehlo.multiply %266, %163 : tensor<256x1024xf32>
    %268 = stablehlo.subtract %arg6, %267 : tensor<256x1024xf32>
    %269 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<1024x256xf32>
    %270 = stablehlo.multiply %269, %143 : tensor<1024x256xf32>
    %271 = stablehlo.subtract %arg7, %270 : tensor<1024x256xf32>
    %272 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256x256xf32>
    %273 = stablehlo.multiply %272, %232 : tensor<256x256xf32>
    %274 = stablehlo.subtract %arg8, %273 : tensor<256x256xf32>
    %275 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256x256xf32>
    %276 = stablehlo.multiply %275, %200 : tensor<256x256xf32>
    %277 = stablehlo.subtract %arg9, %276 : tensor<256x256xf32>
    %278 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256x256xf32>
    %279 = stablehlo.multiply %278, %238 : tensor<256x256xf32>
    %280 = stablehlo.subtract %arg10, %279 : tensor<256x256xf32>
    %281 = stablehlo.broadcast_in_dim %arg14, dims = [] : (tensor<f32>) -> tensor<256x256xf32>
    %282 = stablehlo.multiply %281, %227 : tensor<256x256xf32>
    %283 = stablehlo.subtract %arg11, %282 : tensor<256x256xf32>
    return %135, %250, %253, %256, %259, %262, %265, %268, %271, %274, %277, %280, %283 : tensor<f32>, tensor<1024xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256x1024xf32>, tensor<1024x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>
  }
  func.func private @tril(%arg0: tensor<128x128xi1>) -> tensor<128x128xi1> {
    %0 = stablehlo.iota dim = 0 : tensor<128x128xi64>
    %c = stablehlo.constant dense<0> : tensor<i64>
    %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i64>) -> tensor<128x128xi64>
    %2 = stablehlo.add %0, %1 : tensor<128x128xi64>
    %3 = stablehlo.iota dim = 1 : tensor<128x128xi64>
    %4 = stablehlo.compare GE, %2, %3, SIGNED : (tensor<128x128xi64>, tensor<128x128xi64>) -> tensor<128x128xi1>
    %c_0 = stablehlo.constant dense<false> : tensor<i1>
    %5 = stablehlo.broadcast_in_dim %c_0, dims = [] : (tensor<i1>) -> tensor<128x128xi1>
    %6 = stablehlo.select %4, %arg0, %5 : tensor<128x128xi1>, tensor<128x128xi1>
    return %6 : tensor<128x128xi1>
  }
  func.func private @_where(%arg0: tensor<128x128xi1>, %arg1: tensor<2x4x128x128xf32>, %arg2: tensor<f32>) -> (tensor<2x4x128x128xf32>, tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>) {
    %0 = stablehlo.broadcast_in_dim %arg0, dims = [2, 3] : (tensor<128x128xi1>) -> tensor<2x4x128x128xi1>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [] : (tensor<f32>) -> tensor<2x4x128x128xf32>
    %2 = stablehlo.select %0, %arg1, %1 : tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4x128x128xf32>
    return %2, %0, %3 : tensor<2x4x128x128xf32>, tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>
  }
  func.func private @_where_0(%arg0: tensor<2x4x128x128xi1>, %arg1: tensor<2x4x128x128xf32>, %arg2: tensor<2x4x128x128xf32>) -> tensor<2x4x128x128xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x4x128x128xf32>
    %1 = stablehlo.select %arg0, %arg2, %0 : tensor<2x4x128x128xi1>, tensor<2x4x128x128xf32>
    return %1 : tensor<2x4x128x128xf32>
  }
}
