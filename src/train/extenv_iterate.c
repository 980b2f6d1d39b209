/*
 * The iteration of a trainer with an external env (dpt/extenv.h) on a thread
 * of its own, while the caller serves the env's requests on its thread.
 */
#include "dpt/status.h"
#include "dpt/train.h"
#include "rl/extenv_impl.h"

#include <stdio.h>
#include <string.h>

static void *dpt__ext_main(void *arg)
{
    dpt_ext_t *x = arg;
    int rc = dpt_trainer_iterate(x->t, x->r);
    pthread_mutex_lock(&x->mu);
    x->it_rc = rc;
    if (rc)
        snprintf(x->it_err, sizeof x->it_err, "%s", dpt_last_error());
    x->ended = 1;
    dpt__ext_changed(x);
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int dpt_ext_iterate_begin(dpt_ext_t *x, dpt_trainer_t *t, dpt_train_result_t *r)
{
    if (!x || !t || !r)
        return dpt_error(DPT_EINVAL, "dpt_ext_iterate_begin: x, t and r must not be NULL");
    if (x->running)
        return dpt_error(DPT_ESTATE, "env %s: an iteration is running (dpt_ext_iterate_end)",
                         x->cls.name);
    if (x->closed)
        return dpt_error(DPT_ESTATE, "env %s: closed", x->cls.name);
    x->t = t;
    x->r = r;
    x->ended = 0;
    x->it_rc = 0;
    x->it_err[0] = '\0';
    if (pthread_create(&x->th, NULL, dpt__ext_main, x) != 0)
        return dpt_error(DPT_ETHREAD, "env %s: cannot start the iteration's thread", x->cls.name);
    x->running = 1;
    return DPT_OK;
}

int dpt_ext_iterate_end(dpt_ext_t *x)
{
    if (!x->running)
        return dpt_error(DPT_ESTATE, "env %s: dpt_ext_iterate_end with no iteration begun",
                         x->cls.name);
    pthread_join(x->th, NULL);
    x->running = 0;
    if (x->it_rc)
        return dpt_error(x->it_rc, "%s", x->it_err);
    return DPT_OK;
}
