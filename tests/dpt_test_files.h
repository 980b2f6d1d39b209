/*
 * tests/dpt_test_files.h — scratch files for the tests that need them.
 */
#ifndef DPT_TEST_FILES_H
#define DPT_TEST_FILES_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The folder for scratch files: $TMPDIR, or /tmp when it is unset or empty. */
static inline const char *dpt_test_tmp_base(void)
{
    const char *base = getenv("TMPDIR");
    return base && *base ? base : "/tmp";
}

/* Makes a fresh folder <tmp base>/<prefix>_XXXXXX and writes its path to buf.
 * 0, or -1 with the reason printed. */
static inline int dpt_test_mkdtemp(char *buf, size_t size, const char *prefix)
{
    snprintf(buf, size, "%s/%s_XXXXXX", dpt_test_tmp_base(), prefix);
    if (!mkdtemp(buf)) {
        fprintf(stderr, "mkdtemp %s: %s\n", buf, strerror(errno));
        return -1;
    }
    return 0;
}

/* Writes n bytes of p to path as a new file; 0, or -1. (A new file rather
 * than a truncated one: ext4 flushes a file that was truncated and
 * rewritten when it is closed, which makes thousands of small writes take
 * seconds.) */
static inline int dpt_test_spill(const char *path, const void *p, size_t n)
{
    unlink(path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

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
