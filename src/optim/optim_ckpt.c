/* Saving and loading parameters and optimizer state (see optim_ckpt.h). */
#include "optim/optim_ckpt.h"
#include "dpt/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ns + "optim.<slot name>." */
static void dpt__optim_slot_prefix(const char *ns, const dpt_optim_t *opt, int k, char *buf,
                                   size_t size)
{
    snprintf(buf, size, "%soptim.%s.", ns, dpt_optim_slot_name(opt, k));
}

/* The names are ns + "params.", ns + "optim_step": a namespace longer than
 * DPT__OPTIM_NS_MAX - 1 bytes is refused rather than cut. */
#define DPT__OPTIM_NS_MAX 96

static int dpt__optim_ns_check(const char *ns)
{
    if (strlen(ns) >= DPT__OPTIM_NS_MAX)
        return dpt_error(DPT_EINVAL, "checkpoint namespace \"%s\" is longer than %d bytes", ns,
                         DPT__OPTIM_NS_MAX - 1);
    return DPT_OK;
}

int dpt__optim_ckpt_save_ns(dpt_safetensors_writer_t *w, const char *ns, const dpt_vartable_t *vars,
                            const float *params, dpt_optim_t *opt)
{
    char name[DPT__OPTIM_NS_MAX + 64];
    int rc = dpt__optim_ns_check(ns);
    if (!rc) {
        snprintf(name, sizeof name, "%sparams.", ns);
        rc = dpt_safetensors_add_arena(w, name, vars, params, vars->total);
    }
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        dpt__optim_slot_prefix(ns, opt, k, name, sizeof name);
        rc = dpt_safetensors_add_arena(w, name, vars, dpt_optim_slot(opt, k), dpt_optim_count(opt));
    }
    if (!rc) {
        snprintf(name, sizeof name, "%soptim_step", ns);
        rc = dpt_safetensors_set_meta_u64(w, name, dpt_optim_get_t(opt));
    }
    return rc;
}

int dpt__optim_ckpt_save(dpt_safetensors_writer_t *w, const dpt_vartable_t *vars,
                         const float *params, dpt_optim_t *opt)
{
    return dpt__optim_ckpt_save_ns(w, "", vars, params, opt);
}

int dpt__optim_ckpt_load(const dpt_safetensors_t *st, const dpt_vartable_t *vars,
                         const dpt_optim_t *opt, dpt__optim_ckpt_t *out)
{
    return dpt__optim_ckpt_load_ns(st, "", vars, opt, out);
}

int dpt__optim_ckpt_load_ns(const dpt_safetensors_t *st, const char *ns, const dpt_vartable_t *vars,
                            const dpt_optim_t *opt, dpt__optim_ckpt_t *out)
{
    memset(out, 0, sizeof *out);
    int rc = dpt__optim_ns_check(ns);
    if (rc)
        return rc;
    char name[DPT__OPTIM_NS_MAX + 64];
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
    snprintf(name, sizeof name, "%sparams.", ns);
    rc = dpt_safetensors_load_arena(st, name, vars, data, n);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        dpt__optim_slot_prefix(ns, opt, k, name, sizeof name);
        rc = dpt_safetensors_load_arena(st, name, vars, data + (size_t)(k + 1) * n, n);
    }
    if (!rc) {
        snprintf(name, sizeof name, "%soptim_step", ns);
        rc = dpt_safetensors_meta_u64(st, name, &t);
    }
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

/* Checks (params NULL) or restores params and opt's slots from st. */
static int dpt__optim_ckpt_into(const dpt_safetensors_t *st, const dpt_vartable_t *vars,
                                float *params, dpt_optim_t *opt, uint64_t *t)
{
    char name[DPT__OPTIM_NS_MAX + 64];
    int rc = dpt_safetensors_load_arena(st, "params.", vars, params, vars->total);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        dpt__optim_slot_prefix("", opt, k, name, sizeof name);
        rc = dpt_safetensors_load_arena(st, name, vars, params ? dpt_optim_slot(opt, k) : NULL,
                                        dpt_optim_count(opt));
    }
    return rc ? rc : dpt_safetensors_meta_u64(st, "optim_step", t);
}

int dpt__optim_ckpt_check(const dpt_safetensors_t *st, const dpt_vartable_t *vars, dpt_optim_t *opt)
{
    uint64_t t;
    return dpt__optim_ckpt_into(st, vars, NULL, opt, &t);
}

int dpt__optim_ckpt_restore(const dpt_safetensors_t *st, const dpt_vartable_t *vars, float *params,
                            dpt_optim_t *opt)
{
    uint64_t t;
    int rc = dpt__optim_ckpt_into(st, vars, NULL, opt, &t);
    if (!rc)
        rc = dpt__optim_ckpt_into(st, vars, params, opt, &t);
    if (!rc)
        dpt_optim_set_t(opt, t);
    return rc;
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
