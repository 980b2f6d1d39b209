/* TFRecord framing, CRC-32C and TensorBoard Event messages (see tfrecord.h). */
#include "tfrecord.h"

#include "dpt/status.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- CRC-32C ------------------------------------------------------------------ */

/* Byte-at-a-time table of the reflected polynomial: table[b] is the CRC
 * register after shifting byte b through eight steps. Events files are a
 * few kilobytes per iteration, so the table method is fast enough. */
static uint32_t dpt__crc_table[256];
static pthread_once_t dpt__crc_once = PTHREAD_ONCE_INIT;

static void dpt__crc_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        dpt__crc_table[b] = c;
    }
}

uint32_t dpt__crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&dpt__crc_once, dpt__crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = (crc >> 8) ^ dpt__crc_table[(crc ^ p[i]) & 0xffu];
    return ~crc;
}

uint32_t dpt__crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint32_t dpt__crc32c_unmask(uint32_t masked)
{
    uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

/* ---- buffers ------------------------------------------------------------------- */

void dpt__tfbuf_free(dpt__tfbuf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* Room for n more bytes. */
static int dpt__tfbuf_reserve(dpt__tfbuf_t *b, size_t n)
{
    if (n <= b->cap - b->len)
        return DPT_OK;
    if (n > SIZE_MAX / 2 - b->len)
        return dpt_error(DPT_ENOMEM, "events buffer: %zu bytes is too large", n);
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n)
        cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    if (!p)
        return dpt_error(DPT_ENOMEM, "events buffer: cannot allocate %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return DPT_OK;
}

/* The appenders below write into room reserved beforehand. */
static void dpt__put(dpt__tfbuf_t *b, const void *p, size_t n)
{
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void dpt__put_le(dpt__tfbuf_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        b->data[b->len++] = (unsigned char)(v >> (8 * i));
}

static size_t dpt__varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void dpt__put_varint(dpt__tfbuf_t *b, uint64_t v)
{
    while (v >= 0x80) {
        b->data[b->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (unsigned char)v;
}

/* Field keys: number << 3 | wire type. */
enum { DPT__WT_VARINT = 0, DPT__WT_64 = 1, DPT__WT_LEN = 2, DPT__WT_32 = 5 };
#define DPT__KEY(field, wt) ((unsigned char)(((field) << 3) | (wt)))

/* ---- encoding ------------------------------------------------------------------ */

int dpt__tfevent_add_scalar(dpt__tfbuf_t *summary, const char *tag, float value)
{
    size_t tl = strlen(tag);
    size_t body = 1 + dpt__varint_len(tl) + tl + 1 + 4; /* tag, simple_value */
    int rc = dpt__tfbuf_reserve(summary, 1 + dpt__varint_len(body) + body);
    if (rc)
        return rc;
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    summary->data[summary->len++] = DPT__KEY(1, DPT__WT_LEN); /* Summary.value */
    dpt__put_varint(summary, body);
    summary->data[summary->len++] = DPT__KEY(1, DPT__WT_LEN); /* Value.tag */
    dpt__put_varint(summary, tl);
    dpt__put(summary, tag, tl);
    summary->data[summary->len++] = DPT__KEY(2, DPT__WT_32); /* Value.simple_value */
    dpt__put_le(summary, bits, 4);
    return DPT_OK;
}

/* A record is begun with room for its header, its data appended, then
 * ended: the header and the data's CRC are filled in. */
static int dpt__record_begin(dpt__tfbuf_t *out, size_t len, size_t *head)
{
    int rc = dpt__tfbuf_reserve(out, 8 + 4 + len + 4);
    if (rc)
        return rc;
    *head = out->len;
    dpt__put_le(out, len, 8);
    dpt__put_le(out, dpt__crc32c_mask(dpt__crc32c(0, out->data + *head, 8)), 4);
    return DPT_OK;
}

static void dpt__record_end(dpt__tfbuf_t *out, size_t head)
{
    const unsigned char *data = out->data + head + 12;
    size_t len = out->len - head - 12;
    dpt__put_le(out, dpt__crc32c_mask(dpt__crc32c(0, data, len)), 4);
}

int dpt__tfrecord_append(dpt__tfbuf_t *out, const void *data, size_t n)
{
    size_t head;
    int rc = dpt__record_begin(out, n, &head);
    if (rc)
        return rc;
    dpt__put(out, data, n);
    dpt__record_end(out, head);
    return DPT_OK;
}

int dpt__tfevent_append(dpt__tfbuf_t *out, double wall_time, int64_t step, const char *file_version,
                        const dpt__tfbuf_t *summary)
{
    size_t fl = file_version ? strlen(file_version) : 0;
    size_t sl = summary ? summary->len : 0;
    size_t len = 1 + 8 + 1 + dpt__varint_len((uint64_t)step), head;
    if (file_version)
        len += 1 + dpt__varint_len(fl) + fl;
    if (sl)
        len += 1 + dpt__varint_len(sl) + sl;
    int rc = dpt__record_begin(out, len, &head);
    if (rc)
        return rc;
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    out->data[out->len++] = DPT__KEY(1, DPT__WT_64); /* wall_time */
    dpt__put_le(out, bits, 8);
    out->data[out->len++] = DPT__KEY(2, DPT__WT_VARINT); /* step */
    dpt__put_varint(out, (uint64_t)step);
    if (file_version) {
        out->data[out->len++] = DPT__KEY(3, DPT__WT_LEN);
        dpt__put_varint(out, fl);
        dpt__put(out, file_version, fl);
    }
    if (sl) {
        out->data[out->len++] = DPT__KEY(5, DPT__WT_LEN);
        dpt__put_varint(out, sl);
        dpt__put(out, summary->data, sl);
    }
    dpt__record_end(out, head);
    return DPT_OK;
}

/* ---- reading ------------------------------------------------------------------- */

static uint64_t dpt__get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int dpt__tfrecord_read(FILE *f, const char *name, dpt__tfbuf_t *rec)
{
    long offset = ftell(f);
    unsigned char head[12], tail[4];
    size_t got = fread(head, 1, sizeof head, f);
    rec->len = 0;
    if (got == 0 && feof(f))
        return 0;
    if (got < sizeof head)
        return dpt_error(DPT_EFORMAT, "%s: record at byte %ld is cut short", name, offset);
    uint64_t len = dpt__get_le(head, 8);
    if (dpt__crc32c_mask(dpt__crc32c(0, head, 8)) != (uint32_t)dpt__get_le(head + 8, 4))
        return dpt_error(DPT_EFORMAT, "%s: record at byte %ld: the length's CRC does not match",
                         name, offset);
    if (len > ((uint64_t)1 << 30))
        return dpt_error(DPT_EFORMAT, "%s: record at byte %ld: length %llu is over 1 GiB", name,
                         offset, (unsigned long long)len);
    int rc = dpt__tfbuf_reserve(rec, (size_t)len);
    if (rc)
        return rc;
    if (fread(rec->data, 1, (size_t)len, f) != (size_t)len || fread(tail, 1, 4, f) != 4)
        return dpt_error(DPT_EFORMAT, "%s: record at byte %ld is cut short", name, offset);
    if (dpt__crc32c_mask(dpt__crc32c(0, rec->data, (size_t)len)) != (uint32_t)dpt__get_le(tail, 4))
        return dpt_error(DPT_EFORMAT, "%s: record at byte %ld: the data's CRC does not match", name,
                         offset);
    rec->len = (size_t)len;
    return 1;
}

/* Reads a varint at p[*i] (below n); 0, or -1 when it runs past n or past
 * ten bytes. */
static int dpt__get_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 70 && *i < n; shift += 7) {
        unsigned char b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

int dpt__tfevent_decode(const unsigned char *p, size_t n, dpt__tfevent_info_t *ev)
{
    memset(ev, 0, sizeof *ev);
    size_t i = 0;
    while (i < n) {
        uint64_t key, v;
        if (dpt__get_varint(p, n, &i, &key) != 0)
            return dpt_error(DPT_EFORMAT, "event: bad field key at byte %zu", i);
        unsigned field = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
        switch (wt) {
        case DPT__WT_VARINT:
            if (dpt__get_varint(p, n, &i, &v) != 0)
                return dpt_error(DPT_EFORMAT, "event: bad varint at byte %zu", i);
            if (field == 2)
                ev->step = (int64_t)v;
            break;
        case DPT__WT_64:
            if (n - i < 8)
                return dpt_error(DPT_EFORMAT, "event: field %u cut short", field);
            if (field == 1) {
                v = dpt__get_le(p + i, 8);
                memcpy(&ev->wall_time, &v, sizeof v);
            }
            i += 8;
            break;
        case DPT__WT_32:
            if (n - i < 4)
                return dpt_error(DPT_EFORMAT, "event: field %u cut short", field);
            i += 4;
            break;
        case DPT__WT_LEN:
            if (dpt__get_varint(p, n, &i, &v) != 0 || v > n - i)
                return dpt_error(DPT_EFORMAT, "event: field %u has a bad length", field);
            if (field == 3) {
                ev->file_version = p + i;
                ev->file_version_len = (size_t)v;
            } else if (field == 5) {
                ev->summary = p + i;
                ev->summary_len = (size_t)v;
            }
            i += (size_t)v;
            break;
        default: return dpt_error(DPT_EFORMAT, "event: field %u has wire type %u", field, wt);
        }
    }
    return DPT_OK;
}
