/* A library that is not a custom-call plugin: it exports the version but no registration. */
#include <stdint.h>
uint32_t xthunk_ffi_api_version(void) { return 1; }
