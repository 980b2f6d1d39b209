/*
 * fuzz_metrics — dpt_metrics_load, the reader of result.jsonl (what
 * `dpt plot` reads from any directory it is given). A table it returns must
 * be whole: every column named, and a number or NAN in every row. An
 * accepted file whose rows are rewritten as JSON must load again to the same
 * table.
 */
#include "fuzz_common.h"

#include "dpt/status.h"
#include "dpt/train.h"

#include <math.h>

/* Writes t as result.jsonl rows, each name as one key (a key with '/' reads
 * back as the same flattened name), and loads them again. */
static int same_after_rewrite(const dpt_metrics_table_t *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    for (size_t r = 0; r < t->rows; r++) {
        fputc('{', f);
        int first = 1;
        for (size_t c = 0; c < t->cols; c++) {
            if (isnan(t->values[c][r]))
                continue;
            /* Only plain names round-trip through this simple writer. */
            for (const char *p = t->names[c]; *p; p++)
                if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) {
                    fclose(f);
                    return 1;
                }
            fprintf(f, "%s\"%s\":%.17g", first ? "" : ",", t->names[c], t->values[c][r]);
            first = 0;
        }
        fputs("}\n", f);
    }
    if (fclose(f) != 0)
        abort();
    dpt_metrics_table_t *u = NULL;
    if (dpt_metrics_load(&u, path) != 0)
        return 0;
    int same = u->rows == t->rows;
    for (size_t c = 0; same && c < u->cols; c++) {
        const double *v = dpt_metrics_column(t, u->names[c]);
        for (size_t r = 0; v && r < u->rows; r++)
            same &= isnan(v[r]) ? isnan(u->values[c][r]) : v[r] == u->values[c][r];
        same &= v != NULL;
    }
    dpt_metrics_destroy(u);
    return same;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = dpt_fuzz_path(0, "metrics");
    dpt_fuzz_spill(path, data, size);
    dpt_metrics_table_t *t = NULL;
    if (dpt_metrics_load(&t, path) == 0) {
        if (!t)
            abort();
        for (size_t c = 0; c < t->cols; c++) {
            if (!t->names[c] || !t->values[c] || dpt_metrics_column(t, t->names[c]) == NULL)
                abort();
            for (size_t r = 0; r < t->rows; r++)
                if (isinf(t->values[c][r]))
                    abort();
        }
        if (!same_after_rewrite(t, dpt_fuzz_path(1, "metrics_rewrite"))) {
            fprintf(stderr, "fuzz_metrics: the rewritten rows load to another table\n");
            abort();
        }
        dpt_metrics_destroy(t);
    } else if (t) {
        abort();
    }
    dpt_error_clear();
    return 0;
}
