/* The messages of dpt's point-to-point protocols (msg.h). */
#include "comm/msg.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DPT__MSG_STR_MAX 4095

void dpt__msg_init(dpt__msg_t *m)
{
    memset(m, 0, sizeof *m);
    m->src = -1;
}

void dpt__msg_deinit(dpt__msg_t *m)
{
    free(m->buf);
    dpt__msg_init(m);
}

/* Room for n more bytes; marks m failed when there is none. */
static unsigned char *dpt__msg_room(dpt__msg_t *m, size_t n)
{
    if (m->failed)
        return NULL;
    if (n > m->cap - m->len) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap - m->len < n) {
            if (cap > SIZE_MAX / 2) {
                m->failed = 1;
                return NULL;
            }
            cap *= 2;
        }
        unsigned char *nb = realloc(m->buf, cap);
        if (!nb) {
            m->failed = 1;
            return NULL;
        }
        m->buf = nb;
        m->cap = cap;
    }
    unsigned char *p = m->buf + m->len;
    m->len += n;
    return p;
}

static void dpt__le_put(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t dpt__le_get(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void dpt__msg_begin(dpt__msg_t *m, int proto, int kind)
{
    m->len = m->pos = 0;
    m->failed = 0;
    m->src = -1;
    m->proto = proto;
    m->kind = kind;
    unsigned char *p = dpt__msg_room(m, DPT__MSG_HEADER);
    if (!p)
        return;
    memcpy(p, "dptm", 4);
    dpt__le_put(p + 4, DPT__MSG_VERSION, 2);
    p[6] = (unsigned char)proto;
    p[7] = (unsigned char)kind;
}

void dpt__msg_put_u8(dpt__msg_t *m, uint8_t v)
{
    unsigned char *p = dpt__msg_room(m, 1);
    if (p)
        p[0] = v;
}

void dpt__msg_put_u32(dpt__msg_t *m, uint32_t v)
{
    unsigned char *p = dpt__msg_room(m, 4);
    if (p)
        dpt__le_put(p, v, 4);
}

void dpt__msg_put_u64(dpt__msg_t *m, uint64_t v)
{
    unsigned char *p = dpt__msg_room(m, 8);
    if (p)
        dpt__le_put(p, v, 8);
}

void dpt__msg_put_f64(dpt__msg_t *m, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    dpt__msg_put_u64(m, bits);
}

void dpt__msg_put_f32s(dpt__msg_t *m, const float *v, size_t n)
{
    if (n > SIZE_MAX / 4) {
        m->failed = 1;
        return;
    }
    unsigned char *p = dpt__msg_room(m, 4 * n);
    if (!p)
        return;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        dpt__le_put(p + 4 * i, bits, 4);
    }
}

void dpt__msg_put_bytes(dpt__msg_t *m, const void *src, size_t n)
{
    unsigned char *p = dpt__msg_room(m, n);
    if (p && n)
        memcpy(p, src, n);
}

void dpt__msg_put_str(dpt__msg_t *m, const char *s)
{
    size_t n = strlen(s);
    if (n > DPT__MSG_STR_MAX)
        n = DPT__MSG_STR_MAX;
    dpt__msg_put_u32(m, (uint32_t)n);
    dpt__msg_put_bytes(m, s, n);
}

int dpt__msg_send(dpt_comm_t *comm, int dest, dpt__msg_t *m)
{
    if (m->failed || m->len < DPT__MSG_HEADER)
        return dpt_error(DPT_ENOMEM, "message: cannot build a message of %zu bytes", m->len);
    return dpt_comm_send(comm, dest, DPT__MSG_TAG(m->proto, m->kind), m->buf, m->len);
}

int dpt__msg_send_async(dpt_comm_t *comm, int dest, dpt__msg_t *m)
{
    if (m->failed || m->len < DPT__MSG_HEADER)
        return dpt_error(DPT_ENOMEM, "message: cannot build a message of %zu bytes", m->len);
    int tag = DPT__MSG_TAG(m->proto, m->kind);
    void *buf = m->buf;
    size_t len = m->len;
    m->buf = NULL;
    m->len = m->cap = m->pos = 0;
    return dpt_comm_send_async(comm, dest, tag, buf, len);
}

/* Takes a received payload into m after checking its header. */
static int dpt__msg_take(dpt__msg_t *m, void *data, size_t n, int src, int tag, int proto)
{
    free(m->buf);
    dpt__msg_init(m);
    m->buf = data;
    m->len = m->cap = n;
    m->src = src;
    const unsigned char *p = data;
    if (n < DPT__MSG_HEADER || memcmp(p, "dptm", 4) != 0)
        return dpt_error(DPT_EPROTO,
                         "rank %d sent a message (tag %d, %zu bytes) without dpt's "
                         "message header",
                         src, tag, n);
    unsigned version = (unsigned)dpt__le_get(p + 4, 2);
    if (version != DPT__MSG_VERSION)
        return dpt_error(DPT_EPROTO,
                         "rank %d speaks message version %u, this rank %d (the ranks run "
                         "different dpt builds)",
                         src, version, DPT__MSG_VERSION);
    m->proto = p[6];
    m->kind = p[7];
    if (m->proto != proto || DPT__MSG_TAG(m->proto, m->kind) != tag)
        return dpt_error(DPT_EPROTO,
                         "rank %d sent a message whose header (protocol %d, kind %d) does not "
                         "match its tag %d",
                         src, m->proto, m->kind, tag);
    m->pos = DPT__MSG_HEADER;
    return DPT_OK;
}

int dpt__msg_recv(dpt_comm_t *comm, int src, int proto, int kind, double timeout_s, dpt__msg_t *m)
{
    int lo = DPT__MSG_TAG(proto, 0), hi = DPT__MSG_TAG(proto, DPT__MSG_KINDS - 1);
    double until = dpt_now() + timeout_s;
    for (;;) {
        void *data = NULL;
        size_t n = 0;
        int from = -1, tag = -1;
        int want = kind >= 0 ? DPT__MSG_TAG(proto, kind) : DPT_COMM_ANY_TAG;
        double left = until - dpt_now();
        int rc = dpt_comm_recv(comm, src, want, left > 0.0 ? left : 0.0, &data, &n, &from, &tag);
        if (rc)
            return rc;
        /* Any kind: a message of another protocol is dropped (a
         * communicator whose any-kind receives run carries one protocol). */
        if (tag < lo || tag > hi) {
            free(data);
            continue;
        }
        return dpt__msg_take(m, data, n, from, tag, proto);
    }
}

/* The next n bytes to read, or NULL (m marked failed) past the end. */
static const unsigned char *dpt__msg_next(dpt__msg_t *m, size_t n)
{
    if (m->failed || n > m->len - m->pos) {
        m->failed = 1;
        return NULL;
    }
    const unsigned char *p = m->buf + m->pos;
    m->pos += n;
    return p;
}

uint8_t dpt__msg_get_u8(dpt__msg_t *m)
{
    const unsigned char *p = dpt__msg_next(m, 1);
    return p ? p[0] : 0;
}

uint32_t dpt__msg_get_u32(dpt__msg_t *m)
{
    const unsigned char *p = dpt__msg_next(m, 4);
    return p ? (uint32_t)dpt__le_get(p, 4) : 0;
}

uint64_t dpt__msg_get_u64(dpt__msg_t *m)
{
    const unsigned char *p = dpt__msg_next(m, 8);
    return p ? dpt__le_get(p, 8) : 0;
}

double dpt__msg_get_f64(dpt__msg_t *m)
{
    uint64_t bits = dpt__msg_get_u64(m);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

void dpt__msg_get_f32s(dpt__msg_t *m, float *v, size_t n)
{
    const unsigned char *p = n <= SIZE_MAX / 4 ? dpt__msg_next(m, 4 * n) : NULL;
    if (!p) {
        m->failed = 1;
        memset(v, 0, n * sizeof *v);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)dpt__le_get(p + 4 * i, 4);
        memcpy(&v[i], &bits, sizeof bits);
    }
}

void dpt__msg_get_bytes(dpt__msg_t *m, void *out, size_t n)
{
    const unsigned char *p = dpt__msg_next(m, n);
    if (p && n)
        memcpy(out, p, n);
    else if (!p && n)
        memset(out, 0, n);
}

void dpt__msg_get_str(dpt__msg_t *m, char *out, size_t size)
{
    uint32_t n = dpt__msg_get_u32(m);
    const unsigned char *p = n <= DPT__MSG_STR_MAX ? dpt__msg_next(m, n) : NULL;
    if (!p) {
        m->failed = 1;
        if (size)
            out[0] = '\0';
        return;
    }
    if (!size)
        return;
    size_t k = n < size - 1 ? n : size - 1;
    memcpy(out, p, k);
    out[k] = '\0';
}

size_t dpt__msg_left(const dpt__msg_t *m)
{
    return m->failed ? 0 : m->len - m->pos;
}

int dpt__msg_check(const dpt__msg_t *m, int whole, const char *what)
{
    if (m->failed)
        return dpt_error(DPT_EPROTO,
                         "%s from rank %d: the message (%zu bytes) is shorter than "
                         "its fields",
                         what, m->src, m->len);
    if (whole && m->pos != m->len)
        return dpt_error(DPT_EPROTO, "%s from rank %d: %zu bytes left after its fields", what,
                         m->src, m->len - m->pos);
    return DPT_OK;
}

int dpt__msg_send_fail(dpt_comm_t *comm, int dest, int proto, int code, const char *text)
{
    dpt__msg_t m;
    dpt__msg_init(&m);
    dpt__msg_begin(&m, proto, DPT__MSG_FAIL);
    dpt__msg_put_u32(&m, (uint32_t)(int32_t)code);
    dpt__msg_put_str(&m, text);
    int rc = dpt__msg_send(comm, dest, &m);
    dpt__msg_deinit(&m);
    return rc;
}

int dpt__msg_error(dpt__msg_t *m)
{
    char text[1024];
    int code = (int)(int32_t)dpt__msg_get_u32(m);
    dpt__msg_get_str(m, text, sizeof text);
    int rc = dpt__msg_check(m, 1, "an error report");
    if (rc)
        return rc;
    /* A code that is not an error (a peer's bug) still ends the run. */
    if (code >= 0)
        code = DPT_ECOMM;
    return dpt_error(code, "rank %d: %s", m->src, text);
}

int dpt__msg_send_bye(dpt_comm_t *comm, int dest, int proto)
{
    dpt__msg_t m;
    dpt__msg_init(&m);
    dpt__msg_begin(&m, proto, DPT__MSG_BYE);
    int rc = dpt__msg_send(comm, dest, &m);
    dpt__msg_deinit(&m);
    return rc;
}

int dpt__msg_send_ask_stop(dpt_comm_t *comm, int dest, int proto)
{
    dpt__msg_t m;
    dpt__msg_init(&m);
    dpt__msg_begin(&m, proto, DPT__MSG_ASK_STOP);
    int rc = dpt__msg_send_async(comm, dest, &m);
    dpt__msg_deinit(&m);
    return rc;
}

/* "rank 2" or "ranks 2, 5" of the peers not yet answered. */
static void dpt__msg_silent(const int *peers, const unsigned char *done, size_t n, char *out,
                            size_t size)
{
    size_t len = 0, k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        k += !done[i];
    len += (size_t)snprintf(out, size, "%s", k > 1 ? "ranks " : "rank ");
    for (size_t i = 0, j = 0; i < n && len < size; i++)
        if (!done[i])
            len += (size_t)snprintf(out + len, size - len, "%s%d", j++ ? ", " : "", peers[i]);
}

int dpt__msg_stop_all(dpt_comm_t *comm, int proto, const int *peers, size_t n, double timeout_s)
{
    unsigned char *done = calloc(n ? n : 1, 1);
    if (!done)
        return dpt_error(DPT_ENOMEM, "message: cannot allocate the stop handshake");
    dpt__msg_t m;
    dpt__msg_init(&m);
    int rc = DPT_OK;
    for (size_t i = 0; i < n; i++) {
        dpt__msg_begin(&m, proto, DPT__MSG_STOP);
        int sent = dpt__msg_send_async(comm, peers[i], &m);
        if (sent && !rc)
            rc = sent;
    }
    double until = dpt_now() + timeout_s;
    size_t left = n;
    while (!rc && left) {
        double wait = until - dpt_now();
        if (wait <= 0.0)
            break;
        int got = dpt__msg_recv(comm, DPT_COMM_ANY_SOURCE, proto, -1, wait, &m);
        if (got == DPT_ETIMEDOUT)
            break;
        if (got && got != DPT_EPROTO) { /* a malformed message is skipped */
            rc = got;
            break;
        }
        for (size_t i = 0; !got && i < n; i++)
            if (peers[i] == m.src && !done[i] &&
                (m.kind == DPT__MSG_BYE || m.kind == DPT__MSG_FAIL)) {
                done[i] = 1;
                left--;
            }
    }
    if (!rc && left) {
        char who[256];
        dpt__msg_silent(peers, done, n, who, sizeof who);
        rc = dpt_error(DPT_ETIMEDOUT,
                       "%s did not answer the end of the run within %g s (stopped, dead or "
                       "stuck)",
                       who, timeout_s);
    }
    dpt__msg_deinit(&m);
    free(done);
    return rc;
}
