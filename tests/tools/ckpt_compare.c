/*
 * ckpt_compare A B: exits 0 when two checkpoints hold the same tensors with
 * bitwise-identical contents (metadata is ignored: it holds wall times),
 * 1 with the first difference otherwise. Used by the CLI resume tests.
 */
#include "dpt/checkpoint.h"
#include "dpt/status.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_compare A B\n");
        return 2;
    }
    dpt_safetensors_t *a, *b;
    if (dpt_safetensors_load(&a, argv[1]) || dpt_safetensors_load(&b, argv[2])) {
        fprintf(stderr, "ckpt_compare: %s\n", dpt_last_error());
        return 2;
    }
    int diff = 0;
    if (dpt_safetensors_count(a) != dpt_safetensors_count(b)) {
        printf("different tensor counts: %zu vs %zu\n", dpt_safetensors_count(a),
               dpt_safetensors_count(b));
        diff = 1;
    }
    for (size_t i = 0; !diff && i < dpt_safetensors_count(a); i++) {
        const dpt_safetensors_tensor_t *x = dpt_safetensors_tensor(a, i);
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
