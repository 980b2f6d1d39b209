/*
 * Internal: the window of recent episodes behind episode_reward_mean and
 * its companions: the returns and lengths of the newest
 * DPT__EPISODE_WINDOW episodes, in a ring. The rollouts keep one (PPO,
 * DD-PPO, an APPO sampler), the APPO learner one for the run and one per
 * policy. Not installed.
 */
#ifndef DPT_RL_EPISODE_WINDOW_H
#define DPT_RL_EPISODE_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#define DPT__EPISODE_WINDOW 100

/* Zero-initialized: empty. ret[next] is the slot the next episode takes;
 * the newest count (<= DPT__EPISODE_WINDOW) slots before it hold episodes.
 * Checkpoints store ret[] then len[] as they lie (src/rl/rollout.c). */
typedef struct dpt__episode_window {
    double ret[DPT__EPISODE_WINDOW];
    uint32_t len[DPT__EPISODE_WINDOW];
    size_t count, next;
} dpt__episode_window_t;

/* What the window holds, newest first: the means of all its episodes (<= 100)
 * and of the newest 20 (CleanRL's criterion); every figure is 0 when it is
 * empty. */
typedef struct dpt__episode_stats {
    double reward_mean, reward_min, reward_max, len_mean, reward_mean_20;
    size_t count;
} dpt__episode_stats_t;

/* Adds an episode, dropping the oldest when the window is full. */
void dpt__episode_window_push(dpt__episode_window_t *w, double ret, uint32_t len);

/* The episode `age` steps back (0: the newest); age < w->count. */
void dpt__episode_window_get(const dpt__episode_window_t *w, size_t age, double *ret,
                             uint32_t *len);

/* The sums run from the newest episode to the oldest. */
void dpt__episode_window_stats(const dpt__episode_window_t *w, dpt__episode_stats_t *out);

/* Whether a stored (count, next) pair can describe a window. */
int dpt__episode_window_valid(uint64_t count, uint64_t next);

/* Appends w's k newest episodes (k <= DPT__EPISODE_WINDOW), oldest first,
 * to the list ret[0..*n), len[0..*n) of room DPT__EPISODE_WINDOW, which
 * keeps its newest entries: a full list drops its first entry for each one
 * added. (An APPO train batch carries its episodes so, on the wire too.) */
void dpt__episode_window_append_newest(const dpt__episode_window_t *w, size_t k, double *ret,
                                       uint32_t *len, size_t *n);

#endif
