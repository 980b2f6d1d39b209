/*
 * fuzz_network — the model language (dpt_network_parse).
 *   The input as a network description. When it parses, every layer is
 *   described and the description parsed again to the same layer (what an
 *   error message quotes must mean the same layer), and the layers are
 *   checked against two input shapes (an image and a flat row); a stack is
 *   built from them when the shapes hold and the model is small.
 */
#include "fuzz_common.h"

#include "dpt/arena.h"
#include "dpt/nn.h"
#include "dpt/status.h"

static int same_layer(const dpt_layer_spec_t *a, const dpt_layer_spec_t *b)
{
    size_t sa = a->stride_h ? a->stride_h : (a->kind == DPT_LAYER_CONV2D ? 1 : a->kh);
    return a->kind == b->kind && a->out == b->out && a->kh == b->kh && a->kw == b->kw &&
           a->pad_same == b->pad_same && a->pad_top == b->pad_top && a->pad_left == b->pad_left &&
           a->init == b->init && a->gain == b->gain && sa == b->stride_h &&
           a->count_pad == b->count_pad && a->rate == b->rate;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = dpt_fuzz_strdup(data, size);
    dpt_layer_spec_t layers[DPT_NETWORK_MAX_LAYERS];
    size_t n = 0;
    if (dpt_network_parse(text, layers, DPT_NETWORK_MAX_LAYERS, &n) == 0) {
        if (n == 0 || n > DPT_NETWORK_MAX_LAYERS)
            abort();
        for (size_t i = 0; i < n; i++) {
            char buf[256];
            dpt_layer_spec_t again;
            size_t m = 0;
            dpt_layer_describe(&layers[i], buf, sizeof buf);
            if (dpt_network_parse(buf, &again, 1, &m) != 0) {
                fprintf(stderr, "fuzz_network: \"%s\" does not parse back: %s\n", buf,
                        dpt_last_error());
                abort();
            }
            if (m != 1 || !same_layer(&layers[i], &again)) {
                fprintf(stderr, "fuzz_network: \"%s\" parses back to another layer\n", buf);
                abort();
            }
        }
        dpt_shape_t shapes[DPT_NETWORK_MAX_LAYERS];
        const dpt_shape_t ins[2] = {{3, 12, 10}, {17, 1, 1}};
        for (int k = 0; k < 2; k++) {
            if (dpt_layers_shapes(ins[k], layers, n, shapes) != 0)
                continue;
            /* A stack only when every activation stays small. */
            size_t big = 0;
            for (size_t i = 0; i < n; i++) {
                size_t f = shapes[i].c * shapes[i].h * shapes[i].w;
                big |= f > 4096 || layers[i].out > 256 || layers[i].kh * layers[i].kw > 64;
            }
            if (big)
                continue;
            dpt_vartable_t t;
            dpt_vartable_init(&t);
            dpt_seq_t *s = NULL;
            if (dpt_seq_create_shaped(&s, ins[k], layers, n, 2, &t, "") == 0) {
                dpt_arena_t p = {0}, g = {0};
                float x[2 * 3 * 12 * 10] = {0};
                const float *y;
                if (dpt_arena_init(&p, t.total) == 0 && dpt_arena_init(&g, t.total) == 0 &&
                    dpt_seq_forward(s, p.data, x, 2, &y) == 0)
                    (void)dpt_seq_backward(s, p.data, g.data, y, NULL);
                dpt_arena_deinit(&p);
                dpt_arena_deinit(&g);
            }
            dpt_seq_destroy(s);
            dpt_vartable_deinit(&t);
        }
    }
    free(text);
    return 0;
}
