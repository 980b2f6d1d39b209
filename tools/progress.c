/* The progress line of `dpt train` and the command's small helpers. */
#include "cli.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int dpt_cli_exit_code(int rc)
{
    switch (rc) {
    case DPT_OK: return DPT_EXIT_OK;
    case DPT_EINVAL:  /* a bad argument, key, config or input */
    case DPT_EFORMAT: /* a malformed or corrupted file given (checkpoint, dataset, metrics) */
    case DPT_ENOENT: /* a file, directory or name given that is not there */ return DPT_EXIT_USAGE;
    default: return DPT_EXIT_FAIL;
    }
}

int dpt_cli_parse_u64(const char *cmd, const char *option, const char *s, uint64_t lo, uint64_t hi,
                      uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (!(s[0] >= '0' && s[0] <= '9') || errno || *end || v < lo || v > hi) {
        fprintf(stderr, "dpt %s: %s expects an integer in [%llu, %llu], got \"%.40s\"\n", cmd,
                option, (unsigned long long)lo, (unsigned long long)hi, s);
        return DPT_EXIT_USAGE;
    }
    *out = v;
    return DPT_EXIT_OK;
}

/* A positive integer from the first of two environment variables set. */
static int dpt__cli_env_int(const char *a, const char *b, int fallback)
{
    const char *s = getenv(a);
    if (!s)
        s = getenv(b);
    char *end;
    long v = s ? strtol(s, &end, 10) : -1;
    return s && *s && !*end && v >= 0 && v < 1 << 24 ? (int)v : fallback;
}

int dpt_cli_launcher_rank(int *world)
{
    /* Open MPI's names, then the PMI ones of MPICH, Intel MPI and Slurm. */
    *world = dpt__cli_env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    if (*world < 1)
        *world = 1;
    return *world > 1 ? dpt__cli_env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0) : 0;
}

void dpt_progress_init(dpt_progress_t *p, int quiet)
{
    int world;
    dpt_cli_launcher_rank(&world);
    p->tty = isatty(STDOUT_FILENO) && world == 1;
    p->quiet = quiet;
    p->start = dpt_now();
    p->last_print = -1e9;
}

void dpt_progress_update(dpt_progress_t *p, const char *line, double frac, int force)
{
    if (p->quiet)
        return;
    double now = dpt_now();
    /* A live line refreshes 10 times a second; plain output every 5 s. */
    double period = p->tty ? 0.1 : 5.0;
    if (!force && now - p->last_print < period)
        return;
    p->last_print = now;
    double el = now - p->start;
    char eta[48] = "";
    if (frac > 0.0 && frac <= 1.0)
        snprintf(eta, sizeof eta, "  eta %.0fs", el * (1.0 - frac) / frac);
    if (p->tty)
        printf("\r\033[K%s  elapsed %.1fs%s", line, el, eta);
    else
        printf("%s  elapsed %.1fs%s\n", line, el, eta);
    fflush(stdout);
}

void dpt_progress_done(dpt_progress_t *p)
{
    if (!p->quiet && p->tty)
        printf("\n");
}
