/*
 * fuzz/fuzz_common.h — helpers shared by the libFuzzer targets: a scratch
 * file per process (the readers under test take paths), and a prototype for
 * the entry point (the project builds with -Wmissing-prototypes).
 *
 * Every target must return 0 and leave nothing behind for any input: no
 * crash, no leak, no sanitizer report. A failure here is a library bug.
 */
#ifndef DPT_FUZZ_COMMON_H
#define DPT_FUZZ_COMMON_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A scratch path of this process: $TMPDIR (or /tmp) / dpt_fuzz_<tag>_<pid>.
 * The file is removed at exit. Up to 4 tags per process. */
static char dpt_fuzz_paths[4][512];
static int dpt_fuzz_npaths;

static void dpt_fuzz_cleanup(void)
{
    for (int i = 0; i < dpt_fuzz_npaths; i++)
        unlink(dpt_fuzz_paths[i]);
}

static inline const char *dpt_fuzz_path(int slot, const char *tag)
{
    if (slot < 0 || slot >= 4)
        abort();
    if (!dpt_fuzz_paths[slot][0]) {
        const char *base = getenv("TMPDIR");
        if (!base || !*base)
            base = "/tmp";
        snprintf(dpt_fuzz_paths[slot], sizeof dpt_fuzz_paths[slot], "%s/dpt_fuzz_%s_%ld", base, tag,
                 (long)getpid());
        if (dpt_fuzz_npaths == 0)
            atexit(dpt_fuzz_cleanup);
        if (slot + 1 > dpt_fuzz_npaths)
            dpt_fuzz_npaths = slot + 1;
    }
    return dpt_fuzz_paths[slot];
}

/* Writes n bytes to the file at path (replacing it); aborts when the write
 * fails, since the run would then test nothing. */
static inline void dpt_fuzz_spill(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        abort();
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w <= 0)
            abort();
        b += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0)
        abort();
}

/* A NUL-terminated copy of the input (caller frees); aborts on ENOMEM. */
static inline char *dpt_fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
