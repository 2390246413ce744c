/* Runs a program (examples/mlp.txtpb) through xthunk's C ABI, twice: once with host memory,
 * once with device buffers that stay on the device, and checks that both give the same bytes.
 *
 *   cc -Iinclude examples/c/mlp.c -Ltarget/debug -lxthunk_capi -o mlp
 *   ./mlp examples/mlp.txtpb inputs.bin outputs.bin [backend]
 *
 * inputs.bin holds every parameter's bytes one after the other, in signature order (for the
 * MLP: x, w1, b1, w2, b2 as little-endian f32); outputs.bin receives the outputs' bytes the
 * same way. capi/tests/c_example.rs compiles this file, runs it, and checks the output against
 * a reference computed in f64. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xthunk.h"

/* Prints an error with its causes and frees it. */
static int report(XthunkError *e, const char *what) {
    fprintf(stderr, "mlp: %s: %s\n", what, xthunk_error_message(e));
    for (size_t i = 0; i < xthunk_error_cause_count(e); i++) {
        fprintf(stderr, "  caused by: %s\n", xthunk_error_cause(e, i));
    }
    xthunk_error_free(e);
    return 1;
}

#define TRY(call, what)                  \
    do {                                 \
        XthunkError *err_ = (call);      \
        if (err_ != NULL) {              \
            status = report(err_, what); \
            goto done;                   \
        }                                \
    } while (0)

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    unsigned char *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) {
            data = malloc(n > 0 ? (size_t)n : 1);
            if (data != NULL && fread(data, 1, (size_t)n, f) != (size_t)n) {
                free(data);
                data = NULL;
            }
            *size = (size_t)n;
        }
    }
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: mlp PROGRAM INPUTS OUTPUTS [BACKEND]\n");
        return 2;
    }
    if (xthunk_abi_version() != XTHUNK_ABI_VERSION) {
        fprintf(stderr, "mlp: libxthunk_capi has ABI %u, this program was built for %u\n",
                xthunk_abi_version(), XTHUNK_ABI_VERSION);
        return 1;
    }
    int status = 0;
    XthunkRuntime *rt = NULL;
    XthunkDevice *dev = NULL;
    XthunkExecutable *exe = NULL;
    XthunkHostArray *ins = NULL;
    XthunkHostArrayMut *outs = NULL;
    XthunkBuffer **bufs = NULL;
    unsigned char *input = NULL, *output = NULL, *again = NULL;
    size_t n_in = 0, n_out = 0, input_size = 0, output_size = 0;

    TRY(xthunk_runtime_new(1, &rt), "runtime");
    TRY(xthunk_runtime_device(rt, argc == 5 ? argv[4] : "host", 0, &dev), "device");
    printf("device: %s (%s)%s\n", xthunk_device_name(dev), xthunk_device_backend(dev),
           xthunk_device_emulated(dev) ? " [EMULATED]" : "");
    TRY(xthunk_executable_load_file(dev, argv[1], &exe), "load");

    input = read_file(argv[2], &input_size);
    if (input == NULL) {
        fprintf(stderr, "mlp: cannot read %s\n", argv[2]);
        status = 1;
        goto done;
    }
    n_in = xthunk_executable_parameter_count(exe);
    n_out = xthunk_executable_output_count(exe);
    ins = calloc(n_in + 1, sizeof *ins);
    outs = calloc(n_out + 1, sizeof *outs);
    bufs = calloc(n_in + n_out + 1, sizeof *bufs);
    if (ins == NULL || outs == NULL || bufs == NULL) {
        status = 1;
        goto done;
    }
    /* Parameters: consecutive slices of the input file, sized by the signature. */
    size_t offset = 0;
    for (size_t i = 0; i < n_in; i++) {
        XthunkTensorInfo info;
        TRY(xthunk_executable_parameter(exe, i, &info), "parameter");
        if (info.byte_size > input_size - offset) {
            fprintf(stderr, "mlp: %s does not hold parameter `%s`\n", argv[2], info.name);
            status = 1;
            goto done;
        }
        printf("parameter %s: %zu dims, %llu bytes\n", info.name, info.rank,
               (unsigned long long)info.byte_size);
        ins[i].data = input + offset;
        ins[i].size = (size_t)info.byte_size;
        offset += (size_t)info.byte_size;
    }
    if (offset != input_size) {
        fprintf(stderr, "mlp: %s has %zu bytes, the parameters %zu\n", argv[2], input_size, offset);
        status = 1;
        goto done;
    }
    for (size_t i = 0; i < n_out; i++) {
        XthunkTensorInfo info;
        TRY(xthunk_executable_output(exe, i, &info), "output");
        outs[i].size = (size_t)info.byte_size;
        output_size += (size_t)info.byte_size;
    }
    output = malloc(output_size + 1);
    again = malloc(output_size + 1);
    if (output == NULL || again == NULL) {
        status = 1;
        goto done;
    }
    offset = 0;
    for (size_t i = 0; i < n_out; i++) {
        outs[i].data = output + offset;
        offset += outs[i].size;
    }

    /* 1. Host memory in, host memory out. */
    TRY(xthunk_executable_run_host(exe, ins, n_in, outs, n_out), "run (host memory)");

    /* 2. Device buffers: upload once, run, read the outputs back. */
    for (size_t i = 0; i < n_in; i++) {
        TRY(xthunk_buffer_new(dev, ins[i].size, &bufs[i]), "buffer");
        TRY(xthunk_buffer_write(bufs[i], ins[i].data, ins[i].size), "upload");
    }
    for (size_t i = 0; i < n_out; i++) {
        TRY(xthunk_buffer_new(dev, outs[i].size, &bufs[n_in + i]), "buffer");
    }
    TRY(xthunk_executable_run(exe, (const XthunkBuffer *const *)bufs, n_in,
                              (const XthunkBuffer *const *)(bufs + n_in), n_out),
        "run (device buffers)");
    offset = 0;
    for (size_t i = 0; i < n_out; i++) {
        TRY(xthunk_buffer_read(bufs[n_in + i], again + offset, outs[i].size), "download");
        offset += outs[i].size;
    }
    if (memcmp(output, again, output_size) != 0) {
        fprintf(stderr, "mlp: the device-buffer run differs from the host-memory run\n");
        status = 1;
        goto done;
    }
    printf("device-buffer run matches the host-memory run\n");

    FILE *f = fopen(argv[3], "wb");
    if (f == NULL || fwrite(output, 1, output_size, f) != output_size) {
        fprintf(stderr, "mlp: cannot write %s\n", argv[3]);
        status = 1;
    }
    if (f != NULL) fclose(f);

done:
    if (bufs != NULL) {
        for (size_t i = 0; i < n_in + n_out; i++) xthunk_buffer_free(bufs[i]);
    }
    free(bufs);
    free(ins);
    free(outs);
    free(input);
    free(output);
    free(again);
    xthunk_executable_free(exe);
    xthunk_device_free(dev);
    xthunk_runtime_free(rt);
    return status;
}
