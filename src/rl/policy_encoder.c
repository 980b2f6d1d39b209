/*
 * The policy's shared encoder (dpt_policy_spec_t.encoder): a sequential
 * stack on the observation whose output the LSTM or the two heads read.
 */
#include "dpt/arena.h"
#include "dpt/status.h"
#include "policy_impl.h"

#include <stdio.h>
#include <stdlib.h>

dpt_shape_t dpt__policy_obs_shape(const dpt_policy_t *p)
{
    const dpt_shape_t *s = &p->spec.obs_shape;
    if (s->c && s->h && s->w)
        return *s;
    return dpt_env_obs_shape(p->cls); /* the class's, or [obs_dim, 1, 1] */
}

int dpt__policy_encoder_create(dpt_policy_t *p, size_t max_batch)
{
    p->enc_dim = p->cls->obs_dim;
    if (p->spec.nencoder == 0)
        return DPT_OK;
    if (p->spec.nencoder > DPT_NETWORK_MAX_LAYERS)
        return dpt_error(DPT_EINVAL, "policy: an encoder of %zu layers (at most %d)",
                         p->spec.nencoder, DPT_NETWORK_MAX_LAYERS);
    dpt_shape_t in = dpt__policy_obs_shape(p);
    if (in.c * in.h * in.w != p->cls->obs_dim)
        return dpt_error(DPT_EINVAL,
                         "policy: observation shape [%zu, %zu, %zu] does not hold the %zu values "
                         "of an observation of %s",
                         in.c, in.h, in.w, p->cls->obs_dim, p->cls->name);
    int rc = dpt_seq_create_shaped(&p->enc, in, p->spec.encoder, p->spec.nencoder, max_batch,
                                   &p->vars, "encoder.");
    if (rc) {
        char why[512];
        snprintf(why, sizeof why, "%s", dpt_last_error());
        return dpt_error(rc, "network on the observations of %s, shape [%zu, %zu, %zu]: %s",
                         p->cls->name, in.c, in.h, in.w, why);
    }
    p->enc_dim = dpt_seq_out_dim(p->enc);
    size_t n;
    if (dpt_mul_size(max_batch, p->enc_dim, &n) || !(p->denc = calloc(n ? n : 1, sizeof(float))))
        return dpt_error(DPT_ENOMEM, "policy: cannot allocate the encoder's gradient (%zu rows)",
                         max_batch);
    return DPT_OK;
}

int dpt__policy_encode(dpt_policy_t *p, const float *params, const float *obs, size_t n,
                       const float **e)
{
    *e = obs;
    return p->enc ? dpt_seq_forward(p->enc, params, obs, n, e) : DPT_OK;
}

int dpt__policy_encoder_backward(dpt_policy_t *p, const float *params, float *grads,
                                 const float *de, int store)
{
    if (!p->enc)
        return DPT_OK;
    return dpt_seq_backward_ex(p->enc, params, grads, de, NULL, store);
}
