/*
 * The custom-call test plugin (built by the tests with the system C compiler): targets on the
 * host, cuda and rocm platforms, through include/xthunk_ffi.h.
 *
 *   test.scaled_add          out = scale * x + y (f32), command-buffer compatible
 *   test.scaled_add_split    the same, not command-buffer compatible (splits a command buffer)
 *   test.top_k               values/indices of the k largest of each row (f32 -> f32, i32),
 *                            descending, ties by lower index
 *   test.attrs               reads attributes of every type, writes what it read as f64s
 *   test.fail                fails with a message
 *   test.prepare_fails       refused when a program calling it is loaded (its `prepare`)
 *
 * On the host the handler runs in the host stream's order and computes directly. On cuda and
 * rocm it enqueues the same computation as a host function on the native stream
 * (cuLaunchHostFunc / hipLaunchHostFunc), which reads and writes the device pointers from the
 * host: that is only valid where device memory is host-addressable, as it is on the driver
 * emulator's EMULATED devices. The plugin checks for the emulator (its `xthunk_emu_version`
 * symbol) and refuses real GPUs with an error rather than pretending; a real plugin would
 * launch its own kernels on the stream instead.
 */
#include "xthunk_ffi.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

enum { SCALED_ADD = 1, TOP_K = 2, ATTRS = 3 };

typedef struct Job {
  int kind;
  float scale;
  int64_t k;
  int largest;
  uint64_t n, rows;
  const float *x, *y;
  float *out;
  int32_t *idx;
  double *summary;
  double attrs[16];
  int capturing;
} Job;

static void run_job(Job *j) {
  if (j->kind == SCALED_ADD) {
    for (uint64_t i = 0; i < j->n; i++) j->out[i] = j->scale * j->x[i] + j->y[i];
  } else if (j->kind == TOP_K) {
    for (uint64_t r = 0; r < j->rows; r++) {
      const float *row = j->x + r * j->n;
      for (int64_t t = 0; t < j->k; t++) {
        int64_t best = -1;
        for (uint64_t c = 0; c < j->n; c++) {
          /* skip columns already taken */
          int taken = 0;
          for (int64_t u = 0; u < t; u++) {
            if (j->idx[r * j->k + u] == (int32_t)c) taken = 1;
          }
          if (taken) continue;
          if (best < 0) { best = (int64_t)c; continue; }
          float a = row[c], b = row[best];
          if (j->largest ? a > b : a < b) best = (int64_t)c;
        }
        j->idx[r * j->k + t] = (int32_t)best;
        j->out[r * j->k + t] = row[best];
      }
    }
  } else if (j->kind == ATTRS) {
    for (int i = 0; i < 16; i++) j->summary[i] = j->attrs[i];
  }
}

/* ---- the GPU platforms: a host function on the native stream -------------------------- */

typedef int (*launch_host_fn)(void *stream, void (*fn)(void *), void *data);
typedef int (*is_capturing_fn)(void *stream, int *status);

static void host_fn(void *data) {
  Job *j = (Job *)data;
  run_job(j);
  if (!j->capturing) free(j);
  /* A captured job is replayed with its graph: it is kept (for the process's life). */
}

static int32_t enqueue(const XthunkFfiCallFrame *f, Job *job) {
  const char *lib = f->platform == XTHUNK_FFI_PLATFORM_CUDA ? "libcuda.so.1" : "libamdhip64.so";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: cannot open the driver library");
  }
  if (dlsym(h, "xthunk_emu_version") == NULL) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: device memory is not host-addressable here "
                               "(not the driver emulator): this plugin only runs on the host "
                               "and on EMULATED devices");
  }
  const char *launch = f->platform == XTHUNK_FFI_PLATFORM_CUDA ? "cuLaunchHostFunc" : "hipLaunchHostFunc";
  const char *capt = f->platform == XTHUNK_FFI_PLATFORM_CUDA ? "cuStreamIsCapturing" : "hipStreamIsCapturing";
  launch_host_fn lf = (launch_host_fn)dlsym(h, launch);
  is_capturing_fn cf = (is_capturing_fn)dlsym(h, capt);
  if (lf == NULL || cf == NULL) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: the driver lacks host functions");
  }
  int status = 0;
  if (cf(f->stream, &status) != 0) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: stream capture query failed");
  }
  job->capturing = status != 0;
  if (lf(f->stream, host_fn, job) != 0) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: launching the host function failed");
  }
  return 0;
}

static int32_t dispatch(const XthunkFfiCallFrame *f, Job *job) {
  if (f->api_version != XTHUNK_FFI_API_VERSION) {
    free(job);
    return xthunk_ffi_error(f, "test plugin: unexpected frame version");
  }
  if (f->platform == XTHUNK_FFI_PLATFORM_HOST) {
    if (f->stream != NULL) {
      free(job);
      return xthunk_ffi_error(f, "test plugin: a host call has a stream");
    }
    run_job(job);
    free(job);
    return 0;
  }
  return enqueue(f, job);
}

static int check_buf(const XthunkFfiCallFrame *f, const XthunkFfiBuffer *b, int32_t dtype) {
  if (b->dtype != dtype) {
    xthunk_ffi_error(f, "test plugin: unexpected element type");
    return 1;
  }
  return 0;
}

static int32_t scaled_add(const XthunkFfiCallFrame *f) {
  float scale;
  if (xthunk_ffi_get_f32(f, "scale", &scale)) return 1;
  const XthunkFfiBuffer *x = &f->operands[0], *y = &f->operands[1], *o = &f->results[0];
  if (check_buf(f, x, XTHUNK_FFI_F32) || check_buf(f, y, XTHUNK_FFI_F32) ||
      check_buf(f, o, XTHUNK_FFI_F32))
    return 1;
  if (x->size != y->size || x->size != o->size)
    return xthunk_ffi_error(f, "test plugin: scaled_add needs equal sizes");
  Job *j = calloc(1, sizeof(Job));
  if (j == NULL) return xthunk_ffi_error(f, "out of memory");
  j->kind = SCALED_ADD;
  j->scale = scale;
  j->n = x->size / sizeof(float);
  j->x = x->data;
  j->y = y->data;
  j->out = o->data;
  return dispatch(f, j);
}

static int32_t top_k(const XthunkFfiCallFrame *f) {
  int64_t k;
  int largest;
  if (xthunk_ffi_get_i64(f, "k", &k) || xthunk_ffi_get_bool(f, "largest", &largest)) return 1;
  const XthunkFfiBuffer *x = &f->operands[0], *v = &f->results[0], *ix = &f->results[1];
  if (check_buf(f, x, XTHUNK_FFI_F32) || check_buf(f, v, XTHUNK_FFI_F32) ||
      check_buf(f, ix, XTHUNK_FFI_I32))
    return 1;
  if (x->rank != 2 || v->rank != 2 || ix->rank != 2)
    return xthunk_ffi_error(f, "test plugin: top_k takes [rows, n] and gives [rows, k]");
  uint64_t rows = x->dims[0], n = x->dims[1];
  if (k <= 0 || (uint64_t)k > n || v->dims[0] != rows || (uint64_t)v->dims[1] != (uint64_t)k ||
      ix->dims[0] != rows || ix->dims[1] != (uint64_t)k)
    return xthunk_ffi_error(f, "test plugin: top_k: k must be in 1..=n and the results [rows, k]");
  Job *j = calloc(1, sizeof(Job));
  if (j == NULL) return xthunk_ffi_error(f, "out of memory");
  j->kind = TOP_K;
  j->k = k;
  j->largest = largest;
  j->rows = rows;
  j->n = n;
  j->x = x->data;
  j->out = v->data;
  j->idx = ix->data;
  return dispatch(f, j);
}

/* Writes 16 f64s: bool, i32, i64, f32, f64, string length, first string byte, sum of the
 * bool array (trues), sum of i32s, sum of i64s, sum of f32s, sum of f64s, number of strings,
 * total string bytes, inner.w (f64), inner.deeper.z (i32). */
static int32_t attrs(const XthunkFfiCallFrame *f) {
  const XthunkFfiBuffer *o = &f->results[0];
  if (check_buf(f, o, XTHUNK_FFI_F64)) return 1;
  if (o->size != 16 * sizeof(double)) return xthunk_ffi_error(f, "test plugin: attrs writes f64[16]");
  Job *j = calloc(1, sizeof(Job));
  if (j == NULL) return xthunk_ffi_error(f, "out of memory");
  j->kind = ATTRS;
  j->summary = o->data;
  int b;
  int32_t i32v;
  int64_t i64v;
  float f32v;
  double f64v;
  const char *s;
  uint64_t len, n;
  const void *arr;
  if (xthunk_ffi_get_bool(f, "flag", &b) || xthunk_ffi_get_i32(f, "count", &i32v) ||
      xthunk_ffi_get_i64(f, "big", &i64v) || xthunk_ffi_get_f32(f, "ratio", &f32v) ||
      xthunk_ffi_get_f64(f, "precise", &f64v) || xthunk_ffi_get_string(f, "label", &s, &len)) {
    free(j);
    return 1;
  }
  j->attrs[0] = b;
  j->attrs[1] = i32v;
  j->attrs[2] = (double)i64v;
  j->attrs[3] = f32v;
  j->attrs[4] = f64v;
  j->attrs[5] = (double)len;
  j->attrs[6] = len > 0 ? (double)(unsigned char)s[0] : -1;
  if (xthunk_ffi_get_array(f, "mask", XTHUNK_FFI_ATTR_BOOL_ARRAY, &arr, &n)) { free(j); return 1; }
  for (uint64_t i = 0; i < n; i++) j->attrs[7] += ((const uint8_t *)arr)[i];
  if (xthunk_ffi_get_array(f, "sizes", XTHUNK_FFI_ATTR_I32_ARRAY, &arr, &n)) { free(j); return 1; }
  for (uint64_t i = 0; i < n; i++) j->attrs[8] += ((const int32_t *)arr)[i];
  if (xthunk_ffi_get_array(f, "offsets", XTHUNK_FFI_ATTR_I64_ARRAY, &arr, &n)) { free(j); return 1; }
  for (uint64_t i = 0; i < n; i++) j->attrs[9] += (double)((const int64_t *)arr)[i];
  if (xthunk_ffi_get_array(f, "weights", XTHUNK_FFI_ATTR_F32_ARRAY, &arr, &n)) { free(j); return 1; }
  for (uint64_t i = 0; i < n; i++) j->attrs[10] += ((const float *)arr)[i];
  if (xthunk_ffi_get_array(f, "coeffs", XTHUNK_FFI_ATTR_F64_ARRAY, &arr, &n)) { free(j); return 1; }
  for (uint64_t i = 0; i < n; i++) j->attrs[11] += ((const double *)arr)[i];
  if (xthunk_ffi_get_array(f, "names", XTHUNK_FFI_ATTR_STRING_ARRAY, &arr, &n)) { free(j); return 1; }
  j->attrs[12] = (double)n;
  for (uint64_t i = 0; i < n; i++) j->attrs[13] += (double)((const XthunkFfiString *)arr)[i].len;
  const XthunkFfiAttr *inner = xthunk_ffi_attr_typed(f, "inner", XTHUNK_FFI_ATTR_DICT);
  if (inner == NULL) { free(j); return 1; }
  j->attrs[14] = -1;
  j->attrs[15] = -1;
  for (uint64_t i = 0; i < inner->count; i++) {
    const XthunkFfiAttr *e = &inner->value.dict[i];
    if (strcmp(e->name, "w") == 0 && e->type == XTHUNK_FFI_ATTR_F64) j->attrs[14] = e->value.f64;
    if (strcmp(e->name, "deeper") == 0 && e->type == XTHUNK_FFI_ATTR_DICT) {
      for (uint64_t k = 0; k < e->count; k++) {
        const XthunkFfiAttr *d = &e->value.dict[k];
        if (strcmp(d->name, "z") == 0 && d->type == XTHUNK_FFI_ATTR_I32) j->attrs[15] = d->value.i32;
      }
    }
  }
  return dispatch(f, j);
}

static int32_t fail(const XthunkFfiCallFrame *f) {
  char msg[128];
  snprintf(msg, sizeof msg, "deliberate failure at %s", f->thunk_path);
  return xthunk_ffi_error(f, msg);
}

/* Refuses every load of its target. */
static int32_t prepare_fails(const XthunkFfiPrepareFrame *f) {
  char msg[160];
  snprintf(msg, sizeof msg, "prepare refused %s at %s on device %d", f->target, f->thunk_path,
           (int)f->device_ordinal);
  f->set_error(f->error_context, msg);
  return 1;
}

uint32_t xthunk_ffi_api_version(void) {
#ifdef TEST_PLUGIN_VERSION
  return TEST_PLUGIN_VERSION;
#else
  return XTHUNK_FFI_API_VERSION;
#endif
}

int32_t xthunk_ffi_register(const XthunkFfiRegistrar *r) {
  static const XthunkFfiAttrSpec scale[] = {{"scale", XTHUNK_FFI_ATTR_F32}};
  static const XthunkFfiAttrSpec topk[] = {{"k", XTHUNK_FFI_ATTR_I64}, {"largest", XTHUNK_FFI_ATTR_BOOL}};
  if (r->api_version != XTHUNK_FFI_API_VERSION) return 1;
  for (uint32_t p = 0; p < 3; p++) {
    XthunkFfiHandlerInfo infos[] = {
        {"test.scaled_add", p, XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE, scaled_add, 2, 1, 1, scale},
        {"test.scaled_add_split", p, 0, scaled_add, 2, 1, 1, scale},
        {"test.top_k", p, 0, top_k, 1, 2, 2, topk},
        {"test.attrs", p, 0, attrs, 0, 1, -1, NULL},
        {"test.fail", p, 0, fail, -1, -1, -1, NULL, NULL},
        {"test.prepare_fails", p, 0, fail, -1, -1, -1, NULL, prepare_fails},
    };
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++) {
      if (r->register_handler(r->context, &infos[i]) != 0) return 1;
    }
  }
  return 0;
}
