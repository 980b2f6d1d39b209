/*
 * dpt/extenv.h — external environments: the caller steps the envs, the
 * trainer only acts and learns.
 *
 * Most environments live outside C (a Gymnasium env in Python, a simulator
 * in another process). With an external env the caller keeps its own loop:
 * it hands the trainer observations, gets actions back, steps its envs,
 * and hands back rewards, terminated and truncated flags and the final
 * observations of the episodes that ended. The trainer learns when its
 * batch is complete, as it does with its own envs (the RLlib pattern of an
 * external env, or a policy server).
 *
 * Usage, for one iteration of a trainer (dpt/train.h) of job ppo, ddppo
 * (num_workers = 1: one worker per process) or appo/impala (num_workers = 1:
 * the caller is the sampler):
 *
 *     dpt_ext_t *x;                 // num_envs envs with these spaces
 *     dpt_ext_create(&x, &spaces, num_envs);
 *     dpt_trainer_env_t te = {.ext = x};
 *     dpt_config_set(cfg, "env=external:MyEnv");   // the class's name
 *     dpt_trainer_create(&t, cfg, &te);
 *     dpt_ext_iterate_begin(x, t, &result);      // iterate() on x's thread
 *     for (;;) {
 *         const void *actions;
 *         int what = dpt_ext_poll(x, &actions);
 *         if (what == DPT_EXT_RESET) {          // every env's first observation
 *             my_reset_all(obs);
 *             dpt_ext_reset(x, obs);
 *         } else if (what == DPT_EXT_STEP) {    // one step of every env
 *             my_step_all(actions, obs, rew, term, trunc, final_obs);
 *             dpt_ext_step(x, obs, rew, term, trunc, final_obs);
 *         } else {
 *             break;                            // DPT_EXT_DONE, or an error (< 0)
 *         }
 *     }
 *     rc = dpt_ext_iterate_end(x);              // iterate()'s status
 *
 * Semantics: Gymnasium's, with the autoreset of a vector env in "same step"
 * mode. After a step, obs holds each env's next observation: for an env
 * whose episode ended (terminated or truncated) that is the first
 * observation of its next episode, and final_obs holds the last one of the
 * episode that ended. Terminated means a terminal state (no bootstrapping);
 * truncated a cut (a time limit: the trainer bootstraps from final_obs); an
 * env that is both is taken as terminated. Box actions are clipped into the
 * class's bounds before they are handed out.
 *
 * What a checkpoint keeps: the learner and the counters, as with any env;
 * not the caller's envs. A trainer restored from a checkpoint asks for a
 * reset (DPT_EXT_RESET) before its next step: its episodes start anew.
 * The env of such a checkpoint cannot be made again without the caller:
 * `dpt eval` refuses it, saying so; evaluate with the caller's env.
 *
 * Threads: dpt_ext_iterate_begin runs dpt_trainer_iterate on a thread of
 * x's; every other function is called from the caller's thread, and no
 * other trainer operation may be called between begin and end.
 */
#ifndef DPT_EXTENV_H
#define DPT_EXTENV_H

#include <stddef.h>
#include <stdint.h>

#include "dpt/env.h"
#include "dpt/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The prefix of the `env` key of a trainer given an external env:
 * "external:NAME", NAME the spaces' name. No built-in or plug-in env has
 * such a name, and nothing makes one without the caller. */
#define DPT_EXT_ENV_PREFIX "external:"

typedef struct dpt_ext dpt_ext_t;

/* What dpt_ext_poll asks of the caller. */
typedef enum dpt_ext_request {
    DPT_EXT_RESET = 1, /* reset every env: dpt_ext_reset */
    DPT_EXT_STEP = 2,  /* step every env with the actions: dpt_ext_step */
    DPT_EXT_DONE = 3   /* the iteration has ended: dpt_ext_iterate_end */
} dpt_ext_request_t;

/* An external env of num_envs envs. `spaces` describes them as a class
 * does (dpt/env.h): name (1..63 characters, the part after "external:"),
 * obs_dim and obs_shape, action_kind with num_actions or action_dim and
 * the bounds (copied), max_episode_steps 0 (the caller truncates) and
 * reward_threshold; its functions, state_size and parameters must be
 * NULL/0. Errors: DPT_EINVAL naming the field, DPT_ENOMEM, DPT_ETHREAD. */
int dpt_ext_create(dpt_ext_t **out, const dpt_env_class_t *spaces, size_t num_envs);
/* Frees x. Destroy the trainer that uses it first: while a trainer's
 * runner holds x, x is not freed (a leak rather than a dangling pointer).
 * An iteration still running is closed and joined. NULL is a no-op. */
void dpt_ext_destroy(dpt_ext_t *x);
size_t dpt_ext_num_envs(const dpt_ext_t *x);

/* Starts dpt_trainer_iterate(t, r) on x's thread (t was created with
 * x in its dpt_trainer_env_t; r is the caller's, filled when the
 * iteration ends). Errors: DPT_ESTATE (an iteration is running, or x
 * is closed), DPT_ETHREAD. */
int dpt_ext_iterate_begin(dpt_ext_t *x, dpt_trainer_t *t, dpt_train_result_t *r);
/* Waits until the trainer needs the caller or the iteration has ended;
 * returns a dpt_ext_request_t. For DPT_EXT_STEP, *actions (may be NULL)
 * points at num_envs int32 actions (discrete) or num_envs x action_dim
 * floats (box), valid until dpt_ext_step. Errors: DPT_ESTATE (no
 * iteration begun). */
int dpt_ext_poll(dpt_ext_t *x, const void **actions);
/* Answers DPT_EXT_RESET: obs [num_envs x obs_dim]. Errors: DPT_ESTATE (no
 * reset was asked for), DPT_EINVAL (NULL obs). The values are checked
 * by the trainer: a non-finite one fails the iteration, naming the env. */
int dpt_ext_reset(dpt_ext_t *x, const float *obs);
/* Answers DPT_EXT_STEP: the next observations [num_envs x obs_dim],
 * rewards and the two flags [num_envs] (0 or 1), and final_obs [num_envs x
 * obs_dim] read for the envs whose episode ended (may be NULL when none
 * was truncated). Errors: DPT_ESTATE (no step was asked for), DPT_EINVAL
 * (a NULL buffer; final_obs NULL with a truncated env). */
int dpt_ext_step(dpt_ext_t *x, const float *obs, const float *rewards, const uint8_t *terminated,
                 const uint8_t *truncated, const float *final_obs);
/* Waits for the iteration to end and returns dpt_trainer_iterate's status
 * (its message in dpt_last_error()). DPT_ESTATE when none was begun. */
int dpt_ext_iterate_end(dpt_ext_t *x);
/* The caller's envs start new episodes: before its next step the trainer
 * asks for a reset (DPT_EXT_RESET), and the episodes under way end
 * unrecorded. For a caller that used its envs for something else between
 * iterations (an evaluation). Errors: DPT_ESTATE during an iteration, and
 * for appo and impala, whose sampler steps the envs between iterations too
 * (their episodes cannot start anew). */
int dpt_ext_restart(dpt_ext_t *x);
/* Ends the exchange for good: a trainer waiting for the caller, now or
 * later, fails with DPT_ECLOSED (an iteration begun ends with it). For a
 * caller that stops in the middle of an iteration (an interrupt): close,
 * then dpt_ext_iterate_end, then destroy the trainer. */
void dpt_ext_close(dpt_ext_t *x);

#ifdef __cplusplus
}
#endif

#endif
