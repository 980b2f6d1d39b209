/*
 * dpt_metrics_load (dpt/train.h): result.jsonl read back into columns. A
 * real run's rows equal, bitwise, the results its events reported; nested
 * names, null, columns that appear late or go missing, blank and cut lines;
 * and every malformed input refused with the file, line and byte.
 */
#include "dpt_test.h"
#include "dpt_test_files.h"
#include "dpt_test_train.h"

#include <limits.h>
#include <math.h>
#include <sys/stat.h>

static char scratch[PATH_MAX / 4];

/* Every result a run reported, in order. */
typedef struct seen {
    size_t n;
    dpt_train_result_t r[16];
} seen_t;

static void on_event(void *user, const dpt_run_event_t *ev)
{
    seen_t *s = user;
    if (ev->kind == DPT_RUN_RESULT && s->n < 16)
        s->r[s->n++] = *ev->result;
}

static void test_round_trip(void)
{
    char dir[PATH_MAX], kv[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/run", scratch);
    snprintf(kv, sizeof kv, "output_dir=%s", dir);
    static const char *const base[] = {
        "job=ppo",
        "env=CartPole-v1",
        "num_envs_per_worker=2",
        "rollout_fragment_length=32",
        "num_sgd_iter=1",
        "sgd_minibatch_size=32",
        "total_timesteps=384",
        "eval_episodes=0",
    };
    const char *sets[] = {kv};
    dpt_config_t *c;
    REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof *base, sets, 1));
    static seen_t seen;
    memset(&seen, 0, sizeof seen);
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.on_event = on_event;
    o.user = &seen;
    REQUIRE_OK(dpt_train_run(c, &o, NULL));
    dpt_config_destroy(c);
    dpt_metrics_table_t *t;
    REQUIRE_OK(dpt_metrics_load(&t, dir));
    REQUIRE(t->rows == seen.n && seen.n == 6);
    CHECK(t->cols == seen.r[0].nmetrics);
    for (size_t i = 0; i < seen.n; i++)
        for (size_t k = 0; k < seen.r[i].nmetrics; k++) {
            const dpt_metric_t *m = &seen.r[i].metrics[k];
            const double *col = dpt_metrics_column(t, m->name);
            CHECK(col != NULL);
            if (!col)
                continue;
            if (isfinite(m->value) ? col[i] != m->value : !isnan(col[i])) {
                fprintf(stderr, "row %zu %s: %.17g read back as %.17g\n", i, m->name, m->value,
                        col[i]);
                CHECK(0);
            }
        }
    CHECK(strcmp(t->names[0], "training_iteration") == 0);
    CHECK(dpt_metrics_column(t, "info/learner/default_policy/kl") != NULL);
    CHECK(dpt_metrics_column(t, "info/learner") == NULL);
    dpt_metrics_destroy(t);
    /* The file itself, by path. */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    REQUIRE_OK(dpt_metrics_load(&t, path));
    CHECK(t->rows == 6);
    dpt_metrics_destroy(t);
}

/* A job whose metrics under one prefix are not contiguous (APPO adds its
 * info/ and timing_breakdown/ figures after the common ones): each nested
 * object appears once in a row, and every metric reads back. */
static void test_prefix_groups(void)
{
    char dir[PATH_MAX], kv[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/appo", scratch);
    snprintf(kv, sizeof kv, "output_dir=%s", dir);
    static const char *const base[] = {
        "job=appo",
        "env=CartPole-v1",
        "rollout_fragment_length=20",
        "train_batch_size=40",
        "total_timesteps=2000",
        "min_sample_timesteps_per_iteration=1000",
        "eval_episodes=0",
    };
    const char *sets[] = {kv};
    dpt_config_t *c;
    REQUIRE_OK(dpt_test_config(&c, base, sizeof base / sizeof *base, sets, 1));
    static seen_t seen;
    memset(&seen, 0, sizeof seen);
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.on_event = on_event;
    o.user = &seen;
    REQUIRE_OK(dpt_train_run(c, &o, NULL));
    dpt_config_destroy(c);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    char line[16384];
    size_t rows = 0;
    while (fgets(line, sizeof line, f)) {
        const char *first = strstr(line, "\"info\":{");
        const char *tb = strstr(line, "\"timing_breakdown\":{");
        CHECK(first && !strstr(first + 1, "\"info\":{"));
        CHECK(tb && !strstr(tb + 1, "\"timing_breakdown\":{"));
        rows++;
    }
    fclose(f);
    /* One or two iterations: the learner goes on between them and may
     * reach total_timesteps before the second starts. */
    REQUIRE(rows == seen.n && rows >= 1 && rows <= 2);
    dpt_metrics_table_t *t;
    REQUIRE_OK(dpt_metrics_load(&t, dir));
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < seen.r[i].nmetrics; k++) {
            const dpt_metric_t *m = &seen.r[i].metrics[k];
            const double *col = dpt_metrics_column(t, m->name);
            CHECK(col && (isfinite(m->value) ? col[i] == m->value : isnan(col[i])));
        }
    CHECK(dpt_metrics_column(t, "info/learner_queue/size_mean") != NULL);
    dpt_metrics_destroy(t);
}

static void test_shapes(void)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/shapes.jsonl", scratch);
    static const char text[] = "{\"a\":1,\"n\":{\"x\":-2.5e-3,\"y\":null}}\n"
                               "  \n"
                               "{ \"a\" : 2 , \"n\" : { \"x\" : 4 } , \"late\" : 7 }\r\n"
                               "{\"a\":3,\"q\\\"\\/\\\\\":1,\"e\":{}}\n"
                               "{\"a\":4,\"cut\":1";
    REQUIRE(dpt_test_spill(path, text, sizeof text - 1) == 0);
    dpt_metrics_table_t *t;
    REQUIRE_OK(dpt_metrics_load(&t, path));
    REQUIRE(t->rows == 3 && t->cols == 5);
    static const char *const names[] = {"a", "n/x", "n/y", "late", "q\"/\\"};
    for (size_t c = 0; c < 5; c++)
        CHECK(strcmp(t->names[c], names[c]) == 0);
    const double *a = dpt_metrics_column(t, "a"), *x = dpt_metrics_column(t, "n/x");
    const double *y = dpt_metrics_column(t, "n/y"), *late = dpt_metrics_column(t, "late");
    REQUIRE(a && x && y && late);
    CHECK(a[0] == 1 && a[1] == 2 && a[2] == 3);
    CHECK(x[0] == -2.5e-3 && x[1] == 4 && isnan(x[2]));
    CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]));
    CHECK(isnan(late[0]) && late[1] == 7 && isnan(late[2]));
    CHECK(dpt_metrics_column(t, "cut") == NULL);
    dpt_metrics_destroy(t);
    /* Empty: no rows, no columns. Many rows: the columns grow. */
    REQUIRE(dpt_test_spill(path, "", 0) == 0);
    REQUIRE_OK(dpt_metrics_load(&t, path));
    CHECK(t->rows == 0 && t->cols == 0);
    dpt_metrics_destroy(t);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    for (int i = 0; i < 1000; i++)
        fprintf(f, "{\"i\":%d,\"c%d\":%d}\n", i, i % 40, i);
    fclose(f);
    REQUIRE_OK(dpt_metrics_load(&t, path));
    CHECK(t->rows == 1000 && t->cols == 41);
    const double *c39 = dpt_metrics_column(t, "c39");
    CHECK(c39 && c39[999] == 999 && isnan(c39[998]) && t->values[0][500] == 500);
    dpt_metrics_destroy(t);
    dpt_metrics_destroy(NULL);
    CHECK(dpt_metrics_column(NULL, "a") == NULL);
}

static void test_errors(void)
{
    char path[PATH_MAX + 16], dir[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/bad.jsonl", scratch);
    dpt_metrics_table_t *t = (dpt_metrics_table_t *)&t;
    CHECK_ERR(dpt_metrics_load(&t, "no/such/file.jsonl"), DPT_ENOENT, "no/such/file.jsonl");
    CHECK(t == NULL);
    snprintf(dir, sizeof dir, "%s/empty_dir", scratch);
    REQUIRE(mkdir(dir, 0777) == 0);
    CHECK_ERR(dpt_metrics_load(&t, dir), DPT_ENOENT, "has no result.jsonl");
    char deep[256] = "", longname[700];
    for (int i = 0; i < 40; i++)
        strcat(deep, "{\"a\":");
    strcat(deep, "1\n");
    snprintf(longname, sizeof longname, "{\"%0600d\":1}\n", 0);
    const struct {
        const char *text, *msg;
    } cases[] = {
        {"{\"a\":}\n", ":1: byte 6: expected a number, null or an object"},
        {"{\"a\":1\n", "expected ',' or '}'"},
        {"{\"a\":1} x\n", "text after the object"},
        {"[1]\n", "expected '{'"},
        {"{\"a\":\"s\"}\n", "expected a number, null or an object"},
        {"{\"a\":true}\n", "expected a number, null or an object"},
        {"{\"a\":-inf}\n", "bad number"},
        {"{\"a\":0x10}\n", "bad number"},
        {"{\"a\":1e999}\n", "bad number"},
        {"{\"a\\u0041\":1}\n", "unsupported escape"},
        {"{\"ab\n", "unterminated string"},
        {"{a:1}\n", "expected a quoted name"},
        {"{\"a\" 1}\n", "expected ':'"},
        {"{\"a\":1}\n{\"b\":2,}\n", ":2: byte 8: expected a quoted name"},
        {deep, "nested deeper than 32"},
        {longname, "longer than 511 bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE(dpt_test_spill(path, cases[i].text, strlen(cases[i].text)) == 0);
        CHECK_ERR(dpt_metrics_load(&t, path), DPT_EFORMAT, cases[i].msg);
        CHECK(t == NULL);
    }
    REQUIRE(dpt_test_spill(path, "{\"a\":1}\n{\"b\0\":2}\n", 17) == 0);
    CHECK_ERR(dpt_metrics_load(&t, path), DPT_EFORMAT, "bad.jsonl:2: byte 4: NUL byte");
    /* A name nested past 511 bytes. */
    char nested[1200] = "";
    for (int i = 0; i < 30; i++)
        strcat(nested, "{\"abcdefghijklmnopqrst\":");
    strcat(nested, "1\n");
    REQUIRE(dpt_test_spill(path, nested, strlen(nested)) == 0);
    CHECK_ERR(dpt_metrics_load(&t, path), DPT_EFORMAT, "longer than 511 bytes");
}

int main(void)
{
    if (dpt_test_mkdtemp(scratch, sizeof scratch, "dpt_metrics") != 0)
        return 1;
    static const dpt_test_case_t tests[] = {
        {"round_trip", test_round_trip},
        {"prefix_groups", test_prefix_groups},
        {"shapes", test_shapes},
        {"errors", test_errors},
    };
    int rc = dpt_test_main(tests, sizeof tests / sizeof *tests);
    if (rc == 0)
        dpt_test_rm_tree(scratch);
    return rc;
}
