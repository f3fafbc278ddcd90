#include "testutil.h"

#include <check.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool test_in_ci(void) {
    const char *ci = getenv("CI");
    return ci && (strcmp(ci, "true") == 0 || strcmp(ci, "1") == 0);
}

const char *testdata_path(const char *relative) {
    static char buf[4096];
    const char *dir = getenv("GENLOOP_TESTDATA");
    if (!dir || !*dir) dir = "../shared/testdata";
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (test_in_ci()) {
            fprintf(stderr, "test data folder %s is missing, and CI=true forbids skipping\n", dir);
            exit(1);
        }
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s/%s", dir, relative);
    return buf;
}

int test_run_tests(const char *name, const TTest *const *tests, int n) {
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    for (int i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}

int test_run_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}
