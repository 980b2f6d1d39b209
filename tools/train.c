/*
 * `dpt train` and `dpt eval`: command line, run directory, checkpoints and
 * resume. The jobs themselves are in job_supervised.c and job_rl.c.
 */
#include "cli.h"
#include "train.h"
#include "dpt/dpt.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dpt_run_fail(const char *what, int rc)
{
    fprintf(stderr, "dpt train: %s: %s: %s\n", what, dpt_strerror(rc), dpt_last_error());
    return DPT_EXIT_FAIL;
}

void dpt_run_checkpoint_path(const dpt_run_t *run, uint64_t iteration, char *out, size_t n)
{
    snprintf(out, n, "%s/checkpoints/checkpoint-%08llu.safetensors", run->dir,
             (unsigned long long)iteration);
}

/* Checkpoint iterations present in dir/checkpoints, newest first. */
static int dpt__list_checkpoints(const char *dir, unsigned long long *its, int max)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        unsigned long long it;
        char tail[32];
        if (sscanf(e->d_name, "checkpoint-%llu.%31s", &it, tail) == 2 &&
            strcmp(tail, "safetensors") == 0)
            its[n++] = it;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && its[j] > its[j - 1]; j--) {
            unsigned long long t = its[j];
            its[j] = its[j - 1];
            its[j - 1] = t;
        }
    return n;
}

int dpt_run_find_checkpoint(const char *dir, dpt_safetensors_t **st, int quiet)
{
    *st = NULL;
    unsigned long long its[4096];
    int n = dpt__list_checkpoints(dir, its, 4096);
    for (int i = 0; i < n; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/checkpoints/checkpoint-%08llu.safetensors", dir, its[i]);
        int rc = dpt_safetensors_load(st, path);
        if (rc == 0)
            return DPT_OK;
        if (!quiet)
            fprintf(stderr, "dpt train: skipping checkpoint %s: %s\n", path, dpt_last_error());
    }
    return DPT_OK;
}

int dpt_run_save_checkpoint(dpt_run_t *run, dpt_safetensors_writer_t *w, uint64_t iteration,
                            double time_total_s)
{
    char path[1200], buf[64];
    snprintf(path, sizeof path, "%s/checkpoints", run->dir);
    int rc = dpt_mkdirs(path);
    if (rc)
        return rc;
    snprintf(buf, sizeof buf, "%.17g", time_total_s);
    if ((rc = dpt_safetensors_set_meta(w, "job", CFG_S(&run->cfg, job))) != 0 ||
        (rc = dpt_safetensors_set_meta_u64(w, "config_digest", dpt_config_digest(&run->cfg))) ||
        (rc = dpt_safetensors_set_meta_u64(w, "training_iteration", iteration)) != 0 ||
        (rc = dpt_safetensors_set_meta(w, "time_total_s", buf)) != 0)
        return rc;
    dpt_run_checkpoint_path(run, iteration, path, sizeof path);
    if ((rc = dpt_safetensors_save(w, path)) != 0)
        return rc;
    /* Keep the newest keep_checkpoints files. */
    unsigned long long its[4096];
    int n = dpt__list_checkpoints(run->dir, its, 4096);
    for (int i = (int)CFG_I(&run->cfg, keep_checkpoints); i < n; i++) {
        char old[1200];
        snprintf(old, sizeof old, "%s/checkpoints/checkpoint-%08llu.safetensors", run->dir,
                 its[i]);
        unlink(old);
    }
    return DPT_OK;
}

int dpt_run_open_metrics(dpt_run_t *run, uint64_t resumed_iteration)
{
    int rc;
    if (run->rank != 0)
        return DPT_OK;
    if (run->resume && (rc = dpt_metrics_truncate(run->dir, (long)resumed_iteration)) != 0)
        return rc;
    if ((rc = dpt_metrics_open(&run->metrics, run->dir, run->resume)) != 0)
        return rc;
    run->metrics_open = 1;
    return DPT_OK;
}

static int dpt__train_usage(FILE *f, int code)
{
    fprintf(f,
            "usage: dpt train CONFIG [--set key=value]... [--resume DIR] [--quiet]\n"
            "       dpt train --resume DIR [--set key=value]... [--quiet]\n\n"
            "Trains what the config describes (job = supervised | ppo | ddppo), writing\n"
            "result.jsonl, progress.csv, config.conf and checkpoints/ under output_dir.\n"
            "--resume DIR continues from the newest valid checkpoint in DIR (with DIR's\n"
            "saved config when no CONFIG is given). DD-PPO across processes:\n"
            "  mpirun -np N dpt train CONFIG   (each rank runs num_workers worker threads)\n\n");
    dpt_config_print_help(f);
    return code;
}

/* Checks the config's cross-key rules that apply to every job. */
static int dpt__check_run_config(const dpt_config_t *c)
{
    if (CFG_I(c, job) == 2 /* ddppo */ && CFG_I(c, train_batch_size) != 0)
        return dpt_error(DPT_EINVAL,
                         "train_batch_size is derived for ddppo (rollout_fragment_length x "
                         "num_envs_per_worker per worker); remove it from the config");
    if (CFG_I(c, job) == 0 && CFG_I(c, batch_size) % CFG_I(c, num_devices) != 0)
        return dpt_error(DPT_EINVAL, "batch_size %lld must be divisible by num_devices %lld",
                         (long long)CFG_I(c, batch_size), (long long)CFG_I(c, num_devices));
    return DPT_OK;
}

int dpt_mpi_world_size(void);
int dpt_mpi_world_size(void)
{
    /* Launched by mpirun? Open MPI and MPICH/PMI export the world size. */
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    if (!s)
        s = getenv("PMI_SIZE");
    return s ? atoi(s) : 1;
}

int dpt_cmd_train(int argc, char **argv)
{
    dpt_run_t run;
    memset(&run, 0, sizeof run);
    dpt_config_defaults(&run.cfg);
    const char *config_path = NULL, *resume_dir = NULL;
    const char *sets[256];
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return dpt__train_usage(stdout, DPT_EXIT_OK);
        if (!strcmp(argv[i], "--quiet")) {
            run.quiet = 1;
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (nsets == 256) {
                fprintf(stderr, "dpt train: too many --set options\n");
                return DPT_EXIT_USAGE;
            }
            sets[nsets++] = argv[++i];
        } else if (!strcmp(argv[i], "--resume") && i + 1 < argc) {
            resume_dir = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dpt train: unknown option \"%s\" (try dpt train --help)\n", argv[i]);
            return DPT_EXIT_USAGE;
        } else if (!config_path) {
            config_path = argv[i];
        } else {
            fprintf(stderr, "dpt train: unexpected argument \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (!config_path && !resume_dir) {
        fprintf(stderr, "dpt train: a CONFIG file or --resume DIR is required\n");
        return dpt__train_usage(stderr, DPT_EXIT_USAGE);
    }
    char saved[1100];
    if (!config_path) {
        snprintf(saved, sizeof saved, "%s/config.conf", resume_dir);
        config_path = saved;
    }
    int rc = dpt_config_load(&run.cfg, config_path);
    for (int i = 0; !rc && i < nsets; i++)
        rc = dpt_config_set(&run.cfg, sets[i]);
    if (!rc)
        rc = dpt__check_run_config(&run.cfg);
    if (rc) {
        fprintf(stderr, "dpt train: %s\n", dpt_last_error());
        return rc == DPT_ENOENT || rc == DPT_EINVAL ? DPT_EXIT_USAGE : DPT_EXIT_FAIL;
    }
    if (resume_dir) {
        /* The run continues in the directory it resumes from. */
        snprintf(CFG_S(&run.cfg, output_dir), DPT_CONFIG_STR_MAX, "%s", resume_dir);
    }
    snprintf(run.dir, sizeof run.dir, "%s", CFG_S(&run.cfg, output_dir));
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r)
        r = getenv("PMI_RANK");
    run.rank = r ? atoi(r) : 0;
    if (run.rank == 0 && (rc = dpt_mkdirs(run.dir)) != 0)
        return dpt_run_fail("output directory", rc);
    if (resume_dir) {
        if ((rc = dpt_run_find_checkpoint(run.dir, &run.ckpt, run.quiet || run.rank)) != 0)
            return dpt_run_fail("resume", rc);
        if (!run.ckpt) {
            fprintf(stderr, "dpt train: --resume %s: no valid checkpoint in %s/checkpoints\n",
                    resume_dir, resume_dir);
            return DPT_EXIT_FAIL;
        }
        uint64_t digest = 0;
        const char *job = dpt_safetensors_meta(run.ckpt, "job");
        if (dpt_safetensors_meta_u64(run.ckpt, "config_digest", &digest) != 0 || !job) {
            fprintf(stderr, "dpt train: %s is not a dpt training checkpoint\n",
                    dpt_safetensors_path(run.ckpt));
            dpt_safetensors_destroy(run.ckpt);
            return DPT_EXIT_FAIL;
        }
        if (digest != dpt_config_digest(&run.cfg) || strcmp(job, CFG_S(&run.cfg, job)) != 0) {
            fprintf(stderr, "dpt train: checkpoint %s was made with a different config (only "
                    "output, stopping and bookkeeping keys may change on resume)\n",
                    dpt_safetensors_path(run.ckpt));
            dpt_safetensors_destroy(run.ckpt);
            return DPT_EXIT_USAGE;
        }
        const char *tt = dpt_safetensors_meta(run.ckpt, "time_total_s");
        run.time_offset = tt ? atof(tt) : 0.0;
        run.resume = 1;
    }
    if (run.rank == 0) {
        char path[1100];
        snprintf(path, sizeof path, "%s/config.conf", run.dir);
        if ((rc = dpt_config_save(&run.cfg, path)) != 0) {
            dpt_safetensors_destroy(run.ckpt);
            return dpt_run_fail("saving the config", rc);
        }
    }
    dpt_progress_init(&run.progress, run.quiet || run.rank != 0);
    int code = CFG_I(&run.cfg, job) == 0 ? dpt_job_supervised(&run) : dpt_job_rl(&run);
    if (run.metrics_open)
        dpt_metrics_close(&run.metrics);
    dpt_safetensors_destroy(run.ckpt);
    return code;
}
