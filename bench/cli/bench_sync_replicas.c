/*
 * dpt bench sync-replicas — the sync-replicas engine under a straggler, and
 * the bytes its sparse gradients put on the wire.
 *
 * Stragglers: the spirals task on 4 aggregated workers, in four settings run
 * in turns for --rounds rounds: no straggler (N = R = 4); one worker slowed
 * to 5x the step time without backups (N = R = 4) and with one backup
 * replica (N = 5, R = 4); and N = 5, R = 4 without a straggler. The delay
 * is a sleep before each push (no CPU taken), 4x the median no-straggler
 * step time of the first round, so the slowed worker takes 5x as long per
 * step as the others. Medians of the step time (ms) and their ratios to
 * the no-straggler time.
 *
 * Sparse bytes: the bags task (an embedding table of 100k x 64) at two batch
 * sizes; per step, the distinct rows the pushes touched, the bytes pushed
 * in all and those of the sparse gradients, and bytes per row.
 */
#include "../../tools/cli.h"
#include "dpt/dpt.h"
#include "dpt/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One epoch-long run; the figures of its last epoch. */
typedef struct bsr_out {
    double step_ms, stale, rows_touched, rows_pushed, bytes_step, sparse_bytes_step;
} bsr_out_t;

static int bsr_run(const char *const *sets, size_t n, int straggler, double delay_s, bsr_out_t *out)
{
    dpt_config_t *c;
    dpt_trainer_t *t = NULL;
    int rc = dpt_config_create(&c);
    for (size_t i = 0; !rc && i < n; i++)
        rc = dpt_config_set(c, sets[i]);
    if (!rc)
        rc = dpt_config_finalize(c);
    dpt_trainer_env_t env;
    memset(&env, 0, sizeof env);
    env.straggler_worker = straggler;
    env.straggler_delay_s = delay_s;
    if (!rc)
        rc = dpt_trainer_create(&t, c, &env);
    dpt_config_destroy(c);
    if (rc)
        return rc;
    dpt_train_result_t r;
    memset(&r, 0, sizeof r);
    while (!rc && !r.finished)
        rc = dpt_trainer_iterate(t, &r);
    dpt_trainer_destroy(t);
    if (rc)
        return rc;
    out->step_ms = dpt_train_result_get(&r, "step_time_ms");
    out->stale = dpt_train_result_get(&r, "stale_gradients_dropped");
    out->rows_touched = dpt_train_result_get(&r, "info/sync_replicas/rows_touched_per_step");
    out->bytes_step = dpt_train_result_get(&r, "bytes_pushed_per_step");
    out->sparse_bytes_step = dpt_train_result_get(&r, "info/sync_replicas/sparse_bytes_per_step");
    out->rows_pushed = dpt_train_result_get(&r, "info/sync_replicas/sparse_rows_pushed_per_step");
    return DPT_OK;
}

#define BSR_SETTINGS 4
#define BSR_MAX_ROUNDS 64

static int bsr_stragglers(int rounds, int json)
{
    static const char *const names[BSR_SETTINGS] = {
        "no straggler, N=4 R=4", "straggler, no backup, N=4 R=4", "straggler, 1 backup, N=5 R=4",
        "no straggler, N=5 R=4"};
    const int total[BSR_SETTINGS] = {4, 4, 5, 5};
    const int slow[BSR_SETTINGS] = {0, 1, 1, 0};
    double ms[BSR_SETTINGS][BSR_MAX_ROUNDS];
    double delay = 0.0;
    for (int round = -2; round < rounds; round++)
        for (int k = 0; k < BSR_SETTINGS; k++) {
            char ntot[48];
            snprintf(ntot, sizeof ntot, "total_num_replicas=%d", total[k]);
            const char *sets[] = {"job=sync_replicas",
                                  "dataset=spirals",
                                  "spirals_points=16384",
                                  "hidden=256,256",
                                  "batch_size=256",
                                  "replicas_to_aggregate=4",
                                  ntot,
                                  "epochs=1",
                                  "optimizer=adam",
                                  "lr=0.001",
                                  "seed=1",
                                  "comm_timeout_s=60"};
            bsr_out_t o;
            int rc = bsr_run(sets, sizeof sets / sizeof sets[0], slow[k] ? 0 : -1,
                             slow[k] ? delay : 0.0, &o);
            if (rc) {
                fprintf(stderr, "dpt bench sync-replicas: %s\n", dpt_last_error());
                return rc;
            }
            if (round < 0) {
                /* The delay: 4x the second warm-up's step time. */
                delay = 4.0 * o.step_ms / 1e3;
                continue;
            }
            ms[k][round] = o.step_ms;
            if (json)
                printf("{\"bench\":\"sync_replicas_straggler\",\"round\":%d,\"setting\":\"%s\","
                       "\"step_ms\":%.4f,\"stale_dropped\":%.0f,\"delay_ms\":%.3f}\n",
                       round, names[k], o.step_ms, o.stale, slow[k] ? delay * 1e3 : 0.0);
            else
                printf("round %d  %-32s step %8.3f ms  stale gradients %6.0f\n", round, names[k],
                       o.step_ms, o.stale);
            fflush(stdout);
        }
    double med[BSR_SETTINGS];
    for (int k = 0; k < BSR_SETTINGS; k++)
        med[k] = dpt_median(ms[k], (size_t)rounds);
    printf("%s# medians over %d rounds (straggler delay %.3f ms per step = 4x a warm-up "
           "no-straggler step)\n",
           json ? "" : "\n", rounds, delay * 1e3);
    for (int k = 0; k < BSR_SETTINGS; k++) {
        if (json)
            printf("{\"bench\":\"sync_replicas_straggler_median\",\"setting\":\"%s\","
                   "\"step_ms\":%.4f,\"ratio_to_no_straggler\":%.3f}\n",
                   names[k], med[k], med[k] / med[0]);
        else
            printf("%-32s median step %8.3f ms  %.2fx no straggler (N=4)\n", names[k], med[k],
                   med[k] / med[0]);
    }
    if (json)
        printf("{\"bench\":\"sync_replicas_straggler_ratios\",\"backup_vs_same_config\":%.3f,"
               "\"backup_vs_no_backup_config\":%.3f,\"no_backup\":%.3f}\n",
               med[2] / med[3], med[2] / med[0], med[1] / med[0]);
    else
        printf("with a straggler: 1 backup %.2fx the no-straggler step of the same N=5 R=4 "
               "(%.2fx that of N=4 R=4); no backup %.2fx\n",
               med[2] / med[3], med[2] / med[0], med[1] / med[0]);
    return DPT_OK;
}

static int bsr_sparse(int json)
{
    /* Batches whose steps touch about 1k and 10k distinct rows of the
     * table (the ids are Zipf-distributed, so a batch repeats many). */
    static const char *const batches[2] = {"batch_size=300", "batch_size=6000"};
    if (!json)
        printf("\n%-16s %12s %12s %12s %14s %14s\n", "bags", "rows/step", "rows pushed",
               "bytes/step", "sparse bytes", "bytes/row");
    for (int k = 0; k < 2; k++) {
        const char *sets[] = {"job=sync_replicas",
                              "dataset=bags",
                              "hidden=64",
                              "replicas_to_aggregate=2",
                              "total_num_replicas=2",
                              batches[k],
                              "epochs=1",
                              "optimizer=adam",
                              "lr=0.01",
                              "seed=1"};
        bsr_out_t o;
        int rc = bsr_run(sets, sizeof sets / sizeof sets[0], -1, 0.0, &o);
        if (rc) {
            fprintf(stderr, "dpt bench sync-replicas: %s\n", dpt_last_error());
            return rc;
        }
        if (json)
            printf("{\"bench\":\"sync_replicas_sparse\",\"batch\":\"%s\","
                   "\"rows_touched_per_step\":%.1f,\"rows_pushed_per_step\":%.1f,"
                   "\"bytes_per_step\":%.0f,\"sparse_bytes_per_step\":%.0f,"
                   "\"sparse_bytes_per_pushed_row\":%.2f}\n",
                   batches[k], o.rows_touched, o.rows_pushed, o.bytes_step, o.sparse_bytes_step,
                   o.sparse_bytes_step / o.rows_pushed);
        else
            printf("%-16s %12.1f %12.1f %12.0f %14.0f %14.2f\n", batches[k], o.rows_touched,
                   o.rows_pushed, o.bytes_step, o.sparse_bytes_step,
                   o.sparse_bytes_step / o.rows_pushed);
    }
    if (!json)
        printf("(rows/step: distinct rows each update changed; rows pushed: the rows the two "
               "workers' gradients carried; bytes/row: sparse bytes per pushed row, 8 + 4 x 64)\n");
    return DPT_OK;
}

int dpt_bench_sync_replicas(int argc, char **argv)
{
    int json = 0, rounds = 5, only = 0; /* 1: stragglers only, 2: sparse only */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--stragglers") == 0)
            only = 1;
        else if (strcmp(argv[i], "--sparse") == 0)
            only = 2;
        else {
            fprintf(stderr, "usage: dpt bench sync-replicas [--json] [--rounds K] [--stragglers | "
                            "--sparse]\n");
            return DPT_EXIT_USAGE;
        }
    }
    if (rounds < 1 || rounds > BSR_MAX_ROUNDS) {
        fprintf(stderr, "dpt bench sync-replicas: --rounds must be 1..%d\n", BSR_MAX_ROUNDS);
        return DPT_EXIT_USAGE;
    }
    printf("# command: dpt bench");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n");
    int rc = DPT_OK;
    if (only != 2)
        rc = bsr_stragglers(rounds, json);
    if (!rc && only != 1)
        rc = bsr_sparse(json);
    return rc ? dpt_cli_exit_code(rc) : DPT_EXIT_OK;
}
