/*
 * Process-lifetime strings (core/intern.h): a growing table under a mutex.
 * A lookup is linear: the table holds a few names per policy name ever
 * configured in the process.
 */
#include "core/intern.h"
#include "dpt/status.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t dpt__intern_mu = PTHREAD_MUTEX_INITIALIZER;
static char **dpt__intern_table;
static size_t dpt__intern_n, dpt__intern_cap;

const char *dpt__intern(const char *s)
{
    const char *found = NULL;
    pthread_mutex_lock(&dpt__intern_mu);
    for (size_t i = 0; i < dpt__intern_n && !found; i++)
        if (strcmp(dpt__intern_table[i], s) == 0)
            found = dpt__intern_table[i];
    if (!found) {
        if (dpt__intern_n == dpt__intern_cap) {
            size_t cap = dpt__intern_cap ? 2 * dpt__intern_cap : 64;
            char **t = realloc(dpt__intern_table, cap * sizeof *t);
            if (t) {
                dpt__intern_table = t;
                dpt__intern_cap = cap;
            }
        }
        size_t len = strlen(s) + 1;
        char *copy = dpt__intern_n < dpt__intern_cap ? malloc(len) : NULL;
        if (copy) {
            memcpy(copy, s, len);
            dpt__intern_table[dpt__intern_n++] = copy;
            found = copy;
        }
    }
    pthread_mutex_unlock(&dpt__intern_mu);
    if (!found)
        dpt_error(DPT_ENOMEM, "cannot keep the name \"%s\"", s);
    return found;
}
