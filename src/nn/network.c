/*
 * The model language (dpt/nn.h, dpt_network_parse): a network description
 * as a list of layer specs, and a layer spec back as text.
 */
#include "dpt/nn.h"
#include "dpt/status.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest layer text quoted in a message. */
#define DPT__NET_QUOTE 120

/* What a layer of the language accepts. */
typedef struct dpt__net_kind {
    const char *name, *alias;
    dpt_layer_kind_t kind;
    const char *positional[2]; /* names of the positional arguments, in order */
    const char *named;         /* the names it accepts, space-separated */
} dpt__net_kind_t;

static const dpt__net_kind_t dpt__net_kinds[] = {
    {"conv", "conv2d", DPT_LAYER_CONV2D, {"out", "k"}, "out k stride pad init gain"},
    {"maxpool", "maxpool2d", DPT_LAYER_MAXPOOL2D, {"k", NULL}, "k stride pad"},
    {"avgpool", "avgpool2d", DPT_LAYER_AVGPOOL2D, {"k", NULL}, "k stride pad count_pad"},
    {"dense", "linear", DPT_LAYER_LINEAR, {"out", NULL}, "out init gain"},
    {"dropout", NULL, DPT_LAYER_DROPOUT, {"p", NULL}, "p"},
    {"batchnorm", "bn", DPT_LAYER_BATCHNORM, {NULL, NULL}, "momentum eps"},
    {"flatten", NULL, DPT_LAYER_FLATTEN, {NULL, NULL}, ""},
    {"relu", NULL, DPT_LAYER_RELU, {NULL, NULL}, ""},
    {"tanh", NULL, DPT_LAYER_TANH, {NULL, NULL}, ""},
};
#define DPT__NET_NKINDS (sizeof dpt__net_kinds / sizeof dpt__net_kinds[0])

/* The layer being parsed, for messages. */
typedef struct dpt__net_at {
    size_t pos;                    /* from 1 */
    char text[DPT__NET_QUOTE + 4]; /* its text, shortened with "..." */
} dpt__net_at_t;

static int dpt__net_fail(const dpt__net_at_t *at, const char *what)
{
    return dpt_error(DPT_EINVAL, "network layer %zu \"%s\": %s", at->pos, at->text, what);
}

static int dpt__word_in(const char *list, const char *w, size_t n)
{
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && strncmp(p, w, n) == 0)
            return 1;
        p += k;
        p += *p == ' ';
    }
    return 0;
}

/* A positive integer (min 0 or 1) of at most 1 << 24 from [v, v + n). */
static int dpt__net_size(const dpt__net_at_t *at, const char *name, const char *v, size_t n,
                         size_t min, size_t *out)
{
    char buf[32], msg[160];
    unsigned long long x = 0;
    int ok = n > 0 && n < sizeof buf;
    for (size_t i = 0; ok && i < n; i++)
        ok = isdigit((unsigned char)v[i]) != 0;
    if (ok) {
        memcpy(buf, v, n);
        buf[n] = '\0';
        errno = 0;
        x = strtoull(buf, NULL, 10);
        ok = errno == 0 && x >= min && x <= (1ull << 24);
    }
    if (!ok) {
        snprintf(msg, sizeof msg, "%s = \"%.*s\" is not an integer in %zu..%llu", name,
                 (int)(n < 40 ? n : 40), v, min, 1ull << 24);
        return dpt__net_fail(at, msg);
    }
    *out = (size_t)x;
    return DPT_OK;
}

/* N or HxW into a[0], a[1]. */
static int dpt__net_pair(const dpt__net_at_t *at, const char *name, const char *v, size_t n,
                         size_t min, size_t a[2])
{
    const char *x = memchr(v, 'x', n);
    if (!x) {
        int rc = dpt__net_size(at, name, v, n, min, &a[0]);
        a[1] = a[0];
        return rc;
    }
    int rc = dpt__net_size(at, name, v, (size_t)(x - v), min, &a[0]);
    return rc ? rc : dpt__net_size(at, name, x + 1, n - (size_t)(x - v) - 1, min, &a[1]);
}

/* One argument `name` = [v, v + n) of layer l. */
static int dpt__net_arg(const dpt__net_at_t *at, dpt_layer_spec_t *l, const char *name,
                        const char *v, size_t n)
{
    size_t a[2];
    char buf[64], msg[200];
    int rc;
    if (strcmp(name, "out") == 0)
        return dpt__net_size(at, name, v, n, 1, &l->out);
    if (strcmp(name, "k") == 0) {
        rc = dpt__net_pair(at, name, v, n, 1, a);
        l->kh = a[0], l->kw = a[1];
        return rc;
    }
    if (strcmp(name, "stride") == 0) {
        rc = dpt__net_pair(at, name, v, n, 1, a);
        l->stride_h = a[0], l->stride_w = a[1];
        return rc;
    }
    if (strcmp(name, "pad") == 0) {
        if (n == 4 && strncmp(v, "same", 4) == 0) {
            l->pad_same = 1;
            return DPT_OK;
        }
        rc = dpt__net_pair(at, name, v, n, 0, a);
        l->pad_top = l->pad_bottom = a[0];
        l->pad_left = l->pad_right = a[1];
        return rc;
    }
    if (strcmp(name, "count_pad") == 0) {
        if (n != 1 || (v[0] != '0' && v[0] != '1'))
            return dpt__net_fail(at, "count_pad must be 0 or 1");
        l->count_pad = v[0] == '1';
        return DPT_OK;
    }
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 60 ? n : 60), v);
    if (strcmp(name, "p") == 0) {
        char *end;
        errno = 0;
        double r = strtod(buf, &end);
        if (n == 0 || n >= 60 || *end || errno || !(r >= 0.0 && r < 1.0)) {
            snprintf(msg, sizeof msg, "p = \"%s\" is not a probability in [0, 1)", buf);
            return dpt__net_fail(at, msg);
        }
        l->rate = (float)r;
        return DPT_OK;
    }
    if (strcmp(name, "momentum") == 0 || strcmp(name, "eps") == 0) {
        char *end;
        errno = 0;
        double r = strtod(buf, &end);
        int mom = name[0] == 'm';
        if (n == 0 || n >= 60 || *end || errno || !(r > 0.0 && r <= 1.0)) {
            snprintf(msg, sizeof msg, "%s = \"%s\" is not a number in (0, 1]", name, buf);
            return dpt__net_fail(at, msg);
        }
        *(mom ? &l->rate : &l->gain) = (float)r;
        return DPT_OK;
    }
    if (strcmp(name, "init") == 0) {
        if (dpt_init_parse(buf, &l->init) == DPT_OK)
            return DPT_OK;
        snprintf(msg, sizeof msg,
                 "init = \"%s\" is not one of default, uniform, normal, orthogonal", buf);
        return dpt__net_fail(at, msg);
    }
    /* gain */
    char *end;
    errno = 0;
    double g = strtod(buf, &end);
    if (n == 0 || n >= 60 || *end || errno || !isfinite(g) || g <= 0.0 || g > 1e6) {
        snprintf(msg, sizeof msg, "gain = \"%s\" is not a number in (0, 1e6]", buf);
        return dpt__net_fail(at, msg);
    }
    l->gain = (float)g;
    return DPT_OK;
}

/* The arguments [p, end) (between the parentheses) of a layer of kind k. */
static int dpt__net_args(const dpt__net_at_t *at, const dpt__net_kind_t *k, dpt_layer_spec_t *l,
                         const char *p, const char *end)
{
    char seen[128] = " ", msg[200];
    size_t npos = 0;
    int named = 0;
    const char *q = p;
    while (q < end && isspace((unsigned char)*q))
        q++;
    if (q == end)
        p = end; /* "relu ( )": no arguments */
    while (p < end) {
        const char *e = memchr(p, ',', (size_t)(end - p));
        if (!e)
            e = end;
        const char *a = p, *b = e;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b)
            return dpt__net_fail(at, "an empty argument");
        const char *eq = memchr(a, '=', (size_t)(b - a));
        char name[16];
        const char *v = a;
        if (eq) {
            const char *ne = eq;
            while (ne > a && isspace((unsigned char)ne[-1]))
                ne--;
            size_t nn = (size_t)(ne - a);
            if (nn == 0 || nn >= sizeof name || !dpt__word_in(k->named, a, nn)) {
                snprintf(msg, sizeof msg, "unknown argument \"%.*s\" (%s takes: %s)",
                         (int)(nn < 40 ? nn : 40), a, k->name, *k->named ? k->named : "none");
                return dpt__net_fail(at, msg);
            }
            memcpy(name, a, nn);
            name[nn] = '\0';
            v = eq + 1;
            while (v < b && isspace((unsigned char)*v))
                v++;
            named = 1;
        } else {
            if (named)
                return dpt__net_fail(at, "a positional argument after a named one");
            if (npos >= 2 || !k->positional[npos]) {
                snprintf(msg, sizeof msg, "too many positional arguments (%s takes %zu)", k->name,
                         (size_t)(k->positional[0] != NULL) + (k->positional[1] != NULL));
                return dpt__net_fail(at, msg);
            }
            snprintf(name, sizeof name, "%s", k->positional[npos++]);
        }
        char key[24];
        snprintf(key, sizeof key, " %s ", name);
        if (strstr(seen, key)) {
            snprintf(msg, sizeof msg, "argument %s given twice", name);
            return dpt__net_fail(at, msg);
        }
        if (strlen(seen) + strlen(key) < sizeof seen)
            strcat(seen, key + 1);
        int rc = dpt__net_arg(at, l, name, v, (size_t)(b - v));
        if (rc)
            return rc;
        p = e + (e < end);
        if (e < end && p == end)
            return dpt__net_fail(at, "an empty argument");
    }
    /* Required: out for conv and dense, k for conv and pooling. */
    int needs_out = k->kind == DPT_LAYER_CONV2D || k->kind == DPT_LAYER_LINEAR;
    int needs_k = k->kind == DPT_LAYER_CONV2D || k->kind == DPT_LAYER_MAXPOOL2D ||
                  k->kind == DPT_LAYER_AVGPOOL2D;
    if (k->kind == DPT_LAYER_DROPOUT && !strstr(seen, " p "))
        return dpt__net_fail(at, "the rate is missing (the first argument, e.g. dropout(0.5))");
    if (needs_out && !strstr(seen, " out "))
        return dpt__net_fail(at, "the output size is missing (the first argument)");
    if (needs_k && !strstr(seen, " k "))
        return dpt__net_fail(at, k->kind == DPT_LAYER_CONV2D
                                     ? "the kernel size is missing (k=3, or the second argument)"
                                     : "the window size is missing (the first argument)");
    return DPT_OK;
}

static const dpt__net_kind_t *dpt__net_kind(const char *w, size_t n)
{
    for (size_t i = 0; i < DPT__NET_NKINDS; i++) {
        const dpt__net_kind_t *k = &dpt__net_kinds[i];
        if ((strlen(k->name) == n && strncmp(k->name, w, n) == 0) ||
            (k->alias && strlen(k->alias) == n && strncmp(k->alias, w, n) == 0))
            return k;
    }
    return NULL;
}

int dpt_network_parse(const char *text, dpt_layer_spec_t *layers, size_t max_layers,
                      size_t *nlayers)
{
    if (!text || !layers || !nlayers)
        return dpt_error(DPT_EINVAL, "network: NULL argument");
    size_t n = 0;
    const char *p = text;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        dpt__net_at_t at = {n + 1, ""};
        const char *w = p;
        while (isalnum((unsigned char)*p) || *p == '_')
            p++;
        size_t wn = (size_t)(p - w);
        const char *q = p;
        while (isspace((unsigned char)*q))
            q++;
        const char *open = *q == '(' ? q : NULL, *close = NULL;
        if (open) {
            close = strchr(open, ')');
            p = close ? close + 1 : open + strlen(open);
        } else if (wn == 0) {
            p = w + 1; /* one stray character */
        }
        size_t tn = (size_t)(p - w);
        snprintf(at.text, sizeof at.text, "%.*s%s",
                 (int)(tn > DPT__NET_QUOTE ? DPT__NET_QUOTE : tn), w,
                 tn > DPT__NET_QUOTE ? "..." : "");
        if (wn == 0)
            return dpt__net_fail(&at, "expected a layer name");
        if (open && !close)
            return dpt__net_fail(&at, "no closing parenthesis");
        if (open && memchr(open + 1, '(', (size_t)(close - open - 1)))
            return dpt__net_fail(&at, "a parenthesis inside the arguments");
        if (!isspace((unsigned char)*p) && *p) {
            char msg[80];
            snprintf(msg, sizeof msg, "unexpected \"%c\" after it (layers are separated by spaces)",
                     *p);
            return dpt__net_fail(&at, msg);
        }
        const dpt__net_kind_t *k = dpt__net_kind(w, wn);
        if (!k)
            return dpt__net_fail(&at, "unknown layer (known: conv, maxpool, avgpool, dense, "
                                      "dropout, batchnorm, flatten, relu, tanh; conv2d, maxpool2d, "
                                      "avgpool2d, linear and bn are the same)");
        if (n == max_layers) {
            char msg[80];
            snprintf(msg, sizeof msg, "more than %zu layers", max_layers);
            return dpt__net_fail(&at, msg);
        }
        dpt_layer_spec_t l = {.kind = k->kind, .init = DPT_INIT_DEFAULT};
        l.count_pad = 1;
        if (open) {
            int rc = dpt__net_args(&at, k, &l, open + 1, close);
            if (rc)
                return rc;
        } else if (k->positional[0]) {
            char msg[80];
            snprintf(msg, sizeof msg, "%s needs arguments, e.g. %s", k->name,
                     k->kind == DPT_LAYER_CONV2D    ? "conv(32,k=3)"
                     : k->kind == DPT_LAYER_LINEAR  ? "dense(128)"
                     : k->kind == DPT_LAYER_DROPOUT ? "dropout(0.5)"
                                                    : "maxpool(2)");
            return dpt__net_fail(&at, msg);
        }
        if (l.init != DPT_INIT_DEFAULT && l.gain == 0.0f)
            l.gain = 1.0f;
        layers[n++] = l;
    }
    if (n == 0)
        return dpt_error(DPT_EINVAL, "network: the description is empty (no layers)");
    *nlayers = n;
    return DPT_OK;
}

/* ",init=orthogonal,gain=1.41" for an init other than the default. */
static size_t dpt__net_init_text(const dpt_layer_spec_t *l, char *buf, size_t size)
{
    /* %.9g: the text parses back to the same float. A gain given with the
     * default init (which ignores it) is written too. */
    int k = 0;
    if (l->init != DPT_INIT_DEFAULT)
        k = snprintf(buf, size, ",init=%s,gain=%.9g", dpt_init_name(l->init), (double)l->gain);
    else if (l->gain != 0.0f)
        k = snprintf(buf, size, ",gain=%.9g", (double)l->gain);
    return k < 0 ? 0 : (size_t)k;
}

void dpt_layer_describe(const dpt_layer_spec_t *l, char *buf, size_t size)
{
    if (!buf || size == 0)
        return;
    char pad[64], tail[64] = "";
    if (l->pad_same)
        snprintf(pad, sizeof pad, "same");
    else if (l->pad_top == l->pad_bottom && l->pad_left == l->pad_right)
        snprintf(pad, sizeof pad, "%zux%zu", l->pad_top, l->pad_left);
    else
        snprintf(pad, sizeof pad, "%zu/%zu/%zu/%zu (top/bottom/left/right)", l->pad_top,
                 l->pad_bottom, l->pad_left, l->pad_right);
    size_t sh = l->stride_h, sw = l->stride_w;
    switch (l->kind) {
    case DPT_LAYER_LINEAR:
        dpt__net_init_text(l, tail, sizeof tail);
        snprintf(buf, size, "dense(%zu%s)", l->out, tail);
        return;
    case DPT_LAYER_CONV2D:
        dpt__net_init_text(l, tail, sizeof tail);
        snprintf(buf, size, "conv(%zu,k=%zux%zu,stride=%zux%zu,pad=%s%s)", l->out, l->kh, l->kw,
                 sh ? sh : 1, sw ? sw : 1, pad, tail);
        return;
    case DPT_LAYER_MAXPOOL2D:
    case DPT_LAYER_AVGPOOL2D:
        if (l->kind == DPT_LAYER_AVGPOOL2D)
            snprintf(tail, sizeof tail, ",count_pad=%d", l->count_pad != 0);
        snprintf(buf, size, "%s(%zux%zu,stride=%zux%zu,pad=%s%s)",
                 l->kind == DPT_LAYER_MAXPOOL2D ? "maxpool" : "avgpool", l->kh, l->kw,
                 sh ? sh : l->kh, sw ? sw : l->kw, pad, tail);
        return;
    case DPT_LAYER_DROPOUT: snprintf(buf, size, "dropout(%.9g)", (double)l->rate); return;
    case DPT_LAYER_BATCHNORM: {
        /* Only what differs from the defaults (0 in the spec). */
        char m[32] = "", e[32] = "";
        if (l->rate != 0.0f)
            snprintf(m, sizeof m, "momentum=%.9g", (double)l->rate);
        if (l->gain != 0.0f)
            snprintf(e, sizeof e, "%seps=%.9g", *m ? "," : "", (double)l->gain);
        snprintf(buf, size, *m || *e ? "batchnorm(%s%s)" : "batchnorm", m, e);
        return;
    }
    default: snprintf(buf, size, "%s", dpt_layer_kind_name(l->kind)); return;
    }
}
