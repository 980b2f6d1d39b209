/*
 * tools/cli.h — subcommands of the `dpt` command.
 *
 * Each subcommand is `int fn(int argc, char **argv)` where argv[0] is the
 * subcommand's own name; it returns the process exit code. The command
 * parses, prints and maps errors to exit codes; training itself is the
 * library's (dpt/train.h).
 */
#ifndef DPT_TOOLS_CLI_H
#define DPT_TOOLS_CLI_H

#include <stdint.h>

#define DPT_EXIT_OK 0
#define DPT_EXIT_FAIL 1
#define DPT_EXIT_USAGE 2

int dpt_cmd_info(int argc, char **argv);
int dpt_cmd_demo(int argc, char **argv);
int dpt_cmd_bench(int argc, char **argv);
int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);
int dpt_cmd_init(int argc, char **argv);
int dpt_cmd_check_env(int argc, char **argv);
int dpt_cmd_plot(int argc, char **argv);

/* Benchmarks reachable as `dpt bench NAME` (bench/cli/). */
int dpt_bench_allreduce(int argc, char **argv);
int dpt_bench_towers(int argc, char **argv);
/* dpt bench towers --backend mpi (bench/cli/bench_towers_mpi.c). */
int dpt__bench_towers_mpi(int argc, char **argv);
int dpt_bench_env(int argc, char **argv);
int dpt_bench_ppo(int argc, char **argv);
int dpt_bench_ddppo(int argc, char **argv);
int dpt_bench_lstm(int argc, char **argv);
int dpt_bench_appo(int argc, char **argv);
int dpt_bench_sync_replicas(int argc, char **argv);
int dpt_bench_cnn(int argc, char **argv);
/* The per-core peak the benchmarks report against: GFLOP/s of one
 * thread's 512^3 GEMM with the current backend, the median of 9 timed calls
 * after a warm-up; 0 when out of memory (bench/cli/bench_rl.c). */
double dpt__bench_gemm_peak(void);

/* The exit code of a library error (the table of docs/RELIABILITY.md, "Exit
 * codes"): 2 for bad input given by the user: a bad argument, key or config
 * (DPT_EINVAL), a malformed or corrupted file (DPT_EFORMAT: a checkpoint, a
 * dataset, result.jsonl), a path that names nothing (DPT_ENOENT); 1 for a
 * failure while running: I/O (DPT_EIO), memory, numbers, threads, peers
 * (DPT_ECOMM: a malformed message between ranks too), timeouts. */
int dpt_cli_exit_code(int rc);

/* Parses a whole decimal integer in [lo, hi] ("--episodes 10"). Returns 0,
 * or prints "dpt CMD: OPTION expects an integer in [lo, hi], got \"s\"" and
 * returns DPT_EXIT_USAGE. */
int dpt_cli_parse_u64(const char *cmd, const char *option, const char *s, uint64_t lo, uint64_t hi,
                      uint64_t *out);

/* This process's rank in the world a launcher (mpirun, srun) started, and
 * the world's size in *world: 0 and 1 when there is no launcher. */
int dpt_cli_launcher_rank(int *world);

/* Progress display: a live line on a terminal, plain lines otherwise and
 * under a launcher (which gives each rank a pseudo-terminal, though its
 * output goes where mpirun's does: often a log). */
typedef struct dpt_progress {
    int tty, quiet;
    double last_print, start;
} dpt_progress_t;

void dpt_progress_init(dpt_progress_t *p, int quiet);
/* `line` is the status text; frac in [0, 1] gives the ETA (negative: none).
 * force prints even when the last print was recent. */
void dpt_progress_update(dpt_progress_t *p, const char *line, double frac, int force);
/* Ends the live line (a newline on a terminal). */
void dpt_progress_done(dpt_progress_t *p);

#endif
