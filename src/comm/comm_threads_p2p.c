/*
 * Point-to-point messages, threads backend: one mailbox per rank.
 *
 * A mailbox is a singly linked FIFO list of messages (sender, tag, a
 * malloc'd copy of the payload) under its own mutex, with a condition
 * variable (CLOCK_MONOTONIC) that its owner waits on:
 *
 *   send(dest)   copy the payload; lock box[dest]; append at the tail;
 *                signal; unlock                      (never waits for dest)
 *   recv         lock the own box; loop: group failed -> its error; the
 *                first matching message -> unlink it, hand its payload
 *                over; deadline passed -> DPT_ETIMEDOUT; else timed wait
 *   probe        the same scan, once, without unlinking
 *
 * Order: a sender appends its messages one after another (a handle is used
 * by one thread at a time) and a receiver takes the first match from the
 * head, so two messages of one sender that match a receive come out in send
 * order. Copying once at the send and handing the copy to the receiver is
 * one memcpy per message; the sender's buffer is free as soon as send
 * returns.
 *
 * Failure: the group's failure (a timeout, a mismatch, dpt_comm_abort) is
 * checked before every scan. fail_locked (comm_threads.c) stores the
 * failure and then calls dpt__tmail_wake, which locks every mailbox in turn
 * and broadcasts: a receiver that read "not failed" holds its mailbox's
 * mutex until it sleeps, so the broadcast, which needs that mutex, comes
 * after it sleeps and wakes it (no lost wake-up). Lock order: the group's
 * mutex, then a mailbox's; no code takes them the other way round. A recv
 * that times out does not fail the group: waiting for a message that has
 * not come is an ordinary outcome for a poller.
 */
#include "comm/comm_internal.h"
#include "core/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt/stats.h"
#include "dpt/status.h"

typedef struct tmsg {
    struct tmsg *next;
    int source, tag;
    size_t nbytes;
    void *data; /* malloc'd, NULL when nbytes is 0 */
} tmsg_t;

typedef struct tbox {
    _Alignas(64) pthread_mutex_t mu;
    pthread_cond_t cv;
    tmsg_t *head, *tail;
} tbox_t;

struct dpt__tmail {
    int size;
    int ready; /* boxes whose mutex and condition variable exist */
    tbox_t *box;
};

int dpt__tmail_create(dpt__tmail_t **out, int size)
{
    *out = NULL;
    dpt__tmail_t *mail = calloc(1, sizeof *mail);
    if (mail == NULL)
        return dpt_error(DPT_ENOMEM, "comm threads: out of memory for %d mailboxes", size);
    mail->size = size;
    size_t bytes = ((size_t)size * sizeof(tbox_t) + 63) / 64 * 64;
    mail->box = aligned_alloc(64, bytes);
    if (mail->box == NULL) {
        free(mail);
        return dpt_error(DPT_ENOMEM, "comm threads: out of memory for %d mailboxes", size);
    }
    memset(mail->box, 0, bytes);
    int rc = 0;
    for (int r = 0; r < size && rc == 0; r++) {
        tbox_t *b = &mail->box[r];
        if ((rc = pthread_mutex_init(&b->mu, NULL)) != 0)
            break;
        if ((rc = dpt__cond_init_monotonic(&b->cv)) != 0) {
            pthread_mutex_destroy(&b->mu);
            break;
        }
        mail->ready++;
    }
    if (rc != 0) {
        dpt__tmail_destroy(mail);
        return dpt_error(DPT_ETHREAD, "comm threads: cannot create the mailboxes' mutexes (%d)",
                         rc);
    }
    *out = mail;
    return 0;
}

void dpt__tmail_destroy(dpt__tmail_t *mail)
{
    if (mail == NULL)
        return;
    for (int r = 0; r < mail->ready; r++) {
        tbox_t *b = &mail->box[r];
        for (tmsg_t *m = b->head, *next; m != NULL; m = next) {
            next = m->next;
            free(m->data);
            free(m);
        }
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
    }
    free(mail->box);
    free(mail);
}

void dpt__tmail_wake(dpt__tmail_t *mail)
{
    for (int r = 0; r < mail->ready; r++) {
        pthread_mutex_lock(&mail->box[r].mu);
        pthread_cond_broadcast(&mail->box[r].cv);
        pthread_mutex_unlock(&mail->box[r].mu);
    }
}

/* The first message of b matching (source, tag); *prev_out its predecessor
 * (NULL at the head). Called with b->mu held. */
static tmsg_t *find(const tbox_t *b, int source, int tag, tmsg_t **prev_out)
{
    tmsg_t *prev = NULL;
    for (tmsg_t *m = b->head; m != NULL; prev = m, m = m->next) {
        if ((source == DPT_COMM_ANY_SOURCE || m->source == source) &&
            (tag == DPT_COMM_ANY_TAG || m->tag == tag)) {
            *prev_out = prev;
            return m;
        }
    }
    return NULL;
}

/* The group's failure as this call's error, or 0; the call is described
 * only when there is something to report. */
static int check(const dpt__tpart_t *p, int call, int peer, int tag, size_t nbytes)
{
    if (!dpt__tgroup_failed(p->g))
        return 0;
    char what[96];
    dpt__p2p_describe(call, peer, tag, nbytes, what, sizeof what);
    return dpt__tpart_check(p, what);
}

int dpt__tp2p_send(dpt_comm_t *c, int dest, int tag, const void *data, size_t nbytes)
{
    dpt__tpart_t *p = dpt__tcomm_part(c);
    int rc = check(p, DPT__CALL_SEND, dest, tag, nbytes);
    if (rc < 0)
        return rc;
    tmsg_t *m = malloc(sizeof *m);
    void *copy = nbytes > 0 ? malloc(nbytes) : NULL;
    if (m == NULL || (nbytes > 0 && copy == NULL)) {
        free(m);
        free(copy);
        char what[96];
        dpt__p2p_describe(DPT__CALL_SEND, dest, tag, nbytes, what, sizeof what);
        return dpt_error(DPT_ENOMEM, "comm rank %d: %s: out of memory for the copy", p->rank, what);
    }
    if (nbytes > 0)
        memcpy(copy, data, nbytes);
    m->next = NULL;
    m->source = p->rank;
    m->tag = tag;
    m->nbytes = nbytes;
    m->data = copy;
    tbox_t *b = &dpt__tgroup_mail(p->g)->box[dest];
    pthread_mutex_lock(&b->mu);
    if (b->tail != NULL)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    pthread_cond_signal(&b->cv); /* only the owner waits on its box */
    pthread_mutex_unlock(&b->mu);
    return 0;
}

int dpt__tp2p_recv(dpt_comm_t *c, int source, int tag, double timeout_s, void **data,
                   size_t *nbytes, int *source_out, int *tag_out)
{
    dpt__tpart_t *p = dpt__tcomm_part(c);
    if (timeout_s < 0.0)
        timeout_s = dpt__tgroup_timeout_s(p->g);
    double t0 = dpt_now(), deadline = t0 + timeout_s;
    struct timespec ts = dpt__tabstime(deadline);
    tbox_t *b = &dpt__tgroup_mail(p->g)->box[p->rank];
    tmsg_t *m = NULL, *prev = NULL;
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        if ((rc = check(p, DPT__CALL_RECV, source, tag, 0)) < 0)
            break;
        if ((m = find(b, source, tag, &prev)) != NULL) {
            if (prev != NULL)
                prev->next = m->next;
            else
                b->head = m->next;
            if (b->tail == m)
                b->tail = prev;
            break;
        }
        double now = dpt_now();
        char what[96];
        if (now >= deadline) {
            dpt__p2p_describe(DPT__CALL_RECV, source, tag, 0, what, sizeof what);
            rc = dpt_error(DPT_ETIMEDOUT,
                           "comm rank %d: %s timed out after %.3g s: no such message arrived (the "
                           "communicator stays usable)",
                           p->rank, what, now - t0);
            break;
        }
        int w = pthread_cond_timedwait(&b->cv, &b->mu, &ts);
        if (w != 0 && w != ETIMEDOUT) {
            dpt__p2p_describe(DPT__CALL_RECV, source, tag, 0, what, sizeof what);
            rc = dpt_error(DPT_ETHREAD, "comm rank %d: %s: pthread_cond_timedwait failed (%d)",
                           p->rank, what, w);
            break;
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (m == NULL)
        return rc;
    *data = m->data;
    *nbytes = m->nbytes;
    if (source_out != NULL)
        *source_out = m->source;
    if (tag_out != NULL)
        *tag_out = m->tag;
    free(m);
    return 0;
}

int dpt__tp2p_probe(dpt_comm_t *c, int source, int tag, int *flag, int *source_out, int *tag_out,
                    size_t *nbytes)
{
    dpt__tpart_t *p = dpt__tcomm_part(c);
    tbox_t *b = &dpt__tgroup_mail(p->g)->box[p->rank];
    tmsg_t *prev;
    pthread_mutex_lock(&b->mu);
    int rc = check(p, DPT__CALL_PROBE, source, tag, 0);
    tmsg_t *m = rc < 0 ? NULL : find(b, source, tag, &prev);
    if (m != NULL) {
        *flag = 1;
        if (source_out != NULL)
            *source_out = m->source;
        if (tag_out != NULL)
            *tag_out = m->tag;
        if (nbytes != NULL)
            *nbytes = m->nbytes;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}
