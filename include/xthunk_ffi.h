/*
 * xthunk_ffi.h: the C interface of xthunk custom calls, API version 1.
 *
 * A plugin is a shared library exporting two functions:
 *
 *   uint32_t xthunk_ffi_api_version(void);          return XTHUNK_FFI_API_VERSION
 *   int32_t  xthunk_ffi_register(const XthunkFfiRegistrar *registrar);
 *
 * xthunk checks the version first (a plugin built for another version is refused, naming its
 * file), then calls the registration function, which registers handlers with
 * `registrar->register_handler` (only during that call). It returns 0, or non-zero after
 * `registrar->set_error` (then nothing it registered is kept).
 *
 * A handler is called when its custom-call thunk is issued, with a call frame: the platform
 * and its native stream (a CUstream on cuda, a hipStream_t on rocm, NULL on the host), the
 * operands and results (device pointers with element type and dims), and the attributes. On
 * a GPU it enqueues its work on `frame->stream` and returns; on the host it is itself run in
 * the host stream's order and does its work before returning. It returns 0, or non-zero after
 * `frame->set_error(frame->error_context, message)`: the execution then fails with that
 * message, the thunk's path and the target. Nothing in the frame outlives the call: copy what
 * enqueued work needs.
 *
 * A handler registered with XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE is also called while a
 * command buffer records (CUDA/HIP stream capture, host replays): what it enqueues is replayed
 * later without calling it again, so its work must depend only on the frame's buffers and
 * attributes, and what that work reads must stay alive as long as the recording (a handler
 * on a GPU can ask its stream whether it is capturing). A handler without the trait splits
 * the command buffer around its call.
 *
 * The declared signature (operand and result counts, the attributes with their types) is
 * checked for every call when a program is loaded: a call that does not match is refused
 * before anything runs. Pass -1 to accept any.
 */
#ifndef XTHUNK_FFI_H
#define XTHUNK_FFI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XTHUNK_FFI_API_VERSION 1u

/* Platforms: the backend a handler is registered for. */
#define XTHUNK_FFI_PLATFORM_HOST 0u
#define XTHUNK_FFI_PLATFORM_CUDA 1u
#define XTHUNK_FFI_PLATFORM_ROCM 2u

/* Handler traits (bits). */
#define XTHUNK_FFI_TRAIT_COMMAND_BUFFER_COMPATIBLE 1u

/* Element types: the program schema's DType numbers. */
typedef enum XthunkFfiDType {
  XTHUNK_FFI_PRED = 1,
  XTHUNK_FFI_I8 = 2,
  XTHUNK_FFI_U8 = 3,
  XTHUNK_FFI_I32 = 4,
  XTHUNK_FFI_I64 = 5,
  XTHUNK_FFI_F16 = 6,
  XTHUNK_FFI_BF16 = 7,
  XTHUNK_FFI_F32 = 8,
  XTHUNK_FFI_F64 = 9,
  XTHUNK_FFI_I16 = 10,
  XTHUNK_FFI_U16 = 11,
  XTHUNK_FFI_U32 = 12,
  XTHUNK_FFI_U64 = 13,
  XTHUNK_FFI_C64 = 14,      /* two floats, real part first */
  XTHUNK_FFI_C128 = 15,     /* two doubles, real part first */
  XTHUNK_FFI_F8E4M3FN = 16, /* one byte: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf */
  XTHUNK_FFI_F8E5M2 = 17    /* one byte: 1 sign, 5 exponent (bias 15), 2 mantissa */
} XthunkFfiDType;

/* Attribute types. */
typedef enum XthunkFfiAttrType {
  XTHUNK_FFI_ATTR_BOOL = 1,         /* value.i32: 0 or 1 */
  XTHUNK_FFI_ATTR_I32 = 2,          /* value.i32 */
  XTHUNK_FFI_ATTR_I64 = 3,          /* value.i64 */
  XTHUNK_FFI_ATTR_F32 = 4,          /* value.f32 */
  XTHUNK_FFI_ATTR_F64 = 5,          /* value.f64 */
  XTHUNK_FFI_ATTR_STRING = 6,       /* value.str, NUL-terminated; count: its length */
  XTHUNK_FFI_ATTR_BOOL_ARRAY = 7,   /* value.bools: count bytes, 0 or 1 */
  XTHUNK_FFI_ATTR_I32_ARRAY = 8,    /* value.i32s */
  XTHUNK_FFI_ATTR_I64_ARRAY = 9,    /* value.i64s */
  XTHUNK_FFI_ATTR_F32_ARRAY = 10,   /* value.f32s */
  XTHUNK_FFI_ATTR_F64_ARRAY = 11,   /* value.f64s */
  XTHUNK_FFI_ATTR_STRING_ARRAY = 12,/* value.strs */
  XTHUNK_FFI_ATTR_DICT = 13         /* value.dict: count attributes */
} XthunkFfiAttrType;

/* An operand or result: a dense row-major array. `data` is a device pointer (a host pointer
 * on the host platform). */
typedef struct XthunkFfiBuffer {
  void *data;
  int32_t dtype;         /* XthunkFfiDType */
  uint32_t rank;
  const uint64_t *dims;  /* rank entries */
  uint64_t size;         /* bytes */
} XthunkFfiBuffer;

typedef struct XthunkFfiString {
  const char *data;      /* NUL-terminated */
  uint64_t len;
} XthunkFfiString;

typedef struct XthunkFfiAttr XthunkFfiAttr;
struct XthunkFfiAttr {
  const char *name;      /* NUL-terminated */
  int32_t type;          /* XthunkFfiAttrType */
  uint32_t reserved;
  uint64_t count;        /* 1 for scalars; elements, bytes or entries otherwise */
  union {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    const char *str;
    const uint8_t *bools;
    const int32_t *i32s;
    const int64_t *i64s;
    const float *f32s;
    const double *f64s;
    const XthunkFfiString *strs;
    const XthunkFfiAttr *dict;
  } value;
};

typedef struct XthunkFfiCallFrame {
  uint32_t api_version;  /* XTHUNK_FFI_API_VERSION */
  uint32_t platform;     /* XTHUNK_FFI_PLATFORM_* */
  void *stream;          /* CUstream, hipStream_t, or NULL on the host */
  int32_t device_ordinal;
  uint32_t reserved;
  const char *target;
  const char *thunk_path;   /* e.g. "entry[2].body[0]" */
  uint64_t num_operands;
  const XthunkFfiBuffer *operands;
  uint64_t num_results;
  const XthunkFfiBuffer *results;
  uint64_t num_attrs;
  const XthunkFfiAttr *attrs;
  void *error_context;
  void (*set_error)(void *error_context, const char *message);
} XthunkFfiCallFrame;

typedef int32_t (*XthunkFfiHandler)(const XthunkFfiCallFrame *frame);

/* What `prepare` is given: called once per call of the target when a program is loaded onto a
 * device, before anything runs (load modules, allocate what the calls need: nothing a stream
 * capture forbids then happens at issue). It returns 0, or non-zero after `set_error`: the
 * load fails naming the thunk and the target. */
typedef struct XthunkFfiPrepareFrame {
  uint32_t api_version;  /* XTHUNK_FFI_API_VERSION */
  uint32_t platform;     /* XTHUNK_FFI_PLATFORM_* */
  int32_t device_ordinal;
  uint32_t reserved;
  const char *target;
  const char *thunk_path;
  void *error_context;
  void (*set_error)(void *error_context, const char *message);
} XthunkFfiPrepareFrame;

typedef int32_t (*XthunkFfiPrepare)(const XthunkFfiPrepareFrame *frame);

/* An attribute a handler reads (required, of this type). */
typedef struct XthunkFfiAttrSpec {
  const char *name;
  int32_t type;          /* XthunkFfiAttrType */
} XthunkFfiAttrSpec;

typedef struct XthunkFfiHandlerInfo {
  const char *target;    /* 1 to 256 bytes */
  uint32_t platform;     /* XTHUNK_FFI_PLATFORM_* */
  uint32_t traits;       /* XTHUNK_FFI_TRAIT_* bits */
  XthunkFfiHandler handler;
  int32_t num_operands;  /* -1: any */
  int32_t num_results;   /* -1: any */
  int64_t num_attrs;     /* -1: any attributes; otherwise the entries of `attrs`, exactly */
  const XthunkFfiAttrSpec *attrs;
  XthunkFfiPrepare prepare;  /* NULL: nothing to prepare */
} XthunkFfiHandlerInfo;

typedef struct XthunkFfiRegistrar {
  uint32_t api_version;  /* XTHUNK_FFI_API_VERSION of the loading xthunk */
  uint32_t reserved;
  void *context;
  int32_t (*register_handler)(void *context, const XthunkFfiHandlerInfo *info);
  void (*set_error)(void *context, const char *message);
} XthunkFfiRegistrar;

/* ---- accessors ---------------------------------------------------------------------- */

/* The attribute `name` of the frame, or NULL. */
static inline const XthunkFfiAttr *xthunk_ffi_attr(const XthunkFfiCallFrame *f, const char *name) {
  for (uint64_t i = 0; i < f->num_attrs; i++) {
    if (strcmp(f->attrs[i].name, name) == 0) return &f->attrs[i];
  }
  return NULL;
}

/* The attribute `name` if it has type `type`; otherwise sets the frame's error (naming the
 * attribute) and returns NULL. */
static inline const XthunkFfiAttr *xthunk_ffi_attr_typed(const XthunkFfiCallFrame *f,
                                                         const char *name, int32_t type) {
  const XthunkFfiAttr *a = xthunk_ffi_attr(f, name);
  if (a != NULL && a->type == type) return a;
  char msg[320];
  const char *what = a == NULL ? "is missing" : "has another type than the handler reads";
  size_t n = strlen(name) < 200 ? strlen(name) : 200;
  memcpy(msg, "attribute `", 11);
  memcpy(msg + 11, name, n);
  memcpy(msg + 11 + n, "` ", 2);
  size_t w = strlen(what);
  memcpy(msg + 13 + n, what, w);
  msg[13 + n + w] = '\0';
  f->set_error(f->error_context, msg);
  return NULL;
}

static inline int xthunk_ffi_get_bool(const XthunkFfiCallFrame *f, const char *name, int *out) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_BOOL);
  if (a == NULL) return 1;
  *out = a->value.i32 != 0;
  return 0;
}

static inline int xthunk_ffi_get_i32(const XthunkFfiCallFrame *f, const char *name, int32_t *out) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_I32);
  if (a == NULL) return 1;
  *out = a->value.i32;
  return 0;
}

static inline int xthunk_ffi_get_i64(const XthunkFfiCallFrame *f, const char *name, int64_t *out) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_I64);
  if (a == NULL) return 1;
  *out = a->value.i64;
  return 0;
}

static inline int xthunk_ffi_get_f32(const XthunkFfiCallFrame *f, const char *name, float *out) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_F32);
  if (a == NULL) return 1;
  *out = a->value.f32;
  return 0;
}

static inline int xthunk_ffi_get_f64(const XthunkFfiCallFrame *f, const char *name, double *out) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_F64);
  if (a == NULL) return 1;
  *out = a->value.f64;
  return 0;
}

/* A string attribute: NUL-terminated, `*len` bytes. */
static inline int xthunk_ffi_get_string(const XthunkFfiCallFrame *f, const char *name,
                                        const char **out, uint64_t *len) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, XTHUNK_FFI_ATTR_STRING);
  if (a == NULL) return 1;
  *out = a->value.str;
  if (len != NULL) *len = a->count;
  return 0;
}

/* An array attribute of `type` (an XTHUNK_FFI_ATTR_*_ARRAY): its elements and count. */
static inline int xthunk_ffi_get_array(const XthunkFfiCallFrame *f, const char *name,
                                       int32_t type, const void **out, uint64_t *count) {
  const XthunkFfiAttr *a = xthunk_ffi_attr_typed(f, name, type);
  if (a == NULL) return 1;
  *out = (const void *)a->value.i64s;
  *count = a->count;
  return 0;
}

/* Sets the frame's error and returns 1 (for `return xthunk_ffi_error(f, "...")`). */
static inline int32_t xthunk_ffi_error(const XthunkFfiCallFrame *f, const char *message) {
  f->set_error(f->error_context, message);
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* XTHUNK_FFI_H */
