/*
 * fuzz_safetensors — the checkpoint loader. The input is written to a
 * scratch file and loaded with dpt_safetensors_load. When it loads, every
 * getter runs on it: the tensor list, find/get/get_blob, the metadata
 * (meta_at, meta, meta_u64), and dpt_safetensors_load_arena against a small
 * fixed table ("params." + "w" [2, 3], "b" [3]), as a resume would.
 */
#include "fuzz_common.h"

#include "dpt/checkpoint.h"
#include "dpt/status.h"

static dpt_vartable_t table;
static float arena[64];

static void table_init(void)
{
    static int done;
    if (done)
        return;
    static const size_t w[2] = {2, 3}, b[1] = {3};
    dpt_vartable_init(&table);
    if (dpt_vartable_add(&table, "w", 2, w, NULL) != 0 ||
        dpt_vartable_add(&table, "b", 1, b, NULL) != 0 || table.total > 64)
        abort();
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    table_init();
    const char *path = dpt_fuzz_path(0, "st");
    dpt_fuzz_spill(path, data, size);

    dpt_safetensors_t *st = NULL;
    if (dpt_safetensors_load(&st, path) != 0) {
        if (st)
            abort(); /* on failure *out is NULL */
        dpt_error_clear();
        return 0;
    }
    if (strcmp(dpt_safetensors_path(st), path) != 0)
        abort();
    size_t n = dpt_safetensors_count(st);
    for (size_t i = 0; i < n; i++) {
        const dpt_safetensors_tensor_t *t = dpt_safetensors_tensor(st, i);
        if (!t || dpt_safetensors_find(st, t->name) != t)
            abort();
        const dpt_safetensors_tensor_t *g = NULL;
        if (dpt_safetensors_get(st, t->name, t->dtype, t->ndim, t->shape, &g) != 0 || g != t)
            abort();
        const void *blob;
        size_t bytes;
        (void)dpt_safetensors_get_blob(st, t->name, &blob, &bytes);
    }
    if (dpt_safetensors_tensor(st, n) != NULL)
        abort();
    (void)dpt_safetensors_find(st, "params.w");
    size_t m = dpt_safetensors_meta_count(st);
    for (size_t i = 0; i < m; i++) {
        const char *key, *value;
        if (dpt_safetensors_meta_at(st, i, &key, &value) != 0 || !dpt_safetensors_meta(st, key))
            abort();
        uint64_t u;
        (void)dpt_safetensors_meta_u64(st, key, &u);
    }
    (void)dpt_safetensors_load_arena(st, "params.", &table, arena, 64);
    (void)dpt_safetensors_load_arena(st, "", &table, arena, 64);
    dpt_safetensors_destroy(st);
    dpt_error_clear();
    return 0;
}
