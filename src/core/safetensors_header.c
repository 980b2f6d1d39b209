/* The safetensors reader's header parser: a strict parser for the subset
 * of JSON that safetensors headers use, filling the reader's tensor and
 * metadata tables. Validation, loading and the accessors are in
 * safetensors.c. */
#include "dpt/checkpoint.h"
#include "dpt/status.h"
#include "safetensors_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static int
perr(parser_t *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Byte positions count from the start of the file (the header starts
     * at byte 8) so they can be found with a hex dump. */
    p->rc = dpt_error(DPT_EFORMAT, "checkpoint %s: header JSON at byte %zu: %s", p->path, p->i + 8,
                      msg);
    return p->rc;
}

static void skip_ws(parser_t *p)
{
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
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
            if (!dup &&
                parse_uint_array(p, e->shape, DPT_SAFETENSORS_MAX_DIMS, &e->ndim, "shape") < 0) {
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
                    !have_dtype   ? "dtype"
                    : !have_shape ? "shape"
                                  : "data_offsets");
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

/* The parser's entry point for dpt_safetensors_load (see safetensors_impl.h). */
int dpt__safetensors_parse_header(dpt_safetensors_t *st, const unsigned char *hdr, size_t n,
                                  size_t *cks_pos, size_t *cks_len)
{
    parser_t p = {st->path, hdr, n, 0, 0};
    return parse_header(&p, st, cks_pos, cks_len);
}
