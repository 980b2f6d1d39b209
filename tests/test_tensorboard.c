/*
 * TensorBoard event files (src/core/tfrecord.c, src/train/tb.c): CRC-32C
 * against its check value and a bit-by-bit reference, the TFRecord framing
 * and the Event encoding byte for byte, the library's record reader on cut
 * and corrupt files, and the events of real runs (PPO and supervised,
 * through dpt_train_run) read back with the tests' own reader
 * (dpt_test_tfevents.h) and compared with result.jsonl: one Event per row,
 * its step, every finite metric as a scalar with the row's value. Then a
 * resume after a kill (no step twice, a cut record dropped),
 * tensorboard_dir (a directory of its own, relative paths, off, per seed)
 * and the errors.
 */
#include "core/tfrecord.h"
#include "dpt_test.h"
#include "dpt_test_rundir.h"
#include "dpt_test_tfevents.h"
#include "dpt_test_train.h"

#include <limits.h>
#include <math.h>
#include <sys/stat.h>

static char scratch[PATH_MAX / 4];

/* ---- CRC-32C and framing --------------------------------------------------------- */

static void test_crc32c(void)
{
    CHECK(dpt__crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(dpt_test_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(dpt__crc32c(0, "", 0) == 0);
    /* 32 zero bytes, and 32 bytes 0xff (RFC 3720's examples). */
    unsigned char z[32], ff[32];
    memset(z, 0, sizeof z);
    memset(ff, 0xff, sizeof ff);
    CHECK(dpt__crc32c(0, z, sizeof z) == 0x8A9136AAu);
    CHECK(dpt__crc32c(0, ff, sizeof ff) == 0x62A8AB43u);
    /* The table against the bit-by-bit reference, whole and in pieces. */
    unsigned char buf[1031];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof buf; i++) {
        s = s * 1103515245u + 12345u;
        buf[i] = (unsigned char)(s >> 16);
    }
    for (size_t n = 0; n <= sizeof buf; n += n < 20 ? 1 : 97) {
        uint32_t whole = dpt__crc32c(0, buf, n);
        CHECK(whole == dpt_test_crc32c(buf, n));
        CHECK(dpt__crc32c(dpt__crc32c(0, buf, n / 3), buf + n / 3, n - n / 3) == whole);
    }
    /* The mask: rotate right by 15, add the constant; and back. */
    CHECK(dpt__crc32c_mask(0) == 0xa282ead8u);
    CHECK(dpt__crc32c_mask(0xE3069283u) == dpt_test_crc_mask(0xE3069283u));
    CHECK(dpt__crc32c_mask(1) == (1u << 17) + 0xa282ead8u);
    for (uint32_t c = 1; c < 0xf0000000u; c = c * 7 + 3)
        CHECK(dpt__crc32c_unmask(dpt__crc32c_mask(c)) == c);
}

/* The bytes of a file-version Event at wall time 1.5, step 0, and of a
 * scalar Event, written out by hand from the protobuf rules. */
static void test_encoding_golden(void)
{
    dpt__tfbuf_t out = {0}, sum = {0};
    REQUIRE_OK(dpt__tfevent_append(&out, 1.5, 0, "brain.Event:2", NULL));
    static const unsigned char version[] = {
        0x09, 0,    0,   0,   0,   0,   0,   0xf8, 0x3f, /* wall_time = 1.5 (double) */
        0x10, 0x00,                                      /* step = 0 */
        0x1a, 13,   'b', 'r', 'a', 'i', 'n', '.',  'E',  'v', 'e', 'n', 't', ':', '2'};
    REQUIRE(out.len == 12 + sizeof version + 4);
    CHECK(dpt_test_le(out.data, 8) == sizeof version);
    CHECK(dpt_test_le(out.data + 8, 4) == dpt_test_crc_mask(dpt_test_crc32c(out.data, 8)));
    CHECK(memcmp(out.data + 12, version, sizeof version) == 0);
    CHECK(dpt_test_le(out.data + 12 + sizeof version, 4) ==
          dpt_test_crc_mask(dpt_test_crc32c(version, sizeof version)));

    out.len = 0;
    REQUIRE_OK(dpt__tfevent_add_scalar(&sum, "a/b", 0.5f));
    REQUIRE_OK(dpt__tfevent_append(&out, 0.0, 300, NULL, &sum));
    static const unsigned char scalar[] = {
        0x09, 0,    0,    0,   0,   0, 0, 0, 0, /* wall_time = 0 */
        0x10, 0xac, 0x02,                       /* step = 300 (varint) */
        0x2a, 12,                               /* summary, 12 bytes */
        0x0a, 10,                               /*   value, 10 bytes */
        0x0a, 3,    'a',  '/', 'b',             /*     tag */
        0x15, 0,    0,    0,   0x3f};           /*     simple_value = 0.5f */
    REQUIRE(out.len == 12 + sizeof scalar + 4);
    CHECK(memcmp(out.data + 12, scalar, sizeof scalar) == 0);
    dpt_test_tfevent_t e;
    REQUIRE(dpt_test_tf_event(out.data + 12, sizeof scalar, &e) == 0);
    CHECK(e.step == 300 && e.has_summary && e.nvalues == 1 && e.values[0].value == 0.5f);
    CHECK(strcmp(e.values[0].tag, "a/b") == 0);

    /* The library's own decoder agrees. */
    dpt__tfevent_info_t ev;
    REQUIRE_OK(dpt__tfevent_decode(out.data + 12, sizeof scalar, &ev));
    CHECK(ev.step == 300 && ev.wall_time == 0.0 && ev.summary_len == 12 && !ev.file_version);
    CHECK_ERR(dpt__tfevent_decode(scalar, 5, &ev), DPT_EFORMAT, "cut short");
    CHECK_ERR(dpt__tfevent_decode(scalar, 11, &ev), DPT_EFORMAT, "bad varint");
    static const unsigned char wt3[] = {0x0b};
    CHECK_ERR(dpt__tfevent_decode(wt3, 1, &ev), DPT_EFORMAT, "wire type 3");
    static const unsigned char longlen[] = {0x2a, 0x7f, 0};
    CHECK_ERR(dpt__tfevent_decode(longlen, 3, &ev), DPT_EFORMAT, "bad length");
    static const unsigned char f32[] = {0x15, 1, 2};
    CHECK_ERR(dpt__tfevent_decode(f32, 3, &ev), DPT_EFORMAT, "cut short");
    static const unsigned char key[] = {0x80};
    CHECK_ERR(dpt__tfevent_decode(key, 1, &ev), DPT_EFORMAT, "bad field key");
    dpt__tfbuf_free(&out);
    dpt__tfbuf_free(&sum);
}

/* The library's reader: records, the clean end, and each way a file can be
 * damaged. */
static void test_record_reader(void)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/records", scratch);
    dpt__tfbuf_t out = {0}, rec = {0};
    REQUIRE_OK(dpt__tfrecord_append(&out, "hello", 5));
    REQUIRE_OK(dpt__tfrecord_append(&out, "", 0));
    size_t one = 12 + 5 + 4;
    REQUIRE(out.len == one + 16);
    struct {
        const char *what;
        size_t keep; /* bytes of the file written */
        size_t flip; /* a byte xored with 0x20 (0: none) */
        int records; /* records read before the end or the error */
        int rc;      /* what the call after them returns */
        const char *msg;
    } cases[] = {
        {"whole", out.len, 0, 2, 0, ""},
        {"cut in the second header", one + 5, 0, 1, DPT_EFORMAT, "cut short"},
        {"cut in the first data", 14, 0, 0, DPT_EFORMAT, "cut short"},
        {"cut in the first data CRC", one - 1, 0, 0, DPT_EFORMAT, "cut short"},
        {"length CRC", out.len, 9, 0, DPT_EFORMAT, "the length's CRC"},
        {"data", out.len, 13, 0, DPT_EFORMAT, "the data's CRC"},
        {"data CRC", out.len, one - 2, 0, DPT_EFORMAT, "the data's CRC"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char copy[64];
        memcpy(copy, out.data, out.len);
        if (cases[c].flip)
            copy[cases[c].flip] ^= 0x20;
        REQUIRE(dpt_test_spill(path, copy, cases[c].keep) == 0);
        FILE *f = fopen(path, "rb");
        REQUIRE(f);
        int got = 0, rc;
        while ((rc = dpt__tfrecord_read(f, "records", &rec)) == 1)
            got++;
        fclose(f);
        if (got != cases[c].records || rc != cases[c].rc ||
            (rc && !strstr(dpt_last_error(), cases[c].msg)))
            fprintf(stderr, "case %s: %d records, rc %d: %s\n", cases[c].what, got, rc,
                    dpt_last_error());
        CHECK(got == cases[c].records && rc == cases[c].rc);
        CHECK(!rc || strstr(dpt_last_error(), cases[c].msg));
    }
    /* A length over 1 GiB, with a right CRC. */
    unsigned char huge[12] = {0, 0, 0, 0x40, 1, 0, 0, 0};
    uint32_t m = dpt__crc32c_mask(dpt__crc32c(0, huge, 8));
    for (int i = 0; i < 4; i++)
        huge[8 + i] = (unsigned char)(m >> (8 * i));
    REQUIRE(dpt_test_spill(path, huge, sizeof huge) == 0);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    CHECK_ERR(dpt__tfrecord_read(f, "records", &rec), DPT_EFORMAT, "over 1 GiB");
    fclose(f);
    dpt__tfbuf_free(&out);
    dpt__tfbuf_free(&rec);
}

/* ---- runs ------------------------------------------------------------------------- */

static size_t count_events_files(const char *dir)
{
    size_t n;
    char **files = dpt_test_tf_list(dir, &n);
    dpt_test_tf_list_free(files, n);
    return n;
}

static const char *const ppo_cfg[] = {
    "job=ppo",
    "env=CartPole-v1",
    "num_envs_per_worker=2",
    "rollout_fragment_length=32",
    "sgd_minibatch_size=32",
    "num_sgd_iter=1",
    "policy_hidden=16",
    "total_timesteps=640",
    "checkpoint_every=2",
    "eval_episodes=0",
    "seed=3",
};
#define NPPO (sizeof ppo_cfg / sizeof ppo_cfg[0])

static const char *const sup_cfg[] = {
    "job=supervised", "dataset=spirals", "spirals_points=256", "hidden=16",
    "epochs=4",       "batch_size=64",   "num_devices=1",
};
#define NSUP (sizeof sup_cfg / sizeof sup_cfg[0])

/* A fresh run of base and the extra settings (may be NULL) into dir, or a
 * resume of dir with the extra settings as overrides; the status. */
static int run(const char *const *base, size_t nbase, const char *dir, const char *extra1,
               const char *extra2, int resume)
{
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "output_dir=%s", dir);
    const char *sets[3] = {out, extra1, extra2};
    size_t nsets = 1 + (extra1 != NULL) + (extra1 && extra2);
    dpt_config_t *c = NULL;
    int rc;
    if (resume) {
        /* Overrides only, not finalized: the run takes the saved config. */
        rc = dpt_config_create(&c);
        for (size_t i = 1; !rc && i < nsets; i++)
            rc = dpt_config_set(c, sets[i]);
    } else {
        rc = dpt_test_config(&c, base, nbase, sets, nsets);
    }
    if (rc) {
        dpt_config_destroy(c);
        return rc;
    }
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.resume_dir = resume ? dir : NULL;
    rc = dpt_train_run(c, &o, NULL);
    dpt_config_destroy(c);
    return rc;
}

/* Every events file of dir against its result.jsonl: one summary Event per
 * row, in order, at the row's `step` metric, holding every finite metric of
 * the row (as float) and nothing else; the first record of each file is the
 * file version. Returns the number of files. */
static size_t check_events(const char *dir, const char *events_dir, const char *step)
{
    dpt_metrics_table_t *t = NULL;
    if (dpt_metrics_load(&t, dir) != 0) {
        fprintf(stderr, "%s\n", dpt_last_error());
        CHECK(0);
        return 0;
    }
    const double *steps = dpt_metrics_column(t, step);
    CHECK(steps != NULL);
    size_t nfiles, row = 0;
    char **files = dpt_test_tf_list(events_dir, &nfiles);
    double last_wall = 0.0;
    for (size_t i = 0; steps && i < nfiles; i++) {
        dpt_test_tffile_t f;
        if (dpt_test_tffile_read(files[i], &f) != 0) {
            CHECK(0);
            continue;
        }
        CHECK(!f.bad && !f.cut);
        CHECK(f.n >= 1 && strcmp(f.events[0].file_version, "brain.Event:2") == 0 &&
              !f.events[0].has_summary);
        for (size_t k = 1; k < f.n && row < t->rows; k++, row++) {
            const dpt_test_tfevent_t *e = &f.events[k];
            CHECK(e->has_summary && e->file_version[0] == '\0');
            CHECK(e->step == (long long)steps[row]);
            CHECK(e->wall_time > 1.5e9 && e->wall_time >= last_wall);
            last_wall = e->wall_time;
            size_t finite = 0;
            for (size_t c = 0; c < t->cols; c++)
                finite += isfinite(t->values[c][row]) != 0;
            CHECK(e->nvalues == finite);
            for (size_t v = 0; v < e->nvalues; v++) {
                const double *col = dpt_metrics_column(t, e->values[v].tag);
                if (!col || e->values[v].value != (float)col[row]) {
                    fprintf(stderr, "%s row %zu: %s = %.9g, result.jsonl %.9g\n", files[i], row,
                            e->values[v].tag, (double)e->values[v].value,
                            col ? col[row] : (double)NAN);
                    CHECK(0);
                }
            }
        }
        dpt_test_tffile_free(&f);
    }
    CHECK(row == t->rows);
    dpt_test_tf_list_free(files, nfiles);
    dpt_metrics_destroy(t);
    return nfiles;
}

static void test_ppo_events(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ppo", scratch);
    REQUIRE_OK(run(ppo_cfg, NPPO, dir, NULL, NULL, 0));
    CHECK(check_events(dir, dir, "timesteps_total") == 1);
    dpt_metrics_table_t *t;
    REQUIRE_OK(dpt_metrics_load(&t, dir));
    CHECK(t->rows == 10); /* 640 steps of 64 */
    CHECK(dpt_metrics_column(t, "info/learner/default_policy/policy_loss") != NULL);
    dpt_metrics_destroy(t);
}

static void test_supervised_events(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/sup", scratch);
    REQUIRE_OK(run(sup_cfg, NSUP, dir, NULL, NULL, 0));
    CHECK(check_events(dir, dir, "training_iteration") == 1);
}

/* A kill after iteration 8 whose newest checkpoint is 6 (the checkpoint of
 * 8 lost, and half a record after the last Event): the resume drops steps
 * 7 and 8 from the old file and the cut record, writes them again in a new
 * file that sorts after it, and every step appears once. */
static void test_resume_after_kill(void)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/resume", scratch);
    REQUIRE_OK(run(ppo_cfg, NPPO, dir, "stop_iters=8", NULL, 0));
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint-00000008.safetensors", dir);
    REQUIRE(unlink(path) == 0);
    size_t n;
    char **files = dpt_test_tf_list(dir, &n);
    REQUIRE(n == 1);
    FILE *f = fopen(files[0], "ab");
    REQUIRE(f);
    fwrite("\x30\x00\x00\x00\x00\x00\x00\x00\x12\x34", 1, 10, f);
    fclose(f);
    dpt_test_tf_list_free(files, n);
    dpt_test_rundir_t rd;
    CHECK(dpt_test_rundir_check(dir, &rd) == 0 && rd.cut_rows == 1 && rd.events == 8);

    REQUIRE_OK(run(NULL, 0, dir, "stop_iters=0", NULL, 1)); /* to the end: 10 iterations */
    CHECK(check_events(dir, dir, "timesteps_total") == 2);
    CHECK(dpt_test_rundir_check(dir, &rd) == 0);
    CHECK(rd.events == 10 && rd.rows == 10 && rd.events_repeats == 0 && rd.cut_rows == 0);
    /* Resuming the finished run does no iteration and makes no file. */
    REQUIRE_OK(run(NULL, 0, dir, NULL, NULL, 1));
    CHECK(count_events_files(dir) == 2);
}

/* Resuming a run killed before its first checkpoint starts over: its
 * events are dropped with its rows. */
static void test_resume_from_start(void)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/restart", scratch);
    REQUIRE_OK(run(sup_cfg, NSUP, dir, "epochs=2", "checkpoint_every=0", 0));
    snprintf(path, sizeof path, "%s/checkpoints/checkpoint-00000002.safetensors", dir);
    REQUIRE(unlink(path) == 0);
    REQUIRE_OK(run(NULL, 0, dir, NULL, NULL, 1));
    CHECK(check_events(dir, dir, "training_iteration") == 2);
    dpt_test_rundir_t rd;
    CHECK(dpt_test_rundir_check(dir, &rd) == 0 && rd.events == 2 && rd.events_repeats == 0);
}

static void test_tensorboard_dir(void)
{
    char dir[PATH_MAX], tb[PATH_MAX], kv[PATH_MAX + 32];
    /* A directory of its own (made when missing), nothing in the run's. */
    snprintf(dir, sizeof dir, "%s/own", scratch);
    snprintf(tb, sizeof tb, "%s/tb/own", scratch);
    snprintf(kv, sizeof kv, "tensorboard_dir=%s", tb);
    REQUIRE_OK(run(sup_cfg, NSUP, dir, kv, NULL, 0));
    CHECK(count_events_files(dir) == 0);
    CHECK(check_events(dir, tb, "training_iteration") == 1);
    /* off: none anywhere. */
    snprintf(dir, sizeof dir, "%s/off", scratch);
    REQUIRE_OK(run(sup_cfg, NSUP, dir, "tensorboard_dir=off", NULL, 0));
    CHECK(count_events_files(dir) == 0);
    /* A relative path is from the working directory, saved absolute; the
     * key may change on resume. */
    dpt_config_t *c;
    static const char *const rel[] = {"job=ppo", "tensorboard_dir=tb_rel/x"};
    REQUIRE_OK(dpt_test_config(&c, rel, 2, NULL, 0));
    const char *v = dpt_config_str(c, DPT_CFG_tensorboard_dir);
    CHECK(v[0] == '/' && strstr(v, "/tb_rel/x") != NULL);
    CHECK(dpt_config_key_info(DPT_CFG_tensorboard_dir)->flags & DPT_CFG_RESUMABLE);
    dpt_config_destroy(c);
    snprintf(dir, sizeof dir, "%s/moved", scratch);
    REQUIRE_OK(run(sup_cfg, NSUP, dir, "stop_iters=2", NULL, 0));
    snprintf(kv, sizeof kv, "tensorboard_dir=%s/tb/moved", scratch);
    REQUIRE_OK(run(NULL, 0, dir, kv, "stop_iters=0", 1));
    snprintf(tb, sizeof tb, "%s/tb/moved", scratch);
    CHECK(count_events_files(dir) == 1 && count_events_files(tb) == 1);
    snprintf(kv, sizeof kv, "%s/overrides.log", dir);
    FILE *f = fopen(kv, "r");
    char line[PATH_MAX + 200] = "";
    CHECK(f && fgets(line, sizeof line, f) && strstr(line, "tensorboard_dir = "));
    if (f)
        fclose(f);
}

static void test_seeds(void)
{
    char dir[PATH_MAX], kv[PATH_MAX + 32], kv2[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/seeds", scratch);
    snprintf(kv, sizeof kv, "output_dir=%s", dir);
    snprintf(kv2, sizeof kv2, "tensorboard_dir=%s/tb/seeds", scratch);
    const char *sets[] = {kv, kv2, "epochs=1"};
    dpt_config_t *c;
    REQUIRE_OK(dpt_test_config(&c, sup_cfg, NSUP, sets, 3));
    uint64_t seeds[2] = {4, 9};
    dpt_seed_run_t runs[2];
    REQUIRE_OK(dpt_train_seeds(c, seeds, 2, 2, NULL, runs));
    dpt_config_destroy(c);
    for (int i = 0; i < 2; i++) {
        char run_dir[PATH_MAX + 32], tb[PATH_MAX + 32];
        snprintf(run_dir, sizeof run_dir, "%s/seed-%d", dir, (int)seeds[i]);
        snprintf(tb, sizeof tb, "%s/tb/seeds/seed-%d", scratch, (int)seeds[i]);
        CHECK(check_events(run_dir, tb, "training_iteration") == 1);
    }
}

static void test_errors(void)
{
    char dir[PATH_MAX], file[PATH_MAX], kv[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/a_file", scratch);
    REQUIRE(dpt_test_spill(file, "x", 1) == 0);
    struct stat sb;
    /* tensorboard_dir names a file: usage error, the fresh run removed. */
    snprintf(dir, sizeof dir, "%s/err1", scratch);
    snprintf(kv, sizeof kv, "tensorboard_dir=%s", file);
    CHECK_ERR(run(sup_cfg, NSUP, dir, kv, NULL, 0), DPT_EINVAL, "is not a directory");
    CHECK(stat(dir, &sb) != 0);
    /* ...or a directory under a file: it cannot be made. */
    snprintf(kv, sizeof kv, "tensorboard_dir=%s/sub", file);
    CHECK_ERR(run(sup_cfg, NSUP, dir, kv, NULL, 0), DPT_EIO, "cannot create directory");
    CHECK(stat(dir, &sb) != 0);
    /* Bad values of the key itself. */
    dpt_config_t *c;
    REQUIRE_OK(dpt_config_create(&c));
    CHECK_ERR(dpt_config_set(c, "tensorboard_dir=a#b"), DPT_EINVAL, "'#'");
    CHECK_ERR(dpt_config_set(c, "tensorboard_dir=a\tb"), DPT_EINVAL, "control character");
    dpt_config_destroy(c);
}

int main(void)
{
    if (dpt_test_mkdtemp(scratch, sizeof scratch, "dpt_tensorboard") != 0)
        return 1;
    static const dpt_test_case_t tests[] = {
        {"crc32c", test_crc32c},
        {"encoding_golden", test_encoding_golden},
        {"record_reader", test_record_reader},
        {"ppo_events", test_ppo_events},
        {"supervised_events", test_supervised_events},
        {"resume_after_kill", test_resume_after_kill},
        {"resume_from_start", test_resume_from_start},
        {"tensorboard_dir", test_tensorboard_dir},
        {"seeds", test_seeds},
        {"errors", test_errors},
    };
    int rc = dpt_test_main(tests, sizeof tests / sizeof *tests);
    if (rc == 0)
        dpt_test_rm_tree(scratch);
    return rc;
}
