/* fuzz_util.h -- what the fuzz targets share: finding the test data they
 * load once at start, and a hard stop when it is missing (a fuzzer that
 * silently fuzzes nothing would pass every smoke run). */
#ifndef GL_FUZZ_UTIL_H
#define GL_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* $GENLOOP_TESTDATA/relative (default: ../shared/testdata beside the source
 * tree), malloc'd, or NULL when the file does not exist. */
char *fuzz_testdata(const char *relative);
/* The SmolLM2 model: $GENLOOP_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
 * in the source tree; NULL when neither exists. */
char *fuzz_smollm_path(void);
/* True when s[0..len) is valid UTF-8: shortest forms, no surrogates, at most
 * U+10FFFF. Written apart from the engine's and the server's checks so the
 * targets can compare them against it. */
bool fuzz_utf8_valid(const char *s, size_t len);
/* Prints "fuzz: <what>" and exits 1 (for setup failures in LLVMFuzzerInitialize). */
_Noreturn void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
