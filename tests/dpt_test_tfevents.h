/*
 * tests/dpt_test_tfevents.h — a reader of TensorBoard event files written
 * for the tests, apart from the library's writer so that one cannot hide
 * the other's mistake: its own bit-by-bit CRC-32C, record framing and
 * protobuf decoding of Event {wall_time = 1, step = 2, file_version = 3,
 * summary = 5 {value = 1 {tag = 1, simple_value = 2}}}.
 */
#ifndef DPT_TEST_TFEVENTS_H
#define DPT_TEST_TFEVENTS_H

#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC-32C one bit at a time (reflected Castagnoli polynomial). */
static inline uint32_t dpt_test_crc32c(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static inline uint32_t dpt_test_crc_mask(uint32_t c)
{
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

#define DPT_TEST_TF_MAX_VALUES 96

typedef struct dpt_test_tfvalue {
    char tag[256];
    float value;
} dpt_test_tfvalue_t;

typedef struct dpt_test_tfevent {
    double wall_time;
    long long step;
    char file_version[64]; /* "" when absent */
    int has_summary;
    size_t nvalues;
    dpt_test_tfvalue_t values[DPT_TEST_TF_MAX_VALUES];
} dpt_test_tfevent_t;

/* What one file held. */
typedef struct dpt_test_tffile {
    dpt_test_tfevent_t *events; /* malloc'ed */
    size_t n;
    int cut; /* the last record was cut short (a write a kill interrupted) */
    int bad; /* a complete record whose CRC or protobuf is wrong (printed) */
} dpt_test_tffile_t;

static inline uint64_t dpt_test_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A varint at p[*i] (below n); 0, or -1 past the end. */
static inline int dpt_test_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        unsigned char b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

/* Decodes Summary.Value {tag = 1, simple_value = 2}; 0 or -1. */
static inline int dpt_test_tf_value(const unsigned char *p, size_t n, dpt_test_tfvalue_t *v)
{
    size_t i = 0;
    int have_tag = 0, have_value = 0;
    while (i < n) {
        uint64_t key, len;
        if (dpt_test_varint(p, n, &i, &key))
            return -1;
        if (key == ((1 << 3) | 2)) {
            if (dpt_test_varint(p, n, &i, &len) || len > n - i || len >= sizeof v->tag)
                return -1;
            memcpy(v->tag, p + i, len);
            v->tag[len] = '\0';
            i += len;
            have_tag = 1;
        } else if (key == ((2 << 3) | 5)) {
            if (n - i < 4)
                return -1;
            uint32_t bits = (uint32_t)dpt_test_le(p + i, 4);
            memcpy(&v->value, &bits, 4);
            i += 4;
            have_value = 1;
        } else {
            return -1; /* dpt writes nothing else */
        }
    }
    return have_tag && have_value ? 0 : -1;
}

/* Decodes an Event; 0 or -1. */
static inline int dpt_test_tf_event(const unsigned char *p, size_t n, dpt_test_tfevent_t *e)
{
    memset(e, 0, sizeof *e);
    size_t i = 0;
    while (i < n) {
        uint64_t key, v;
        if (dpt_test_varint(p, n, &i, &key))
            return -1;
        if (key == ((1 << 3) | 1)) { /* wall_time, 64-bit */
            if (n - i < 8)
                return -1;
            v = dpt_test_le(p + i, 8);
            memcpy(&e->wall_time, &v, 8);
            i += 8;
        } else if (key == ((2 << 3) | 0)) { /* step, varint */
            if (dpt_test_varint(p, n, &i, &v))
                return -1;
            e->step = (long long)v;
        } else if (key == ((3 << 3) | 2) || key == ((5 << 3) | 2)) {
            if (dpt_test_varint(p, n, &i, &v) || v > n - i)
                return -1;
            if (key == ((3 << 3) | 2)) {
                if (v >= sizeof e->file_version)
                    return -1;
                memcpy(e->file_version, p + i, v);
                e->file_version[v] = '\0';
            } else {
                /* Summary: repeated Value value = 1. */
                const unsigned char *s = p + i;
                size_t j = 0, sn = (size_t)v;
                e->has_summary = 1;
                while (j < sn) {
                    uint64_t sk, len;
                    if (dpt_test_varint(s, sn, &j, &sk) || sk != ((1 << 3) | 2) ||
                        dpt_test_varint(s, sn, &j, &len) || len > sn - j ||
                        e->nvalues == DPT_TEST_TF_MAX_VALUES ||
                        dpt_test_tf_value(s + j, (size_t)len, &e->values[e->nvalues++]))
                        return -1;
                    j += (size_t)len;
                }
            }
            i += (size_t)v;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Reads one events file. Returns 0, or -1 when it cannot be opened or
 * read (printed); cut and bad records are reported in *out. */
static inline int dpt_test_tffile_read(const char *path, dpt_test_tffile_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    size_t cap = 0;
    for (;;) {
        unsigned char head[12], tail[4];
        size_t got = fread(head, 1, 12, f);
        if (got == 0)
            break;
        if (got < 12) {
            out->cut = 1;
            break;
        }
        uint64_t len = dpt_test_le(head, 8);
        if (dpt_test_crc_mask(dpt_test_crc32c(head, 8)) != (uint32_t)dpt_test_le(head + 8, 4)) {
            fprintf(stderr, "%s: record %zu: the length's CRC does not match\n", path, out->n);
            out->bad++;
            break;
        }
        unsigned char *data = len < ((uint64_t)1 << 26) ? malloc(len ? len : 1) : NULL;
        if (!data) {
            fprintf(stderr, "%s: record %zu: length %llu\n", path, out->n, (unsigned long long)len);
            out->bad++;
            break;
        }
        if (fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4) {
            free(data);
            out->cut = 1;
            break;
        }
        int crc_ok =
            dpt_test_crc_mask(dpt_test_crc32c(data, len)) == (uint32_t)dpt_test_le(tail, 4);
        if (out->n == cap) {
            cap = cap ? 2 * cap : 64;
            dpt_test_tfevent_t *ne = realloc(out->events, cap * sizeof *ne);
            if (!ne) {
                free(data);
                out->bad++;
                break;
            }
            out->events = ne;
        }
        if (!crc_ok || dpt_test_tf_event(data, len, &out->events[out->n]) != 0) {
            fprintf(stderr, "%s: record %zu: %s\n", path, out->n,
                    crc_ok ? "not an Event dpt writes" : "the data's CRC does not match");
            out->bad++;
            free(data);
            break;
        }
        free(data);
        out->n++;
    }
    fclose(f);
    return 0;
}

static inline void dpt_test_tffile_free(dpt_test_tffile_t *f)
{
    free(f->events);
    memset(f, 0, sizeof *f);
}

static inline int dpt_test_tf_cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The events files of dir (events.out.tfevents.*, no temporaries), in name
 * order: a malloc'ed array of malloc'ed paths; *n of them. */
static inline char **dpt_test_tf_list(const char *dir, size_t *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **names = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0 || strstr(e->d_name, ".tmp-"))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[*n] = malloc(len)))
            break;
        snprintf(names[*n], len, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(names, *n, sizeof *names, dpt_test_tf_cmp_names);
    return names;
}

static inline void dpt_test_tf_list_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

#endif /* DPT_TEST_TFEVENTS_H */
