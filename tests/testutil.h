/* testutil.h -- helpers shared by the C tests. */
#ifndef GL_TESTUTIL_H
#define GL_TESTUTIL_H

#include <stdbool.h>

/* Exit status meson reads as "skipped". */
#define TEST_SKIP 77

/* Path of a file under the shared test data ($GENLOOP_TESTDATA), or NULL when
 * the folder is missing. Under CI=true a missing folder is a hard failure:
 * prints why and exits 1, so CI can never pass by skipping. */
const char *testdata_path(const char *relative);

/* True when the environment says we are in CI (CI=true). */
bool test_in_ci(void);

/* Run every case of a check suite; the number of failed tests. */
typedef struct Suite Suite;
int test_run_suite(Suite *s);
/* The same for one case of n tests (START_TEST names) in a suite called name. */
typedef struct TTest TTest;
int test_run_tests(const char *name, const TTest *const *tests, int n);

#endif
