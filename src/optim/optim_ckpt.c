/* Saving and loading parameters and optimizer state (see optim_ckpt.h). */
#include "optim/optim_ckpt.h"
#include "dpt/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "optim.<slot name>." */
static void dpt__optim_slot_prefix(const dpt_optim_t *opt, int k, char *buf, size_t size)
{
    snprintf(buf, size, "optim.%s.", dpt_optim_slot_name(opt, k));
}

int dpt__optim_ckpt_save(dpt_safetensors_writer_t *w, const dpt_vartable_t *vars,
                         const float *params, dpt_optim_t *opt)
{
    int rc = dpt_safetensors_add_arena(w, "params.", vars, params, vars->total);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        char prefix[64];
        dpt__optim_slot_prefix(opt, k, prefix, sizeof prefix);
        rc = dpt_safetensors_add_arena(w, prefix, vars, dpt_optim_slot(opt, k),
                                       dpt_optim_count(opt));
    }
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "optim_step", dpt_optim_get_t(opt));
    return rc;
}

int dpt__optim_ckpt_load(const dpt_safetensors_t *st, const dpt_vartable_t *vars,
                         const dpt_optim_t *opt, dpt__optim_ckpt_t *out)
{
    memset(out, 0, sizeof *out);
    size_t n = vars->total, parts = (size_t)dpt_optim_num_slots(opt) + 1;
    if (n && parts > (size_t)-1 / sizeof(float) / n)
        return dpt_error(DPT_EOVERFLOW,
                         "checkpoint %s: %zu arenas of %zu floats overflow the "
                         "size",
                         dpt_safetensors_path(st), parts, n);
    size_t floats = parts * n;
    float *data = calloc(floats > 0 ? floats : 1, sizeof(float));
    if (!data)
        return dpt_error(DPT_ENOMEM, "checkpoint %s: cannot allocate %zu floats to restore",
                         dpt_safetensors_path(st), floats);
    uint64_t t = 0;
    int rc = dpt_safetensors_load_arena(st, "params.", vars, data, n);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        char prefix[64];
        dpt__optim_slot_prefix(opt, k, prefix, sizeof prefix);
        rc = dpt_safetensors_load_arena(st, prefix, vars, data + (size_t)(k + 1) * n, n);
    }
    if (!rc)
        rc = dpt_safetensors_meta_u64(st, "optim_step", &t);
    if (rc) {
        free(data);
        return rc;
    }
    out->data = data;
    out->count = n;
    out->nslots = dpt_optim_num_slots(opt);
    out->t = t;
    return DPT_OK;
}

void dpt__optim_ckpt_apply(const dpt__optim_ckpt_t *s, dpt_optim_t *opt)
{
    for (int k = 0; k < s->nslots; k++)
        memcpy(dpt_optim_slot(opt, k), s->data + (size_t)(k + 1) * s->count,
               s->count * sizeof(float));
    dpt_optim_set_t(opt, s->t);
}

void dpt__optim_ckpt_free(dpt__optim_ckpt_t *s)
{
    free(s->data);
    memset(s, 0, sizeof *s);
}
