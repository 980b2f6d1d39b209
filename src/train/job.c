/*
 * The jobs (dpt/train.h's DPT_JOB_LIST): one table of descriptors, each
 * defined beside its trainer's ops, and the names, summaries and ops read
 * from it. A new job is its file plus one entry here (and one line in
 * DPT_JOB_LIST); the tests register one more through dpt__job_register_test.
 */
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <stdio.h>
#include <string.h>

static const dpt__job_t *const dpt__job_table[DPT_JOB_COUNT] = {
    [DPT_JOB_SUPERVISED] = &dpt__supervised_job, [DPT_JOB_PPO] = &dpt__ppo_job,
    [DPT_JOB_DDPPO] = &dpt__ddppo_job,           [DPT_JOB_APPO] = &dpt__appo_job,
    [DPT_JOB_IMPALA] = &dpt__impala_job,         [DPT_JOB_SYNC_REPLICAS] = &dpt__sync_replicas_job,
};

static const char *const dpt__job_names[DPT_JOB_COUNT] = {
#define DPT__JOB_NAME(sym, name, summary) [sym] = name,
    DPT_JOB_LIST(DPT__JOB_NAME)
#undef DPT__JOB_NAME
};

static const char *const dpt__job_summaries[DPT_JOB_COUNT] = {
#define DPT__JOB_SUMMARY(sym, name, summary) [sym] = summary,
    DPT_JOB_LIST(DPT__JOB_SUMMARY)
#undef DPT__JOB_SUMMARY
};

/* The one job a test may add (id DPT_JOB_COUNT). */
static const dpt__job_t *dpt__job_test;

const dpt__job_t *dpt__job_get(dpt_job_t job)
{
    if ((unsigned)job < DPT_JOB_COUNT)
        return dpt__job_table[job];
    return job == DPT_JOB_COUNT ? dpt__job_test : NULL;
}

unsigned dpt__job_keys_bit(dpt_job_t job)
{
    const dpt__job_t *d = dpt__job_get(job);
    return d ? 1u << d->keys : 0u;
}

int dpt__job_find(const char *name)
{
    for (int j = 0; j < DPT_JOB_COUNT; j++)
        if (strcmp(dpt__job_names[j], name) == 0)
            return j;
    return dpt__job_test && strcmp(dpt__job_test->name, name) == 0 ? DPT_JOB_COUNT : -1;
}

int dpt__job_register_test(const dpt__job_t *job)
{
    if (job && (job->id != DPT_JOB_COUNT || !job->ops || job->ops->job != DPT_JOB_COUNT ||
                (unsigned)job->keys >= DPT_JOB_COUNT || !job->name || !job->summary ||
                dpt__job_find(job->name) >= 0))
        return dpt_error(DPT_EINVAL, "a test job needs id DPT_JOB_COUNT, its ops, a listed job's "
                                     "keys and a new name");
    dpt__job_test = job;
    return DPT_OK;
}

const char *dpt_job_name(dpt_job_t job)
{
    if ((unsigned)job < DPT_JOB_COUNT)
        return dpt__job_names[job];
    return job == DPT_JOB_COUNT && dpt__job_test ? dpt__job_test->name : "unknown";
}

const char *dpt_job_summary(dpt_job_t job)
{
    if ((unsigned)job < DPT_JOB_COUNT)
        return dpt__job_summaries[job];
    return job == DPT_JOB_COUNT && dpt__job_test ? dpt__job_test->summary : "";
}

int dpt_job_parse(const char *name, dpt_job_t *job)
{
    int j = dpt__job_find(name);
    if (j >= 0) {
        *job = (dpt_job_t)j;
        return DPT_OK;
    }
    char known[128] = "";
    size_t len = 0;
    for (int k = 0; k < DPT_JOB_COUNT && len < sizeof known; k++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", k ? ", " : "",
                                dpt__job_names[k]);
    return dpt_error(DPT_EINVAL, "unknown job \"%s\" (known: %s)", name, known);
}

const dpt_trainer_ops_t *dpt_trainer_ops(dpt_job_t job)
{
    const dpt__job_t *d = dpt__job_get(job);
    return d ? d->ops : NULL;
}
