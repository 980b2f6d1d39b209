/* The safetensors reader: a strict JSON parser for the header subset,
 * validation of the whole file, and the accessors. The writer is in
 * checkpoint.c. */
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CKS_PREFIX "fnv1a64:"
#define CKS_PREFIX_LEN 8
#define CKS_DIGITS 16

uint64_t dpt_fnv1a64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

typedef struct entry {
    dpt_safetensors_tensor_t pub;
    char *name;
    char *dtype_str;  /* as written, until resolved */
    uint64_t shape[DPT_SAFETENSORS_MAX_DIMS];
    int ndim;
    uint64_t begin, end;
    void *copy;       /* aligned copy when the file's offset is misaligned */
} entry_t;

typedef struct meta {
    char *key;
    char *value;
} meta_t;

struct dpt_safetensors {
    char *path;
    entry_t *e;           /* in file order after validation */
    size_t n, cap;
    size_t *by_name;      /* indices into e, sorted by name */
    meta_t *m;
    size_t nm, capm;
    unsigned char *data;  /* the data section, 64-byte aligned */
    size_t data_bytes;
};

void dpt_safetensors_destroy(dpt_safetensors_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++) {
        free(st->e[i].name);
        free(st->e[i].dtype_str);
        free(st->e[i].copy);
    }
    for (size_t i = 0; i < st->nm; i++) {
        free(st->m[i].key);
        free(st->m[i].value);
    }
    free(st->e);
    free(st->m);
    free(st->by_name);
    dpt_free_aligned(st->data);
    free(st->path);
    free(st);
}

/* ---- the JSON subset ----------------------------------------------------
 *
 * top      = ws object ws            (trailing spaces are the padding)
 * object   = '{' [member (',' member)*] '}'
 * top-level members: "__metadata__": {string: string, ...}
 *                    name: {"dtype": string, "shape": [uint, ...],
 *                           "data_offsets": [uint, uint]}
 * Strings: UTF-8, escapes \" \\ \/ \b \f \n \r \t \uXXXX (with surrogate
 * pairs); no raw control characters and no \u0000 (names are C strings).
 * Numbers: non-negative integers without sign, leading zeros, fraction or
 * exponent, at most UINT64_MAX. Anything else is an error that says where.
 */

typedef struct parser {
    const char *path;
    const unsigned char *s;
    size_t n, i;
    int rc;
} parser_t;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int perr(parser_t *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Byte positions count from the start of the file (the header starts
     * at byte 8) so they can be found with a hex dump. */
    p->rc = dpt_error(DPT_EFORMAT, "checkpoint %s: header JSON at byte %zu: %s", p->path,
                      p->i + 8, msg);
    return p->rc;
}

static void skip_ws(parser_t *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static int expect(parser_t *p, char c)
{
    skip_ws(p);
    if (p->i >= p->n)
        return perr(p, "expected '%c', found the end of the header", c);
    if (p->s[p->i] != (unsigned char)c)
        return perr(p, "expected '%c', found '%c'", c,
                    p->s[p->i] >= 0x20 && p->s[p->i] < 0x7f ? p->s[p->i] : '?');
    p->i++;
    return 0;
}

/* After a member: ',' (returns 1, more follow) or `close` (returns 0). */
static int next_or_close(parser_t *p, char close)
{
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        return 1;
    }
    if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
        p->i++;
        return 0;
    }
    perr(p, "expected ',' or '%c'", close);
    return -1;
}

static int hex4(parser_t *p, unsigned *out)
{
    unsigned v = 0;
    if (p->n - p->i < 4)
        return perr(p, "truncated \\u escape");
    for (int k = 0; k < 4; k++) {
        unsigned c = p->s[p->i + (size_t)k], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return perr(p, "bad \\u escape");
        v = v * 16 + d;
    }
    p->i += 4;
    *out = v;
    return 0;
}

/* Length of the UTF-8 sequence at s[0..avail), or 0 when malformed. */
static size_t utf8_seq(const unsigned char *s, size_t avail)
{
    unsigned c = s[0], min;
    size_t len;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0)
        len = 2, min = 0x80, c &= 0x1f;
    else if ((c & 0xf0) == 0xe0)
        len = 3, min = 0x800, c &= 0x0f;
    else if ((c & 0xf8) == 0xf0)
        len = 4, min = 0x10000, c &= 0x07;
    else
        return 0;
    if (avail < len)
        return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[k] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    return len;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parses a string into a new allocation (*out, caller frees). *raw_begin
 * and *raw_len give the bytes between the quotes, as written. */
static int parse_string(parser_t *p, char **out, size_t *raw_begin, size_t *raw_len)
{
    static const char esc_in[] = "\"\\/bfnrt", esc_out[] = "\"\\/\b\f\n\r\t";
    *out = NULL;
    if (expect(p, '"') < 0)
        return p->rc;
    size_t start = p->i, end = start;
    while (end < p->n && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n)
        return perr(p, "unterminated string");
    /* The decoded text is never longer than the raw text. */
    char *o = malloc(end - start + 1);
    if (!o) {
        p->rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", p->path);
        return p->rc;
    }
    size_t k = 0;
    while (p->s[p->i] != '"') {
        unsigned c = p->s[p->i], cp, lo;
        if (c < 0x20) {
            perr(p, "control character 0x%02x in a string", c);
            goto fail;
        }
        if (c != '\\') {
            size_t len = utf8_seq(p->s + p->i, end - p->i);
            if (len == 0) {
                perr(p, "invalid UTF-8 in a string");
                goto fail;
            }
            memcpy(o + k, p->s + p->i, len);
            k += len;
            p->i += len;
            continue;
        }
        c = p->s[++p->i];
        const char *e = c ? strchr(esc_in, (int)c) : NULL;
        if (e) {
            o[k++] = esc_out[e - esc_in];
            p->i++;
            continue;
        }
        if (c != 'u') {
            perr(p, "bad escape '\\%c'", c >= 0x20 && c < 0x7f ? (int)c : '?');
            goto fail;
        }
        p->i++;
        if (hex4(p, &cp) < 0)
            goto fail;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
                perr(p, "unpaired surrogate in a \\u escape");
                goto fail;
            }
            p->i += 2;
            if (hex4(p, &lo) < 0)
                goto fail;
            if (lo < 0xdc00 || lo > 0xdfff) {
                perr(p, "unpaired surrogate in a \\u escape");
                goto fail;
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            perr(p, "unpaired surrogate in a \\u escape");
            goto fail;
        }
        if (cp == 0) {
            perr(p, "\\u0000 in a string");
            goto fail;
        }
        k += put_utf8(o + k, cp);
    }
    o[k] = '\0';
    *raw_begin = start;
    *raw_len = p->i - start;
    p->i++; /* closing quote */
    *out = o;
    return 0;
fail:
    free(o);
    return p->rc;
}

static int parse_uint(parser_t *p, uint64_t *out)
{
    skip_ws(p);
    if (p->i >= p->n)
        return perr(p, "expected a number, found the end of the header");
    unsigned c = p->s[p->i];
    if (c == '-')
        return perr(p, "negative number");
    if (c < '0' || c > '9')
        return perr(p, "expected a non-negative integer");
    if (c == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
        return perr(p, "number with a leading zero");
    uint64_t v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        unsigned d = p->s[p->i] - '0';
        if (v > (UINT64_MAX - d) / 10)
            return perr(p, "number too large");
        v = v * 10 + d;
        p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
        return perr(p, "expected an integer, found a fraction or exponent");
    *out = v;
    return 0;
}

/* [uint, ...] with at most `max` elements; the count goes to *count. */
static int parse_uint_array(parser_t *p, uint64_t *vals, int max, int *count, const char *what)
{
    *count = 0;
    if (expect(p, '[') < 0)
        return p->rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == ']') {
        p->i++;
        return 0;
    }
    for (;;) {
        if (*count >= max)
            return perr(p, "%s has more than %d elements", what, max);
        if (parse_uint(p, &vals[(*count)++]) < 0)
            return p->rc;
        int more = next_or_close(p, ']');
        if (more < 0)
            return p->rc;
        if (!more)
            return 0;
    }
}

static int grow(void **ptr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16, bytes;
    if (ncap <= n || dpt_mul_size(ncap, size, &bytes) != 0)
        return DPT_EOVERFLOW;
    void *q = realloc(*ptr, bytes);
    if (!q)
        return DPT_ENOMEM;
    *ptr = q;
    *cap = ncap;
    return 0;
}

static int parse_metadata(parser_t *p, dpt_safetensors_t *st, size_t *cks_pos, size_t *cks_len)
{
    if (expect(p, '{') < 0)
        return p->rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
        return 0;
    }
    for (;;) {
        size_t kb, kl, vb, vl, at;
        char *key, *value;
        skip_ws(p);
        at = p->i;
        if (parse_string(p, &key, &kb, &kl) < 0)
            return p->rc;
        for (size_t j = 0; j < st->nm; j++)
            if (strcmp(st->m[j].key, key) == 0) {
                p->i = at;
                perr(p, "metadata key \"%s\" appears twice", key);
                free(key);
                return p->rc;
            }
        if (expect(p, ':') < 0) {
            free(key);
            return p->rc;
        }
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] != '"') {
            free(key);
            return perr(p, "metadata values must be strings");
        }
        if (parse_string(p, &value, &vb, &vl) < 0) {
            free(key);
            return p->rc;
        }
        if (grow((void **)&st->m, &st->capm, st->nm, sizeof *st->m) < 0) {
            free(key);
            free(value);
            p->rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", p->path);
            return p->rc;
        }
        if (strcmp(key, "dpt.checksum") == 0) {
            *cks_pos = vb;
            *cks_len = vl;
        }
        st->m[st->nm].key = key;
        st->m[st->nm].value = value;
        st->nm++;
        int more = next_or_close(p, '}');
        if (more < 0)
            return p->rc;
        if (!more)
            return 0;
    }
}

static int parse_tensor(parser_t *p, entry_t *e)
{
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    if (expect(p, '{') < 0)
        return p->rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}')
        return perr(p, "tensor %s: empty description", e->name);
    for (;;) {
        size_t kb, kl, at;
        char *key;
        skip_ws(p);
        at = p->i;
        if (parse_string(p, &key, &kb, &kl) < 0)
            return p->rc;
        if (expect(p, ':') < 0) {
            free(key);
            return p->rc;
        }
        int dup = 0;
        if (strcmp(key, "dtype") == 0) {
            dup = have_dtype++;
            if (!dup && parse_string(p, &e->dtype_str, &kb, &kl) < 0) {
                free(key);
                return p->rc;
            }
        } else if (strcmp(key, "shape") == 0) {
            dup = have_shape++;
            if (!dup && parse_uint_array(p, e->shape, DPT_SAFETENSORS_MAX_DIMS, &e->ndim,
                                         "shape") < 0) {
                free(key);
                return p->rc;
            }
        } else if (strcmp(key, "data_offsets") == 0) {
            uint64_t off[3];
            int cnt;
            dup = have_offsets++;
            if (!dup && parse_uint_array(p, off, 3, &cnt, "data_offsets") < 0) {
                free(key);
                return p->rc;
            }
            if (!dup && cnt != 2) {
                free(key);
                return perr(p, "tensor %s: data_offsets needs 2 numbers, has %d", e->name, cnt);
            }
            if (!dup) {
                e->begin = off[0];
                e->end = off[1];
            }
        } else {
            p->i = at;
            perr(p, "tensor %s: unknown key \"%s\"", e->name, key);
            free(key);
            return p->rc;
        }
        if (dup) {
            p->i = at;
            perr(p, "tensor %s: key \"%s\" appears twice", e->name, key);
            free(key);
            return p->rc;
        }
        free(key);
        int more = next_or_close(p, '}');
        if (more < 0)
            return p->rc;
        if (!more)
            break;
    }
    if (!have_dtype || !have_shape || !have_offsets)
        return perr(p, "tensor %s: missing \"%s\"", e->name,
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    return 0;
}

static int parse_header(parser_t *p, dpt_safetensors_t *st, size_t *cks_pos, size_t *cks_len)
{
    int have_meta = 0;
    if (expect(p, '{') < 0)
        return p->rc;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == '}') {
        p->i++;
    } else {
        for (;;) {
            size_t kb, kl, at;
            char *name;
            skip_ws(p);
            at = p->i;
            if (parse_string(p, &name, &kb, &kl) < 0)
                return p->rc;
            if (expect(p, ':') < 0) {
                free(name);
                return p->rc;
            }
            if (strcmp(name, "__metadata__") == 0) {
                free(name);
                if (have_meta++) {
                    p->i = at;
                    return perr(p, "\"__metadata__\" appears twice");
                }
                if (parse_metadata(p, st, cks_pos, cks_len) < 0)
                    return p->rc;
            } else {
                if (grow((void **)&st->e, &st->cap, st->n, sizeof *st->e) < 0) {
                    free(name);
                    p->rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", p->path);
                    return p->rc;
                }
                entry_t *e = &st->e[st->n++];
                memset(e, 0, sizeof *e);
                e->name = name;
                if (parse_tensor(p, e) < 0)
                    return p->rc;
            }
            int more = next_or_close(p, '}');
            if (more < 0)
                return p->rc;
            if (!more)
                break;
        }
    }
    skip_ws(p);
    if (p->i != p->n)
        return perr(p, "unexpected text after the JSON object");
    return 0;
}

/* ---- validation ------------------------------------------------------ */

static int fits_size(uint64_t v)
{
#if SIZE_MAX < UINT64_MAX
    return v <= SIZE_MAX;
#else
    (void)v;
    return 1;
#endif
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

static int cmp_offsets(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* qsort has no context argument; the name index sorts pointers instead. */
static int cmp_name_ptr(const void *a, const void *b)
{
    const entry_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int verify_checksum(dpt_safetensors_t *st, const unsigned char *hdr, size_t n,
                           const unsigned char len8[8], size_t pos, size_t len)
{
    const char *path = st->path;
    const char *value = dpt_safetensors_meta(st, "dpt.checksum");
    /* The value must be exactly "fnv1a64:" + 16 lowercase hex digits, as
     * written, without escapes (so the raw bytes are the value). */
    int ok = len == CKS_PREFIX_LEN + CKS_DIGITS && strlen(value) == len &&
             memcmp(value, CKS_PREFIX, CKS_PREFIX_LEN) == 0;
    for (size_t k = CKS_PREFIX_LEN; ok && k < len; k++)
        ok = (value[k] >= '0' && value[k] <= '9') || (value[k] >= 'a' && value[k] <= 'f');
    if (!ok)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: dpt.checksum \"%.40s\" is not fnv1a64:<16 hex digits>",
                         path, value);
    uint64_t want = strtoull(value + CKS_PREFIX_LEN, NULL, 16);
    size_t digits = pos + CKS_PREFIX_LEN;
    static const char zeros[CKS_DIGITS] = "0000000000000000";
    uint64_t h = dpt_fnv1a64(DPT_FNV1A64_INIT, len8, 8);
    h = dpt_fnv1a64(h, hdr, digits);
    h = dpt_fnv1a64(h, zeros, CKS_DIGITS);
    h = dpt_fnv1a64(h, hdr + digits + CKS_DIGITS, n - digits - CKS_DIGITS);
    h = dpt_fnv1a64(h, st->data, st->data_bytes);
    if (h != want) {
        /* Say "truncated" when that is the likely story. */
        uint64_t need = 0;
        for (size_t i = 0; i < st->n; i++)
            if (st->e[i].end > need)
                need = st->e[i].end;
        if (need > st->data_bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: the file is truncated: the tensors need %" PRIu64
                             " bytes of data, it has %zu (checksum mismatch)",
                             path, need, st->data_bytes);
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: checksum mismatch (the file says %016" PRIx64
                         ", its contents give %016" PRIx64 "): the file is corrupted",
                         path, want, h);
    }
    return DPT_OK;
}

static int validate_tensors(dpt_safetensors_t *st)
{
    const char *path = st->path;
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        int found = 0;
        for (int d = 0; d < DPT_ST_DTYPE_COUNT; d++)
            if (strcmp(e->dtype_str, dpt_safetensors_dtype_name((dpt_st_dtype_t)d)) == 0) {
                e->pub.dtype = (dpt_st_dtype_t)d;
                found = 1;
            }
        if (!found)
            return dpt_error(DPT_ENOTSUP,
                             "checkpoint %s: tensor %s has dtype \"%.16s\", which dpt does not "
                             "read (F32, I32, U8, I64, F64)",
                             path, e->name, e->dtype_str);
        size_t es = dpt_safetensors_dtype_size(e->pub.dtype), count = 1;
        for (int d = 0; d < e->ndim; d++)
            if (!fits_size(e->shape[d]) || dpt_mul_size(count, (size_t)e->shape[d], &count) != 0)
                return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s: shape overflows", path,
                                 e->name);
        size_t bytes;
        if (dpt_mul_size(count, es, &bytes) != 0)
            return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s: shape overflows", path,
                             e->name);
        if (e->end < e->begin)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                             "] end before they begin",
                             path, e->name, e->begin, e->end);
        if (e->end - e->begin != bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: shape and dtype give %zu bytes, "
                             "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                             path, e->name, bytes, e->begin, e->end, e->end - e->begin);
        if (e->end > st->data_bytes)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                             "] run past the end of the data section (%zu bytes): the file is "
                             "truncated or corrupted",
                             path, e->name, e->begin, e->end, st->data_bytes);
        e->pub.ndim = e->ndim;
        for (int d = 0; d < e->ndim; d++)
            e->pub.shape[d] = (size_t)e->shape[d];
        e->pub.count = count;
        e->pub.bytes = bytes;
    }

    /* File order, then no gap, no overlap and full coverage. */
    if (st->n > 1)
        qsort(st->e, st->n, sizeof *st->e, cmp_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        if (e->begin > pos)
            return dpt_error(DPT_EFORMAT,
                             "checkpoint %s: bytes %" PRIu64 "..%" PRIu64
                             " of the data section belong to no tensor",
                             path, pos, e->begin);
        if (e->begin < pos)
            return dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s overlaps the tensor before it",
                             path, e->name);
        pos = e->end;
    }
    if (pos != st->data_bytes)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: the tensors cover %" PRIu64
                         " bytes, the data section has %zu",
                         path, pos, st->data_bytes);

    /* Names: sorted index, duplicates refused. */
    entry_t **idx = malloc((st->n ? st->n : 1) * sizeof *idx);
    st->by_name = malloc((st->n ? st->n : 1) * sizeof *st->by_name);
    if (!idx || !st->by_name) {
        free(idx);
        return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
    }
    for (size_t i = 0; i < st->n; i++)
        idx[i] = &st->e[i];
    if (st->n > 1)
        qsort(idx, st->n, sizeof *idx, cmp_name_ptr);
    for (size_t i = 0; i < st->n; i++) {
        st->by_name[i] = (size_t)(idx[i] - st->e);
        if (i > 0 && strcmp(idx[i]->name, idx[i - 1]->name) == 0) {
            int rc = dpt_error(DPT_EFORMAT, "checkpoint %s: tensor %s appears twice", path,
                               idx[i]->name);
            free(idx);
            return rc;
        }
    }
    free(idx);

    /* Data pointers: host byte order, aligned to the element size. */
    int le = host_is_little_endian();
    for (size_t i = 0; i < st->n; i++) {
        entry_t *e = &st->e[i];
        size_t es = dpt_safetensors_dtype_size(e->pub.dtype);
        unsigned char *src = st->data + e->begin;
        e->pub.name = e->name;
        if (e->pub.bytes == 0) {
            e->pub.data = src;
            continue;
        }
        if (e->begin % es != 0) {
            e->copy = malloc(e->pub.bytes);
            if (!e->copy)
                return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
            memcpy(e->copy, src, e->pub.bytes);
            src = e->copy;
        }
        if (!le && es > 1)
            for (size_t k = 0; k < e->pub.bytes; k += es)
                for (size_t a = 0, b = es - 1; a < b; a++, b--) {
                    unsigned char t = src[k + a];
                    src[k + a] = src[k + b];
                    src[k + b] = t;
                }
        e->pub.data = src;
    }
    return DPT_OK;
}

/* ---- load ------------------------------------------------------------ */

static int read_exact(FILE *f, void *buf, size_t n)
{
    return n == 0 || fread(buf, 1, n, f) == n;
}

int dpt_safetensors_load(dpt_safetensors_t **out, const char *path)
{
    int rc = DPT_OK;
    FILE *f = NULL;
    unsigned char *hdr = NULL;
    *out = NULL;
    dpt_safetensors_t *st = calloc(1, sizeof *st);
    if (!st || !(st->path = malloc(strlen(path) + 1))) {
        free(st);
        return dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
    }
    memcpy(st->path, path, strlen(path) + 1);

    f = fopen(path, "rb");
    if (!f) {
        rc = errno == ENOENT ? dpt_error(DPT_ENOENT, "checkpoint %s: no such file", path)
                             : dpt_error(DPT_EIO, "checkpoint %s: cannot open: %s", path,
                                         strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = dpt_error(DPT_EIO, "checkpoint %s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: the file has %" PRIu64 " bytes, fewer than the 8-byte "
                       "header length: truncated, or not a safetensors file",
                       path, size);
        goto fail;
    }
    unsigned char len8[8];
    if (!read_exact(f, len8, 8))
        goto read_error;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    if (n == 0 || n > DPT_SAFETENSORS_MAX_HEADER) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: header length %" PRIu64 " is %s: not a safetensors file, "
                       "or a corrupted one",
                       path, n, n == 0 ? "zero" : "over the 100 MiB limit");
        goto fail;
    }
    if (n > size - 8) {
        rc = dpt_error(DPT_EFORMAT,
                       "checkpoint %s: header length %" PRIu64 " runs past the end of the file "
                       "(%" PRIu64 " bytes): the file is truncated or corrupted",
                       path, n, size);
        goto fail;
    }
    hdr = malloc((size_t)n);
    if (!hdr) {
        rc = dpt_error(DPT_ENOMEM, "checkpoint %s: out of memory", path);
        goto fail;
    }
    if (!read_exact(f, hdr, (size_t)n))
        goto read_error;
    if (!fits_size(size - 8 - n)) {
        rc = dpt_error(DPT_EOVERFLOW, "checkpoint %s: too large for this machine", path);
        goto fail;
    }
    st->data_bytes = (size_t)(size - 8 - n);
    if (st->data_bytes > 0) {
        st->data = dpt_alloc_aligned(st->data_bytes);
        if (!st->data) {
            rc = dpt_error(DPT_ENOMEM, "checkpoint %s: cannot allocate %zu bytes", path,
                           st->data_bytes);
            goto fail;
        }
        if (!read_exact(f, st->data, st->data_bytes))
            goto read_error;
    }
    fclose(f);
    f = NULL;

    parser_t p = {path, hdr, (size_t)n, 0, 0};
    size_t cks_pos = 0, cks_len = 0;
    rc = parse_header(&p, st, &cks_pos, &cks_len);
    if (rc < 0)
        goto fail;
    /* The checksum comes before the other checks, so that a corrupted file
     * is reported as such rather than as an odd dtype or shape. A dpt file
     * (one with dpt.format) must carry it. */
    if (dpt_safetensors_meta(st, "dpt.checksum")) {
        rc = verify_checksum(st, hdr, (size_t)n, len8, cks_pos, cks_len);
        if (rc < 0)
            goto fail;
    } else if (dpt_safetensors_meta(st, "dpt.format")) {
        rc = dpt_error(DPT_EFORMAT, "checkpoint %s: dpt.format is set but dpt.checksum is missing",
                       path);
        goto fail;
    }
    rc = validate_tensors(st);
    if (rc < 0)
        goto fail;
    const char *fmt = dpt_safetensors_meta(st, "dpt.format");
    if (fmt && strcmp(fmt, "1") != 0) {
        rc = dpt_error(DPT_ENOTSUP,
                       "checkpoint %s: dpt.format \"%.16s\" is not supported by this build "
                       "(it reads format 1)",
                       path, fmt);
        goto fail;
    }
    free(hdr);
    *out = st;
    return DPT_OK;

read_error:
    rc = ferror(f) ? dpt_error(DPT_EIO, "checkpoint %s: read error: %s", path, strerror(errno))
                   : dpt_error(DPT_EIO, "checkpoint %s: the file shrank while being read", path);
fail:
    if (f)
        fclose(f);
    free(hdr);
    dpt_safetensors_destroy(st);
    return rc;
}

/* ---- accessors ------------------------------------------------------- */

const char *dpt_safetensors_path(const dpt_safetensors_t *st)
{
    return st->path;
}

size_t dpt_safetensors_count(const dpt_safetensors_t *st)
{
    return st->n;
}

const dpt_safetensors_tensor_t *dpt_safetensors_tensor(const dpt_safetensors_t *st, size_t i)
{
    return i < st->n ? &st->e[i].pub : NULL;
}

const dpt_safetensors_tensor_t *dpt_safetensors_find(const dpt_safetensors_t *st,
                                                     const char *name)
{
    size_t lo = 0, hi = st->n;
    if (!st->by_name)
        return NULL;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const entry_t *e = &st->e[st->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0)
            return &e->pub;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *dpt_safetensors_meta(const dpt_safetensors_t *st, const char *key)
{
    for (size_t i = 0; i < st->nm; i++)
        if (strcmp(st->m[i].key, key) == 0)
            return st->m[i].value;
    return NULL;
}

size_t dpt_safetensors_meta_count(const dpt_safetensors_t *st)
{
    return st->nm;
}

int dpt_safetensors_meta_at(const dpt_safetensors_t *st, size_t i, const char **key,
                            const char **value)
{
    if (i >= st->nm)
        return dpt_error(DPT_EINVAL, "checkpoint %s: metadata index %zu out of range (%zu)",
                         st->path, i, st->nm);
    *key = st->m[i].key;
    *value = st->m[i].value;
    return DPT_OK;
}

int dpt_safetensors_meta_u64(const dpt_safetensors_t *st, const char *key, uint64_t *value)
{
    const char *s = dpt_safetensors_meta(st, key);
    if (!s)
        return dpt_error(DPT_ENOENT, "checkpoint %s: no metadata \"%s\"", st->path, key);
    uint64_t v = 0;
    int ok = s[0] != '\0';
    for (const char *c = s; ok && *c; c++) {
        unsigned d = (unsigned)(*c - '0');
        ok = *c >= '0' && *c <= '9' && v <= (UINT64_MAX - d) / 10;
        v = v * 10 + d;
    }
    if (!ok)
        return dpt_error(DPT_EFORMAT,
                         "checkpoint %s: metadata %s = \"%.40s\" is not an unsigned 64-bit "
                         "integer",
                         st->path, key, s);
    *value = v;
    return DPT_OK;
}
