/*
 * The one checkpoint path for a model's training state: the parameters, the
 * optimizer's slots and its step counter. Internal to the library (not
 * installed); every trainer saves and restores through it
 * (src/train/trainer_supervised.c, src/rl/ppo.c, src/rl/ddppo.c).
 *
 * Names in a checkpoint, for each variable V of the table:
 *   "params.V"             the parameters
 *   "optim.<slot>.V"       each optimizer slot, <slot> = dpt_optim_slot_name
 *                          ("momentum"; Adam's "m" and "v"); none for SGD
 *   metadata "optim_step"  the optimizer's step counter (dpt_optim_get_t)
 *
 * A restore is all or nothing: dpt__optim_ckpt_load reads and checks every
 * tensor into its own buffer and changes nothing; the trainer validates the
 * rest of its state, then applies the buffer (dpt__optim_ckpt_apply and its
 * own dpt_towers_set_weights).
 */
#ifndef DPT_OPTIM_CKPT_H
#define DPT_OPTIM_CKPT_H

#include "dpt/checkpoint.h"
#include "dpt/optim.h"

#include <stddef.h>
#include <stdint.h>

/* Adds "params." from `params` (vars->total floats laid out by vars), each
 * slot of `opt` (an optimizer of vars->total floats) and "optim_step" to w.
 * params and the slots are borrowed until the writer is saved. Errors: those
 * of dpt_safetensors_add_arena and dpt_safetensors_set_meta_u64. */
int dpt__optim_ckpt_save(dpt_safetensors_writer_t *w, const dpt_vartable_t *vars,
                         const float *params, dpt_optim_t *opt);

/* A model state read from a checkpoint and checked, not yet applied. */
typedef struct dpt__optim_ckpt {
    float *data;  /* [(1 + nslots) * count]: the parameters, then slot k at
                   * data + (k + 1) * count; owned, freed by dpt__optim_ckpt_free */
    size_t count; /* vars->total */
    int nslots;   /* dpt_optim_num_slots of the optimizer it was read for */
    uint64_t t;   /* "optim_step" */
} dpt__optim_ckpt_t;

/* Reads "params.", every slot of `opt` (by its slot names) and
 * "optim_step" from st into out, checking each tensor against vars
 * (dpt_safetensors_load_arena). Changes nothing else; on error out holds
 * nothing (dpt__optim_ckpt_free is still safe). Errors: those of
 * dpt_safetensors_load_arena and dpt_safetensors_meta_u64 (naming the
 * checkpoint and the tensor or key), DPT_ENOMEM. */
int dpt__optim_ckpt_load(const dpt_safetensors_t *st, const dpt_vartable_t *vars,
                         const dpt_optim_t *opt, dpt__optim_ckpt_t *out);

/* The same under a namespace: every name above prefixed with ns (e.g.
 * "policy.a." gives "policy.a.params.V", "policy.a.optim.m.V",
 * "policy.a.optim_step"), so that one checkpoint holds several models; ""
 * is the plain layout. DPT_EINVAL for a namespace of 96 bytes or more. */
int dpt__optim_ckpt_save_ns(dpt_safetensors_writer_t *w, const char *ns, const dpt_vartable_t *vars,
                            const float *params, dpt_optim_t *opt);
int dpt__optim_ckpt_load_ns(const dpt_safetensors_t *st, const char *ns, const dpt_vartable_t *vars,
                            const dpt_optim_t *opt, dpt__optim_ckpt_t *out);

/* Checks what dpt__optim_ckpt_load reads (every tensor against vars, the
 * slots of opt, "optim_step") without copying anything. Errors: those of
 * dpt__optim_ckpt_load. */
int dpt__optim_ckpt_check(const dpt_safetensors_t *st, const dpt_vartable_t *vars,
                          dpt_optim_t *opt);

/* Restores the parameters (into params, vars->total floats) and opt's slots
 * and step counter from st with no buffer of its own: everything is checked
 * first, so on error nothing changed. For a trainer that has checked the
 * rest of its state (dpt__optim_ckpt_check) and whose model is large: the
 * checkpoint's tensors go straight where they belong. */
int dpt__optim_ckpt_restore(const dpt_safetensors_t *st, const dpt_vartable_t *vars, float *params,
                            dpt_optim_t *opt);

/* Copies the loaded slots and step counter into `opt`, the optimizer (or one
 * of the same kind and count) that s was loaded for. Cannot fail. The
 * parameters are the caller's to apply. */
void dpt__optim_ckpt_apply(const dpt__optim_ckpt_t *s, dpt_optim_t *opt);

/* Frees what a load kept; s may be zeroed or freed already. */
void dpt__optim_ckpt_free(dpt__optim_ckpt_t *s);

#endif /* DPT_OPTIM_CKPT_H */
