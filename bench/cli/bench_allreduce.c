/*
 * dpt bench allreduce — time per allreduce, algorithm and bus bandwidth, per
 * backend, next to this machine's single-thread memcpy bandwidth.
 *
 *   algbw  = bytes / time                       (bytes = count * 4)
 *   busbw  = algbw * 2 (P - 1) / P              (as nccl-tests define it)
 *   memcpy = bytes / time of one thread memcpy'ing `bytes` between two
 *            pre-touched buffers, measured in the same run
 *
 * Every buffer is allocated and touched once before anything is timed (a
 * first touch of a 4 KiB page costs ~10 us on these VMs). Each size is run
 * `iters` times untimed (20 * iters for the first size), then `reps`
 * repetitions of `iters` back-to-back allreduces
 * (SUM, in place, on zero-filled buffers; the values do not change the
 * speed); the figures are the median repetition and the fastest. For threads and hier the
 * participants are threads of this process; for mpi and hier the program
 * runs under mpirun and rank 0 prints. --algorithm picks the allreduce
 * algorithm (for hier, of the step across processes); the algo column
 * shows the one that ran at each size (auto resolved by the table).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/comm.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "../../tools/cli.h"

#define BENCH_REPS 7 /* default repetitions per size */
#define BENCH_MAX_REPS 1000
#define BENCH_MAX_PARTICIPANTS 256

typedef struct bench_cfg {
    dpt_comm_backend_t backend;
    int participants; /* threads per process; 0 = default list */
    size_t min_bytes, max_bytes;
    int iters; /* 0 = automatic per size */
    int reps;  /* timed repetitions per size */
    int json;
    int touch;                      /* rewrite the buffer before every allreduce */
    int half_octaves;               /* also 1.5x every size (3 x 2^k) */
    long small_bytes;               /* threads/hier small-message threshold; < 0 = default */
    dpt_comm_algorithm_t algorithm; /* threads and mpi (hier: its MPI step) */
    int ranks_per_node;             /* mpi/hier: node layout for hier; 0 = by host */
    char command[1024];
    char command_json[2100]; /* the same, escaped for a JSON string */
} bench_cfg_t;

/* One row of results, filled by participant 0. */
typedef struct bench_row {
    size_t bytes;
    int iters;
    double time_s, best_s, memcpy_s; /* median and fastest repetition; memcpy median */
    dpt_comm_algorithm_t algorithm;  /* what ran (auto resolved) */
} bench_row_t;

typedef struct bench_run {
    const bench_cfg_t *cfg;
    int nsizes;
    bench_row_t *rows;
    int world_rank; /* MPI rank of this process (0 for threads) */
} bench_run_t;

typedef struct bench_part {
    bench_run_t *run;
    dpt_comm_t *comm;
    int lead; /* 1 for the participant that measures and records */
    int rc;   /* first failure */
    char msg[512];
} bench_part_t;

/* Enough iterations for ~256 MB of data per repetition, 10 at least. */
static int auto_iters(size_t bytes)
{
    size_t it = ((size_t)256 << 20) / (bytes ? bytes : 1);
    if (it < 10)
        it = 10;
    if (it > 20000)
        it = 20000;
    return (int)it;
}

static float *alloc_touched(size_t bytes)
{
    float *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p != NULL)
        memset(p, 0, (bytes + 63) / 64 * 64);
    return p;
}

static void part_fail(bench_part_t *p, int rc, const char *what)
{
    if (p->rc == 0) {
        p->rc = rc;
        snprintf(p->msg, sizeof p->msg, "%s: %s: %s", what, dpt_strerror(rc), dpt_last_error());
    }
}

/* The timed loop every participant runs. */
static void part_body(bench_part_t *p)
{
    bench_run_t *run = p->run;
    const bench_cfg_t *cfg = run->cfg;
    float *buf = alloc_touched(cfg->max_bytes);
    float *msrc = NULL, *mdst = NULL;
    if (p->lead) {
        msrc = alloc_touched(cfg->max_bytes);
        mdst = alloc_touched(cfg->max_bytes);
    }
    if (buf == NULL || (p->lead && (msrc == NULL || mdst == NULL))) {
        part_fail(p, DPT_ENOMEM, "allocating the buffers");
        /* keep going through the collectives so the others do not hang;
         * each one then fails or times out */
    }
    int rc;
    for (int s = 0; s < run->nsizes && p->rc == 0; s++) {
        bench_row_t *row = &run->rows[s];
        size_t count = row->bytes / sizeof(float);
        int iters = row->iters;
        double t[BENCH_MAX_REPS];
        int reps = cfg->reps;
        if (p->lead)
            row->algorithm = dpt_comm_allreduce_algorithm(p->comm, count);
        /* warm-up: one untimed repetition (threads settle on their CPUs,
         * caches and the clock frequency reach their steady state); twenty
         * before the first size, which follows the allocation and first
         * touch of all buffers and otherwise pays for the kernel's
         * after-effects (measured: 0.97 instead of 0.25 us at 4 KB). The
         * count is fixed so that every participant makes the same calls. */
        int warm = s == 0 ? 20 * iters : iters;
        for (int w = 0; w < warm && p->rc == 0; w++)
            if ((rc = dpt_comm_allreduce(p->comm, buf, count, DPT_REDUCE_SUM)) < 0)
                part_fail(p, rc, "warm-up allreduce");
        for (int r = 0; r < reps && p->rc == 0; r++) {
            if ((rc = dpt_comm_barrier(p->comm)) < 0) {
                part_fail(p, rc, "barrier");
                break;
            }
            double t0 = dpt_now();
            for (int i = 0; i < iters; i++) {
                if (cfg->touch)
                    memset(buf, 0, row->bytes);
                if ((rc = dpt_comm_allreduce(p->comm, buf, count, DPT_REDUCE_SUM)) < 0) {
                    part_fail(p, rc, "allreduce");
                    break;
                }
            }
            t[r] = (dpt_now() - t0) / iters;
        }
        if (p->rc != 0)
            break;
        /* memcpy while the other participants wait in the barrier below
         * (blocked, so they take no memory bandwidth) */
        if (p->lead) {
            double m[BENCH_MAX_REPS];
            memcpy(mdst, msrc, row->bytes);
            for (int r = 0; r < reps; r++) {
                double t0 = dpt_now();
                for (int i = 0; i < iters; i++) {
                    memcpy(mdst, msrc, row->bytes);
                    /* a dependency through the data so the copies are not
                     * elided: touch one byte of the destination */
                    msrc[i % (row->bytes / sizeof(float))] = mdst[0] + 0.0f;
                }
                m[r] = (dpt_now() - t0) / iters;
            }
            row->time_s = dpt_median(t, reps);
            row->memcpy_s = dpt_median(m, reps);
            row->best_s = t[0];
            for (int r = 1; r < reps; r++)
                row->best_s = t[r] < row->best_s ? t[r] : row->best_s;
        }
        if ((rc = dpt_comm_barrier(p->comm)) < 0)
            part_fail(p, rc, "barrier");
    }
    free(buf);
    free(msrc);
    free(mdst);
}

static void *part_thread(void *arg)
{
    part_body(arg);
    return NULL;
}

static void print_rows(const bench_run_t *run, int participants)
{
    const bench_cfg_t *cfg = run->cfg;
    const char *be = dpt_comm_backend_name(cfg->backend);
    if (!cfg->json) {
        printf("# %s\n", cfg->command);
        printf("# backend %s, %d participants, algorithm %s; medians of %d repetitions (best_us: "
               "the fastest); memcpy = one thread, same size%s\n",
               be, participants, dpt_comm_algorithm_name(cfg->algorithm), cfg->reps,
               cfg->touch ? "; time includes rewriting the buffer (--touch)" : "");
        printf("%12s %8s %12s %12s %10s %10s %11s %8s %7s\n", "bytes", "iters", "time_us",
               "best_us", "algbw_gbs", "busbw_gbs", "memcpy_gbs", "bus/mem", "algo");
    }
    for (int s = 0; s < run->nsizes; s++) {
        const bench_row_t *row = &run->rows[s];
        double algbw = (double)row->bytes / row->time_s / 1e9;
        double busbw = algbw * 2.0 * (participants - 1) / participants;
        double mem = (double)row->bytes / row->memcpy_s / 1e9;
        if (cfg->json)
            printf("{\"backend\":\"%s\",\"participants\":%d,\"algorithm\":\"%s\",\"bytes\":%zu,"
                   "\"iters\":%d,\"time_us\":%.3f,\"best_us\":%.3f,\"algbw_gbs\":%.3f,"
                   "\"busbw_gbs\":%.3f,\"memcpy_gbs\":%.3f,\"touch\":%s,\"command\":\"%s\"}\n",
                   be, participants, dpt_comm_algorithm_name(row->algorithm), row->bytes,
                   row->iters, row->time_s * 1e6, row->best_s * 1e6, algbw, busbw, mem,
                   cfg->touch ? "true" : "false", cfg->command_json);
        else
            printf("%12zu %8d %12.3f %12.3f %10.3f %10.3f %11.3f %8.3f %7s\n", row->bytes,
                   row->iters, row->time_s * 1e6, row->best_s * 1e6, algbw, busbw, mem, busbw / mem,
                   dpt_comm_algorithm_name(row->algorithm));
    }
    fflush(stdout);
}

/* The sizes: min, 2 min, 4 min, ... up to max; with --half-octaves also
 * 1.5x each power (when a multiple of 4 bytes), in increasing order, so that
 * neighbouring sizes are measured one after the other. Fills rows (when not
 * NULL) and returns how many. */
static int list_sizes(const bench_cfg_t *cfg, bench_row_t *rows)
{
    int n = 0;
    for (size_t b = cfg->min_bytes; b <= cfg->max_bytes; b *= 2) {
        size_t sizes[2] = {b, b / 2 * 3};
        int k = cfg->half_octaves && b % 8 == 0 && sizes[1] <= cfg->max_bytes ? 2 : 1;
        for (int i = 0; i < k; i++, n++)
            if (rows) {
                rows[n].bytes = sizes[i];
                rows[n].iters = cfg->iters > 0 ? cfg->iters : auto_iters(sizes[i]);
            }
        if (b > SIZE_MAX / 4)
            break;
    }
    return n;
}

static int make_rows(bench_run_t *run)
{
    int n = list_sizes(run->cfg, NULL);
    run->rows = calloc((size_t)n, sizeof *run->rows);
    if (run->rows == NULL)
        return DPT_ENOMEM;
    run->nsizes = list_sizes(run->cfg, run->rows);
    return 0;
}

/* Runs T participant threads on handles comms[0..T); thread 0 is the
 * calling thread (so that, for hier, MPI is called by the main thread). */
static int run_threads(bench_run_t *run, dpt_comm_t **comms, int T, int lead_thread)
{
    bench_part_t *parts = calloc((size_t)T, sizeof *parts);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    int rc = 0;
    if (parts == NULL || th == NULL) {
        free(parts);
        free(th);
        fprintf(stderr, "dpt bench allreduce: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    for (int i = 0; i < T; i++) {
        parts[i].run = run;
        parts[i].comm = comms[i];
        parts[i].lead = lead_thread && i == 0;
    }
    int started = 1;
    for (int i = 1; i < T; i++, started++)
        if (pthread_create(&th[i], NULL, part_thread, &parts[i]) != 0)
            break;
    if (started < T) {
        fprintf(stderr, "dpt bench allreduce: cannot start participant threads\n");
        rc = DPT_EXIT_FAIL;
    }
    if (rc == 0)
        part_body(&parts[0]);
    for (int i = 1; i < started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T && rc == 0; i++) {
        if (parts[i].rc != 0) {
            fprintf(stderr, "dpt bench allreduce: participant %d: %s\n", i, parts[i].msg);
            rc = DPT_EXIT_FAIL;
        }
    }
    free(parts);
    free(th);
    return rc;
}

static int bench_threads(const bench_cfg_t *cfg, int P)
{
    bench_run_t run = {.cfg = cfg};
    if (make_rows(&run) < 0) {
        fprintf(stderr, "dpt bench allreduce: out of memory\n");
        return DPT_EXIT_FAIL;
    }
    dpt_comm_threads_group_t *g = NULL;
    dpt_comm_t *comms[BENCH_MAX_PARTICIPANTS] = {0};
    dpt_comm_threads_options_t opt;
    dpt_comm_threads_options_init(&opt);
    if (cfg->small_bytes >= 0)
        opt.small_bytes = (size_t)cfg->small_bytes;
    opt.algorithm = cfg->algorithm;
    int rc = dpt_comm_threads_group_create(&g, P, &opt);
    for (int i = 0; i < P && rc == 0; i++)
        rc = dpt_comm_threads_join(g, i, &comms[i]);
    if (rc < 0) {
        fprintf(stderr, "dpt bench allreduce: %s: %s\n", dpt_strerror(rc), dpt_last_error());
        rc = DPT_EXIT_FAIL;
    } else {
        rc = run_threads(&run, comms, P, 1);
        if (rc == 0)
            print_rows(&run, P);
    }
    for (int i = 0; i < P; i++)
        dpt_comm_destroy(comms[i]);
    dpt_comm_threads_group_destroy(g);
    free(run.rows);
    return rc;
}

static int bench_mpi(const bench_cfg_t *cfg, int T)
{
    int rc = dpt_comm_mpi_init(NULL, NULL, DPT_COMM_MPI_FUNNELED);
    if (rc < 0) {
        fprintf(stderr, "dpt bench allreduce: %s: %s\n", dpt_strerror(rc), dpt_last_error());
        return DPT_EXIT_FAIL;
    }
    bench_run_t run = {.cfg = cfg};
    dpt_comm_t *comms[BENCH_MAX_PARTICIPANTS] = {0};
    dpt_comm_hier_group_t *hg = NULL;
    int exit_code = DPT_EXIT_FAIL;
    if (make_rows(&run) < 0) {
        rc = dpt_error(DPT_ENOMEM, "out of memory");
        goto done;
    }
    if (cfg->backend == DPT_COMM_MPI) {
        T = 1;
        dpt_comm_mpi_options_t opt;
        dpt_comm_mpi_options_init(&opt);
        opt.algorithm = cfg->algorithm;
        opt.ranks_per_node = cfg->ranks_per_node;
        rc = dpt_comm_mpi_create(&comms[0], &opt);
    } else {
        dpt_comm_hier_options_t opt;
        dpt_comm_hier_options_init(&opt);
        if (cfg->small_bytes >= 0)
            opt.threads.small_bytes = (size_t)cfg->small_bytes;
        opt.mpi.algorithm = cfg->algorithm;
        opt.mpi.ranks_per_node = cfg->ranks_per_node;
        rc = dpt_comm_hier_group_create(&hg, T, &opt);
        for (int i = 0; i < T && rc == 0; i++)
            rc = dpt_comm_hier_join(hg, i, &comms[i]);
    }
    if (rc < 0)
        goto done;
    run.world_rank = dpt_comm_rank(comms[0]) / T;
    exit_code = run_threads(&run, comms, T, run.world_rank == 0);
    if (exit_code == 0 && run.world_rank == 0)
        print_rows(&run, dpt_comm_size(comms[0]));
done:
    if (rc < 0)
        fprintf(stderr, "dpt bench allreduce: %s: %s\n", dpt_strerror(rc), dpt_last_error());
    for (int i = 0; i < T; i++)
        dpt_comm_destroy(comms[i]);
    dpt_comm_hier_group_destroy(hg);
    free(run.rows);
    dpt_comm_mpi_finalize();
    return exit_code;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dpt bench allreduce [--backend threads|mpi|hier] [--participants P]\n"
            "                           [--min-bytes N] [--max-bytes N] [--iters N]\n"
            "                           [--small-bytes N] [--algorithm A] [--ranks-per-node K]\n"
            "                           [--reps N] [--half-octaves] [--touch] [--json]\n"
            "\n"
            "  --backend       threads (default): P threads of this process;\n"
            "                  mpi: one participant per MPI process (run under mpirun);\n"
            "                  hier: P threads in each MPI process (run under mpirun)\n"
            "  --participants  threads (per process for hier); default: threads 2 then 4,\n"
            "                  hier 2\n"
            "  --min-bytes     smallest message, default 4096 (sizes double up to max)\n"
            "  --max-bytes     largest message, default 67108864 (64 MiB)\n"
            "  --iters         allreduces per timed repetition (default: ~256 MB of data,\n"
            "                  10 to 20000)\n"
            "  --reps          timed repetitions per size (default %d, at most %d): time_us is\n"
            "                  their median, best_us the fastest (on a shared machine the\n"
            "                  least disturbed)\n"
            "  --small-bytes   threads/hier: largest allreduce on the small-message path\n"
            "                  (default: the library's, 0, or 8K when participants outnumber\n"
            "                  the CPUs)\n"
            "  --algorithm     allreduce algorithm: auto (default), native, ring, tree, hier\n"
            "                  (hier backend: the step across processes); the algo column\n"
            "                  shows what ran\n"
            "  --ranks-per-node  mpi/hier: put ranks [0,K) on node 0, [K,2K) on node 1, ... for\n"
            "                  hier and auto (default 0: by host name)\n"
            "  --half-octaves  also 1.5x every size (3 x 2^k between the powers of 2),\n"
            "                  measured in increasing order with the others\n"
            "  --touch         each participant rewrites its buffer before every allreduce\n"
            "                  (as a backward pass does; included in time_us)\n"
            "  --json          one JSON object per line\n"
            "\n"
            "busbw = algbw * 2(P-1)/P (nccl-tests); memcpy_gbs = one thread memcpy of the same\n"
            "size, measured in the same run (a copy of N bytes counts N).\n",
            BENCH_REPS, BENCH_MAX_REPS);
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || s[0] == '-')
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)v;
    return 0;
}

int dpt_bench_allreduce(int argc, char **argv)
{
    bench_cfg_t cfg = {.backend = DPT_COMM_THREADS,
                       .min_bytes = 4096,
                       .max_bytes = (size_t)64 << 20,
                       .small_bytes = -1,
                       .reps = BENCH_REPS};
    size_t len = (size_t)snprintf(cfg.command, sizeof cfg.command, "dpt bench");
    for (int i = 0; i < argc && len < sizeof cfg.command; i++)
        len += (size_t)snprintf(cfg.command + len, sizeof cfg.command - len, " %s", argv[i]);
    size_t j = 0;
    for (size_t k = 0; cfg.command[k] != '\0' && j + 7 < sizeof cfg.command_json; k++) {
        unsigned char ch = (unsigned char)cfg.command[k];
        if (ch == '"' || ch == '\\') {
            cfg.command_json[j++] = '\\';
            cfg.command_json[j++] = (char)ch;
        } else if (ch < 0x20) {
            j += (size_t)snprintf(cfg.command_json + j, 7, "\\u%04x", ch);
        } else {
            cfg.command_json[j++] = (char)ch;
        }
    }
    cfg.command_json[j] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return DPT_EXIT_OK;
        } else if (strcmp(a, "--json") == 0) {
            cfg.json = 1;
        } else if (strcmp(a, "--touch") == 0) {
            cfg.touch = 1;
        } else if (strcmp(a, "--half-octaves") == 0) {
            cfg.half_octaves = 1;
        } else if (strcmp(a, "--backend") == 0 && v) {
            if (dpt_comm_backend_parse(v, &cfg.backend) < 0) {
                fprintf(stderr, "dpt bench allreduce: %s\n", dpt_last_error());
                return DPT_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(a, "--participants") == 0 && v) {
            char *end;
            long p = strtol(v, &end, 10);
            if (*end != '\0' || p < 1 || p > BENCH_MAX_PARTICIPANTS) {
                fprintf(stderr, "dpt bench allreduce: --participants %s: expected 1..%d\n", v,
                        BENCH_MAX_PARTICIPANTS);
                return DPT_EXIT_USAGE;
            }
            cfg.participants = (int)p;
            i++;
        } else if ((strcmp(a, "--min-bytes") == 0 || strcmp(a, "--max-bytes") == 0) && v) {
            size_t b;
            if (parse_size(v, &b) < 0 || b < sizeof(float) || b % sizeof(float) != 0) {
                fprintf(stderr,
                        "dpt bench allreduce: %s %s: expected a positive multiple of 4 bytes "
                        "(suffix K, M or G allowed)\n",
                        a, v);
                return DPT_EXIT_USAGE;
            }
            if (a[2] == 'm' && a[3] == 'i')
                cfg.min_bytes = b;
            else
                cfg.max_bytes = b;
            i++;
        } else if (strcmp(a, "--small-bytes") == 0 && v) {
            size_t b;
            if (parse_size(v, &b) < 0 || b > ((size_t)64 << 20)) {
                fprintf(stderr, "dpt bench allreduce: --small-bytes %s: expected 0..64M\n", v);
                return DPT_EXIT_USAGE;
            }
            cfg.small_bytes = (long)b;
            i++;
        } else if (strcmp(a, "--algorithm") == 0 && v) {
            if (dpt_comm_algorithm_parse(v, &cfg.algorithm) < 0) {
                fprintf(stderr, "dpt bench allreduce: %s\n", dpt_last_error());
                return DPT_EXIT_USAGE;
            }
            i++;
        } else if (strcmp(a, "--ranks-per-node") == 0 && v) {
            char *end;
            long k = strtol(v, &end, 10);
            if (*end != '\0' || k < 0 || k > 1000000) {
                fprintf(stderr, "dpt bench allreduce: --ranks-per-node %s: expected 0 or more\n",
                        v);
                return DPT_EXIT_USAGE;
            }
            cfg.ranks_per_node = (int)k;
            i++;
        } else if (strcmp(a, "--reps") == 0 && v) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end != '\0' || n < 1 || n > BENCH_MAX_REPS) {
                fprintf(stderr, "dpt bench allreduce: --reps %s: expected 1..%d\n", v,
                        BENCH_MAX_REPS);
                return DPT_EXIT_USAGE;
            }
            cfg.reps = (int)n;
            i++;
        } else if (strcmp(a, "--iters") == 0 && v) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end != '\0' || n < 1 || n > 100000000) {
                fprintf(stderr, "dpt bench allreduce: --iters %s: expected a positive integer\n",
                        v);
                return DPT_EXIT_USAGE;
            }
            cfg.iters = (int)n;
            i++;
        } else {
            static const char *const valued[] = {"--backend",   "--participants",   "--min-bytes",
                                                 "--max-bytes", "--iters",          "--small-bytes",
                                                 "--algorithm", "--ranks-per-node", "--reps"};
            int needs_value = 0;
            for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
                needs_value |= strcmp(a, valued[k]) == 0;
            if (needs_value)
                fprintf(stderr, "dpt bench allreduce: option '%s' needs a value (try --help)\n", a);
            else
                fprintf(stderr, "dpt bench allreduce: unknown option '%s' (try --help)\n", a);
            return DPT_EXIT_USAGE;
        }
    }
    if (cfg.min_bytes > cfg.max_bytes) {
        fprintf(stderr, "dpt bench allreduce: --min-bytes %zu is larger than --max-bytes %zu\n",
                cfg.min_bytes, cfg.max_bytes);
        return DPT_EXIT_USAGE;
    }
    if (!dpt_comm_backend_available(cfg.backend)) {
        fprintf(stderr, "dpt bench allreduce: backend %s needs MPI, which this build lacks\n",
                dpt_comm_backend_name(cfg.backend));
        return DPT_EXIT_FAIL;
    }
    if (cfg.backend == DPT_COMM_THREADS) {
        if (cfg.participants > 0)
            return bench_threads(&cfg, cfg.participants);
        int rc = bench_threads(&cfg, 2);
        if (rc == 0)
            rc = bench_threads(&cfg, 4);
        return rc;
    }
    return bench_mpi(&cfg, cfg.participants > 0 ? cfg.participants : 2);
}
