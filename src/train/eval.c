/* Evaluation of a saved model with no config file (dpt/train.h). */
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Keeps why the newest checkpoint of a directory was skipped: the note
 * comes right after its load failed, whose message is still this thread's. */
static void dpt__eval_skipped(void *ctx, const char *text)
{
    (void)text;
    char *first = ctx;
    if (!first[0])
        snprintf(first, 512, "%s", dpt_last_error());
}

int dpt_eval_checkpoint(const char *path, const char *const *overrides, size_t n, size_t episodes,
                        uint64_t seed, dpt_eval_result_t *out, char *path_out, size_t path_size,
                        dpt_job_t *job_out)
{
    out->count = 0;
    out->stochastic = 0;
    out->mean_return = out->mean_length = out->loss = out->accuracy = NAN;
    out->rmse = out->mae = out->r2 = NAN;
    dpt_safetensors_t *st = NULL;
    dpt_config_t *c = NULL;
    struct stat sb;
    int rc;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char skipped[512] = "";
        if ((rc = dpt__find_checkpoint(path, &st, dpt__eval_skipped, skipped)) != 0)
            return rc;
        if (!st)
            return dpt_error(DPT_ENOENT, "%s: no valid checkpoint in %s/checkpoints%s%s", path,
                             path, skipped[0] ? "; the newest: " : "", skipped);
    } else if ((rc = dpt_safetensors_load(&st, path)) != 0) {
        return rc;
    }
    if (path_out && path_size)
        snprintf(path_out, path_size, "%s", dpt_safetensors_path(st));
    const char *text = dpt_safetensors_meta(st, "config");
    const char *job = dpt_safetensors_meta(st, "job");
    if (!text || !job) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s has no dpt run metadata: it was written by "
                       "dpt before 0.2 or by another program; evaluate it with the dpt that "
                       "wrote it",
                       dpt_safetensors_path(st));
        goto out;
    }
    if ((rc = dpt_config_create(&c)) != 0 ||
        (rc = dpt__config_load_text(c, text, dpt_safetensors_path(st))) != 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        if ((rc = dpt_config_set(c, overrides[i])) != 0)
            goto out;
    if ((rc = dpt_config_finalize(c)) != 0)
        goto out;
    dpt_job_t j = dpt_config_job(c);
    if (strcmp(job, dpt_job_name(j)) != 0) {
        rc = dpt_error(DPT_EINVAL, "checkpoint %s is a %s checkpoint; job cannot be changed to %s",
                       dpt_safetensors_path(st), job, dpt_job_name(j));
        goto out;
    }
    if (job_out)
        *job_out = j;
    if (seed == UINT64_MAX)
        seed = (uint64_t)dpt_config_int(c, DPT_CFG_seed);
    rc = dpt_trainer_ops(j)->eval_checkpoint(c, st, episodes, seed, out);
out:
    dpt_config_destroy(c);
    dpt_safetensors_destroy(st);
    return rc;
}
