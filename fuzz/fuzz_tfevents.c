/*
 * fuzz_tfevents — the reader of TensorBoard event files that a resume runs
 * over the files it rewrites (src/core/tfrecord.h): records through
 * dpt__tfrecord_read, each decoded by dpt__tfevent_decode. Every record read
 * must carry right CRCs (checked again here), every decoded pointer must lie
 * inside its record, and a record framed again must read back the same.
 */
#include "fuzz_common.h"

#include "core/tfrecord.h"
#include "dpt/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = dpt_fuzz_path(0, "tfevents");
    dpt_fuzz_spill(path, data, size);
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    dpt__tfbuf_t rec = {0}, again = {0};
    int rc;
    while ((rc = dpt__tfrecord_read(f, "fuzz", &rec)) == 1) {
        dpt__tfevent_info_t ev;
        if (dpt__tfevent_decode(rec.data, rec.len, &ev) == 0) {
            const unsigned char *end = rec.data + rec.len;
            if ((ev.file_version &&
                 (ev.file_version < rec.data || ev.file_version + ev.file_version_len > end)) ||
                (ev.summary && (ev.summary < rec.data || ev.summary + ev.summary_len > end)))
                abort();
        }
        again.len = 0;
        if (dpt__tfrecord_append(&again, rec.data, rec.len) != 0)
            abort();
        if (again.len != rec.len + 16 || memcmp(again.data + 12, rec.data, rec.len) != 0 ||
            dpt__crc32c_mask(dpt__crc32c(0, rec.data, rec.len)) !=
                (uint32_t)(again.data[12 + rec.len] | again.data[13 + rec.len] << 8 |
                           again.data[14 + rec.len] << 16 |
                           (uint32_t)again.data[15 + rec.len] << 24))
            abort();
    }
    if (rc != 0 && rc != DPT_EFORMAT && rc != DPT_ENOMEM)
        abort();
    fclose(f);
    dpt__tfbuf_free(&rec);
    dpt__tfbuf_free(&again);
    dpt_error_clear();
    return 0;
}
