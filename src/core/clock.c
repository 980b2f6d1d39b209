/* Monotonic condition variables and deadlines (clock.h). */
#include "core/clock.h"

#include <math.h>

int dpt__cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

struct timespec dpt__deadline(double timeout_s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = floor(timeout_s);
    long nsec = ts.tv_nsec + (long)((timeout_s - whole) * 1e9);
    ts.tv_sec += (time_t)whole + nsec / 1000000000L;
    ts.tv_nsec = nsec % 1000000000L;
    return ts;
}
