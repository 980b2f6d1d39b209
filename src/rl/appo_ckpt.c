/*
 * APPO/IMPALA checkpoints (dpt_appo_checkpoint, dpt_appo_restore): the
 * weights, the optimizers and the counters (the run's step counters as
 * metadata); the envs and the queues are not saved (see appo.c).
 */
#include "dpt/status.h"
#include "appo_internal.h"
#include "optim/optim_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DPT__APPO_MAGIC UINT64_C(0x6470746170706f31) /* "dptappo1" */

/* "policy.<name>." (several policies), or "" (one: the plain layout). */
static void dpt__appo_ns(const dpt_appo_t *a, int p, char *buf, size_t size)
{
    if (a->npols == 1)
        buf[0] = '\0';
    else
        snprintf(buf, size, DPT_RL_POLICY_NS_FMT, a->cfg.policies.name[p]);
}

/* The comma-separated names of the policies (train: of those trained). */
static void dpt__appo_names(const dpt_appo_t *a, int train, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int p = 0; p < a->npols && len < size; p++)
        if (!train || a->pols[p].train)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? "," : "",
                                    a->cfg.policies.name[p]);
}

/* Checkpoint names in a run of several policies: metadata "appo.policies"
 * and "appo.policies_to_train" (comma-separated names), and under
 * "policy.<name>." each policy's "params." (and for a trained one its
 * optimizer, "optim_step" and "updates"). One policy: the plain layout. */
#define DPT__APPO_NS_MAX (DPT_RL_POLICY_NAME_MAX + 16)
#define DPT__APPO_NAMES_MAX (DPT_RL_MAX_POLICIES * DPT_RL_POLICY_NAME_MAX)

int dpt_appo_checkpoint(dpt_appo_t *a, dpt_safetensors_writer_t *w)
{
    /* A copy of the weights and the optimizers taken between two updates:
     * the learner goes on while the writer saves. */
    pthread_mutex_lock(&a->mu);
    int rc = DPT_OK;
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__appo_pol_t *pol = &a->pols[p];
        if (!pol->train) {
            pthread_mutex_lock(&a->wmu);
            memcpy(pol->ck_params.data, pol->pub.data, pol->pub.count * sizeof(float));
            pthread_mutex_unlock(&a->wmu);
            continue;
        }
        rc = dpt_towers_get_weights(pol->towers, pol->ck_params.data, pol->ck_params.count);
        dpt_optim_t *opt = dpt_towers_optimizer(pol->towers);
        for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++)
            memcpy(dpt_optim_slot(pol->ck_opt, k), dpt_optim_slot(opt, k),
                   pol->ck_params.count * sizeof(float));
        dpt_optim_set_t(pol->ck_opt, dpt_optim_get_t(opt));
        pol->ck_updates = pol->updates;
    }
    a->ck_head[0] = DPT__APPO_MAGIC;
    a->ck_head[1] = a->iteration;
    a->ck_head[2] = a->timesteps;
    a->ck_head[3] = a->updates;
    a->ck_head[4] = a->episodes_total;
    a->ck_counters = a->counters;
    pthread_mutex_unlock(&a->mu);
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__appo_pol_t *pol = &a->pols[p];
        const dpt_vartable_t *vars = dpt_policy_vars(pol->learner);
        char ns[DPT__APPO_NS_MAX], name[DPT__APPO_NS_MAX + 16];
        dpt__appo_ns(a, p, ns, sizeof ns);
        if (pol->train) {
            rc = dpt__optim_ckpt_save_ns(w, ns, vars, pol->ck_params.data, pol->ck_opt);
            snprintf(name, sizeof name, "%supdates", ns);
            if (!rc && a->npols > 1)
                rc = dpt_safetensors_set_meta_u64(w, name, pol->ck_updates);
        } else {
            snprintf(name, sizeof name, "%sparams.", ns);
            rc =
                dpt_safetensors_add_arena(w, name, vars, pol->ck_params.data, pol->ck_params.count);
        }
    }
    if (!rc && a->npols > 1) {
        char names[DPT__APPO_NAMES_MAX];
        dpt__appo_names(a, 0, names, sizeof names);
        rc = dpt_safetensors_set_meta(w, "appo.policies", names);
        dpt__appo_names(a, 1, names, sizeof names);
        if (!rc)
            rc = dpt_safetensors_set_meta(w, "appo.policies_to_train", names);
    }
    if (!rc)
        rc = dpt_safetensors_add_blob(w, "appo.state", a->ck_head, sizeof a->ck_head);
    if (!rc)
        rc = dpt__rl_counters_save(w, &a->ck_counters);
    return rc;
}

/* The checkpoint's policies must be this run's: the same names, the same
 * ones trained. */
static int dpt__appo_check_policies(const dpt_appo_t *a, const dpt_safetensors_t *st)
{
    const char *path = dpt_safetensors_path(st);
    const char *have = dpt_safetensors_meta(st, "appo.policies");
    const char *have_train = dpt_safetensors_meta(st, "appo.policies_to_train");
    char want[DPT__APPO_NAMES_MAX], want_train[DPT__APPO_NAMES_MAX];
    dpt__appo_names(a, 0, want, sizeof want);
    dpt__appo_names(a, 1, want_train, sizeof want_train);
    if (a->npols == 1 && !have)
        return DPT_OK; /* the plain layout of one policy */
    if (!have)
        return dpt_error(DPT_EFORMAT, "checkpoint %s holds one policy; this run has policies = %s",
                         path, want);
    if (strcmp(have, want) != 0)
        return dpt_error(DPT_EFORMAT, "checkpoint %s holds policies %s; this run has policies = %s",
                         path, have, want);
    if (!have_train || strcmp(have_train, want_train) != 0)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s trains policies %s; this run has policies_to_train = %s",
                         path, have_train ? have_train : "(none given)", want_train);
    return DPT_OK;
}

int dpt_appo_restore(dpt_appo_t *a, const dpt_safetensors_t *st)
{
    if (a->lstarted)
        return dpt_error(DPT_ESTATE, "appo: restore before training starts");
    const void *blob;
    size_t bytes;
    uint64_t head[5];
    int rc = dpt__appo_check_policies(a, st);
    if (!rc)
        rc = dpt_safetensors_get_blob(st, "appo.state", &blob, &bytes);
    if (!rc && bytes != sizeof head)
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: appo.state has %zu bytes, expected %zu",
                       dpt_safetensors_path(st), bytes, sizeof head);
    if (!rc) {
        memcpy(head, blob, sizeof head);
        if (head[0] != DPT__APPO_MAGIC)
            rc = dpt_error(DPT_EFORMAT, "checkpoint %s: appo.state is not an APPO state",
                           dpt_safetensors_path(st));
    }
    dpt_rl_counters_t counters;
    if (!rc)
        rc = dpt__rl_counters_load(st, head[2], &counters);
    if (rc)
        return rc;
    /* All or nothing: every policy is read and checked before any is
     * changed. */
    dpt__optim_ckpt_t *ck = calloc((size_t)a->npols, sizeof *ck);
    uint64_t *updates = calloc((size_t)a->npols, sizeof *updates);
    if (!ck || !updates) {
        free(ck);
        free(updates);
        return dpt_error(DPT_ENOMEM, "appo: cannot allocate the restore of %d policies", a->npols);
    }
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__appo_pol_t *pol = &a->pols[p];
        const dpt_vartable_t *vars = dpt_policy_vars(pol->learner);
        char ns[DPT__APPO_NS_MAX], name[DPT__APPO_NS_MAX + 16];
        dpt__appo_ns(a, p, ns, sizeof ns);
        if (pol->train) {
            rc = dpt__optim_ckpt_load_ns(st, ns, vars, dpt_towers_optimizer(pol->towers), &ck[p]);
            snprintf(name, sizeof name, "%supdates", ns);
            updates[p] = head[3];
            if (!rc && a->npols > 1)
                rc = dpt_safetensors_meta_u64(st, name, &updates[p]);
            continue;
        }
        /* Not trained: the weights alone, in a buffer as the others'. */
        if (!(ck[p].data = calloc(pol->pub.count ? pol->pub.count : 1, sizeof(float)))) {
            rc = dpt_error(DPT_ENOMEM, "appo: cannot allocate the restore of policy %s",
                           a->cfg.policies.name[p]);
            break;
        }
        ck[p].count = pol->pub.count;
        snprintf(name, sizeof name, "%sparams.", ns);
        rc = dpt_safetensors_load_arena(st, name, vars, ck[p].data, ck[p].count);
    }
    for (int p = 0; !rc && p < a->npols; p++) {
        dpt__appo_pol_t *pol = &a->pols[p];
        if (pol->train) {
            rc = dpt_towers_set_weights(pol->towers, ck[p].data, ck[p].count);
            if (!rc) {
                dpt_optim_t *opt = dpt_towers_optimizer(pol->towers);
                dpt__optim_ckpt_apply(&ck[p], opt);
                rc = dpt_towers_set_optimizer_state(pol->towers, opt);
            }
            pol->updates = updates[p];
            pol->pub_version = updates[p];
        }
        memcpy(pol->pub.data, ck[p].data, ck[p].count * sizeof(float));
    }
    if (!rc) {
        a->iteration = head[1];
        a->timesteps = head[2];
        a->updates = head[3];
        a->episodes_total = head[4];
        a->counters = counters;
    }
    for (int p = 0; p < a->npols; p++)
        dpt__optim_ckpt_free(&ck[p]);
    free(ck);
    free(updates);
    return rc;
}
