/* Monotonic clock and windowed statistics. */
#include "dpt/stats.h"
#include "dpt/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double dpt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int dpt_window_init(dpt_window_t *w, size_t capacity)
{
    memset(w, 0, sizeof *w);
    if (capacity == 0)
        return dpt_error(DPT_EINVAL, "window: capacity must be > 0");
    if (capacity > ((size_t)-1) / (2 * sizeof(double)))
        return dpt_error(DPT_EOVERFLOW, "window: capacity %zu is too large", capacity);
    w->values = calloc(capacity, sizeof(double));
    w->scratch = calloc(capacity, sizeof(double));
    if (!w->values || !w->scratch) {
        dpt_window_deinit(w);
        return dpt_error(DPT_ENOMEM, "window: cannot allocate %zu values", capacity);
    }
    w->capacity = capacity;
    return DPT_OK;
}

void dpt_window_deinit(dpt_window_t *w)
{
    if (!w)
        return;
    free(w->values);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

void dpt_window_push(dpt_window_t *w, double x)
{
    if (w->capacity == 0)
        return;
    w->values[w->next] = x;
    w->next = (w->next + 1) % w->capacity;
    if (w->count < w->capacity)
        w->count++;
    w->total++;
}

void dpt_window_clear(dpt_window_t *w)
{
    w->count = 0;
    w->next = 0;
}

double dpt_window_mean(const dpt_window_t *w)
{
    if (w->count == 0)
        return 0.0;
    double s = 0.0;
    for (size_t i = 0; i < w->count; i++)
        s += w->values[i];
    return s / (double)w->count;
}

double dpt_window_std(const dpt_window_t *w)
{
    if (w->count == 0)
        return 0.0;
    double m = dpt_window_mean(w), s = 0.0;
    for (size_t i = 0; i < w->count; i++)
        s += (w->values[i] - m) * (w->values[i] - m);
    return sqrt(s / (double)w->count);
}

double dpt_window_min(const dpt_window_t *w)
{
    if (w->count == 0)
        return 0.0;
    double m = w->values[0];
    for (size_t i = 1; i < w->count; i++)
        if (w->values[i] < m)
            m = w->values[i];
    return m;
}

double dpt_window_max(const dpt_window_t *w)
{
    if (w->count == 0)
        return 0.0;
    double m = w->values[0];
    for (size_t i = 1; i < w->count; i++)
        if (w->values[i] > m)
            m = w->values[i];
    return m;
}

static int dpt__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dpt_window_quantile(dpt_window_t *w, double q)
{
    if (w->count == 0)
        return 0.0;
    if (!(q > 0.0)) /* also catches NaN */
        q = 0.0;
    if (q > 1.0)
        q = 1.0;
    memcpy(w->scratch, w->values, w->count * sizeof(double));
    qsort(w->scratch, w->count, sizeof(double), dpt__cmp_double);
    double pos = q * (double)(w->count - 1);
    size_t lo = (size_t)pos;
    if (lo + 1 >= w->count)
        return w->scratch[w->count - 1];
    double frac = pos - (double)lo;
    return w->scratch[lo] + frac * (w->scratch[lo + 1] - w->scratch[lo]);
}

double dpt_median(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, dpt__cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
