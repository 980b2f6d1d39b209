/*
 * Internal: the messages of dpt's point-to-point protocols (the roles of a
 * run under mpirun talking to each other: APPO's samplers and learner, the
 * sync-replicas services and workers), over dpt_comm_send / dpt_comm_recv.
 * One tag space, one header, typed fields written little-endian, one error
 * encoding and one shutdown handshake, so every protocol fails and ends the
 * same way.
 *
 * A message on the wire:
 *
 *   bytes 0..3   magic "dptm"
 *   bytes 4..5   header version (DPT__MSG_VERSION), little-endian
 *   byte  6      protocol (dpt__msg_proto_t)
 *   byte  7      kind (the protocol's own numbering; 0..3 are reserved for
 *                the kinds below, shared by every protocol)
 *   bytes 8..    the payload: fields in the order the protocol writes them
 *
 * Its tag is DPT__MSG_TAG(proto, kind): each protocol owns the 64 tags from
 * proto * 64, so two protocols on one communicator never take each other's
 * messages. A receiver checks magic, version, protocol and kind, and reads
 * the payload through a cursor that fails (DPT_EPROTO naming the sender and
 * the field) instead of reading past the end.
 *
 * Shared kinds:
 *   FAIL {code i32, text str}  a rank reports its error to a peer, which
 *                              turns it into its own ("rank 2: env step
 *                              failed: ...") with dpt__msg_error;
 *   STOP {}                    the end of a run, sent by the rank that ends it;
 *   BYE {}                     the answer to STOP: the sender holds nothing more
 *                              for the receiver;
 *   ASK_STOP {}                a rank that runs a role was asked to stop (a
 *                              signal that reached it alone): it asks the
 *                              rank that ends the run to end it, which then
 *                              stops as it would for its own signal.
 * The handshake (dpt__msg_stop_all) sends STOP to every peer, then waits for
 * every peer's BYE, dropping what else they send meanwhile, and names each
 * peer that did not answer within the timeout.
 */
#ifndef DPT_COMM_MSG_H
#define DPT_COMM_MSG_H

#include "dpt/comm.h"

#include <stddef.h>
#include <stdint.h>

#define DPT__MSG_VERSION 2
#define DPT__MSG_HEADER 8

/* The protocols: each owns the tags [proto * 64, proto * 64 + 64). */
typedef enum dpt__msg_proto {
    DPT__MSG_PROTO_TEST = 1, /* the module's own tests */
    DPT__MSG_PROTO_APPO = 3, /* appo and impala under mpirun */
    DPT__MSG_PROTO_SR = 4,   /* the sync-replicas service across processes */
    DPT__MSG_PROTO_COUNT
} dpt__msg_proto_t;

/* Kinds every protocol shares; a protocol numbers its own from
 * DPT__MSG_FIRST. */
enum {
    DPT__MSG_FAIL = 0,
    DPT__MSG_STOP = 1,
    DPT__MSG_BYE = 2,
    DPT__MSG_ASK_STOP = 3,
    DPT__MSG_FIRST = 4
};
#define DPT__MSG_KINDS 64
#define DPT__MSG_TAG(proto, kind) ((int)(proto)*DPT__MSG_KINDS + (int)(kind))

/* A message being written or read. Zeroed (or dpt__msg_init) is empty. */
typedef struct dpt__msg {
    unsigned char *buf; /* header + payload (malloc'd; owned) */
    size_t len, cap;    /* bytes written; allocated */
    size_t pos;         /* the read cursor (a received message) */
    int src;            /* a received message's sender (-1: none) */
    int proto, kind;
    int failed; /* a write ran out of memory, or a read past the end */
} dpt__msg_t;

void dpt__msg_init(dpt__msg_t *m);
void dpt__msg_deinit(dpt__msg_t *m);

/* Starts a message of (proto, kind), reusing m's buffer. */
void dpt__msg_begin(dpt__msg_t *m, int proto, int kind);
/* Appends fields, little-endian. A failed allocation marks m failed and
 * dpt__msg_send then returns DPT_ENOMEM. */
void dpt__msg_put_u8(dpt__msg_t *m, uint8_t v);
void dpt__msg_put_u32(dpt__msg_t *m, uint32_t v);
void dpt__msg_put_u64(dpt__msg_t *m, uint64_t v);
void dpt__msg_put_f64(dpt__msg_t *m, double v);
void dpt__msg_put_f32s(dpt__msg_t *m, const float *v, size_t n);
void dpt__msg_put_bytes(dpt__msg_t *m, const void *p, size_t n);
/* A string: its length (u32) and its bytes, at most 4095 of them. */
void dpt__msg_put_str(dpt__msg_t *m, const char *s);

/* Sends m to dest (waiting as dpt_comm_send does); m stays usable. */
int dpt__msg_send(dpt_comm_t *comm, int dest, dpt__msg_t *m);
/* Sends without waiting (dpt_comm_send_async): the buffer goes to the
 * communicator and m is left empty. */
int dpt__msg_send_async(dpt_comm_t *comm, int dest, dpt__msg_t *m);

/* Receives the first message of protocol `proto` from src (or
 * DPT_COMM_ANY_SOURCE) whose kind is `kind` (or -1: any of the protocol's),
 * waiting at most timeout_s, into m (its old contents freed). With kind -1
 * a message of another protocol met on the way is dropped: a communicator
 * on which such receives run carries one protocol. Errors:
 * dpt_comm_recv's; DPT_EPROTO naming the sender when the header is not
 * this protocol's of this version. A FAIL is returned as a message like any
 * other (kind DPT__MSG_FAIL): turn it into an error with dpt__msg_error. */
int dpt__msg_recv(dpt_comm_t *comm, int src, int proto, int kind, double timeout_s, dpt__msg_t *m);

/* Reads fields in the order they were written; past the end m is marked
 * failed, the value is 0 and dpt__msg_check reports it. */
uint8_t dpt__msg_get_u8(dpt__msg_t *m);
uint32_t dpt__msg_get_u32(dpt__msg_t *m);
uint64_t dpt__msg_get_u64(dpt__msg_t *m);
double dpt__msg_get_f64(dpt__msg_t *m);
void dpt__msg_get_f32s(dpt__msg_t *m, float *v, size_t n);
void dpt__msg_get_bytes(dpt__msg_t *m, void *p, size_t n);
/* A string into out (size bytes, always terminated; longer ones cut). */
void dpt__msg_get_str(dpt__msg_t *m, char *out, size_t size);
/* The bytes left to read. */
size_t dpt__msg_left(const dpt__msg_t *m);
/* 0 when every read was inside the message and (when `whole`) the payload
 * was read to its end; else DPT_EPROTO naming `what` and the sender. */
int dpt__msg_check(const dpt__msg_t *m, int whole, const char *what);

/* The shared error encoding: sends FAIL {code, text} to dest. */
int dpt__msg_send_fail(dpt_comm_t *comm, int dest, int proto, int code, const char *text);
/* The error a received FAIL carries, set as this thread's error
 * ("rank N: text") with its code; DPT_EPROTO for a malformed one. */
int dpt__msg_error(dpt__msg_t *m);

/* The shutdown handshake, from the rank that ends the run: STOP to each of
 * the n ranks in `peers`, then their BYE, each within timeout_s (other
 * messages of the protocol are dropped meanwhile; a FAIL counts as an
 * answer). DPT_ETIMEDOUT naming the ranks that did not answer ("rank 2"
 * or "ranks 2, 5"), or a communication error. Every peer gets its STOP
 * even when an earlier send failed. */
int dpt__msg_stop_all(dpt_comm_t *comm, int proto, const int *peers, size_t n, double timeout_s);
/* A peer's side: answers STOP with BYE. */
int dpt__msg_send_bye(dpt_comm_t *comm, int dest, int proto);
/* A peer's side: ASK_STOP to dest (without waiting). */
int dpt__msg_send_ask_stop(dpt_comm_t *comm, int dest, int proto);

#endif
