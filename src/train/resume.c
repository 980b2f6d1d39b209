/*
 * Resuming a run (dpt_train_run with a resume directory): the run's config
 * rebuilt from config.conf, checked against the checkpoint's own copy, with
 * the overrides the user may give (the resumable keys), and the log of what
 * changed. Nothing here writes the run's files but overrides.log.
 */
#include "core/io.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends "env_config.NAME (x, now y)" to msg for each entry whose value
 * differs between `a` and `b` ("(none)" where one has no such entry); counts
 * them in *n, with dpt__resume_compare's other differences (the first 8 listed). */
static void dpt__resume_compare_env(const dpt_config_t *a, const dpt_config_t *b, char *msg,
                                    size_t size, int *n)
{
    /* The names of a, then those only b has. */
    for (int pass = 0; pass < 2; pass++) {
        const dpt_config_t *from = pass ? b : a;
        for (size_t i = 0; i < dpt_config_env_count(from); i++) {
            const char *name = dpt_config_env_name(from, i);
            const char *x = dpt_config_env_get(a, name), *y = dpt_config_env_get(b, name);
            if ((pass && x) || (x && y && strcmp(x, y) == 0))
                continue;
            size_t len = strlen(msg);
            if ((*n)++ < 8)
                snprintf(msg + len, size - len, "%s" DPT_CONFIG_ENV_PREFIX "%s (%.60s, now %.60s)",
                         len ? "; " : "", name, x ? x : "(none)", y ? y : "(none)");
        }
    }
}

/* Whether key k may differ between a and b whatever its flags: the device
 * and worker counts of a run in the invariant reduction order (its weights
 * do not depend on them; ddppo's trainer checks that the envs in all stay
 * the same). */
static int dpt__resume_key_free(const dpt_config_t *a, const dpt_config_t *b, dpt_config_key_t k)
{
    int ddppo = dpt_config_job(a) == DPT_JOB_DDPPO;
    if ((k != DPT_CFG_num_devices &&
         !(ddppo && (k == DPT_CFG_num_workers || k == DPT_CFG_num_envs_per_worker))) ||
        !dpt_config_applies(a, DPT_CFG_reduction_order) ||
        !dpt_config_applies(b, DPT_CFG_reduction_order))
        return 0;
    return DPT_CI(a, reduction_order) == DPT_REDUCTION_INVARIANT &&
           DPT_CI(b, reduction_order) == DPT_REDUCTION_INVARIANT;
}

/* Keys of `a` and `b` whose values differ, limited to those without
 * `allowed` flags, and the env_config entries that differ; DPT_EINVAL listing
 * them. */
static int dpt__resume_compare(const dpt_config_t *a, const dpt_config_t *b, unsigned allowed,
                               const char *what)
{
    char msg[1024] = "";
    int n = 0;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        const dpt_config_key_info_t *ki = dpt_config_key_info((dpt_config_key_t)k);
        if ((ki->flags & allowed) || !dpt_config_applies(a, (dpt_config_key_t)k) ||
            dpt__resume_key_free(a, b, (dpt_config_key_t)k))
            continue;
        const char *x = dpt_config_str(a, (dpt_config_key_t)k);
        const char *y = dpt_config_str(b, (dpt_config_key_t)k);
        if (strcmp(x, y) == 0)
            continue;
        size_t len = strlen(msg);
        if (n++ < 8)
            snprintf(msg + len, sizeof msg - len, "%s%s (%.60s, now %.60s)", len ? "; " : "",
                     ki->name, x, y);
    }
    if (dpt_config_applies(a, DPT_CFG_env))
        dpt__resume_compare_env(a, b, msg, sizeof msg, &n);
    if (n)
        return dpt_error(DPT_EINVAL,
                         "%s: %s%s. Only stop conditions, checkpoint and "
                         "evaluation settings, timeouts, data locations and the frozen "
                         "variables may change when a run is resumed",
                         what, msg, n > 8 ? "; ..." : "");
    return DPT_OK;
}

int dpt__record_overrides(const char *dir, const dpt_config_t *cfg, const dpt_config_t *saved,
                          uint64_t iteration)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/overrides.log", dir);
    FILE *f = NULL;
    for (int k = 0; k < DPT_CFG_COUNT; k++) {
        if (!dpt_config_applies(cfg, (dpt_config_key_t)k))
            continue;
        const char *was = dpt_config_str(saved, (dpt_config_key_t)k);
        const char *now = dpt_config_str(cfg, (dpt_config_key_t)k);
        if (strcmp(was, now) == 0)
            continue;
        if (!f && !(f = dpt__io_fopen(path, "a")))
            return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(errno));
        fprintf(f, "resumed after iteration %llu: %s = %s (was %s)\n",
                (unsigned long long)iteration, dpt_config_key_info((dpt_config_key_t)k)->name, now,
                was);
    }
    if (!f)
        return DPT_OK;
    int bad = dpt__io_fflush(f) != 0 || dpt__io_fsync(fileno(f)) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad)
        return dpt_error(DPT_EIO, "cannot write %s: %s", path, strerror(e));
    return DPT_OK;
}

int dpt__resume_config(const char *dir, const dpt_config_t *given, dpt_config_t **cfg,
                       dpt_safetensors_t **st, dpt_config_t **saved_out,
                       void (*note)(void *ctx, const char *text), void *ctx)
{
    dpt_config_t *saved = NULL, *ck = NULL;
    char path[PATH_MAX];
    int rc;
    snprintf(path, sizeof path, "%s/config.conf", dir);
    if ((rc = dpt_config_create(&saved)) != 0)
        return rc;
    /* dpt 0.1 wrote every key of every job under this first line; its runs
     * carry no run metadata and cannot continue here. */
    FILE *f = fopen(path, "r");
    char first[80] = "";
    if (f) {
        if (!fgets(first, sizeof first, f))
            first[0] = '\0';
        fclose(f);
    }
    if (strncmp(first, "# dpt configuration used by this run (every key)", 48) == 0) {
        rc = dpt_error(DPT_EINVAL,
                       "--resume %s: this run was made by dpt 0.1, whose run "
                       "directories and checkpoints 0.2 cannot continue; continue it with dpt "
                       "0.1, or start a new run",
                       dir);
        goto out;
    }
    if ((rc = dpt_config_load(saved, path)) != 0) {
        if (rc == DPT_ENOENT)
            rc = dpt_error(DPT_EINVAL, "--resume %s: not a run directory (%s)", dir,
                           dpt_last_error());
        goto out;
    }
    dpt__config_mark_saved(saved);
    if ((rc = dpt_config_finalize(saved)) != 0) {
        rc = dpt_error(DPT_EINVAL, "%s: %s", path, dpt_last_error());
        goto out;
    }
    if ((rc = dpt__find_checkpoint(dir, st, note, ctx)) != 0)
        goto out;
    /* Stopped before its first checkpoint: the run starts over from its
     * config.conf (nothing else was saved). Checkpoints that are all
     * corrupt are another matter: the run's history would be lost. */
    if (!*st) {
        uint64_t *its;
        size_t n;
        if ((rc = dpt__list_checkpoints(dir, &its, &n)) != 0)
            goto out;
        free(its);
        if (n) {
            rc = dpt_error(DPT_ENOENT, "--resume %s: no valid checkpoint in %s/checkpoints", dir,
                           dir);
            goto out;
        }
    }
    const char *text = *st ? dpt_safetensors_meta(*st, "config") : NULL;
    if (*st && !text) {
        rc = dpt_error(DPT_EINVAL,
                       "--resume %s: checkpoint %s was written by dpt before 0.2 "
                       "(no run metadata); continue it with that version, or start a new run",
                       dir, dpt_safetensors_path(*st));
        goto out;
    }
    if (*st) {
        if ((rc = dpt_config_create(&ck)) != 0 ||
            (rc = dpt__config_load_text(ck, text, dpt_safetensors_path(*st))) != 0 ||
            (rc = dpt_config_finalize(ck)) != 0)
            goto out;
        snprintf(path, sizeof path, "%s/config.conf differs from checkpoint %s", dir,
                 dpt_safetensors_path(*st));
        if ((rc = dpt__resume_compare(ck, saved, DPT_CFG_RESUMABLE, path)) != 0)
            goto out;
    }
    if ((rc = dpt_config_clone(cfg, saved)) != 0)
        goto out;
    if (given) {
        if (dpt_config_given(given, DPT_CFG_job) &&
            dpt_config_job(given) != dpt_config_job(saved)) {
            rc =
                dpt_error(DPT_EINVAL, "--resume %s: the run is job %s, not %s", dir,
                          dpt_job_name(dpt_config_job(saved)), dpt_job_name(dpt_config_job(given)));
            goto out;
        }
        if ((rc = dpt__config_apply_overrides(*cfg, given)) != 0 ||
            (rc = dpt_config_finalize(*cfg)) != 0)
            goto out;
        if ((rc = dpt__resume_compare(saved, *cfg, DPT_CFG_RESUMABLE,
                                      "--resume: these keys cannot change")) != 0)
            goto out;
    }
    *saved_out = saved;
    saved = NULL;
out:
    dpt_config_destroy(saved);
    dpt_config_destroy(ck);
    return rc;
}
