/* Checkpoints: the safetensors writer and reader, atomic saves, validation
 * of damaged files, arena helpers, and readers that are not dpt's (one
 * written here by string scanning, and Python's json + struct). */
#include "dpt_test.h"
#include "dpt_test_files.h"

#include "dpt/arena.h"
#include "dpt/checkpoint.h"

#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

/* ---- helpers ------------------------------------------------------------ */

static void path_in(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p)
        p[n] = 0;
    *len = (size_t)n;
    return p;
}

/* Number of entries in tmpdir whose name contains ".tmp" (leftovers). */
static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".tmp") != NULL;
    closedir(d);
    return n;
}

/* The test's own FNV-1a (not the library's), for the independent reader. */
static uint64_t my_fnv(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* A safetensors file from a header text and data, as another tool would
 * write it (no padding unless the header text has it). When the header
 * contains "fnv1a64:0000000000000000" the checksum is filled in. */
static void write_raw(const char *path, const char *header, const void *data, size_t n)
{
    size_t hl = strlen(header);
    unsigned char *buf = malloc(8 + hl + n + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (n)
        memcpy(buf + 8 + hl, data, n);
    const char *z = strstr(header, "fnv1a64:0000000000000000");
    if (z) {
        uint64_t h = my_fnv(14695981039346656037ull, buf, 8 + hl + n);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, h);
        memcpy(buf + 8 + (size_t)(z - header) + 8, hex, 16);
    }
    CHECK(dpt_test_spill(path, buf, 8 + hl + n) == 0);
    free(buf);
}

/* Values used by several tests, including the Python check (which computes
 * the same formulas). */
static float wval(size_t i)
{
    return (float)i * 0.5f - 3.0f;
}

/* A writer with one tensor of every dtype, a scalar, an empty tensor, a
 * blob and metadata that needs escaping. The data arrays are static so the
 * borrowed pointers outlive the writer. */
/* Metadata that needs escaping (and its check in the Python script). */
#define NOTE "quote \" backslash \\ newline \n tab \t \xc3\xa9 \xe2\x9c\x93"

static float g_w[12], g_scalar = 2.5f, g_empty[1];
static int32_t g_i32[5] = {-2147483647 - 1, -1, 0, 1, 2147483647};
static int64_t g_i64[3] = {INT64_MIN, -5, INT64_MAX};
static double g_f64[4] = {0.1, -0.0, 1e300, 3.0};
static const unsigned char g_blob[7] = {0, 1, 2, 0xfe, 0xff, 0x80, 0x7f};

static dpt_safetensors_writer_t *make_writer(void)
{
    dpt_safetensors_writer_t *w = NULL;
    if (dpt_safetensors_writer_create(&w) != 0)
        return NULL;
    for (size_t i = 0; i < 12; i++)
        g_w[i] = wval(i);
    size_t s34[2] = {3, 4}, s5 = 5, s3 = 3, s22[2] = {2, 2}, s03[2] = {0, 3};
    int ok = dpt_safetensors_add(w, "layer.0.weight", DPT_ST_F32, 2, s34, g_w) == 0 &&
             dpt_safetensors_add(w, "ints", DPT_ST_I32, 1, &s5, g_i32) == 0 &&
             dpt_safetensors_add_blob(w, "rng.state", g_blob, sizeof g_blob) == 0 &&
             dpt_safetensors_add(w, "big", DPT_ST_I64, 1, &s3, g_i64) == 0 &&
             dpt_safetensors_add(w, "doubles", DPT_ST_F64, 2, s22, g_f64) == 0 &&
             dpt_safetensors_add(w, "scalar", DPT_ST_F32, 0, NULL, &g_scalar) == 0 &&
             dpt_safetensors_add(w, "empty", DPT_ST_F32, 2, s03, g_empty) == 0 &&
             dpt_safetensors_set_meta(w, "note", NOTE) == 0 &&
             dpt_safetensors_set_meta_u64(w, "iteration", UINT64_MAX) == 0 &&
             dpt_safetensors_set_meta(w, "config", "lr = 0.1") == 0;
    if (!ok) {
        fprintf(stderr, "make_writer: %s\n", dpt_last_error());
        dpt_safetensors_writer_destroy(w);
        return NULL;
    }
    return w;
}

/* ---- round trip ---------------------------------------------------------- */

static void test_roundtrip_bitwise(void)
{
    char path[512];
    path_in(path, sizeof path, "rt.safetensors");
    dpt_safetensors_writer_t *w = make_writer();
    REQUIRE(w);
    /* Special float bit patterns must survive: NaN payloads, -0, denormals. */
    uint32_t bits[4] = {0x7fc12345u, 0x80000000u, 0x00000001u, 0x7f800000u};
    memcpy(g_w, bits, sizeof bits);
    REQUIRE_OK(dpt_safetensors_save(w, path));
    /* Saving again over the file works and gives identical bytes. */
    size_t n1, n2;
    unsigned char *a = slurp(path, &n1);
    REQUIRE_OK(dpt_safetensors_save(w, path));
    unsigned char *b = slurp(path, &n2);
    CHECK(a && b && n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    dpt_safetensors_writer_destroy(w);

    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(strcmp(dpt_safetensors_path(st), path) == 0);
    CHECK(dpt_safetensors_count(st) == 7);
    const dpt_safetensors_tensor_t *t = dpt_safetensors_find(st, "layer.0.weight");
    REQUIRE(t);
    CHECK(t->dtype == DPT_ST_F32 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4);
    CHECK(t->count == 12 && t->bytes == 48);
    CHECK(memcmp(t->data, g_w, sizeof g_w) == 0);
    CHECK((uintptr_t)t->data % 4 == 0);
    t = dpt_safetensors_find(st, "ints");
    CHECK(t && t->dtype == DPT_ST_I32 && memcmp(t->data, g_i32, sizeof g_i32) == 0);
    t = dpt_safetensors_find(st, "big");
    CHECK(t && t->dtype == DPT_ST_I64 && memcmp(t->data, g_i64, sizeof g_i64) == 0);
    CHECK(t && (uintptr_t)t->data % 8 == 0);
    t = dpt_safetensors_find(st, "doubles");
    CHECK(t && t->dtype == DPT_ST_F64 && t->ndim == 2 && memcmp(t->data, g_f64, sizeof g_f64) == 0);
    t = dpt_safetensors_find(st, "scalar");
    CHECK(t && t->ndim == 0 && t->count == 1 && memcmp(t->data, &g_scalar, 4) == 0);
    t = dpt_safetensors_find(st, "empty");
    CHECK(t && t->ndim == 2 && t->shape[0] == 0 && t->count == 0 && t->bytes == 0);
    CHECK(dpt_safetensors_find(st, "nope") == NULL);
    CHECK(dpt_safetensors_find(st, "") == NULL);

    const void *blob;
    size_t bytes;
    CHECK_OK(dpt_safetensors_get_blob(st, "rng.state", &blob, &bytes));
    CHECK(bytes == sizeof g_blob && memcmp(blob, g_blob, bytes) == 0);

    /* File order: by offset, 8-byte types first. */
    const dpt_safetensors_tensor_t *t0 = dpt_safetensors_tensor(st, 0);
    CHECK(t0 && t0->dtype == DPT_ST_I64);
    CHECK(dpt_safetensors_tensor(st, 7) == NULL);

    CHECK(strcmp(dpt_safetensors_meta(st, "note"), NOTE) == 0);
    CHECK(strcmp(dpt_safetensors_meta(st, "dpt.format"), "1") == 0);
    CHECK(strncmp(dpt_safetensors_meta(st, "dpt.checksum"), "fnv1a64:", 8) == 0);
    CHECK(dpt_safetensors_meta(st, "absent") == NULL);
    uint64_t it = 0;
    CHECK_OK(dpt_safetensors_meta_u64(st, "iteration", &it));
    CHECK(it == UINT64_MAX);
    CHECK(dpt_safetensors_meta_count(st) == 5);
    const char *k, *v;
    CHECK_OK(dpt_safetensors_meta_at(st, 0, &k, &v));
    CHECK(strcmp(k, "dpt.checksum") == 0);
    CHECK_ERR(dpt_safetensors_meta_at(st, 5, &k, &v), DPT_EINVAL, "out of range");
    dpt_safetensors_destroy(st);
    dpt_safetensors_destroy(NULL);
}

static void test_accessor_errors(void)
{
    char path[512];
    path_in(path, sizeof path, "acc.safetensors");
    dpt_safetensors_writer_t *w = make_writer();
    REQUIRE(w);
    REQUIRE_OK(dpt_safetensors_set_meta(w, "bad_u64", "12a"));
    REQUIRE_OK(dpt_safetensors_set_meta(w, "too_big", "18446744073709551616"));
    REQUIRE_OK(dpt_safetensors_set_meta(w, "empty", ""));
    REQUIRE_OK(dpt_safetensors_set_meta(w, "neg", "-1"));
    REQUIRE_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    uint64_t u;
    CHECK_ERR(dpt_safetensors_meta_u64(st, "missing", &u), DPT_ENOENT, "missing");
    CHECK_ERR(dpt_safetensors_meta_u64(st, "bad_u64", &u), DPT_EFORMAT, "bad_u64");
    CHECK_ERR(dpt_safetensors_meta_u64(st, "too_big", &u), DPT_EFORMAT, path);
    CHECK_ERR(dpt_safetensors_meta_u64(st, "empty", &u), DPT_EFORMAT, "empty");
    CHECK_ERR(dpt_safetensors_meta_u64(st, "neg", &u), DPT_EFORMAT, "neg");
    const dpt_safetensors_tensor_t *t;
    size_t s43[2] = {4, 3}, s34[2] = {3, 4};
    CHECK_ERR(dpt_safetensors_get(st, "nope", DPT_ST_F32, 2, s43, &t), DPT_ENOENT,
              "no tensor \"nope\"");
    CHECK_ERR(dpt_safetensors_get(st, "layer.0.weight", DPT_ST_F32, 2, s43, &t), DPT_EINVAL,
              "has shape [3, 4], expected [4, 3]");
    CHECK_ERR(dpt_safetensors_get(st, "layer.0.weight", DPT_ST_F32, 1, s34, &t), DPT_EINVAL,
              "expected [3]");
    CHECK_ERR(dpt_safetensors_get(st, "ints", DPT_ST_F32, 0, NULL, &t), DPT_EINVAL,
              "dtype I32, expected F32");
    CHECK_OK(dpt_safetensors_get(st, "layer.0.weight", DPT_ST_F32, 2, s34, &t));
    const void *blob;
    size_t bytes;
    CHECK_ERR(dpt_safetensors_get_blob(st, "ints", &blob, &bytes), DPT_EINVAL, "dtype I32");
    CHECK_ERR(dpt_safetensors_get_blob(st, "nope", &blob, &bytes), DPT_ENOENT, path);
    dpt_safetensors_destroy(st);
}

static void test_writer_errors(void)
{
    dpt_safetensors_writer_t *w;
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    float x[4] = {0};
    size_t s2 = 2, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, huge[2] = {SIZE_MAX / 2, 4};
    CHECK_OK(dpt_safetensors_add(w, "a", DPT_ST_F32, 1, &s2, x));
    CHECK_ERR(dpt_safetensors_add(w, "a", DPT_ST_F32, 1, &s2, x), DPT_EINVAL, "added twice");
    CHECK_ERR(dpt_safetensors_add(w, "", DPT_ST_F32, 1, &s2, x), DPT_EINVAL, "invalid tensor name");
    CHECK_ERR(dpt_safetensors_add(w, "__metadata__", DPT_ST_F32, 1, &s2, x), DPT_EINVAL,
              "__metadata__");
    CHECK_ERR(dpt_safetensors_add(w, "bad\xff", DPT_ST_F32, 1, &s2, x), DPT_EINVAL, "invalid");
    CHECK_ERR(dpt_safetensors_add(w, "b", DPT_ST_F32, 1, &s2, NULL), DPT_EINVAL, "NULL data");
    CHECK_ERR(dpt_safetensors_add(w, "b", DPT_ST_F32, 9, s9, x), DPT_EINVAL, "ndim 9");
    CHECK_ERR(dpt_safetensors_add(w, "b", DPT_ST_F32, -1, s9, x), DPT_EINVAL, "ndim -1");
    CHECK_ERR(dpt_safetensors_add(w, "b", (dpt_st_dtype_t)99, 1, &s2, x), DPT_EINVAL, "dtype 99");
    CHECK_ERR(dpt_safetensors_add(w, "b", DPT_ST_F32, 2, huge, x), DPT_EOVERFLOW, "overflow");
    CHECK_ERR(dpt_safetensors_add(w, NULL, DPT_ST_F32, 1, &s2, x), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_safetensors_set_meta(w, "dpt.checksum", "x"), DPT_EINVAL, "reserved");
    CHECK_ERR(dpt_safetensors_set_meta(w, "", "x"), DPT_EINVAL, "empty");
    CHECK_ERR(dpt_safetensors_set_meta(w, "k", NULL), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_safetensors_set_meta(w, "k", "\xc0\x80"), DPT_EINVAL, "UTF-8");
    /* Setting a key twice keeps the last value. */
    CHECK_OK(dpt_safetensors_set_meta(w, "k", "1"));
    CHECK_OK(dpt_safetensors_set_meta(w, "k", "2"));
    /* A failed add_arena adds nothing. */
    dpt_vartable_t t;
    dpt_vartable_init(&t);
    size_t sa = 2;
    CHECK_OK(dpt_vartable_add(&t, "b", 1, &sa, NULL));
    CHECK_OK(dpt_vartable_add(&t, "a", 1, &sa, NULL)); /* "" + "a" collides */
    float arena[64] = {0};
    CHECK_ERR(dpt_safetensors_add_arena(w, "", &t, arena, 64), DPT_EINVAL, "added twice");
    CHECK_ERR(dpt_safetensors_add_arena(w, "p.", &t, arena, 3), DPT_EINVAL, "needs");
    CHECK_OK(dpt_safetensors_add_arena(w, "p.", &t, arena, 64));
    char path[512];
    path_in(path, sizeof path, "werr.safetensors");
    REQUIRE_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    dpt_safetensors_writer_destroy(NULL);
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(dpt_safetensors_count(st) == 3); /* a, p.b, p.a: not "b" from the failed call */
    CHECK(dpt_safetensors_find(st, "b") == NULL);
    CHECK(strcmp(dpt_safetensors_meta(st, "k"), "2") == 0);
    dpt_safetensors_destroy(st);
    dpt_vartable_deinit(&t);

    /* A writer without tensors gives a valid file with only metadata. */
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    REQUIRE_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(dpt_safetensors_count(st) == 0 && dpt_safetensors_meta_count(st) == 2);
    dpt_safetensors_destroy(st);
}

/* ---- an independent reader ---------------------------------------------- */

/* Finds "name":{...} in the header by string scanning and reads dtype,
 * shape and offsets with sscanf; relies only on the safetensors spec, not
 * on dpt's parser. */
static int scan_tensor(const char *hdr, const char *name, char *dtype, size_t *shape, int *ndim,
                       unsigned long long *begin, unsigned long long *end)
{
    char key[128];
    snprintf(key, sizeof key, "\"%s\":", name);
    const char *p = strstr(hdr, key);
    if (!p)
        return -1;
    const char *close = strchr(p, '}');
    const char *d = strstr(p, "\"dtype\":\"");
    const char *s = strstr(p, "\"shape\":[");
    const char *o = strstr(p, "\"data_offsets\":[");
    if (!close || !d || !s || !o || d > close || s > close || o > close)
        return -1;
    if (sscanf(d + 9, "%7[A-Z0-9]", dtype) != 1)
        return -1;
    *ndim = 0;
    s += 9;
    while (*s != ']') {
        unsigned long long v;
        int used;
        if (sscanf(s, "%llu%n", &v, &used) != 1)
            return -1;
        shape[(*ndim)++] = (size_t)v;
        s += used;
        if (*s == ',')
            s++;
    }
    return sscanf(o + 16, "%llu,%llu", begin, end) == 2 ? 0 : -1;
}

static void test_independent_reader(void)
{
    char path[512];
    path_in(path, sizeof path, "indep.safetensors");
    dpt_safetensors_writer_t *w = make_writer();
    REQUIRE(w);
    for (size_t i = 0; i < 12; i++)
        g_w[i] = wval(i);
    REQUIRE_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);

    size_t len;
    unsigned char *f = slurp(path, &len);
    REQUIRE(f && len >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | f[i];
    REQUIRE(n <= len - 8);
    CHECK((8 + n) % 8 == 0); /* padded so the data starts 8-byte aligned */
    char *hdr = malloc(n + 1);
    memcpy(hdr, f + 8, n);
    hdr[n] = '\0';
    CHECK(hdr[0] == '{');
    size_t last = n;
    while (last > 0 && hdr[last - 1] == ' ')
        last--;
    CHECK(last > 0 && hdr[last - 1] == '}');
    const unsigned char *data = f + 8 + n;
    size_t data_len = len - 8 - n;

    char dtype[8];
    size_t shape[8];
    int ndim;
    unsigned long long b, e;
    REQUIRE(scan_tensor(hdr, "layer.0.weight", dtype, shape, &ndim, &b, &e) == 0);
    CHECK(strcmp(dtype, "F32") == 0 && ndim == 2 && shape[0] == 3 && shape[1] == 4);
    CHECK(e - b == 48 && e <= data_len);
    for (size_t i = 0; i < 12 && e <= data_len; i++) {
        const unsigned char *q = data + b + 4 * i;
        uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                     (uint32_t)q[3] << 24; /* little-endian by the spec */
        float v;
        memcpy(&v, &u, 4);
        CHECK(v == wval(i));
    }
    REQUIRE(scan_tensor(hdr, "ints", dtype, shape, &ndim, &b, &e) == 0);
    CHECK(strcmp(dtype, "I32") == 0 && ndim == 1 && shape[0] == 5 && e - b == 20);
    if (e <= data_len) {
        const unsigned char *q = data + b;
        CHECK(q[0] == 0 && q[1] == 0 && q[2] == 0 && q[3] == 0x80); /* INT32_MIN */
    }
    REQUIRE(scan_tensor(hdr, "rng.state", dtype, shape, &ndim, &b, &e) == 0);
    CHECK(strcmp(dtype, "U8") == 0 && ndim == 1 && shape[0] == 7);
    CHECK(e <= data_len && memcmp(data + b, g_blob, 7) == 0);
    REQUIRE(scan_tensor(hdr, "scalar", dtype, shape, &ndim, &b, &e) == 0);
    CHECK(ndim == 0 && e - b == 4);
    CHECK(strstr(hdr, "\"iteration\":\"18446744073709551615\"") != NULL);
    CHECK(strstr(hdr, "\"dpt.format\":\"1\"") != NULL);

    /* The checksum: FNV-1a of the file with its 16 digits read as '0'. */
    char *c = strstr(hdr, "\"dpt.checksum\":\"fnv1a64:");
    REQUIRE(c);
    size_t at = 8 + (size_t)(c - hdr) + strlen("\"dpt.checksum\":\"fnv1a64:");
    unsigned long long want = strtoull((char *)f + at, NULL, 16);
    memset(f + at, '0', 16);
    CHECK(my_fnv(14695981039346656037ull, f, len) == want);
    CHECK(dpt_fnv1a64(DPT_FNV1A64_INIT, "a", 1) == 0xaf63dc4c8601ec8cull); /* published vector */
    free(hdr);
    free(f);
}

/* ---- damaged files ------------------------------------------------------- */

/* A small valid file (about 250 bytes) for the damage tests. */
static int write_small(const char *path)
{
    dpt_safetensors_writer_t *w;
    if (dpt_safetensors_writer_create(&w) != 0)
        return -1;
    static float x[6] = {1, 2, 3, 4, 5, 6};
    static int32_t y[2] = {7, -8};
    size_t s23[2] = {2, 3}, s2 = 2;
    int rc = dpt_safetensors_add(w, "x", DPT_ST_F32, 2, s23, x);
    if (rc == 0)
        rc = dpt_safetensors_add(w, "y", DPT_ST_I32, 1, &s2, y);
    if (rc == 0)
        rc = dpt_safetensors_set_meta_u64(w, "iteration", 3);
    if (rc == 0)
        rc = dpt_safetensors_save(w, path);
    dpt_safetensors_writer_destroy(w);
    return rc;
}

static void test_truncated_every_length(void)
{
    char path[512], cut[512];
    path_in(path, sizeof path, "small.safetensors");
    path_in(cut, sizeof cut, "cut.safetensors");
    REQUIRE_OK(write_small(path));
    size_t len;
    unsigned char *f = slurp(path, &len);
    REQUIRE(f && len > 100);
    for (size_t l = 0; l < len; l++) {
        REQUIRE(dpt_test_spill(cut, f, l) == 0);
        dpt_safetensors_t *st = (dpt_safetensors_t *)1;
        CHECK_ERR(dpt_safetensors_load(&st, cut), DPT_EFORMAT, cut);
        CHECK(st == NULL);
    }
    /* The messages say what is wrong. */
    CHECK(dpt_test_spill(cut, f, 5) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, cut), DPT_EFORMAT,
              "fewer than the 8-byte header length");
    CHECK(dpt_test_spill(cut, f, 40) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, cut), DPT_EFORMAT,
              "runs past the end of the file");
    CHECK(dpt_test_spill(cut, f, len - 1) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, cut), DPT_EFORMAT,
              "the file is truncated: the tensors need 32 bytes of data, it has 31");
    /* One byte appended is caught too. */
    unsigned char *g = malloc(len + 1);
    memcpy(g, f, len);
    g[len] = 0;
    CHECK(dpt_test_spill(cut, g, len + 1) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, cut), DPT_EFORMAT, cut);
    free(g);
    free(f);
}

static void test_flipped_bytes(void)
{
    char path[512], bad[512];
    path_in(path, sizeof path, "small2.safetensors");
    path_in(bad, sizeof bad, "flip.safetensors");
    REQUIRE_OK(write_small(path));
    size_t len;
    unsigned char *f = slurp(path, &len);
    REQUIRE(f);
    static const unsigned char masks[] = {0x01, 0x20, 0x80, 0xff};
    int undetected = 0;
    for (size_t m = 0; m < sizeof masks; m++)
        for (size_t i = 0; i < len; i++) {
            f[i] ^= masks[m];
            REQUIRE(dpt_test_spill(bad, f, len) == 0);
            f[i] ^= masks[m];
            dpt_safetensors_t *st = NULL;
            dpt_error_clear();
            int rc = dpt_safetensors_load(&st, bad);
            if (rc != DPT_EFORMAT || !strstr(dpt_last_error(), bad)) {
                if (undetected++ < 5)
                    fprintf(stderr, "flip 0x%02x at byte %zu: %s: %s\n", masks[m], i,
                            dpt_status_name(rc), dpt_last_error());
            }
            dpt_safetensors_destroy(st);
        }
    CHECK(undetected == 0);
    /* A flip in the data names the checksum. */
    f[len - 3] ^= 0x10;
    CHECK(dpt_test_spill(bad, f, len) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, bad), DPT_EFORMAT,
              "checksum mismatch");
    free(f);
}

static void test_not_found_and_not_a_file(void)
{
    char path[512];
    path_in(path, sizeof path, "does-not-exist.safetensors");
    dpt_safetensors_t *st = NULL;
    CHECK_ERR(dpt_safetensors_load(&st, path), DPT_ENOENT, path);
    CHECK(st == NULL);
    /* What is not a file, or names nothing, is bad input (exit 2 in the
     * command), not an I/O failure. */
    CHECK_ERR(dpt_safetensors_load(&st, tmpdir), DPT_EINVAL, "a directory, not a checkpoint file");
    CHECK_ERR(dpt_safetensors_load(&st, "/dev/zero"), DPT_EINVAL, "not a regular file");
    /* A path through a regular file: the system's reason is in the message. */
    char small[512], through[600];
    path_in(small, sizeof small, "plain-file");
    REQUIRE(dpt_test_spill(small, "x", 1) == 0);
    snprintf(through, sizeof through, "%s/x.safetensors", small);
    CHECK_ERR(dpt_safetensors_load(&st, through), DPT_ENOENT, "cannot open: Not a directory");
    CHECK(st == NULL);
}

typedef struct bad_case {
    const char *header;
    size_t data_len;
    int code;
    const char *needle;
} bad_case_t;

static void test_bad_headers(void)
{
    static const bad_case_t cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, DPT_EFORMAT,
         "expected ',' or '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", 4, DPT_EFORMAT,
         "expected '\"'"},
        {"[]", 0, DPT_EFORMAT, "expected '{'"},
        {"{} x", 0, DPT_EFORMAT, "unexpected text after"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, DPT_EFORMAT,
         "unknown key \"x\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, DPT_EFORMAT, "tensor a appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         DPT_EFORMAT, "\"dtype\" appears twice"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT, "missing \"shape\""},
        {"{\"a\":{}}", 0, DPT_EFORMAT, "empty description"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "fraction"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4,
         DPT_EFORMAT, "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         DPT_EFORMAT, "more than 8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, DPT_EFORMAT,
         "needs 2 numbers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, DPT_EFORMAT,
         "needs 2 numbers"},
        {"{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "expected '\"'"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2, DPT_ENOTSUP,
         "dtype \"BF16\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "shape and dtype give 8 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, DPT_EFORMAT,
         "run past the end of the data section"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, DPT_EFORMAT,
         "end before they begin"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, DPT_EFORMAT, "bytes 4..8 of the data section belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, DPT_EFORMAT, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, DPT_EFORMAT,
         "cover 4 bytes, the data section has 8"},
        {"{\"__metadata__\":{\"k\":1}}", 0, DPT_EFORMAT, "metadata values must be strings"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, DPT_EFORMAT, "\"k\" appears twice"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, DPT_EFORMAT, "appears twice"},
        {"{\"__metadata__\":{\"k\":\"a\x01\"}}", 0, DPT_EFORMAT, "control character"},
        {"{\"__metadata__\":{\"k\":\"\\x\"}}", 0, DPT_EFORMAT, "bad escape"},
        {"{\"__metadata__\":{\"k\":\"abc}}", 0, DPT_EFORMAT, "unterminated string"},
        {"{\"__metadata__\":{\"k\":\"\xff\"}}", 0, DPT_EFORMAT, "invalid UTF-8"},
        {"{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}", 0, DPT_EFORMAT, "invalid UTF-8"},
        {"{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0, DPT_EFORMAT, "unpaired surrogate"},
        {"{\"__metadata__\":{\"k\":\"\\udc00\"}}", 0, DPT_EFORMAT, "unpaired surrogate"},
        {"{\"__metadata__\":{\"k\":\"\\u0000\"}}", 0, DPT_EFORMAT, "\\u0000"},
        {"{\"__metadata__\":{\"k\":\"\\u12g4\"}}", 0, DPT_EFORMAT, "bad \\u escape"},
        {"{\"__metadata__\":{\"dpt.format\":\"1\"}}", 0, DPT_EFORMAT, "dpt.checksum is missing"},
        {"{\"__metadata__\":{\"dpt.checksum\":\"crc32:1234\"}}", 0, DPT_EFORMAT,
         "not fnv1a64:<16 hex digits>"},
        {"{\"__metadata__\":{\"dpt.checksum\":\"fnv1a64:0000000000000000\",\"dpt.format\":\"2\"}}",
         0, DPT_ENOTSUP, "dpt.format \"2\""},
        {"{\"__metadata__\":{\"dpt.checksum\":\"fnv1a64:0000000000000000\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, DPT_OK, ""},
        {"{\"\\u1\"}", 0, DPT_EFORMAT, "truncated \\u escape"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1 2],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "expected ',' or ']'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[a],\"data_offsets\":[0,4]}}", 4, DPT_EFORMAT,
         "expected a non-negative integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[", 0, DPT_EFORMAT,
         "expected a number, found the end of the header"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
         "\"data_offsets\":[0,4]}}",
         4, DPT_EFORMAT, "tensor a: shape overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,4]}}", 4,
         DPT_EFORMAT, "tensor a: shape overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}\"b\":{}}", 4, DPT_EFORMAT,
         "expected ',' or '}'"},
        {"", 0, DPT_EFORMAT, "header length 0 is zero"},
        {"   ", 0, DPT_EFORMAT, "expected '{', found the end"},
        {"{\"a\":", 0, DPT_EFORMAT, "expected '{', found the end"},
    };
    char path[512];
    path_in(path, sizeof path, "bad.safetensors");
    unsigned char data[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].header, data, cases[i].data_len);
        dpt_safetensors_t *st = NULL;
        dpt_error_clear();
        int rc = dpt_safetensors_load(&st, path);
        int ok = rc == cases[i].code && (rc == 0 || (strstr(dpt_last_error(), path) &&
                                                     strstr(dpt_last_error(), cases[i].needle)));
        if (!ok)
            fprintf(stderr, "case %zu (%s): got %s \"%s\", expected %s with \"%s\"\n", i,
                    cases[i].header, dpt_status_name(rc), dpt_last_error(),
                    dpt_status_name(cases[i].code), cases[i].needle);
        CHECK(ok);
        CHECK((rc == 0) == (st != NULL));
        dpt_safetensors_destroy(st);
    }

    /* A header length over the limit, and one past the end of the file. */
    unsigned char big[16] = {0, 0, 0, 0x40, 0, 0, 0, 0, '{', '}'};
    CHECK(dpt_test_spill(path, big, 10) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, path), DPT_EFORMAT,
              "over the 100 MiB limit");
    unsigned char past[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK(dpt_test_spill(path, past, 10) == 0);
    CHECK_ERR(dpt_safetensors_load(&(dpt_safetensors_t *){NULL}, path), DPT_EFORMAT,
              "runs past the end");
}

/* Files other tools may write: whitespace, escapes in names, no metadata,
 * no padding, and a tensor at an offset that is not a multiple of its
 * element size (the reader then gives an aligned copy). */
static void test_foreign_files(void)
{
    char path[512];
    path_in(path, sizeof path, "foreign.safetensors");
    unsigned char data[5] = {9, 0, 0, 0x80, 0x3f}; /* U8 9, then F32 1.0 at offset 1 */
    write_raw(path,
              "{ \"b\\u00e9\\n\\/\" : { \"dtype\" : \"U8\", \"shape\" : [ 1 ],\n"
              "\t\"data_offsets\" : [ 0 , 1 ] } ,\r\n"
              "\"\\ud83d\\ude00\":{\"data_offsets\":[1,5],\"shape\":[],\"dtype\":\"F32\"}}",
              data, 5);
    dpt_safetensors_t *st = NULL;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(dpt_safetensors_count(st) == 2);
    CHECK(dpt_safetensors_meta_count(st) == 0);
    const dpt_safetensors_tensor_t *a = dpt_safetensors_find(st, "b\xc3\xa9\n/");
    const dpt_safetensors_tensor_t *b = dpt_safetensors_find(st, "\xf0\x9f\x98\x80");
    CHECK(a && a->dtype == DPT_ST_U8 && ((const unsigned char *)a->data)[0] == 9);
    REQUIRE(b);
    CHECK(b->dtype == DPT_ST_F32 && b->ndim == 0 && (uintptr_t)b->data % 4 == 0);
    CHECK(*(const float *)b->data == 1.0f);
    dpt_safetensors_destroy(st);

    write_raw(path, "{}", NULL, 0);
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK(dpt_safetensors_count(st) == 0);
    CHECK(dpt_safetensors_find(st, "x") == NULL);
    dpt_safetensors_destroy(st);
}

/* Every single-byte substitution (from a set of JSON-significant bytes) and
 * every truncation of a header without a checksum: the parser must never
 * crash (this runs under the address sanitizer too), and whatever it
 * accepts must be consistent. */
static void test_header_mutations(void)
{
    static const char base[] =
        "{\"__metadata__\":{\"k\":\"v\\u00e9\\n\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,1],"
        "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}";
    static const char subst[] = "\"\\{}[],:09u -.e\x01\x80\xff";
    char path[512], hdr[sizeof base];
    path_in(path, sizeof path, "mut.safetensors");
    unsigned char data[12] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 1, 2, 3, 4};
    size_t len = strlen(base);
    int accepted = 0, bad = 0;
    for (size_t i = 0; i <= len; i++)
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(hdr, base, len + 1);
            if (i == len) {
                if (k > 0)
                    break;
            } else if (subst[k] == '\0') {
                hdr[i] = '\0'; /* truncation */
            } else {
                hdr[i] = subst[k];
            }
            write_raw(path, hdr, data, sizeof data);
            dpt_safetensors_t *st = NULL;
            dpt_error_clear();
            int rc = dpt_safetensors_load(&st, path);
            if (rc == 0) {
                accepted++;
                size_t total = 0;
                for (size_t t = 0; t < dpt_safetensors_count(st); t++)
                    total += dpt_safetensors_tensor(st, t)->bytes;
                bad += total != sizeof data;
            } else {
                bad += rc > 0 || st != NULL || !strstr(dpt_last_error(), path);
            }
            dpt_safetensors_destroy(st);
        }
    CHECK(bad == 0);
    CHECK(accepted > 0); /* e.g. the unmodified header, a changed metadata value */
}

/* ---- arenas -------------------------------------------------------------- */

static void make_table(dpt_vartable_t *t, size_t out, int with_bias, int extra)
{
    size_t w[2] = {out, 3}, b = out, e[1] = {2};
    dpt_vartable_init(t);
    dpt_vartable_add(t, "0.weight", 2, w, NULL);
    if (with_bias)
        dpt_vartable_add(t, "0.bias", 1, &b, NULL);
    if (extra)
        dpt_vartable_add(t, "1.weight", 1, e, NULL);
}

static void test_arena_roundtrip_and_mismatch(void)
{
    char path[512];
    path_in(path, sizeof path, "arena.safetensors");
    dpt_vartable_t t;
    make_table(&t, 4, 1, 0);
    dpt_arena_t params, m;
    REQUIRE_OK(dpt_arena_init(&params, t.total));
    REQUIRE_OK(dpt_arena_init(&m, t.total));
    for (size_t i = 0; i < t.nvars; i++)
        for (size_t j = 0; j < t.vars[i].count; j++) {
            params.data[t.vars[i].offset + j] = (float)(i * 100 + j) + 0.25f;
            m.data[t.vars[i].offset + j] = -(float)j / 3.0f;
        }
    dpt_safetensors_writer_t *w;
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    CHECK_OK(dpt_safetensors_add_arena(w, "params.", &t, params.data, params.count));
    CHECK_OK(dpt_safetensors_add_arena(w, "optim.m.", &t, m.data, m.count));
    CHECK_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);

    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    const dpt_safetensors_tensor_t *tw = dpt_safetensors_find(st, "params.0.weight");
    CHECK(tw && tw->ndim == 2 && tw->shape[0] == 4 && tw->shape[1] == 3);
    dpt_arena_t p2, m2;
    REQUIRE_OK(dpt_arena_init(&p2, t.total));
    REQUIRE_OK(dpt_arena_init(&m2, t.total));
    CHECK_OK(dpt_safetensors_load_arena(st, "params.", &t, p2.data, p2.count));
    CHECK_OK(dpt_safetensors_load_arena(st, "optim.m.", &t, m2.data, m2.count));
    CHECK(memcmp(p2.data, params.data, t.total * sizeof(float)) == 0);
    CHECK(memcmp(m2.data, m.data, t.total * sizeof(float)) == 0);

    /* Mismatches: nothing is copied, the message names the variable. */
    for (size_t i = 0; i < p2.count; i++)
        p2.data[i] = 42.0f;
    dpt_vartable_t t5, tx, tnb;
    make_table(&t5, 5, 1, 0);
    make_table(&tx, 4, 1, 1);
    make_table(&tnb, 4, 0, 0);
    dpt_arena_t big;
    REQUIRE_OK(dpt_arena_init(&big, 1024));
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &t5, big.data, big.count), DPT_EINVAL,
              "variable 0.weight has shape [4, 3], the model has [5, 3]");
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &t5, big.data, big.count), DPT_EINVAL,
              path);
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &tx, big.data, big.count), DPT_ENOENT,
              "variable 1.weight (tensor params.1.weight) is missing");
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &tnb, p2.data, p2.count), DPT_EINVAL,
              "tensor params.0.bias is not a variable of the model");
    CHECK_ERR(dpt_safetensors_load_arena(st, "optim.v.", &t, p2.data, p2.count), DPT_ENOENT,
              "tensor optim.v.0.weight");
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &t, p2.data, 3), DPT_EINVAL, "needs");
    /* With no arena: checked only. */
    CHECK_OK(dpt_safetensors_load_arena(st, "params.", &t, NULL, 0));
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &t5, NULL, 0), DPT_EINVAL,
              "the model has [5, 3]");
    int untouched = 1;
    for (size_t i = 0; i < p2.count; i++)
        untouched &= p2.data[i] == 42.0f;
    CHECK(untouched);
    dpt_safetensors_destroy(st);

    /* A tensor with the right name and shape but another dtype. */
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    int32_t iw[12] = {0}, ib[4] = {0};
    size_t s43[2] = {4, 3}, s4 = 4;
    CHECK_OK(dpt_safetensors_add(w, "params.0.weight", DPT_ST_I32, 2, s43, iw));
    CHECK_OK(dpt_safetensors_add(w, "params.0.bias", DPT_ST_I32, 1, &s4, ib));
    CHECK_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    CHECK_ERR(dpt_safetensors_load_arena(st, "params.", &t, p2.data, p2.count), DPT_EINVAL,
              "variable 0.weight has dtype I32, expected F32");
    dpt_safetensors_destroy(st);

    dpt_arena_deinit(&big);
    dpt_arena_deinit(&params);
    dpt_arena_deinit(&m);
    dpt_arena_deinit(&p2);
    dpt_arena_deinit(&m2);
    dpt_vartable_deinit(&t);
    dpt_vartable_deinit(&t5);
    dpt_vartable_deinit(&tx);
    dpt_vartable_deinit(&tnb);
}

/* A large file is mapped, not read: its tensors read back the same, the
 * pages an arena load gave back come again from the file, and blobs stay
 * valid until destroy. */
static void test_large_file_mapped(void)
{
    char path[512];
    path_in(path, sizeof path, "large.safetensors");
    dpt_vartable_t t;
    make_table(&t, 200000, 1, 0); /* 800k floats: 3.2 MB */
    dpt_arena_t params, back;
    REQUIRE_OK(dpt_arena_init(&params, t.total));
    REQUIRE_OK(dpt_arena_init(&back, t.total));
    for (size_t i = 0; i < t.total; i++)
        params.data[i] = (float)i * 0.5f - 7.0f;
    unsigned char blob[5] = {1, 2, 3, 4, 5};
    dpt_safetensors_writer_t *w;
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    CHECK_OK(dpt_safetensors_add_arena(w, "params.", &t, params.data, params.count));
    CHECK_OK(dpt_safetensors_add_blob(w, "state", blob, sizeof blob));
    CHECK_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    dpt_safetensors_t *st;
    REQUIRE_OK(dpt_safetensors_load(&st, path));
    for (int pass = 0; pass < 2; pass++) {
        memset(back.data, 0, t.total * sizeof(float));
        CHECK_OK(dpt_safetensors_load_arena(st, "params.", &t, back.data, back.count));
        CHECK(memcmp(back.data, params.data, t.total * sizeof(float)) == 0);
    }
    const dpt_safetensors_tensor_t *tw = dpt_safetensors_find(st, "params.0.weight");
    CHECK(tw && memcmp(tw->data, params.data + t.vars[0].offset, tw->bytes) == 0);
    const void *got;
    size_t n;
    CHECK_OK(dpt_safetensors_get_blob(st, "state", &got, &n));
    CHECK(n == sizeof blob && memcmp(got, blob, n) == 0);
    dpt_safetensors_destroy(st);
    dpt_arena_deinit(&params);
    dpt_arena_deinit(&back);
    dpt_vartable_deinit(&t);
}

/* ---- atomic saves -------------------------------------------------------- */

static void test_atomic_save_failures(void)
{
    char path[512], nodir[512], isdir[512];
    path_in(path, sizeof path, "atomic.safetensors");
    path_in(nodir, sizeof nodir, "no/such/dir/x.safetensors");
    path_in(isdir, sizeof isdir, "a-directory");
    REQUIRE_OK(write_small(path));
    size_t len0;
    unsigned char *before = slurp(path, &len0);
    REQUIRE(before);

    /* A big checkpoint that cannot be written: the file size limit makes
     * write() fail part-way (EFBIG), as a full disk would. */
    static float big[1 << 16];
    size_t n = sizeof big / sizeof big[0];
    dpt_safetensors_writer_t *w;
    REQUIRE_OK(dpt_safetensors_writer_create(&w));
    REQUIRE_OK(dpt_safetensors_add(w, "big", DPT_ST_F32, 1, &n, big));
    struct rlimit old, lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 16384;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    dpt_error_clear();
    int rc = dpt_safetensors_save(w, path);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK(rc == DPT_EIO);
    CHECK(strstr(dpt_last_error(), path) && strstr(dpt_last_error(), "writing"));
    size_t len1;
    unsigned char *after = slurp(path, &len1);
    CHECK(after && len1 == len0 && memcmp(before, after, len0) == 0);
    free(after);
    CHECK(count_temp_files(tmpdir) == 0);
    dpt_safetensors_t *st;
    CHECK_OK(dpt_safetensors_load(&st, path));
    dpt_safetensors_destroy(st);

    /* A directory that does not exist: nothing is created. */
    CHECK_ERR(dpt_safetensors_save(w, nodir), DPT_EIO, "cannot create temporary file");

    /* The target is a directory: rename() refuses, the directory stays and
     * the temporary file is removed. */
    REQUIRE(mkdir(isdir, 0755) == 0);
    char inner[600];
    snprintf(inner, sizeof inner, "%s/keep", isdir);
    REQUIRE(dpt_test_spill(inner, "x", 1) == 0);
    CHECK_ERR(dpt_safetensors_save(w, isdir), DPT_EIO, "cannot rename");
    struct stat sb;
    CHECK(stat(inner, &sb) == 0);
    CHECK(count_temp_files(tmpdir) == 0);

    /* A directory without write permission (root ignores permissions, so
     * this case only runs as another user). */
    if (geteuid() != 0) {
        char rodir[512], ropath[600];
        path_in(rodir, sizeof rodir, "readonly");
        REQUIRE(mkdir(rodir, 0755) == 0);
        snprintf(ropath, sizeof ropath, "%s/ck.safetensors", rodir);
        REQUIRE_OK(write_small(ropath));
        REQUIRE(chmod(rodir, 0555) == 0);
        CHECK_ERR(dpt_safetensors_save(w, ropath), DPT_EIO, ropath);
        chmod(rodir, 0755);
        CHECK_OK(dpt_safetensors_load(&st, ropath));
        CHECK(st && dpt_safetensors_find(st, "x") != NULL); /* still the old file */
        dpt_safetensors_destroy(st);
        CHECK(count_temp_files(rodir) == 0);
    } else {
        printf("note: running as root, the read-only directory case is skipped\n");
    }

    /* After the failures, a good save replaces the old file. */
    CHECK_OK(dpt_safetensors_save(w, path));
    CHECK_OK(dpt_safetensors_load(&st, path));
    CHECK(st && dpt_safetensors_find(st, "big") && !dpt_safetensors_find(st, "x"));
    dpt_safetensors_destroy(st);
    CHECK(count_temp_files(tmpdir) == 0);
    dpt_safetensors_writer_destroy(w);
    free(before);
}

/* ---- Python -------------------------------------------------------------- */

static const char py_script[] =
    "import json, struct, sys\n"
    "raw = open(sys.argv[1], 'rb').read()\n"
    "n, = struct.unpack('<Q', raw[:8])\n"
    "hdr = json.loads(raw[8:8 + n])\n"
    "data = raw[8 + n:]\n"
    "meta = hdr.pop('__metadata__')\n"
    "assert meta['dpt.format'] == '1', meta\n"
    "assert int(meta['iteration']) == 2**64 - 1, meta\n"
    "note = 'quote \" backslash \\\\ newline \\n tab \\t \\u00e9 \\u2713'\n"
    "assert meta['note'] == note, meta['note']\n"
    "cks = meta['dpt.checksum']\n"
    "h = 0xcbf29ce484222325\n"
    "for b in raw.replace(cks.encode(), b'fnv1a64:' + b'0' * 16, 1):\n"
    "    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff\n"
    "assert '%016x' % h == cks[8:], (cks, h)\n"
    "fmt = {'F32': 'f', 'I32': 'i', 'U8': 'B', 'I64': 'q', 'F64': 'd'}\n"
    "def get(name):\n"
    "    t = hdr[name]\n"
    "    b, e = t['data_offsets']\n"
    "    k = 1\n"
    "    for d in t['shape']: k *= d\n"
    "    return t, struct.unpack('<%d%s' % (k, fmt[t['dtype']]), data[b:e])\n"
    "t, w = get('layer.0.weight')\n"
    "assert t['dtype'] == 'F32' and t['shape'] == [3, 4], t\n"
    "assert list(w) == [i * 0.5 - 3.0 for i in range(12)], w\n"
    "assert get('ints')[1] == (-2**31, -1, 0, 1, 2**31 - 1)\n"
    "assert get('big')[1] == (-2**63, -5, 2**63 - 1)\n"
    "assert get('doubles')[1] == (0.1, -0.0, 1e300, 3.0)\n"
    "assert get('rng.state')[1] == (0, 1, 2, 254, 255, 128, 127)\n"
    "assert get('scalar')[1] == (2.5,) and hdr['scalar']['shape'] == []\n"
    "assert get('empty')[1] == () and hdr['empty']['shape'] == [0, 3]\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    print('python: ok (json + struct; numpy not installed)')\n"
    "    sys.exit(0)\n"
    /* The reader given in docs/CHECKPOINTS.md, verbatim. */
    "def read_dpt(path):\n"
    "    raw = open(path, 'rb').read()\n"
    "    n, = struct.unpack('<Q', raw[:8])\n"
    "    header = json.loads(raw[8:8 + n])\n"
    "    meta = header.pop('__metadata__', {})\n"
    "    data = raw[8 + n:]\n"
    "    dtypes = {'F32': '<f4', 'I32': '<i4', 'U8': 'u1', 'I64': '<i8', 'F64': '<f8'}\n"
    "    tensors = {}\n"
    "    for name, t in header.items():\n"
    "        begin, end = t['data_offsets']\n"
    "        tensors[name] = np.frombuffer(data[begin:end], "
    "dtype=dtypes[t['dtype']]).reshape(t['shape'])\n"
    "    return tensors, meta\n"
    "tensors, m2 = read_dpt(sys.argv[1])\n"
    "assert m2 == meta\n"
    "a = tensors['layer.0.weight']\n"
    "assert a.shape == (3, 4) and a.dtype == np.float32\n"
    "assert (a == np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 - 3).all(), a\n"
    "for name in hdr:\n"
    "    assert tuple(tensors[name].ravel().tolist()) == get(name)[1], name\n"
    "    assert list(tensors[name].shape) == hdr[name]['shape'], name\n"
    "print('python: ok (json + struct + numpy)')\n";

static void test_python_reader(void)
{
    if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) {
        printf("skipped: python3 is not installed (the Python reader check)\n");
        return;
    }
    char path[512], script[512], cmd[1200];
    path_in(path, sizeof path, "py.safetensors");
    path_in(script, sizeof script, "read.py");
    dpt_safetensors_writer_t *w = make_writer();
    REQUIRE(w);
    for (size_t i = 0; i < 12; i++)
        g_w[i] = wval(i);
    REQUIRE_OK(dpt_safetensors_save(w, path));
    dpt_safetensors_writer_destroy(w);
    REQUIRE(dpt_test_spill(script, py_script, strlen(py_script)) == 0);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, path);
    fflush(stdout);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_ckpt") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_roundtrip_bitwise),
        DPT_TEST(test_accessor_errors),
        DPT_TEST(test_writer_errors),
        DPT_TEST(test_independent_reader),
        DPT_TEST(test_truncated_every_length),
        DPT_TEST(test_flipped_bytes),
        DPT_TEST(test_not_found_and_not_a_file),
        DPT_TEST(test_bad_headers),
        DPT_TEST(test_foreign_files),
        DPT_TEST(test_header_mutations),
        DPT_TEST(test_arena_roundtrip_and_mismatch),
        DPT_TEST(test_large_file_mapped),
        DPT_TEST(test_atomic_save_failures),
        DPT_TEST(test_python_reader),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
