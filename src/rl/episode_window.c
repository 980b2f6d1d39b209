/*
 * The window of recent episodes (episode_window.h): one ring, written
 * once, for every engine's episode_reward_mean.
 */
#include "episode_window.h"

#include <float.h>
#include <string.h>

void dpt__episode_window_push(dpt__episode_window_t *w, double ret, uint32_t len)
{
    w->ret[w->next] = ret;
    w->len[w->next] = len;
    w->next = (w->next + 1) % DPT__EPISODE_WINDOW;
    if (w->count < DPT__EPISODE_WINDOW)
        w->count++;
}

void dpt__episode_window_get(const dpt__episode_window_t *w, size_t age, double *ret, uint32_t *len)
{
    size_t idx = (w->next + DPT__EPISODE_WINDOW - 1 - age) % DPT__EPISODE_WINDOW;
    *ret = w->ret[idx];
    *len = w->len[idx];
}

void dpt__episode_window_stats(const dpt__episode_window_t *w, dpt__episode_stats_t *out)
{
    double s = 0.0, l = 0.0, lo = DBL_MAX, hi = -DBL_MAX, s20 = 0.0;
    size_t n20 = 0;
    for (size_t j = 0; j < w->count; j++) {
        double v;
        uint32_t len;
        dpt__episode_window_get(w, j, &v, &len);
        s += v;
        l += len;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        if (j < 20) {
            s20 += v;
            n20++;
        }
    }
    out->count = w->count;
    out->reward_mean = w->count ? s / (double)w->count : 0.0;
    out->len_mean = w->count ? l / (double)w->count : 0.0;
    out->reward_min = w->count ? lo : 0.0;
    out->reward_max = w->count ? hi : 0.0;
    out->reward_mean_20 = n20 ? s20 / (double)n20 : 0.0;
}

int dpt__episode_window_valid(uint64_t count, uint64_t next)
{
    return count <= DPT__EPISODE_WINDOW && next < DPT__EPISODE_WINDOW;
}

void dpt__episode_window_append_newest(const dpt__episode_window_t *w, size_t k, double *ret,
                                       uint32_t *len, size_t *n)
{
    for (size_t j = 0; j < k; j++) {
        if (*n == DPT__EPISODE_WINDOW) {
            memmove(ret, ret + 1, (DPT__EPISODE_WINDOW - 1) * sizeof ret[0]);
            memmove(len, len + 1, (DPT__EPISODE_WINDOW - 1) * sizeof len[0]);
            (*n)--;
        }
        dpt__episode_window_get(w, k - 1 - j, &ret[*n], &len[*n]);
        (*n)++;
    }
}
