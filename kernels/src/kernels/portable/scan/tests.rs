//! Tests of the portable-source scan.

use super::*;

#[test]
fn vendor_constructs_are_found_with_their_lines() {
    let src = "// __shfl_sync in a comment is fine\n\
               const char* s = \"atomicAdd\";\n\
               __global__ void k(float* x) {\n\
               \x20 float v = __shfl_down(x[0], 1);\n\
               \x20 atomicAdd_system(x, v); int w = __activemask();\n\
               \x20 asm(\"trap;\");\n\
               }\n\
               #include <mma.h>\n\
               #define MY_BALLOT(p) \\\n  __ballot(p)\n\
               __half2 h; cudaMalloc(0, 0); hipLaunchKernelGGL(k);\n\
               int c = __builtin_popcountll(7ull) + __popc(3u);\n";
    let f = vendor_constructs(src);
    let got: Vec<(usize, &str)> = f.iter().map(|f| (f.line, f.construct.as_str())).collect();
    assert_eq!(
        got,
        [
            (4, "__shfl_down"),
            (5, "atomicAdd_system"),
            (5, "__activemask"),
            (6, "asm"),
            (8, "#include"),
            (10, "__ballot"),
            (11, "__half2"),
            (11, "cudaMalloc"),
            (11, "hipLaunchKernelGGL"),
            (12, "__builtin_popcountll"),
            (12, "__popc"),
        ]
    );
    assert!(f[0].to_string().starts_with("line 4: `__shfl_down`"));
    let ok = "__global__ void k(float* atomic_count, int hipster, int cuda_like) {\n\
              float v = xt_shfl_down(atomic_count[0], 1u); xt_atomic_add(atomic_count, v); }";
    assert_eq!(vendor_constructs(ok), []);
}

#[test]
fn kernels_not_launchable_by_name_everywhere_are_found() {
    let code = "template <typename T> __global__ void t(T* x) {}\n\
                static __global__ void s(float* x) {}\n\
                extern \"C++\" __global__ void cxx(float* x) {}\n\
                extern \"C\" __global__ void fine(float* x) {}\n\
                __global__ void decl(float* x);\n\
                __global__ void decl(float* x) {}\n\
                __global__ void two(float* x) {}\n\
                __global__ void two(int* x) {}\n";
    let got: Vec<(usize, String)> = vendor_constructs(code)
        .into_iter()
        .map(|f| (f.line, f.construct))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "kernel `t`".to_string()),
            (2, "kernel `s`".to_string()),
            (3, "kernel `cxx`".to_string()),
            (8, "a second definition of kernel `two`".to_string()),
        ]
    );
}

#[test]
fn cuda_only_helpers_are_refused_and_user_names_are_not() {
    let code = "__global__ void k(float* x, unsigned* u) {\n\
                u[0] = __float_as_uint(x[0]); x[1] = max(x[1], 0.0f); x[2] = __ldg_x(x);\n\
                x[3] = __fmul_rn(x[0], x[1]); half2 v = make_half2(1, 2); x[4] = erfinvf(v.x);\n\
                printf(\"%f\", x[0]);\n\
                int atomicAddCount = 0, maxv = 1, atomics = 2; x[5] = __fadd(x[0]);\n\
                atomicAdd_block(u, 1u); }\n";
    let got: Vec<(usize, String)> = vendor_constructs(code)
        .into_iter()
        .map(|f| (f.line, f.construct))
        .collect();
    let names: Vec<&str> = got.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "__float_as_uint",
            "max",
            "__fmul_rn",
            "half2",
            "make_half2",
            "erfinvf",
            "printf",
            "atomicAdd_block"
        ],
        "{got:?}"
    );
}

#[test]
fn pragma_once_headers_are_inlined_once() {
    let h = |name: &str, code: &str| HeaderSource {
        name: name.into(),
        code: code.into(),
    };
    let headers = [
        h("a.h", "#pragma once\nint a;\n"),
        h("b.h", "#include \"a.h\"\nint b;\n"),
    ];
    let out = inline_headers(
        "#include \"a.h\"\n#include \"b.h\"\nint c;\n",
        "m",
        &headers,
    );
    assert_eq!(out.matches("int a;").count(), 1, "{out}");
    assert!(!out.contains("pragma"), "{out}");
    assert!(out.contains("int b;") && out.contains("int c;"), "{out}");
    // Without the pragma, each include inlines the header.
    let headers = [h("a.h", "int a;\n"), h("b.h", "#include \"a.h\"\nint b;\n")];
    let out = inline_headers("#include \"a.h\"\n#include \"b.h\"\n", "m", &headers);
    assert_eq!(out.matches("int a;").count(), 2, "{out}");
}

#[test]
fn kernels_get_c_linkage_on_the_same_line() {
    let src = "__global__ void a(float* x) { x[0] = 1; }\n\
               extern \"C\" __global__ void b() {}\n\
               template <typename T> __global__ void c(T* x) {}\n\
               static __global__ void d() {}\n\
               namespace ns { __global__ void e() {} }\n\
               struct S { void f(); };\n\
               __global__ void __launch_bounds__(256) g(int n) {\n\
               \x20 if (n) { return; }\n\
               }\n\
               __device__ float helper(float x) { return x; }\n\
               #define K __global__\n\
               __global__ void h();\n";
    assert_eq!(kernel_names(src), ["a", "b", "c", "d", "e", "g", "h"]);
    let out = with_c_linkage(src);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), src.lines().count());
    assert_eq!(
        lines[0],
        "extern \"C\" __global__ void a(float* x) { x[0] = 1; }"
    );
    assert_eq!(lines[1], "extern \"C\" __global__ void b() {}");
    assert!(lines[2].starts_with("template"));
    assert!(lines[3].starts_with("static"));
    assert_eq!(
        lines[4],
        "namespace ns { extern \"C\" __global__ void e() {} }"
    );
    assert!(lines[6].starts_with("extern \"C\" __global__ void __launch_bounds__(256) g"));
    assert_eq!(lines[10], "#define K __global__");
    assert_eq!(lines[11], "extern \"C\" __global__ void h();");
}

#[test]
fn carried_headers_are_inlined_with_their_lines() {
    let h = |name: &str, code: &str| HeaderSource {
        name: name.into(),
        code: code.into(),
    };
    let headers = [
        h(
            "util.h",
            "#include \"inner.h\"\n__device__ float twice(float x) { return 2.0f * x; }",
        ),
        h("inner.h", "#define INNER 1\n#include \"util.h\""),
    ];
    let code = "#include \"util.h\"\n__global__ void k(float* x) { x[0] = twice(x[0]); }\n#include <mma.h>\n";
    let out = inline_headers(code, "m", &headers);
    assert_eq!(
        out,
        "#line 1 \"util.h\"\n#line 1 \"inner.h\"\n#define INNER 1\n#include \"util.h\"\n#line 2 \"util.h\"\n\
         __device__ float twice(float x) { return 2.0f * x; }\n#line 2 \"m\"\n\
         __global__ void k(float* x) { x[0] = twice(x[0]); }\n#include <mma.h>\n"
    );
    // Carried headers may be included; anything else is refused.
    let f = vendor_constructs_in(code, &headers);
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].line, f[0].construct.as_str()), (3, "#include"));
    assert_eq!(vendor_constructs(code).len(), 2);
}

#[test]
fn the_lexer_survives_anything() {
    for s in [
        "\"",
        "'",
        "/*",
        "#",
        "\\",
        "é__global__",
        "__global__",
        "{{{}}}}}",
    ] {
        let _ = with_c_linkage(s);
        let _ = vendor_constructs(s);
    }
}

#[test]
fn cuda_spellings_are_accepted() {
    let code = "#include <cuda_runtime.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n\
                namespace cg = cooperative_groups;\n\
                __global__ void k(float* x, int4* q, __nv_bfloat16* b, unsigned* u) {\n\
                \x20 float v = __shfl_xor_sync(0xffffffff, x[0], warpSize / 2);\n\
                \x20 atomicAdd(x, v); atomicCAS(u, 0u, 1u); atomicInc(u, 4u);\n\
                \x20 int4 w = __ldcs(q); __stcs(q + 1, make_int4(w.x, w.y, w.z, w.w)); __stcg(x, v);\n\
                \x20 b[0] = __float2bfloat16(__bfloat162float(b[1]) + 1.0f);\n\
                \x20 cg::thread_block_tile<32> t = cg::tiled_partition<32>(cg::this_thread_block());\n\
                \x20 x[1] = cg::reduce(t, v, cg::plus<float>()) + t.meta_group_rank() + __ballot_sync(~0u, v > 0);\n\
                \x20 __syncwarp(); }\n";
    assert_eq!(vendor_constructs(code), []);
    let out = without_covered_includes(code);
    assert_eq!(out.lines().count(), code.lines().count());
    assert!(out.starts_with("\n\n\nnamespace cg"), "{out}");
}

#[test]
fn unmappable_cooperative_groups_are_refused_with_the_replacement() {
    let code = "#include <cooperative_groups.h>\n#include <cooperative_groups/memcpy_async.h>\n\
                __global__ void k(float* x) {\n\
                \x20 cg::grid_group g = cg::this_grid(); g.sync();\n\
                \x20 auto c = cg::coalesced_threads();\n\
                \x20 x[0] = cg::inclusive_scan(c, x[0]); int inclusive_scan = 0; }\n";
    let got: Vec<(usize, String)> = vendor_constructs(code)
        .into_iter()
        .map(|f| (f.line, f.construct))
        .collect();
    let want: Vec<(usize, String)> = [
        (2, "#include"),
        (4, "grid_group"),
        (4, "this_grid"),
        (5, "coalesced_threads"),
        (6, "inclusive_scan"),
    ]
    .into_iter()
    .map(|(l, c)| (l, c.to_string()))
    .collect();
    assert_eq!(got, want);
    let f = vendor_constructs(code);
    assert!(f[1].to_string().contains("cooperative launch"), "{}", f[1]);
}

#[test]
fn unparseable_source_is_reported_with_its_line() {
    let f = structure_findings("__global__ void k(float* x) {\n  if (x) {\n    x[0] = 1;\n}\n");
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].line, 1);
    assert!(f[0].to_string().contains("does not parse"), "{}", f[0]);
    let f = structure_findings("__global__ void k(float* x) {\n}\n}\n");
    assert_eq!((f[0].line, f[0].construct.as_str()), (3, "}"));
    let f = structure_findings("__global__ void k(float* x) { }\n/* not closed\n\n");
    assert_eq!((f[0].line, f[0].construct.as_str()), (2, "/*"));
    assert_eq!(
        structure_findings("__global__ void k(float* x) { x[0] = '}'; }\n"),
        []
    );
}

#[test]
fn literal_lane_counts_in_shuffling_code_are_warned_about() {
    let code = "__device__ float warp_sum(float v) {\n\
                \x20 for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);\n\
                \x20 return v; }\n\
                __global__ void a(float* x) { x[threadIdx.x % 32] = warp_sum(x[0]); }\n\
                __global__ void b(float* x) { x[threadIdx.x % 32] = 1.0f; float s[32]; }\n\
                __global__ void c(float* x) {\n\
                \x20 for (int o = warpSize / 2; o > 0; o /= 2) x[0] += __shfl_xor_sync(~0u, x[0], o); }\n";
    let w = warp_width_warnings(code);
    let lines: Vec<usize> = w.iter().map(|w| w.line).collect();
    assert_eq!(lines, [2, 2, 4], "{w:?}");
    assert!(w[1].message.contains("0xffffffff"), "{}", w[1]);
    assert_eq!(shuffling_kernels(code), ["a", "c"]);
}

#[test]
fn partial_masks_are_refused_and_full_ones_accepted() {
    let code = "__global__ void k(float* x, unsigned m) {\n\
                \x20 x[0] = __shfl_sync(0xffffffff, x[0], 0) + __shfl_xor_sync(~0u, x[0], 1);\n\
                \x20 x[1] = __ballot_sync(-1, 1) + __any_sync(0xffffffffffffffffull, 1) + __all_sync(m, 1);\n\
                \x20 x[2] = __shfl_down_sync(0xffff, x[0], 1); __syncwarp(1u);\n\
                \x20 x[3] = __shfl_up_sync(-2, x[0], 1) + __ballot_sync(~1u, 1); }\n";
    let got: Vec<(usize, String)> = vendor_constructs(code)
        .into_iter()
        .map(|f| (f.line, f.construct))
        .collect();
    let want: Vec<(usize, String)> = [
        (4, "__shfl_down_sync(0xffff, ...)"),
        (4, "__syncwarp(1u, ...)"),
        (5, "__shfl_up_sync(-2, ...)"),
        (5, "__ballot_sync(~1u, ...)"),
    ]
    .into_iter()
    .map(|(l, c)| (l, c.to_string()))
    .collect();
    assert_eq!(got, want);
}
