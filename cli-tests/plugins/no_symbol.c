/* A library that is not a custom-call plugin: it exports the version but no registration
 * function (with -DNO_VERSION, not even the version). */
#include <stdint.h>
#ifndef NO_VERSION
uint32_t xthunk_ffi_api_version(void) { return 1; }
#else
int not_a_plugin(void) { return 0; }
#endif
