/*
 * Internal to the sync-replicas service across processes
 * (dpt/sync_replicas_remote.h): the kinds of its messages (protocol
 * DPT__MSG_PROTO_SR of comm/msg.h) and the layout both sides share: which
 * rank keeps each variable, which are sparse, and how a service's part of
 * an arena travels (its variables in table order, each as float32s).
 *
 *   TOKEN    {}                                   worker -> rank 0
 *   GO       {step u64, index u64, tag u64}       rank 0 -> worker
 *   FETCH    {step u64, var u32, n u64, ids u64[n]}  worker -> service
 *            (var DPT__SRW_DENSE, n 0: the dense variables)
 *   PARAMS   {the service's dense variables}      service -> worker
 *   ROWS     {rows f32[n * dim]}                  service -> worker
 *   PUSH     {step u64, figures f64[nfigures], then per variable of the
 *             service in table order: dense f32[count]; sparse n u64,
 *             ids u64[n], rows f32[n * dim]}      worker -> service
 *   GATHER   {min step u64}                       rank 0 -> service k
 *   GATHERED {optimizer step u64, state}          service k -> rank 0
 *   SCATTER  {global step u64, optimizer step u64, state}  rank 0 -> k
 * state: the service's variables, then their EMA (ema_decay > 0), then
 * each optimizer slot, each in table order.
 */
#ifndef DPT_PARALLEL_SR_WIRE_H
#define DPT_PARALLEL_SR_WIRE_H

#include "comm/msg.h"
#include "dpt/sync_replicas_remote.h"

#include <stddef.h>
#include <stdint.h>

enum {
    DPT__SRW_TOKEN = DPT__MSG_FIRST,
    DPT__SRW_GO,
    DPT__SRW_FETCH,
    DPT__SRW_PARAMS,
    DPT__SRW_ROWS,
    DPT__SRW_PUSH,
    DPT__SRW_GATHER,
    DPT__SRW_GATHERED,
    DPT__SRW_SCATTER
};
#define DPT__SRW_PROTO DPT__MSG_PROTO_SR
#define DPT__SRW_DENSE UINT32_MAX

/* What every rank knows of the layout (from the same config). */
typedef struct dpt__srw_layout {
    size_t nvars;
    size_t *offset, *count, *rows, *dim; /* [nvars]: rows = shape[0], dim = count / rows */
    unsigned char *sparse;               /* [nvars] */
    int *place;                          /* [nvars] the service keeping each */
    size_t total;                        /* floats of the table */
    int P, N, nfigures;
    double timeout_s;
} dpt__srw_layout_t;

/* Checks cfg against comm (num_ps + total_num_replicas ranks, nfigures,
 * timeout_s) and fills l (free with dpt__srw_layout_deinit, also half
 * built). */
int dpt__srw_layout_init(dpt__srw_layout_t *l, const dpt_sr_remote_config_t *cfg, dpt_comm_t *comm);
void dpt__srw_layout_deinit(dpt__srw_layout_t *l);

/* Appends (reads) the variables of service k from (into) the arena `full`
 * (the table's layout): all of them, or the dense ones only. */
void dpt__srw_put_vars(dpt__msg_t *m, const dpt__srw_layout_t *l, int k, int dense_only,
                       const float *full);
void dpt__srw_get_vars(dpt__msg_t *m, const dpt__srw_layout_t *l, int k, int dense_only,
                       float *full);

#endif
