/* Dataset readers: IDX (plain and gzipped) and CSV on small files written
 * here, every corruption the readers must refuse, the MNIST directory
 * lookup, and the real Fashion-MNIST test set when it is installed. */
#include "dpt_test.h"
#include "dpt_test_files.h"

#include "dpt/dataset.h"
#include "dpt_config.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#if DPT_HAVE_ZLIB
#include <zlib.h>
#endif

static char tmpdir[256];

static void path_in(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static int spill_str(const char *path, const char *s)
{
    return dpt_test_spill(path, s, strlen(s));
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static unsigned char pixel(size_t i, size_t j)
{
    return (unsigned char)((i * 7 + j * 13) % 256);
}

/* An IDX buffer: magic, dims, then bytes from `fill` (NULL: pixel()). */
static unsigned char *make_idx(uint32_t magic, int ndim, const uint32_t *dims, size_t *len,
                               const unsigned char *fill)
{
    size_t total = 1;
    for (int d = 0; d < ndim; d++)
        total *= dims[d];
    size_t head = 4 + 4 * (size_t)ndim;
    unsigned char *p = malloc(head + total);
    put_be32(p, magic);
    for (int d = 0; d < ndim; d++)
        put_be32(p + 4 + 4 * d, dims[d]);
    size_t per = ndim > 0 ? total / dims[0] : 0;
    for (size_t k = 0; k < total; k++)
        p[head + k] = fill ? fill[k] : pixel(k / per, k % per);
    *len = head + total;
    return p;
}

/* 5 images of 3x2 and their labels i % 3, as plain files. */
static void write_small_idx(const char *images, const char *labels)
{
    uint32_t di[3] = {5, 3, 2}, dl[1] = {5};
    unsigned char lab[5] = {0, 1, 2, 0, 1};
    size_t n;
    unsigned char *p = make_idx(0x803, 3, di, &n, NULL);
    CHECK(dpt_test_spill(images, p, n) == 0);
    free(p);
    p = make_idx(0x801, 1, dl, &n, lab);
    CHECK(dpt_test_spill(labels, p, n) == 0);
    free(p);
}

#if DPT_HAVE_ZLIB
static int spill_gz(const char *path, const void *p, size_t n)
{
    gzFile gz = gzopen(path, "wb");
    if (!gz)
        return -1;
    int w = gzwrite(gz, p, (unsigned)n);
    return gzclose(gz) == Z_OK && (size_t)w == n ? 0 : -1;
}

static int gzip_file(const char *src, const char *dst)
{
    FILE *f = fopen(src, "rb");
    if (!f)
        return -1;
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return spill_gz(dst, buf, n);
}
#endif

static void check_small(const dpt_dataset_t *ds, int num_classes)
{
    CHECK(ds->rows == 5 && ds->dim == 6 && ds->height == 3 && ds->width == 2);
    CHECK(ds->num_classes == num_classes);
    REQUIRE(ds->x && ds->labels);
    for (size_t i = 0; i < 5; i++) {
        CHECK(ds->labels[i] == (int32_t)(i % 3));
        for (size_t j = 0; j < 6; j++)
            CHECK(ds->x[i * 6 + j] == (float)pixel(i, j) / 255.0f);
    }
}

/* ---- IDX ------------------------------------------------------------------ */

static void test_idx_plain(void)
{
    char im[512], lb[512];
    path_in(im, sizeof im, "img");
    path_in(lb, sizeof lb, "lab");
    write_small_idx(im, lb);
    dpt_dataset_t ds = {0};
    REQUIRE_OK(dpt_dataset_load_idx(&ds, im, lb, 0));
    check_small(&ds, 3);
    dpt_dataset_deinit(&ds);
    CHECK(ds.x == NULL && ds.rows == 0);
    dpt_dataset_deinit(&ds); /* twice is fine */
    dpt_dataset_deinit(NULL);
    REQUIRE_OK(dpt_dataset_load_idx(&ds, im, lb, 10));
    check_small(&ds, 10);
    dpt_dataset_deinit(&ds);

    /* A 2-D IDX file ([n, features]) also works; no image shape then. */
    uint32_t d2[2] = {5, 6};
    size_t n;
    unsigned char *p = make_idx(0x802, 2, d2, &n, NULL);
    CHECK(dpt_test_spill(im, p, n) == 0);
    free(p);
    REQUIRE_OK(dpt_dataset_load_idx(&ds, im, lb, 0));
    CHECK(ds.rows == 5 && ds.dim == 6 && ds.height == 0 && ds.width == 0);
    CHECK(ds.x[7] == (float)pixel(1, 1) / 255.0f);
    dpt_dataset_deinit(&ds);
}

static void test_idx_gzip(void)
{
    char im[512], lb[512], imz[512], lbz[512];
    path_in(im, sizeof im, "gimg");
    path_in(lb, sizeof lb, "glab");
    path_in(imz, sizeof imz, "gimg.gz");
    path_in(lbz, sizeof lbz, "glab.gz");
    write_small_idx(im, lb);
    dpt_dataset_t ds = {0};
#if DPT_HAVE_ZLIB
    REQUIRE(gzip_file(im, imz) == 0 && gzip_file(lb, lbz) == 0);
    REQUIRE_OK(dpt_dataset_load_idx(&ds, imz, lbz, 0));
    check_small(&ds, 3);
    dpt_dataset_deinit(&ds);
    REQUIRE_OK(dpt_dataset_load_idx(&ds, imz, lb, 0)); /* mixed */
    check_small(&ds, 3);
    dpt_dataset_deinit(&ds);

    /* Truncated gzip stream, and a corrupted one. */
    FILE *f = fopen(imz, "rb");
    REQUIRE(f);
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char bad[512];
    path_in(bad, sizeof bad, "bad.gz");
    for (size_t cut = 3; cut < n; cut += 3) {
        REQUIRE(dpt_test_spill(bad, buf, cut) == 0);
        CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lbz, 0), DPT_EFORMAT, bad);
        CHECK(ds.x == NULL);
    }
    REQUIRE(dpt_test_spill(bad, buf, n - 10) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lbz, 0), DPT_EFORMAT, "truncated");
    buf[n - 6] ^= 0x55; /* inside the CRC-32 / length trailer */
    REQUIRE(dpt_test_spill(bad, buf, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lbz, 0), DPT_EFORMAT, "corrupted gzip data");
    /* A gzipped file whose content has the wrong size says so. */
    uint32_t di[3] = {6, 3, 2};
    size_t len;
    unsigned char *p = make_idx(0x803, 3, di, &len, NULL);
    REQUIRE(spill_gz(bad, p, len - 1) == 0);
    free(p);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lbz, 0), DPT_EFORMAT,
              "decompresses to 51 bytes: truncated");
#else
    /* Without zlib a gzipped file is refused with a message that says why. */
    static const unsigned char gz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    REQUIRE(dpt_test_spill(imz, gz, sizeof gz) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, imz, lb, 0), DPT_ENOTSUP, "no zlib");
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, imz, 0), DPT_ENOTSUP, imz);
    printf("note: this build has no zlib; only the refusal of gzipped files is tested\n");
#endif
}

static void test_idx_errors(void)
{
    char im[512], lb[512], bad[512], missing[512];
    path_in(im, sizeof im, "eimg");
    path_in(lb, sizeof lb, "elab");
    path_in(bad, sizeof bad, "ebad");
    path_in(missing, sizeof missing, "missing-idx");
    write_small_idx(im, lb);
    dpt_dataset_t ds;
    memset(&ds, 0xab, sizeof ds); /* load must not trust the old contents */

    CHECK_ERR(dpt_dataset_load_idx(&ds, missing, lb, 0), DPT_ENOENT, missing);
    CHECK(ds.x == NULL && ds.labels == NULL && ds.rows == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, missing, 0), DPT_ENOENT, "no such file");
    CHECK_ERR(dpt_dataset_load_idx(&ds, tmpdir, lb, 0), DPT_EINVAL, "not a regular file");
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, lb, -1), DPT_EINVAL, "negative");

    /* Swapped files: each has the wrong number of dimensions. */
    CHECK_ERR(dpt_dataset_load_idx(&ds, lb, im, 0), DPT_EFORMAT,
              "magic number 0x00000801 gives 1 dimensions");
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, im, 0), DPT_EFORMAT,
              "magic number 0x00000803 gives 3 dimensions");

    uint32_t di[3] = {5, 3, 2}, dl[1] = {5};
    size_t n;
    unsigned char *p = make_idx(0x803, 3, di, &n, NULL);
    /* Bad magic numbers. */
    put_be32(p, 0x12345678);
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "bad magic number 0x12345678");
    put_be32(p, 0x00000700 | 3);
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "bad magic number 0x00000703");
    put_be32(p, 0x00000800);
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, bad);
    put_be32(p, 0x00000d03); /* float elements */
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_ENOTSUP, "element type 0x0d");
    put_be32(p, 0x803);
    /* Header sizes against the file length. */
    REQUIRE(dpt_test_spill(bad, p, n - 1) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT,
              "the header says 5 images of 3x2 (46 bytes), the file has 45 bytes: truncated");
    unsigned char *q = malloc(n + 1);
    memcpy(q, p, n);
    q[n] = 0;
    REQUIRE(dpt_test_spill(bad, q, n + 1) == 0);
    free(q);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "extra data at the end");
    REQUIRE(dpt_test_spill(bad, p, 3) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "too few for an IDX header");
    REQUIRE(dpt_test_spill(bad, p, 9) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT,
              "too few for the 3 dimension sizes");
    REQUIRE(dpt_test_spill(bad, p, 0) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "has 0 bytes");
    put_be32(p + 8, 0);
    REQUIRE(dpt_test_spill(bad, p, 16) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, bad, lb, 0), DPT_EFORMAT, "dimension 1 of the header is 0");
    free(p);

    /* Labels: truncated, count mismatch, out of range. */
    unsigned char lab[5] = {0, 1, 7, 0, 1};
    p = make_idx(0x801, 1, dl, &n, lab);
    REQUIRE(dpt_test_spill(bad, p, n - 1) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, bad, 0), DPT_EFORMAT,
              "the header says 5 labels (13 bytes), the file has 12 bytes");
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, bad, 5), DPT_EFORMAT,
              "sample 2: label 7 is out of range for 5 classes");
    CHECK_OK(dpt_dataset_load_idx(&ds, im, bad, 8));
    CHECK(ds.num_classes == 8 && ds.labels[2] == 7);
    dpt_dataset_deinit(&ds);
    CHECK_OK(dpt_dataset_load_idx(&ds, im, bad, 0));
    CHECK(ds.num_classes == 8);
    dpt_dataset_deinit(&ds);
    free(p);
    uint32_t d4[1] = {4};
    p = make_idx(0x801, 1, d4, &n, lab);
    REQUIRE(dpt_test_spill(bad, p, n) == 0);
    free(p);
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, bad, 0), DPT_EFORMAT, "has 5 images but");
    CHECK_ERR(dpt_dataset_load_idx(&ds, im, bad, 0), DPT_EFORMAT, "has 4 labels");
    CHECK(ds.x == NULL && ds.labels == NULL);
}

/* ---- CSV ------------------------------------------------------------------ */

/* Regression sets: target columns by name, in the order named; the other
 * columns are the features; each way of naming them wrong. */
static void test_csv_targets(void)
{
    char path[512];
    path_in(path, sizeof path, "reg.csv");
    REQUIRE(spill_str(path, "a,\"y\",b,z\n1,2.5,3,-4\n5,6,7,8.25\n") == 0);
    dpt_csv_options_t opt = {0};
    opt.header = 1;
    opt.label_name = "ignored";
    opt.target_names = " z ,y";
    dpt_dataset_t ds;
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &opt));
    CHECK(ds.rows == 2 && ds.dim == 2 && ds.target_dim == 2);
    CHECK(ds.labels == NULL && ds.num_classes == 0);
    static const float x[4] = {1, 3, 5, 7}, y[4] = {-4.0f, 2.5f, 8.25f, 6};
    for (int i = 0; i < 4; i++)
        CHECK(ds.x[i] == x[i] && ds.targets[i] == y[i]);
    dpt_dataset_deinit(&ds);
    CHECK(ds.targets == NULL && ds.target_dim == 0);
    /* Many rows: the target array grows with the features. */
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fprintf(f, "x,t\n");
    for (int i = 0; i < 3000; i++)
        fprintf(f, "%d,%d.5\n", i, i);
    fclose(f);
    opt.target_names = "t";
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &opt));
    CHECK(ds.rows == 3000 && ds.dim == 1 && ds.x[2999] == 2999.0f && ds.targets[2999] == 2999.5f);
    dpt_dataset_deinit(&ds);
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){1, NULL, 0, 0, 0, "w"}),
              DPT_EINVAL, "has no target column \"w\"");
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){1, NULL, 0, 0, 0, "t,t"}),
              DPT_EINVAL, "target column \"t\" is named twice");
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){1, NULL, 0, 0, 0, "x,t"}),
              DPT_EFORMAT, "no feature column is left");
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){1, NULL, 0, 0, 0, ""}),
              DPT_EINVAL, "has no target column \"\"");
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){0, NULL, 0, 0, 0, "t"}),
              DPT_EINVAL, "no header line");
    REQUIRE(spill_str(path, "x,t\n1,abc\n") == 0);
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, &(dpt_csv_options_t){1, NULL, 0, 0, 0, "t"}),
              DPT_EFORMAT, "line 2, column 2: \"abc\" is not a number");
    CHECK(ds.x == NULL && ds.targets == NULL);
}

static void test_csv_valid(void)
{
    char path[512];
    path_in(path, sizeof path, "ok.csv");
    REQUIRE(spill_str(path, "# a comment\r\n"
                            "f1, f2 ,\"label\",f3\r\n"
                            "\n"
                            "  # indented comment\n"
                            "1.5,-2,3,1e-3\r\n"
                            "   \t\n"
                            " 0 , 4.25 , 0 , -7\n"
                            "2,2,1,2") == 0); /* no final newline */
    dpt_csv_options_t opt = {0};
    opt.header = 1;
    opt.label_name = "label";
    dpt_dataset_t ds;
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &opt));
    CHECK(ds.rows == 3 && ds.dim == 3 && ds.num_classes == 4);
    CHECK(ds.height == 0 && ds.width == 0);
    static const float want[9] = {1.5f, -2.0f, 1e-3f, 0.0f, 4.25f, -7.0f, 2, 2, 2};
    for (int i = 0; i < 9; i++)
        CHECK(ds.x[i] == want[i]);
    CHECK(ds.labels[0] == 3 && ds.labels[1] == 0 && ds.labels[2] == 1);
    dpt_dataset_deinit(&ds);

    /* The same column by index, and by index from the end. */
    opt.label_name = NULL;
    opt.label_index = 2;
    opt.num_classes = 10;
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &opt));
    CHECK(ds.rows == 3 && ds.num_classes == 10 && ds.labels[0] == 3);
    dpt_dataset_deinit(&ds);
    opt.label_index = -2;
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &opt));
    CHECK(ds.labels[0] == 3 && ds.x[2] == 1e-3f);
    dpt_dataset_deinit(&ds);

    /* Defaults (NULL options): no header, label in the first column. */
    REQUIRE(spill_str(path, "2,0.5,0.25\n0,1,2\n") == 0);
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, NULL));
    CHECK(ds.rows == 2 && ds.dim == 2 && ds.num_classes == 3);
    CHECK(ds.labels[0] == 2 && ds.x[0] == 0.5f && ds.x[3] == 2.0f);
    dpt_dataset_deinit(&ds);

    /* Another delimiter, and many rows (the arrays grow). */
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    for (int i = 0; i < 5000; i++)
        fprintf(f, "%d;%d;%d\n", i, i % 7, -i);
    fclose(f);
    dpt_csv_options_t semi = {0};
    semi.delimiter = ';';
    semi.label_index = 1;
    REQUIRE_OK(dpt_dataset_load_csv(&ds, path, &semi));
    CHECK(ds.rows == 5000 && ds.dim == 2 && ds.num_classes == 7);
    CHECK(ds.x[2 * 4999] == 4999.0f && ds.x[2 * 4999 + 1] == -4999.0f && ds.labels[4999] == 1);
    dpt_dataset_deinit(&ds);

#if DPT_HAVE_ZLIB
    char gz[512];
    path_in(gz, sizeof gz, "ok.csv.gz");
    REQUIRE(spill_gz(gz, "1,2,3\n0,5,6\n", 12) == 0);
    REQUIRE_OK(dpt_dataset_load_csv(&ds, gz, NULL));
    CHECK(ds.rows == 2 && ds.labels[0] == 1 && ds.x[3] == 6.0f);
    dpt_dataset_deinit(&ds);
#endif
}

typedef struct csv_case {
    const char *text;
    int header;
    const char *label_name;
    long label_index;
    int num_classes;
    int code;
    const char *needle;
} csv_case_t;

static void test_csv_errors(void)
{
    static const csv_case_t cases[] = {
        {"0,1,2\n1,abc,3\n", 0, NULL, 0, 0, DPT_EFORMAT,
         "line 2, column 2: \"abc\" is not a number"},
        {"0,1,2\n1,2x,3\n", 0, NULL, 0, 0, DPT_EFORMAT, "\"2x\" is not a number"},
        {"0,,2\n", 0, NULL, 0, 0, DPT_EFORMAT, "line 1, column 2: empty cell"},
        {"0,1,2\n1,2\n", 0, NULL, 0, 0, DPT_EFORMAT, "line 2 has 2 cells, expected 3 (as line 1)"},
        {"# c\n0,1,2\n\n1,2,3,4\n", 0, NULL, 0, 0, DPT_EFORMAT,
         "line 4 has 4 cells, expected 3 (as line 2)"},
        {"a,b,c\n0,1\n", 1, NULL, 0, 0, DPT_EFORMAT, "line 2 has 2 cells, expected 3 (as line 1)"},
        {"2.5,1,2\n", 0, NULL, 0, 0, DPT_EFORMAT,
         "line 1, column 1: label \"2.5\" is not an integer"},
        {"-1,1,2\n", 0, NULL, 0, 0, DPT_EFORMAT, "line 1, column 1: label -1 is negative"},
        {"300,1,2\n", 0, NULL, 0, 0, DPT_EFORMAT, "label 300 is over 255"},
        {"1,2,3\n", 0, NULL, 0, 0, DPT_OK, ""},
        {"1,2,3\n", 0, NULL, 0, 1, DPT_EFORMAT, "label 1 is out of range for 1 classes"},
        {"1,2,3\n", 0, NULL, -1, 3, DPT_EFORMAT,
         "line 1, column 3: label 3 is out of range for 3 classes"},
        {"0,inf,1\n", 0, NULL, 0, 0, DPT_EFORMAT, "\"inf\" is not a finite float"},
        {"0,nan,1\n", 0, NULL, 0, 0, DPT_EFORMAT, "\"nan\" is not a finite float"},
        {"0,1e40,1\n", 0, NULL, 0, 0, DPT_EFORMAT, "\"1e40\" is not a finite float"},
        {"99999999999999999999,1\n", 0, NULL, 0, 0, DPT_EFORMAT, "is not an integer"},
        {"a,b\n1,2\n", 1, "label", 0, 0, DPT_EINVAL, "has no column \"label\""},
        {"1,2\n", 0, "label", 0, 0, DPT_EINVAL, "no header line"},
        {"1,2,3\n", 0, NULL, 3, 0, DPT_EINVAL,
         "label column 3 is out of range: line 1 has 3 columns"},
        {"1,2,3\n", 0, NULL, -4, 0, DPT_EINVAL, "label column -4 is out of range"},
        {"1\n2\n", 0, NULL, 0, 0, DPT_EFORMAT, "line 1 has 1 column"},
        {"a,b\n# only a header\n", 1, NULL, 0, 0, DPT_EFORMAT, "no data lines"},
        {"", 0, NULL, 0, 0, DPT_EFORMAT, "no data lines"},
        {"\n\n# x\n", 0, NULL, 0, 0, DPT_EFORMAT, "no data lines"},
        {"1,2\n", 0, NULL, 0, -2, DPT_EINVAL, "num_classes -2"},
    };
    char path[512];
    path_in(path, sizeof path, "bad.csv");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const csv_case_t *c = &cases[i];
        REQUIRE(spill_str(path, c->text) == 0);
        dpt_csv_options_t opt = {0};
        opt.header = c->header;
        opt.label_name = c->label_name;
        opt.label_index = c->label_index;
        opt.num_classes = c->num_classes;
        dpt_dataset_t ds;
        dpt_error_clear();
        int rc = dpt_dataset_load_csv(&ds, path, &opt);
        int ok =
            rc == c->code &&
            (rc == 0 || (strstr(dpt_last_error(), path) && strstr(dpt_last_error(), c->needle)));
        if (!ok)
            fprintf(stderr, "csv case %zu: got %s \"%s\", expected %s with \"%s\"\n", i,
                    dpt_status_name(rc), dpt_last_error(), dpt_status_name(c->code), c->needle);
        CHECK(ok);
        if (rc != 0)
            CHECK(ds.x == NULL && ds.labels == NULL && ds.rows == 0);
        dpt_dataset_deinit(&ds);
    }
    /* A zero byte, a missing file, a directory. */
    dpt_dataset_t ds;
    REQUIRE(dpt_test_spill(path, "1,2\n\0", 5) == 0);
    CHECK_ERR(dpt_dataset_load_csv(&ds, path, NULL), DPT_EFORMAT, "zero byte");
    char missing[512];
    path_in(missing, sizeof missing, "missing.csv");
    CHECK_ERR(dpt_dataset_load_csv(&ds, missing, NULL), DPT_ENOENT, missing);
    CHECK_ERR(dpt_dataset_load_csv(&ds, tmpdir, NULL), DPT_EINVAL, "not a regular file");
    char through[600];
    snprintf(through, sizeof through, "%s/x.csv", path);
    CHECK_ERR(dpt_dataset_load_csv(&ds, through, NULL), DPT_ENOENT, "cannot open: Not a directory");
}

/* ---- MNIST directories ---------------------------------------------------- */

static void test_find_mnist(void)
{
    char dir[512], p[700];
    path_in(dir, sizeof dir, "mnist");
    REQUIRE(mkdir(dir, 0755) == 0);
    static const char *const files[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    dpt_mnist_files_t mf;
    CHECK_ERR(dpt_dataset_find_mnist(&mf, dir), DPT_ENOENT,
              "train-images-idx3-ubyte[.gz] is missing");
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        REQUIRE(spill_str(p, "x") == 0);
    }
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir);
    unlink(p);
    CHECK_ERR(dpt_dataset_find_mnist(&mf, dir), DPT_ENOENT,
              "t10k-labels-idx1-ubyte[.gz] is missing");
    CHECK_ERR(dpt_dataset_find_mnist(&mf, dir), DPT_ENOENT, dir);
    REQUIRE(spill_str(p, "x") == 0);
#if DPT_HAVE_ZLIB
    REQUIRE_OK(dpt_dataset_find_mnist(&mf, dir));
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    CHECK(strcmp(mf.train_images, p) == 0);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir);
    CHECK(strcmp(mf.test_labels, p) == 0);
    /* Plain files win over gzipped ones. */
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    REQUIRE(spill_str(p, "x") == 0);
    REQUIRE_OK(dpt_dataset_find_mnist(&mf, dir));
    CHECK(strcmp(mf.test_labels, p) == 0);
#else
    CHECK_ERR(dpt_dataset_find_mnist(&mf, dir), DPT_ENOTSUP, "no zlib");
#endif
    char nodir[512];
    path_in(nodir, sizeof nodir, "no-such-dir");
    CHECK_ERR(dpt_dataset_find_mnist(&mf, nodir), DPT_ENOENT, "does not exist");
    dpt_dataset_t ds;
    CHECK_ERR(dpt_dataset_load_mnist(&ds, nodir, DPT_SPLIT_TEST), DPT_ENOENT, nodir);

    /* A directory whose file paths would not fit in dpt_mnist_files_t. */
    char deep[4200];
    size_t len = (size_t)snprintf(deep, sizeof deep, "%s", tmpdir);
    while (len + 201 < 4080) {
        deep[len++] = '/';
        memset(deep + len, 'd', 200);
        len += 200;
        deep[len] = '\0';
        REQUIRE(mkdir(deep, 0755) == 0);
    }
    deep[len++] = '/'; /* a last component up to 4080 bytes */
    memset(deep + len, 'e', 4080 - len);
    len = 4080;
    deep[len] = '\0';
    REQUIRE(mkdir(deep, 0755) == 0);
    CHECK_ERR(dpt_dataset_find_mnist(&mf, deep), DPT_EINVAL, "path too long");
    /* The files are placeholders: loading them fails with a format error. */
#if DPT_HAVE_ZLIB
    CHECK_ERR(dpt_dataset_load_mnist(&ds, dir, DPT_SPLIT_TRAIN), DPT_EFORMAT,
              "train-images-idx3-ubyte");
#endif
}

/* The real Fashion-MNIST files (Debian's dataset-fashion-mnist). */
static void test_fashion_mnist_installed(void)
{
    dpt_mnist_files_t mf;
    int rc = dpt_dataset_find_mnist(&mf, NULL);
    if (rc == DPT_ENOENT || rc == DPT_ENOTSUP) {
        printf("skipped: Fashion-MNIST not usable here (%s)\n", dpt_last_error());
        return;
    }
    REQUIRE_OK(rc);
    dpt_dataset_t ds;
    REQUIRE_OK(dpt_dataset_load_mnist(&ds, NULL, DPT_SPLIT_TEST));
    CHECK(ds.rows == 10000 && ds.dim == 784 && ds.height == 28 && ds.width == 28);
    CHECK(ds.num_classes == 10);
    int counts[10] = {0};
    for (size_t i = 0; i < ds.rows; i++) {
        CHECK(ds.labels[i] >= 0 && ds.labels[i] < 10);
        if (ds.labels[i] >= 0 && ds.labels[i] < 10)
            counts[ds.labels[i]]++;
    }
    for (int c = 0; c < 10; c++)
        CHECK(counts[c] == 1000); /* the test set is balanced */
    double sum = 0;
    float lo = 1, hi = 0;
    for (size_t i = 0; i < ds.rows * ds.dim; i++) {
        sum += (double)ds.x[i];
        lo = ds.x[i] < lo ? ds.x[i] : lo;
        hi = ds.x[i] > hi ? ds.x[i] : hi;
    }
    double mean = sum / (double)(ds.rows * ds.dim);
    CHECK(lo == 0.0f && hi == 1.0f);
    CHECK(mean > 0.28 && mean < 0.29); /* Fashion-MNIST test mean is about 0.286 */
    printf("Fashion-MNIST test set: %zu images of %zux%zu, mean pixel %.4f\n", ds.rows, ds.height,
           ds.width, mean);
    dpt_dataset_deinit(&ds);
}

int main(void)
{
    if (dpt_test_mkdtemp(tmpdir, sizeof tmpdir, "dpt_data") != 0)
        return 1;
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_idx_plain),  DPT_TEST(test_idx_gzip),
        DPT_TEST(test_idx_errors), DPT_TEST(test_csv_valid),
        DPT_TEST(test_csv_errors), DPT_TEST(test_csv_targets),
        DPT_TEST(test_find_mnist), DPT_TEST(test_fashion_mnist_installed),
    };
    int rc = DPT_TEST_RUN(cases);
    dpt_test_rm_tree(tmpdir);
    return rc;
}
