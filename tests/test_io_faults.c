/*
 * A full or read-only disk at every write of a run: the library's file layer
 * (src/core/io.h) makes the Nth open, write, fsync or rename fail with
 * ENOSPC, EROFS or EIO, for every N a small PPO run reaches. Each time:
 * dpt_train_run fails with DPT_EIO (the command's exit code 1) and a message
 * that names the file and the system's reason; every checkpoint left on disk
 * loads (checksum included); config.conf is complete or absent; no
 * temporary file is left; and the user's next step without the fault (a
 * resume, or the same start again when the run had not written its
 * config.conf) finishes with the same weights, bitwise, as a run that
 * never failed.
 */
#include "core/io.h"
#include "dpt_test.h"
#include "dpt_test_rundir.h"
#include "train/train_internal.h"
#include "dpt_test_train.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <sys/stat.h>

static const char *const base_cfg[] = {
    "job=ppo",
    "env=CartPole-v1",
    "num_envs_per_worker=2",
    "rollout_fragment_length=16",
    "sgd_minibatch_size=16",
    "num_sgd_iter=1",
    "policy_hidden=16",
    "total_timesteps=192",
    "checkpoint_every=1",
    "keep_checkpoints=3",
    "eval_episodes=0",
    "seed=7",
};

static char scratch[PATH_MAX / 2];
static int runs_done, faults_total, faults_tolerated;

/* A run into dir (fresh, or resumed when resume); the status. */
static int run(const char *dir, int resume)
{
    char out[PATH_MAX + 32];
    if (strlen(dir) >= PATH_MAX)
        return DPT_EINVAL;
    snprintf(out, sizeof out, "output_dir=%s", dir);
    const char *sets[] = {out};
    dpt_config_t *c = NULL;
    int rc =
        resume ? 0 : dpt_test_config(&c, base_cfg, sizeof base_cfg / sizeof *base_cfg, sets, 1);
    if (rc)
        return rc;
    dpt_run_options_t o;
    memset(&o, 0, sizeof o);
    o.resume_dir = resume ? dir : NULL;
    rc = dpt_train_run(c, &o, NULL);
    dpt_config_destroy(c);
    runs_done++;
    return rc;
}

/* The newest checkpoint of dir (path into out); 0 when there is none. */
static int newest_checkpoint(const char *dir, char *out, size_t n)
{
    char path[PATH_MAX / 2 + 64];
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    unsigned long long best = 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned long long it;
        if (sscanf(e->d_name, "checkpoint-%llu.safetensors", &it) == 1 && (!found || it > best)) {
            best = it;
            found = 1;
        }
    }
    closedir(d);
    if (found)
        snprintf(out, n, "%s/checkpoint-%08llu.safetensors", path, best);
    return found;
}

/* The run directory's invariant, and no temporary left by a failed write
 * (the library removes its own); the count of violations. */
static int bad_files(const char *dir)
{
    dpt_test_rundir_t rd;
    int bad = dpt_test_rundir_check(dir, &rd) + rd.temporaries;
    if (rd.temporaries)
        fprintf(stderr, "%s: %d temporaries left behind\n", dir, rd.temporaries);
    return bad;
}

/* Whether two checkpoints hold the same tensors, bitwise. */
static int same_checkpoint(const char *a, const char *b)
{
    dpt_safetensors_t *x, *y;
    if (dpt_safetensors_load(&x, a) != 0)
        return 0;
    if (dpt_safetensors_load(&y, b) != 0) {
        dpt_safetensors_destroy(x);
        return 0;
    }
    int same = dpt_safetensors_count(x) == dpt_safetensors_count(y);
    for (size_t i = 0; same && i < dpt_safetensors_count(x); i++) {
        const dpt_safetensors_tensor_t *t = dpt_safetensors_tensor(x, i);
        const dpt_safetensors_tensor_t *u = dpt_safetensors_find(y, t->name);
        same = u && u->bytes == t->bytes && memcmp(t->data, u->data, t->bytes) == 0;
    }
    dpt_safetensors_destroy(x);
    dpt_safetensors_destroy(y);
    return same;
}

static char ref_final[PATH_MAX];
static uint64_t ref_calls[DPT__IO_OP_COUNT];

static void test_reference_run(void)
{
    char dir[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/ref", scratch);
    dpt__io_fault_arm(DPT__IO_OPEN, 0, 0); /* counts only */
    int rc = run(dir, 0);
    for (int op = 0; op < DPT__IO_OP_COUNT; op++)
        ref_calls[op] = dpt__io_calls((dpt__io_op_t)op);
    if (rc)
        fprintf(stderr, "reference run: %s\n", dpt_last_error());
    REQUIRE(rc == 0);
    REQUIRE(newest_checkpoint(dir, ref_final, sizeof ref_final));
    for (int op = 0; op < DPT__IO_OP_COUNT; op++) {
        printf("reference run: %llu %s calls\n", (unsigned long long)ref_calls[op],
               dpt__io_op_name((dpt__io_op_t)op));
        CHECK(ref_calls[op] > 0);
    }
    CHECK(bad_files(dir) == 0);
}

/* One injected fault: the Nth call of op fails with err. */
static void one_fault(dpt__io_op_t op, uint64_t nth, int err)
{
    char dir[PATH_MAX + 64], ckpt[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s-%d-%llu", scratch, dpt__io_op_name(op), err,
             (unsigned long long)nth);
    dpt__io_fault_arm(op, nth, err);
    int rc = run(dir, 0);
    uint64_t injected = dpt__io_faults();
    dpt__io_fault_arm(op, 0, 0);
    faults_total++;
    CHECK(injected > 0);
    if (rc == 0) {
        /* Only a directory's fsync on a read-only filesystem is not an
         * error: the file itself is in place. */
        faults_tolerated++;
        CHECK(op == DPT__IO_FSYNC && err == EROFS);
    } else {
        const char *msg = dpt_last_error();
        int names_file = strstr(msg, "checkpoint") || strstr(msg, "config.conf") ||
                         strstr(msg, "result.jsonl") || strstr(msg, "progress.csv") ||
                         strstr(msg, "directory") || strstr(msg, dir);
        int names_reason = strstr(msg, strerror(err)) != NULL;
        if (rc != DPT_EIO || !names_file || !names_reason)
            fprintf(stderr, "%s #%llu -> %s: status %d, message: %s\n", dpt__io_op_name(op),
                    (unsigned long long)nth, strerror(err), rc, msg);
        else if (nth == 1 || nth == ref_calls[op])
            printf("%s #%llu -> %s: %s\n", dpt__io_op_name(op), (unsigned long long)nth,
                   strerror(err), msg);
        CHECK(rc == DPT_EIO);
        CHECK(names_file);
        /* The first open is the run's own directory, not a parent that
         * exists (mkdir of an existing directory fails on a full disk). */
        if (op == DPT__IO_OPEN && nth == 1)
            CHECK(strstr(msg, dir) != NULL);
        CHECK(names_reason);
    }
    CHECK(bad_files(dir) == 0);
    /* The user's next step: --resume when the run has its config.conf
     * (from its newest checkpoint, or from the start when it has none),
     * else the same command again. */
    if (rc) {
        char conf[PATH_MAX + 96];
        struct stat sb;
        snprintf(conf, sizeof conf, "%s/config.conf", dir);
        int has_conf = stat(conf, &sb) == 0;
        int again = run(dir, has_conf);
        if (again)
            fprintf(stderr, "%s #%llu -> %s: %s failed: %s\n", dpt__io_op_name(op),
                    (unsigned long long)nth, strerror(err), has_conf ? "resume" : "a new start",
                    dpt_last_error());
        CHECK(again == 0);
    }
    CHECK(newest_checkpoint(dir, ckpt, sizeof ckpt));
    int same = same_checkpoint(ckpt, ref_final);
    if (!same)
        fprintf(stderr, "%s #%llu -> %s: final weights differ from the reference\n",
                dpt__io_op_name(op), (unsigned long long)nth, strerror(err));
    CHECK(same);
    dpt_test_rm_tree(dir);
}

static void test_every_call_fails(void)
{
    REQUIRE(ref_final[0]);
    static const int errs[] = {ENOSPC, EROFS, EIO};
    for (int op = 0; op < DPT__IO_OP_COUNT; op++) {
        /* Every call up to 40, then a stride that still reaches the last. */
        uint64_t n = ref_calls[op], step = n <= 40 ? 1 : (n + 39) / 40;
        for (size_t e = 0; e < sizeof errs / sizeof *errs; e++) {
            for (uint64_t k = 1; k <= n; k += step)
                one_fault((dpt__io_op_t)op, k, errs[e]);
            if ((n - 1) % step)
                one_fault((dpt__io_op_t)op, n, errs[e]);
        }
    }
    printf("%d faults injected (%d tolerated: a directory's fsync on a read-only disk), "
           "%d runs\n",
           faults_total, faults_tolerated, runs_done);
}

/* The fault hook itself: counts, the Nth call, sticky failure, disarm. */
static void test_hook(void)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/hook", scratch);
    dpt__io_fault_arm(DPT__IO_WRITE, 2, ENOSPC);
    int fd = dpt__io_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    REQUIRE(fd >= 0);
    CHECK(dpt__io_write(fd, "ab", 2) == 0);
    errno = 0;
    CHECK(dpt__io_write(fd, "cd", 2) == -1 && errno == ENOSPC);
    CHECK(dpt__io_write(fd, "ef", 2) == -1 && errno == ENOSPC); /* stays full */
    CHECK(dpt__io_calls(DPT__IO_WRITE) == 3 && dpt__io_calls(DPT__IO_OPEN) == 1);
    CHECK(dpt__io_faults() == 2);
    CHECK(dpt__io_fsync(fd) == 0); /* another kind of call */
    dpt__io_fault_arm(DPT__IO_WRITE, 0, 0);
    CHECK(dpt__io_faults() == 0 && dpt__io_calls(DPT__IO_WRITE) == 0);
    CHECK(dpt__io_write(fd, "gh", 2) == 0);
    close(fd);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == 4);
    dpt__io_op_t op;
    CHECK(dpt__io_op_parse("rename", &op) == 0 && op == DPT__IO_RENAME);
    CHECK(dpt__io_op_parse("unlink", &op) == -1);
    CHECK(strcmp(dpt__io_op_name(DPT__IO_FSYNC), "fsync") == 0);
    CHECK(strcmp(dpt__io_op_name(DPT__IO_OP_COUNT), "?") == 0);
    dpt__io_fault_arm(DPT__IO_RENAME, 1, EROFS);
    CHECK(dpt__io_rename(path, path) == -1 && errno == EROFS);
    dpt__io_fault_arm(DPT__IO_OPEN, 1, EROFS);
    CHECK(dpt__io_fopen(path, "w") == NULL && errno == EROFS);
    CHECK(dpt__io_mkdir(path, 0777) == -1 && errno == EROFS);
    dpt__io_fault_arm(DPT__IO_OPEN, 0, 0);
    FILE *f = dpt__io_fopen(path, "w");
    REQUIRE(f);
    dpt__io_fault_arm(DPT__IO_WRITE, 1, EIO);
    CHECK(dpt__io_fflush(f) == EOF && errno == EIO);
    dpt__io_fault_arm(DPT__IO_WRITE, 0, 0);
    CHECK(dpt__io_fflush(f) == 0);
    fclose(f);
    unlink(path);
}

/* Resume cuts result.jsonl and progress.csv back to a checkpoint's
 * iteration by streaming them (a long run's files need not fit in memory):
 * rows past it, a row cut by a kill and rows longer than the copy buffer
 * (64 KiB) all handled. */
static void test_metrics_truncate(void)
{
    char dir[PATH_MAX / 2 + 16], path[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/trunc", scratch);
    REQUIRE(mkdir(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    size_t big = 100000, kept = 0;
    for (int it = 1; it <= 5000; it++) {
        fprintf(f, "{\"training_iteration\":%d,\"x\":\"", it);
        size_t pad = it == 7 ? big : 10; /* one row past the buffer */
        for (size_t k = 0; k < pad; k++)
            fputc('a', f);
        fputs("\"}\n", f);
        if (it <= 4000)
            kept += (size_t)snprintf(NULL, 0, "{\"training_iteration\":%d,\"x\":\"", it) + pad + 3;
    }
    fputs("{\"training_iteration\":5001,\"x\":", f); /* cut by a kill */
    fclose(f);
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    f = fopen(path, "w");
    REQUIRE(f);
    fputs("a,training_iteration,b\n", f);
    for (int it = 1; it <= 5000; it++)
        fprintf(f, "0.5,%d,%d\n", it, 2 * it);
    fputs("0.5,5001", f);
    fclose(f);
    dpt_config_t *c = NULL;
    static const char *const kv[] = {"job=ppo", "tensorboard_dir=off"};
    REQUIRE_OK(dpt_test_config(&c, kv, 2, NULL, 0));
    CHECK_OK(dpt__metrics_truncate(dir, c, 4000, 0));
    dpt_config_destroy(c);
    dpt_test_rundir_t rd;
    CHECK(dpt_test_rundir_check(dir, &rd) == 0);
    CHECK(rd.rows == 4000 && rd.last_iter == 4000 && rd.gaps == 0 && rd.cut_rows == 0);
    CHECK(rd.temporaries == 0);
    struct stat sb;
    snprintf(path, sizeof path, "%s/result.jsonl", dir);
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == kept);
    snprintf(path, sizeof path, "%s/progress.csv", dir);
    f = fopen(path, "r");
    REQUIRE(f);
    char line[64];
    int rows = 0, good = fgets(line, sizeof line, f) && !strcmp(line, "a,training_iteration,b\n");
    while (fgets(line, sizeof line, f)) {
        int it = 0, twice = 0;
        rows++;
        good &= sscanf(line, "0.5,%d,%d", &it, &twice) == 2 && it == rows && twice == 2 * rows;
    }
    fclose(f);
    CHECK(good && rows == 4000);
    dpt_test_rm_tree(dir);
}

int main(void)
{
    if (dpt_test_mkdtemp(scratch, sizeof scratch, "dpt_io_faults") != 0)
        return 1;
    static const dpt_test_case_t tests[] = {
        {"hook", test_hook},
        {"reference_run", test_reference_run},
        {"every_call_fails", test_every_call_fails},
        {"metrics_truncate", test_metrics_truncate},
    };
    int rc = dpt_test_main(tests, sizeof tests / sizeof *tests);
    if (rc == 0)
        dpt_test_rm_tree(scratch);
    return rc;
}
