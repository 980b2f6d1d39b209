/*
 * dpt/sync_replicas_remote.h — the sync-replicas service (dpt/sync_replicas.h)
 * across processes, and the one interface a worker uses to reach a service,
 * in its process or in others.
 *
 * Layout of the ranks of a communicator of num_ps + total_num_replicas
 * ranks (dpt_comm_t: point-to-point messages, usually MPI):
 *
 *     ranks 0 .. P-1      the services (dpt_sr_server_t). Variable i lives on
 *                         the service dpt_sr_place() gives it; rank 0 is the
 *                         chief: it hands out the tokens and runs the steps'
 *                         sessions, the others answer until rank 0 stops them.
 *     ranks P .. P+N-1    one worker each (dpt_sr_client_t): worker w is rank
 *                         P + w.
 *
 * A worker's verbs are the in-process engine's: take a token, fetch, fetch
 * rows, push, report itself lost. A local client (dpt_sr_client_create_local)
 * calls the engine of its process; a remote one sends messages:
 *
 *     worker w (rank P+w)                services (rank 0 = chief, 1..P-1)
 *     ---------------------------------  ----------------------------------
 *     TOKEN                        --->  rank 0: the first of a session, or
 *                                        once a token is free for w:
 *                                  <---  GO {step, index, tag}
 *     FETCH {step, dense}          --->  every service, answered once its
 *                                  <---  global step reached `step`: PARAMS
 *     FETCH {step, var, ids}       --->  the service of sparse variable var
 *                                  <---  ROWS {rows [n, dim]}
 *     PUSH {step, figures, its variables' gradients; sparse: ids, rows}
 *                                  --->  every service (dpt_sr_push there)
 *     FAIL {code, text} (lost)     --->  rank 0: the worker is left out
 *                                  <---  STOP (end of run, or left out)
 *     BYE                          --->  rank 0
 *
 *     rank 0 -> rank k: GATHER {min step} -> GATHERED {optimizer step,
 *     state}; SCATTER {global step, optimizer step, state}; STOP -> BYE.
 *
 * The messages are dpt's internal message module's (a versioned header,
 * little-endian typed fields, one error encoding, one STOP/BYE handshake).
 *
 * Failures: every wait has a timeout (the engine config's timeout_s). Rank 0
 * names the worker ranks a step waits for when none of them is heard from
 * within timeout_s ("worker 1 (rank 2) sent nothing for ..."); the workers
 * and the other services wait twice as long for rank 0, so that the rank
 * that waited for a stopped peer is the one that reports it. A worker whose
 * gradient fails reports it (FAIL) and the steps go on while at least
 * replicas_to_aggregate workers remain, as in one process. Errors are
 * DPT_E... codes with a message naming the rank (dpt_last_error).
 *
 * Reproducibility: with N == R and the same batches per (index, worker),
 * the variables are bitwise those of the same workers in one process.
 *
 * Limits: at most one sparse variable's rows per FETCH (one call of
 * dpt_sr_client_fetch_rows); grad_clip > 0 with num_ps > 1 clips each
 * service's part of the gradient on its own (refuse it if that matters).
 */
#ifndef DPT_SYNC_REPLICAS_REMOTE_H
#define DPT_SYNC_REPLICAS_REMOTE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dpt/comm.h"
#include "dpt/sync_replicas.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Doubles a push may carry (the worker's figures: loss, hits, ...). */
#define DPT_SR_MAX_FIGURES 8

typedef struct dpt_sr_remote_config {
    /* The service's config, the same on every rank (vars, sparse, R, N,
     * num_ps, timeout_s > 0, ...). owned and no_tokens are ignored: the
     * server sets them from its rank. Borrowed for the create call. */
    dpt_sr_config_t sr;
    /* Doubles each push carries (0 .. DPT_SR_MAX_FIGURES); the services sum
     * them per worker over the pushes they accepted. */
    int nfigures;
} dpt_sr_remote_config_t;

/* A token: the step of the worker's next gradient. index counts the
 * gradients handed to this worker in the session (from the session's
 * first_index); tag is the session's (both are the caller's, e.g. which
 * batch the worker takes). */
typedef struct dpt_sr_token {
    uint64_t step, index, tag;
} dpt_sr_token_t;

/* ---- a service rank --------------------------------------------------------------- */

typedef struct dpt_sr_server dpt_sr_server_t;

/* Creates the service of rank dpt_comm_rank(comm) (< num_ps) with its own
 * engine (dpt_sr_create with owned = the variables placed on this rank and
 * no_tokens on every rank but 0). comm is borrowed until destroy and must
 * have num_ps + total_num_replicas ranks. Errors: DPT_EINVAL (the layout,
 * nfigures, timeout_s <= 0, the engine's checks), DPT_ENOMEM. */
int dpt_sr_server_create(dpt_sr_server_t **s, const dpt_sr_remote_config_t *cfg, dpt_comm_t *comm);
/* Frees the server and its engine (NULL is a no-op). Sends nothing: rank 0
 * ends the run with dpt_sr_server_stop first. */
void dpt_sr_server_destroy(dpt_sr_server_t *s);
/* The engine (borrowed, valid until destroy): initialise its variables,
 * set its global step, read its stats, checkpoint it, between sessions. */
dpt_sr_t *dpt_sr_server_engine(dpt_sr_server_t *s);
/* A flag (e.g. set by a signal handler; may be NULL). On rank 0, once it
 * is non-zero or another rank asked to stop (dpt_sr_server_stop_asked), a
 * session that hears from no worker for a second (the step waits for a
 * stopped or dead one) ends with DPT_ECLOSED naming them instead of
 * waiting out timeout_s; the engine then holds the variables of the
 * global step reached. A session that makes progress runs to its end (the
 * caller stops after it). On another service, a non-zero flag makes it
 * ask rank 0 to stop the run (once). */
void dpt_sr_server_set_stop_flag(dpt_sr_server_t *s, const volatile sig_atomic_t *flag);
/* Rank 0: the first rank (a worker, dpt_sr_client_ask_stop, or another
 * service, its stop flag) that asked to stop the run, or -1. The request
 * is the caller's to act on: end the session's caller after it, then
 * dpt_sr_server_stop. */
int dpt_sr_server_stop_asked(const dpt_sr_server_t *s);

/* Rank 0: one session (dpt_sr_begin with the default initial tokens) until
 * the global step reaches `until`, answering every worker and handing out
 * tokens as the engine frees them. A worker's first token of the session
 * carries the global step (the chief's init); tokens carry `tag` and index
 * first_index, first_index + 1, ... per worker. Returns 0 when the steps
 * are done; DPT_ECLOSED (a stop while the step waits for silent workers,
 * named: see dpt_sr_server_set_stop_flag); DPT_ETIMEDOUT naming the worker
 * ranks the step waits for; the engine's failure (fewer than R workers
 * left: the message names the last worker lost and why); DPT_EFORMAT
 * naming a rank that sent a malformed message; a communication error.
 * The other services need no session: they follow rank 0. */
int dpt_sr_server_session(dpt_sr_server_t *s, uint64_t until, uint64_t tag, uint64_t first_index);
/* Ranks 1 .. num_ps - 1: answers workers and rank 0 until rank 0 stops the
 * run (returns 0), or fails (DPT_ETIMEDOUT: nothing heard for twice
 * timeout_s; a malformed message; a communication error). */
int dpt_sr_server_serve(dpt_sr_server_t *s);
/* Rank 0: the variables of every other service, with their EMA and
 * optimizer slots, once its global step reached `min`, written into rank
 * 0's engine (which then holds the whole model). */
int dpt_sr_server_gather(dpt_sr_server_t *s, uint64_t min);
/* Rank 0: every other service gets its part of rank 0's engine (variables,
 * EMA, slots), the optimizer step and the global step (after a restore). */
int dpt_sr_server_scatter(dpt_sr_server_t *s);
/* Rank 0: the end of the run (the STOP/BYE handshake with every worker not
 * yet stopped and every other service). DPT_ETIMEDOUT naming the ranks that
 * did not answer within timeout_s. Call it once. */
int dpt_sr_server_stop(dpt_sr_server_t *s);

/* A worker as rank 0 saw it in the current session. */
typedef struct dpt_sr_worker_info {
    uint64_t pushes;                    /* pushes received (stale ones included) */
    uint64_t accepted;                  /* pushes that counted toward a step */
    uint64_t rows;                      /* sparse rows pushed to this service */
    double figures[DPT_SR_MAX_FIGURES]; /* summed over the accepted pushes */
    int lost;                           /* left out (for the rest of the run) */
} dpt_sr_worker_info_t;
/* Errors: DPT_EINVAL (worker out of range). */
int dpt_sr_server_worker(const dpt_sr_server_t *s, int worker, dpt_sr_worker_info_t *out);
/* "" or the last worker left out and why ("worker 1 (rank 2): ...");
 * borrowed, valid until the next session or destroy. */
const char *dpt_sr_server_lost_reason(const dpt_sr_server_t *s);

/* ---- a worker's handle ------------------------------------------------------------ */

typedef struct dpt_sr_client dpt_sr_client_t;

/* Worker `worker` of the engine sr of this process (borrowed until
 * destroy). Errors: DPT_EINVAL, DPT_ENOMEM. */
int dpt_sr_client_create_local(dpt_sr_client_t **c, dpt_sr_t *sr, int worker);
/* Worker dpt_comm_rank(comm) - num_ps of the services of ranks
 * 0 .. num_ps - 1 (comm borrowed until destroy). cfg as the servers'.
 * Errors: DPT_EINVAL (the layout, a rank that is not a worker's),
 * DPT_ENOMEM. */
int dpt_sr_client_create_remote(dpt_sr_client_t **c, const dpt_sr_remote_config_t *cfg,
                                dpt_comm_t *comm);
/* Frees the handle (NULL is a no-op); sends nothing. */
void dpt_sr_client_destroy(dpt_sr_client_t *c);
/* The worker's number (0 .. N-1). */
int dpt_sr_client_worker(const dpt_sr_client_t *c);

/* A local client: the engine's session began (dpt_sr_begin); the next
 * take_token returns the global step without a token, with this tag and
 * index first_index. No-op for a remote client (rank 0 tells it). */
void dpt_sr_client_begin(dpt_sr_client_t *c, uint64_t tag, uint64_t first_index);
/* The step of the worker's next gradient (waiting up to timeout_s locally,
 * twice that for rank 0). DPT_ECLOSED when the session (local) or the run
 * (remote: rank 0 said STOP, answered with BYE) is over; the engine's
 * errors (local); DPT_ETIMEDOUT naming rank 0; a FAIL of rank 0 as its
 * error. */
int dpt_sr_client_take_token(dpt_sr_client_t *c, dpt_sr_token_t *tok);
/* The dense variables into out (the table's layout; sparse variables'
 * values are left as they are), as of the step of the last token. */
int dpt_sr_client_fetch(dpt_sr_client_t *c, float *out);
/* Rows idx[0..n) of sparse variable `var` into out [n, dim]. */
int dpt_sr_client_fetch_rows(dpt_sr_client_t *c, size_t var, const int64_t *idx, size_t n,
                             float *out);
/* Pushes the gradient of `step` (dpt_sr_push's grads and sparse, borrowed
 * for the call) with nfigures doubles of figures (may be NULL when
 * nfigures is 0). *accepted (may be NULL): 1 counted, 0 stale (local); -1
 * remote (the services count: dpt_sr_server_worker). */
int dpt_sr_client_push(dpt_sr_client_t *c, uint64_t step, const float *grads,
                       const dpt_sparse_rows_t *const *sparse, const double *figures,
                       int *accepted);
/* The worker failed with `code` and `why` and leaves the steps: local,
 * dpt_sr_worker_lost (its error when fewer than R remain); remote, FAIL
 * {code, why} to rank 0 and the wait for its STOP (0 once answered), except
 * after a failure of rank 0 itself (DPT_ETIMEDOUT, DPT_ECOMM: returns code
 * at once). */
int dpt_sr_client_lost(dpt_sr_client_t *c, int code, const char *why);
/* The worker was asked to stop (a signal that reached its process alone):
 * remote, ASK_STOP to rank 0, once, without waiting (rank 0 decides; its
 * STOP ends the run as usual); local, nothing (the process that runs the
 * service has the same request). Errors: a communication error. */
int dpt_sr_client_ask_stop(dpt_sr_client_t *c);

#ifdef __cplusplus
}
#endif
#endif /* DPT_SYNC_REPLICAS_REMOTE_H */
