/* Status codes and the per-thread error message. */
#include "dpt/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One message buffer per thread: a failing call writes it, the caller reads it
 * right after. Thread-local so that towers failing at once do not mix. */
static _Thread_local char dpt__errbuf[512];

const char *dpt_strerror(int code)
{
    switch (code) {
#define DPT__STATUS_STR(sym, val, desc) \
    case (val): return (desc);
        DPT_STATUS_LIST(DPT__STATUS_STR)
#undef DPT__STATUS_STR
    default: return "unknown error";
    }
}

const char *dpt_status_name(int code)
{
    switch (code) {
#define DPT__STATUS_NAME(sym, val, desc) \
    case (val): return #sym;
        DPT_STATUS_LIST(DPT__STATUS_NAME)
#undef DPT__STATUS_NAME
    default: return "DPT_E?";
    }
}

const char *dpt_last_error(void)
{
    return dpt__errbuf;
}

int dpt_error(int code, const char *fmt, ...)
{
    /* Format into a local buffer first: callers may pass dpt_last_error()
     * itself as an argument to add context to a message. */
    char tmp[sizeof dpt__errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(dpt__errbuf, tmp, sizeof tmp);
    return code;
}

void dpt_error_clear(void)
{
    dpt__errbuf[0] = '\0';
}
