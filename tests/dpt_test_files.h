/*
 * tests/dpt_test_files.h — scratch files for the tests that need them.
 */
#ifndef DPT_TEST_FILES_H
#define DPT_TEST_FILES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Removes a file or a directory tree (best effort; for test scratch space). */
static inline void dpt_test_rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t n = strlen(path) + strlen(e->d_name) + 2;
        char *sub = malloc(n);
        if (!sub)
            break;
        snprintf(sub, n, "%s/%s", path, e->d_name);
        dpt_test_rm_tree(sub);
        free(sub);
    }
    closedir(d);
    rmdir(path);
}

#endif
