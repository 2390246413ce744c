/* The issue-28 aliasing case from C: o1 = copy(a), o2 = b + b, with o1 given b's buffer.
 * Undeclared, the run is refused (the buffers overlap); with b declared aliased to o1
 * (`tf.aliasing_output`, what JAX's donate_argnums prints) the same call computes right, and
 * so does a donation through xthunk_executable_run_donated with a NULL output.
 * Usage: donate [BACKEND]; prints "donate: ok" and exits 0 when every check holds. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "xthunk.h"

static const char *PLAIN =
    "module {\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> "
    "(tensor<4xf32>, tensor<4xf32>) {\n    %0 = stablehlo.add %b, %b : tensor<4xf32>\n"
    "    return %a, %0 : tensor<4xf32>, tensor<4xf32>\n  }\n}\n";
static const char *ALIASED =
    "module {\n  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32> "
    "{tf.aliasing_output = 0 : i32}) -> (tensor<4xf32>, tensor<4xf32>) {\n"
    "    %0 = stablehlo.add %b, %b : tensor<4xf32>\n"
    "    return %a, %0 : tensor<4xf32>, tensor<4xf32>\n  }\n}\n";

static int failed(const char *what, XthunkError *e) {
    if (e == NULL) return 0;
    fprintf(stderr, "donate: %s: %s\n", what, xthunk_error_message(e));
    xthunk_error_free(e);
    return 1;
}

static XthunkExecutable *load(const XthunkDevice *dev, const char *text) {
    XthunkExecutable *exe = NULL;
    if (failed("load", xthunk_executable_load_bytes(dev, (const uint8_t *)text, strlen(text), &exe)))
        return NULL;
    return exe;
}

static int check(const XthunkBuffer *buf, const float *want, const char *what) {
    float got[4];
    if (failed("read", xthunk_buffer_read(buf, (uint8_t *)got, sizeof got))) return 1;
    for (int i = 0; i < 4; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "donate: %s[%d] = %g, want %g\n", what, i, got[i], want[i]);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "host";
    XthunkRuntime *rt = NULL;
    XthunkDevice *dev = NULL;
    if (failed("runtime", xthunk_runtime_new(1, &rt))) return 1;
    if (failed("device", xthunk_runtime_device(rt, backend, 0, &dev))) return 1;
    XthunkExecutable *plain = load(dev, PLAIN), *aliased = load(dev, ALIASED);
    if (plain == NULL || aliased == NULL) return 1;
    XthunkBuffer *a = NULL, *b = NULL, *o2 = NULL;
    if (failed("buffer", xthunk_buffer_new(dev, 16, &a)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &b)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &o2)))
        return 1;
    const float ones[4] = {1, 1, 1, 1}, bv[4] = {10, 20, 30, 40}, twice[4] = {20, 40, 60, 80};
    const XthunkBuffer *params[2] = {a, b}, *outs[2] = {b, o2};
    int bad = failed("write", xthunk_buffer_write(a, (const uint8_t *)ones, 16));

    /* Undeclared: refused, naming both, and nothing written. */
    bad |= failed("write", xthunk_buffer_write(b, (const uint8_t *)bv, 16));
    XthunkError *e = xthunk_executable_run(plain, params, 2, outs, 2);
    if (e == NULL || xthunk_error_code(e) != XTHUNK_STATUS_INVALID_ARGUMENT ||
        strstr(xthunk_error_message(e), "parameter 1 and output 0") == NULL) {
        fprintf(stderr, "donate: the undeclared overlap was not refused\n");
        bad = 1;
    }
    xthunk_error_free(e);
    bad |= check(b, bv, "b after the refusal");

    /* Declared: the same call computes right. */
    if (xthunk_executable_output_alias(aliased, 0) != 1) {
        fprintf(stderr, "donate: output 0 is not aliased to parameter 1\n");
        bad = 1;
    }
    bad |= failed("run", xthunk_executable_run(aliased, params, 2, outs, 2));
    bad |= check(o2, twice, "o2") | check(b, ones, "o1 in b");

    /* Donated, with a NULL output. */
    bad |= failed("write", xthunk_buffer_write(b, (const uint8_t *)bv, 16));
    const bool donate[2] = {false, true};
    const XthunkBuffer *donated_outs[2] = {NULL, o2};
    bad |= failed("run_donated",
                  xthunk_executable_run_donated(aliased, params, 2, donate, donated_outs, 2));
    bad |= check(o2, twice, "o2 (donated)") | check(b, ones, "o1 in b (donated)");

    xthunk_buffer_free(a);
    xthunk_buffer_free(b);
    xthunk_buffer_free(o2);
    xthunk_executable_free(plain);
    xthunk_executable_free(aliased);
    xthunk_device_free(dev);
    xthunk_runtime_free(rt);
    if (bad) return 1;
    printf("donate: ok\n");
    return 0;
}
