/*
 * ckpt_compare [--weights] A B: exits 0 when two checkpoints hold the same
 * tensors with bitwise-identical contents (metadata is ignored: it holds
 * wall times), 1 with the first difference otherwise. --weights compares
 * only the weights and the optimizer state (the tensors named params.* and
 * optim.*), as runs that split their envs differently among workers save
 * different worker states. Used by the CLI resume and reduction-order
 * tests.
 */
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <stdio.h>
#include <string.h>

static int weights_only;

static int compared(const char *name)
{
    return !weights_only || strncmp(name, "params.", 7) == 0 || strncmp(name, "optim.", 6) == 0;
}

/* The tensors of st that are compared. */
static size_t count_compared(const dpt_safetensors_t *st)
{
    size_t n = 0;
    for (size_t i = 0; i < dpt_safetensors_count(st); i++)
        n += (size_t)compared(dpt_safetensors_tensor(st, i)->name);
    return n;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--weights") == 0) {
        weights_only = 1;
        argv++;
        argc--;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_compare [--weights] A B\n");
        return 2;
    }
    dpt_safetensors_t *a, *b;
    if (dpt_safetensors_load(&a, argv[1]) || dpt_safetensors_load(&b, argv[2])) {
        fprintf(stderr, "ckpt_compare: %s\n", dpt_last_error());
        return 2;
    }
    int diff = 0;
    size_t na = count_compared(a), nb = count_compared(b);
    if (na != nb || na == 0) {
        printf("different tensor counts: %zu vs %zu\n", na, nb);
        diff = 1;
    }
    for (size_t i = 0; !diff && i < dpt_safetensors_count(a); i++) {
        const dpt_safetensors_tensor_t *x = dpt_safetensors_tensor(a, i);
        if (!compared(x->name))
            continue;
        const dpt_safetensors_tensor_t *y = dpt_safetensors_find(b, x->name);
        if (!y || y->bytes != x->bytes || memcmp(x->data, y->data, x->bytes) != 0) {
            printf("tensor %s differs\n", x->name);
            diff = 1;
        }
    }
    dpt_safetensors_destroy(a);
    dpt_safetensors_destroy(b);
    if (!diff)
        printf("identical\n");
    return diff;
}
