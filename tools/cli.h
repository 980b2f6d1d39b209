/*
 * tools/cli.h — subcommands of the `dpt` command.
 *
 * Each subcommand is `int fn(int argc, char **argv)` where argv[0] is the
 * subcommand's own name; it returns the process exit code: 0 success,
 * 1 runtime failure, 2 usage error. Subcommands print; the library does not.
 */
#ifndef DPT_TOOLS_CLI_H
#define DPT_TOOLS_CLI_H

#define DPT_EXIT_OK 0
#define DPT_EXIT_FAIL 1
#define DPT_EXIT_USAGE 2

int dpt_cmd_info(int argc, char **argv);
int dpt_cmd_demo(int argc, char **argv);
int dpt_cmd_bench(int argc, char **argv);
int dpt_cmd_train(int argc, char **argv);
int dpt_cmd_eval(int argc, char **argv);

/* Benchmarks reachable as `dpt bench NAME` (tools/bench_*.c). */
int dpt_bench_allreduce(int argc, char **argv);
int dpt_bench_towers(int argc, char **argv);
int dpt_bench_env(int argc, char **argv);
int dpt_bench_ppo(int argc, char **argv);
int dpt_bench_ddppo(int argc, char **argv);

#endif
