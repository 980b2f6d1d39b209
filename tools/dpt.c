/*
 * The `dpt` command: subcommands from one table (name, summary, handler).
 * The library never prints; this program does, and maps errors to exit
 * codes (0 success, 1 runtime failure, 2 bad usage or input; docs/RELIABILITY.md).
 */
#include "cli.h"
#include "dpt/dpt.h"
#include "dpt_config.h" /* DPT_BUILT_BY */

#include <stdio.h>
#include <string.h>

#define DPT_COMMAND_LIST(X)                                                             \
    X("train", dpt_cmd_train, "train what a config file describes (dpt train --help)")  \
    X("eval", dpt_cmd_eval, "evaluate a checkpoint or run directory (dpt eval --help)") \
    X("init", dpt_cmd_init, "write a starter config for a job (dpt init --help)")       \
    X("check-env", dpt_cmd_check_env, "check an env's contract (dpt check-env --help)") \
    X("plot", dpt_cmd_plot, "learning curves of runs as an SVG file (dpt plot --help)") \
    X("info", dpt_cmd_info, "print the version, detected features and GEMM backend")    \
    X("demo", dpt_cmd_demo, "train an MLP on two spirals (no files, a few seconds)")    \
    X("bench", dpt_cmd_bench, "run a benchmark: dpt bench NAME --help")

typedef struct dpt_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} dpt_command_t;

static const dpt_command_t dpt_commands[] = {
#define DPT__CMD(name, fn, summary) {name, fn, summary},
    DPT_COMMAND_LIST(DPT__CMD)
#undef DPT__CMD
};

#define DPT_BENCH_LIST(X)                                                                  \
    X("allreduce", dpt_bench_allreduce, "collective bandwidth and latency per backend")    \
    X("towers", dpt_bench_towers, "training throughput of the towers engine per mode")     \
    X("env", dpt_bench_env, "raw environment stepping throughput")                         \
    X("ppo", dpt_bench_ppo, "PPO wall time on CartPole with CleanRL's settings")           \
    X("ddppo", dpt_bench_ddppo, "DD-PPO env steps/s for 1..N worker threads")              \
    X("lstm", dpt_bench_lstm, "LSTM layer forward + backward time and GFLOP/s")            \
    X("appo", dpt_bench_appo, "APPO and IMPALA per seed; APPO against PPO (--vs-ppo)")     \
    X("sync-replicas", dpt_bench_sync_replicas,                                            \
      "sync replicas: step time under a straggler with and without backups; sparse bytes") \
    X("cnn", dpt_bench_cnn, "CNN training samples/s (Fashion-MNIST, MinAtar PPO), GFLOP/s")

static const dpt_command_t dpt_benches[] = {
#define DPT__BENCH(name, fn, summary) {name, fn, summary},
    DPT_BENCH_LIST(DPT__BENCH)
#undef DPT__BENCH
};

static const dpt_command_t *dpt__lookup(const dpt_command_t *table, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

static void dpt__usage(FILE *f)
{
    fprintf(f, "usage: dpt COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof dpt_commands / sizeof dpt_commands[0]; i++)
        fprintf(f, "  %-8s %s\n", dpt_commands[i].name, dpt_commands[i].summary);
    fprintf(f, "\n`dpt COMMAND --help` describes a command.\n");
}

int dpt_cmd_info(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: dpt info\n\nPrints the version, the optional features this build "
               "found, and the GEMM backend in use.\n");
        return DPT_EXIT_OK;
    }
    if (argc > 1) {
        fprintf(stderr, "dpt info: unexpected argument \"%s\"\n", argv[1]);
        return DPT_EXIT_USAGE;
    }
    printf("dpt %s\n", dpt_version());
    printf("built by: %s\n", DPT_BUILT_BY);
    printf("features:\n");
    for (int f = 0; f < DPT_FEATURE_COUNT; f++)
        printf("  %-6s %-4s %s\n", dpt_feature_name((dpt_feature_t)f),
               dpt_has_feature((dpt_feature_t)f) ? "yes" : "no",
               dpt_feature_description((dpt_feature_t)f));
    printf("collectives: threads%s\n",
           dpt_has_feature(DPT_FEATURE_MPI) ? ", mpi, hier" : " (mpi, hier need MPI)");
    printf("gemm: %s\n", dpt_gemm_describe(dpt_gemm_get_backend()));
    return DPT_EXIT_OK;
}

int dpt_cmd_bench(int argc, char **argv)
{
    size_t n = sizeof dpt_benches / sizeof dpt_benches[0];
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: dpt bench NAME [OPTIONS]\n\nbenchmarks:\n");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "  %-10s %s\n", dpt_benches[i].name, dpt_benches[i].summary);
        return argc < 2 ? DPT_EXIT_USAGE : DPT_EXIT_OK;
    }
    const dpt_command_t *b = dpt__lookup(dpt_benches, n, argv[1]);
    if (!b) {
        fprintf(stderr, "dpt bench: unknown benchmark \"%s\" (try `dpt bench --help`)\n", argv[1]);
        return DPT_EXIT_USAGE;
    }
    return b->fn(argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        dpt__usage(stderr);
        return DPT_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        dpt__usage(stdout);
        return DPT_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dpt %s\n", dpt_version());
        return DPT_EXIT_OK;
    }
    const dpt_command_t *c =
        dpt__lookup(dpt_commands, sizeof dpt_commands / sizeof dpt_commands[0], argv[1]);
    if (!c) {
        fprintf(stderr, "dpt: unknown command \"%s\" (try `dpt --help`)\n", argv[1]);
        return DPT_EXIT_USAGE;
    }
    return c->fn(argc - 1, argv + 1);
}
