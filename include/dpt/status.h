/*
 * dpt/status.h — status codes and error messages.
 *
 * Every dpt function that can fail returns an int: 0 (DPT_OK) on success or a
 * negative DPT_E... code. The code says what kind of failure it was; the
 * details (which file, variable, rank or value) are in a per-thread message
 * that the failing call wrote and that stays until the next failure on the
 * same thread:
 *
 *     int rc = dpt_arena_init(&a, n);
 *     if (rc < 0) fprintf(stderr, "%s: %s\n", dpt_strerror(rc), dpt_last_error());
 *
 * The library never prints and never exits; callers decide what to show.
 */
#ifndef DPT_STATUS_H
#define DPT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X-macro: symbol, value, short description. One list makes the enum and the
 * strings returned by dpt_strerror(). */
#define DPT_STATUS_LIST(X)                                    \
    X(DPT_OK, 0, "success")                                   \
    X(DPT_EINVAL, -1, "invalid argument")                     \
    X(DPT_ENOMEM, -2, "out of memory")                        \
    X(DPT_EIO, -3, "input/output error")                      \
    X(DPT_ETIMEDOUT, -4, "timed out")                         \
    X(DPT_ECLOSED, -5, "closed")                              \
    X(DPT_ENOTSUP, -6, "not supported by this build")         \
    X(DPT_ENUMERIC, -7, "non-finite value (NaN or infinity)") \
    X(DPT_EFORMAT, -8, "malformed input")                     \
    X(DPT_ESTATE, -9, "call not valid in the current state")  \
    X(DPT_ECOMM, -10, "communication failure")                \
    X(DPT_EOVERFLOW, -11, "size overflow")                    \
    X(DPT_ENOENT, -12, "not found")                           \
    X(DPT_ETHREAD, -13, "thread failure")                     \
    X(DPT_EPROTO, -14, "malformed message from a peer")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_status {
#define DPT__STATUS_ENUM(sym, val, desc) sym = (val),
    DPT_STATUS_LIST(DPT__STATUS_ENUM)
#undef DPT__STATUS_ENUM
} dpt_status_t;
/* clang-format on */

/* Static description of a status code ("invalid argument"); never NULL.
 * Unknown codes give "unknown error". */
const char *dpt_strerror(int code);

/* The symbolic name of a status code ("DPT_EINVAL"); never NULL. */
const char *dpt_status_name(int code);

/* The message of the last failure on the calling thread: a sentence with the
 * context of the failure (e.g. "linear layer 2: input has 5 columns, expected
 * 4"). Empty string when nothing failed yet. Valid until the next dpt call on
 * this thread that fails. */
const char *dpt_last_error(void);

/* Records a failure message for the calling thread (printf-style format) and
 * returns `code`, so that library code and user callbacks (models, envs) can
 * write `return dpt_error(DPT_EINVAL, "batch has %zu rows", n);`. Messages
 * longer than 511 bytes are truncated. */
int dpt_error(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clears the calling thread's message. */
void dpt_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* DPT_STATUS_H */
