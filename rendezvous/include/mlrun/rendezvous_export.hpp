// Symbol visibility: the library is built with hidden visibility; only what carries this macro
// is exported from a shared build.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define MLRUN_RDZV_EXPORT __attribute__((visibility("default")))
#else
#define MLRUN_RDZV_EXPORT
#endif
