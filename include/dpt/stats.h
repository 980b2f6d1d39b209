/*
 * dpt/stats.h — clocks and windowed statistics.
 *
 * dpt_now() is a monotonic clock in seconds. A window keeps the last
 * `capacity` values pushed into it and answers mean, standard deviation,
 * minimum, maximum and quantiles over them (the learner reports queue sizes
 * and step times this way). All memory is allocated at init; pushing and
 * querying never allocate.
 */
#ifndef DPT_STATS_H
#define DPT_STATS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic time in seconds (CLOCK_MONOTONIC), for intervals only. */
double dpt_now(void);

/* The median of v[0..n) (the mean of the two middle values when n is
 * even; NAN when n is 0). Sorts v in place. */
double dpt_median(double *v, size_t n);

/* A window of the last `capacity` doubles. The struct is the caller's; the
 * value storage is owned by the window until dpt_window_deinit(). Not
 * thread-safe: one writer, or external locking. */
typedef struct dpt_window {
    double *values;  /* ring of `capacity` values (owned) */
    double *scratch; /* sorted copy for quantiles (owned) */
    size_t capacity; /* maximum number of values kept */
    size_t count;    /* number of values currently kept (<= capacity) */
    size_t next;     /* ring position of the next push */
    size_t total;    /* number of values ever pushed */
} dpt_window_t;

/* Allocates room for `capacity` (> 0) values. Returns 0, DPT_EINVAL for a zero
 * capacity or DPT_ENOMEM. */
int dpt_window_init(dpt_window_t *w, size_t capacity);
/* Frees the storage; safe on a zeroed or already deinitialised window. */
void dpt_window_deinit(dpt_window_t *w);
/* Adds a value, dropping the oldest one when the window is full. */
void dpt_window_push(dpt_window_t *w, double x);
/* Forgets all values (capacity unchanged). */
void dpt_window_clear(dpt_window_t *w);

/* Statistics over the kept values. With no values, every statistic is 0. */
double dpt_window_mean(const dpt_window_t *w);
/* Population standard deviation sqrt(mean((x - mean)^2)). */
double dpt_window_std(const dpt_window_t *w);
double dpt_window_min(const dpt_window_t *w);
double dpt_window_max(const dpt_window_t *w);
/* Quantile q in [0, 1] with linear interpolation between order statistics
 * (q = 0.5 is the median). q outside [0, 1] is clamped. Uses the window's
 * scratch buffer, so it takes a non-const window. */
double dpt_window_quantile(dpt_window_t *w, double q);

#ifdef __cplusplus
}
#endif
#endif /* DPT_STATS_H */
