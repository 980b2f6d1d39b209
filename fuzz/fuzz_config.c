/*
 * fuzz_config — the config parser.
 *   1. The input as config text (dpt__config_load_text, the path a
 *      checkpoint's "config" metadata takes) and dpt_config_finalize on a
 *      fresh config. When it finalizes, the formatted text must load and
 *      finalize again to the same digest (what resuming from a checkpoint
 *      relies on).
 *   2. The input split at newlines into `--set` assignments
 *      (dpt_config_set), then dpt_config_finalize.
 */
#include "fuzz_common.h"

#include "dpt/status.h"
#include "dpt/train.h"
#include "train/train_internal.h"

/* Formats c, reloads the text into a fresh config, and checks that it
 * finalizes to the same digest. */
static void roundtrip(const dpt_config_t *c)
{
    size_t n = dpt_config_format(c, NULL, 0);
    char *text = malloc(n + 1);
    if (!text)
        abort();
    if (dpt_config_format(c, text, n + 1) != n)
        abort();
    dpt_config_t *r = NULL;
    if (dpt_config_create(&r) != 0)
        abort();
    int rc = dpt__config_load_text(r, text, "roundtrip");
    if (rc == 0)
        rc = dpt_config_finalize(r);
    if (rc != 0) {
        fprintf(stderr, "fuzz_config: the formatted config does not load again: %s\n%s",
                dpt_last_error(), text);
        abort();
    }
    if (dpt_config_digest(r, 0) != dpt_config_digest(c, 0)) {
        fprintf(stderr, "fuzz_config: the formatted config loads to another digest\n%s", text);
        abort();
    }
    dpt_config_destroy(r);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = dpt_fuzz_strdup(data, size);

    dpt_config_t *c = NULL;
    if (dpt_config_create(&c) != 0)
        abort();
    if (dpt__config_load_text(c, text, "fuzz") == 0 && dpt_config_finalize(c) == 0) {
        roundtrip(c);
        (void)dpt_config_job(c);
    }
    dpt_config_destroy(c);

    if (dpt_config_create(&c) != 0)
        abort();
    int rc = 0;
    for (char *line = text, *next; line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        rc = dpt_config_set(c, line);
    }
    if (rc == 0 && dpt_config_finalize(c) == 0)
        roundtrip(c);
    dpt_config_destroy(c);

    dpt_error_clear();
    free(text);
    return 0;
}
