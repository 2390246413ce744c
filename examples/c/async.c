/* Asynchronous runs from C (issue 28, item 1): a StableHLO `while` loop that adds 1 to x
 * n times, run with xthunk_executable_run_async.
 *  - n random and small: the event completes, the completion callback runs once with no
 *    error, the output is x + n (x random, the output poisoned with NaN first).
 *  - n = INT32_MAX (hours of trips): still running after 50 ms; another thread cancels it;
 *    the event ends with XTHUNK_STATUS_CANCELLED, and the time from the cancel to the end is
 *    printed and must be under 1 s.
 *  - the same with a 100 ms deadline: XTHUNK_STATUS_DEADLINE_EXCEEDED.
 *  - two runs of the one executable at once (an endless one and a short one): the short one
 *    completes while the endless one still runs.
 * Usage: async [BACKEND]; prints "async: ok" and exits 0 when every check holds. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "xthunk.h"

static const char *PROGRAM =
    "module {\n"
    "  func.func public @main(%n: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %c0 = stablehlo.constant dense<0> : tensor<i32>\n"
    "    %r:3 = stablehlo.while(%i = %c0, %v = %x, %m = %n) : tensor<i32>, tensor<4xf32>, tensor<i32>\n"
    "    cond {\n"
    "      %p = stablehlo.compare LT, %i, %m, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
    "      stablehlo.return %p : tensor<i1>\n"
    "    } do {\n"
    "      %one = stablehlo.constant dense<1> : tensor<i32>\n"
    "      %i2 = stablehlo.add %i, %one : tensor<i32>\n"
    "      %onef = stablehlo.constant dense<1.000000e+00> : tensor<4xf32>\n"
    "      %v2 = stablehlo.add %v, %onef : tensor<4xf32>\n"
    "      stablehlo.return %i2, %v2, %m : tensor<i32>, tensor<4xf32>, tensor<i32>\n"
    "    }\n"
    "    return %r#1 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static int failed(const char *what, XthunkError *e) {
    if (e == NULL) return 0;
    fprintf(stderr, "async: %s: %s\n", what, xthunk_error_message(e));
    xthunk_error_free(e);
    return 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    int calls;
    int failed;
} Completion;

static void on_done(void *user_data, const XthunkError *error) {
    Completion *c = user_data;
    c->calls++;
    c->failed = error != NULL;
}

typedef struct {
    XthunkEvent *event;
    double cancelled_at;
} Canceller;

static void *cancel_later(void *arg) {
    Canceller *c = arg;
    struct timespec t = {0, 100 * 1000 * 1000};
    nanosleep(&t, NULL);
    c->cancelled_at = now();
    xthunk_event_cancel(c->event);
    return NULL;
}

/* Writes n, x and a NaN-poisoned output. */
static int prepare(XthunkBuffer *n_buf, XthunkBuffer *x_buf, XthunkBuffer *y_buf, int32_t n,
                   const float *x) {
    const float nan[4] = {NAN, NAN, NAN, NAN};
    return failed("write n", xthunk_buffer_write(n_buf, (const uint8_t *)&n, sizeof n)) ||
           failed("write x", xthunk_buffer_write(x_buf, (const uint8_t *)x, 16)) ||
           failed("write y", xthunk_buffer_write(y_buf, (const uint8_t *)nan, 16));
}

static int expect_code(XthunkError *e, XthunkStatus want, const char *what) {
    if (e == NULL) {
        fprintf(stderr, "async: %s: the run succeeded, want status %d\n", what, (int)want);
        return 1;
    }
    XthunkStatus got = xthunk_error_code(e);
    printf("async: %s: %s\n", what, xthunk_error_message(e));
    xthunk_error_free(e);
    if (got != want) {
        fprintf(stderr, "async: %s: status %d, want %d\n", what, (int)got, (int)want);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "host";
    srand((unsigned)time(NULL));
    XthunkRuntime *rt = NULL;
    XthunkDevice *dev = NULL;
    XthunkExecutable *exe = NULL;
    if (failed("runtime", xthunk_runtime_new(1, &rt)) ||
        failed("device", xthunk_runtime_device(rt, backend, 0, &dev)) ||
        failed("load", xthunk_executable_load_bytes(dev, (const uint8_t *)PROGRAM,
                                                    strlen(PROGRAM), &exe)))
        return 1;
    XthunkBuffer *n_buf = NULL, *x_buf = NULL, *y_buf = NULL;
    XthunkBuffer *n2 = NULL, *x2 = NULL, *y2 = NULL;
    if (failed("buffer", xthunk_buffer_new(dev, 4, &n_buf)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &x_buf)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &y_buf)) ||
        failed("buffer", xthunk_buffer_new(dev, 4, &n2)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &x2)) ||
        failed("buffer", xthunk_buffer_new(dev, 16, &y2)))
        return 1;
    const XthunkBuffer *params[2] = {n_buf, x_buf}, *outputs[1] = {y_buf};
    const XthunkBuffer *params2[2] = {n2, x2}, *outputs2[1] = {y2};
    float x[4];
    for (int i = 0; i < 4; i++) x[i] = (float)(rand() % 1000) / 8.0f - 60.0f;

    /* 1. A short run: callback, result. */
    int32_t n = 1 + rand() % 50;
    if (prepare(n_buf, x_buf, y_buf, n, x)) return 1;
    Completion done = {0, 0};
    XthunkRunOptions with_callback = {0, on_done, &done};
    XthunkEvent *ev = NULL;
    if (failed("run_async", xthunk_executable_run_async(exe, params, 2, NULL, outputs, 1,
                                                        &with_callback, &ev)) ||
        failed("wait", xthunk_event_wait(ev)))
        return 1;
    if (!xthunk_event_poll(ev) || done.calls != 1 || done.failed) {
        fprintf(stderr, "async: poll %d, callback calls %d, failed %d\n", xthunk_event_poll(ev),
                done.calls, done.failed);
        return 1;
    }
    xthunk_event_free(ev);
    float y[4];
    if (failed("read", xthunk_buffer_read(y_buf, (uint8_t *)y, sizeof y))) return 1;
    for (int i = 0; i < 4; i++) {
        if (y[i] != x[i] + (float)n) {
            fprintf(stderr, "async: y[%d] = %g, want %g + %d\n", i, y[i], x[i], (int)n);
            return 1;
        }
    }

    /* 2. An endless run cancelled from another thread. */
    if (prepare(n_buf, x_buf, y_buf, INT32_MAX, x)) return 1;
    if (failed("run_async", xthunk_executable_run_async(exe, params, 2, NULL, outputs, 1, NULL,
                                                        &ev)))
        return 1;
    bool finished = true;
    if (failed("wait_timeout", xthunk_event_wait_timeout(ev, 50, &finished))) return 1;
    if (finished || xthunk_event_poll(ev)) {
        fprintf(stderr, "async: an endless run finished\n");
        return 1;
    }
    /* 4. Meanwhile a short run of the same executable on other buffers completes. */
    int32_t m = 1 + rand() % 50;
    if (prepare(n2, x2, y2, m, x)) return 1;
    XthunkEvent *short_run = NULL;
    if (failed("run_async", xthunk_executable_run_async(exe, params2, 2, NULL, outputs2, 1, NULL,
                                                        &short_run)) ||
        failed("overlapping run", xthunk_event_wait(short_run)))
        return 1;
    xthunk_event_free(short_run);
    if (xthunk_event_poll(ev)) {
        fprintf(stderr, "async: the endless run ended during the short one\n");
        return 1;
    }
    if (failed("read", xthunk_buffer_read(y2, (uint8_t *)y, sizeof y))) return 1;
    for (int i = 0; i < 4; i++) {
        if (y[i] != x[i] + (float)m) {
            fprintf(stderr, "async: overlapping y[%d] = %g, want %g + %d\n", i, y[i], x[i],
                    (int)m);
            return 1;
        }
    }
    Canceller c = {ev, 0.0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, cancel_later, &c) != 0) return 1;
    XthunkError *e = xthunk_event_wait(ev);
    double ended = now();
    pthread_join(thread, NULL);
    if (expect_code(e, XTHUNK_STATUS_CANCELLED, "cancelled")) return 1;
    printf("async: cancel to end: %.1f ms\n", (ended - c.cancelled_at) * 1e3);
    if (ended - c.cancelled_at >= 1.0) {
        fprintf(stderr, "async: the cancelled run took %.3f s to end\n", ended - c.cancelled_at);
        return 1;
    }
    xthunk_event_free(ev);

    /* 3. A deadline. */
    XthunkRunOptions deadline = {100, NULL, NULL};
    if (failed("run_async", xthunk_executable_run_async(exe, params, 2, NULL, outputs, 1,
                                                        &deadline, &ev)))
        return 1;
    if (expect_code(xthunk_event_wait(ev), XTHUNK_STATUS_DEADLINE_EXCEEDED, "deadline")) return 1;
    xthunk_event_free(ev);

    xthunk_buffer_free(n_buf);
    xthunk_buffer_free(x_buf);
    xthunk_buffer_free(y_buf);
    xthunk_buffer_free(n2);
    xthunk_buffer_free(x2);
    xthunk_buffer_free(y2);
    xthunk_executable_free(exe);
    xthunk_device_free(dev);
    xthunk_runtime_free(rt);
    printf("async: ok\n");
    return 0;
}
