/*
 * fuzz_idx — the IDX reader (MNIST format, plain or gzipped by content).
 * Input layout: [1 byte num_classes, as int8] [4 bytes n, little-endian]
 * [images file: the next n bytes (fewer when the input is shorter)]
 * [labels file: the rest]. Both files are written to scratch files and
 * loaded with dpt_dataset_load_idx.
 */
#include "fuzz_common.h"

#include "dpt/dataset.h"
#include "dpt/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    int num_classes = (int8_t)data[0];
    size_t n =
        (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    data += 5;
    size -= 5;
    if (n > size)
        n = size;
    const char *images = dpt_fuzz_path(0, "idx_images");
    const char *labels = dpt_fuzz_path(1, "idx_labels");
    dpt_fuzz_spill(images, data, n);
    dpt_fuzz_spill(labels, data + n, size - n);

    dpt_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    if (dpt_dataset_load_idx(&ds, images, labels, num_classes) == 0) {
        /* Every label in range, every feature in [0, 1]. */
        for (size_t i = 0; i < ds.rows; i++)
            if (ds.labels[i] < 0 || ds.labels[i] >= ds.num_classes)
                abort();
        for (size_t i = 0; i < ds.rows * ds.dim; i++)
            if (!(ds.x[i] >= 0.0f && ds.x[i] <= 1.0f))
                abort();
    } else if (ds.x || ds.labels || ds.rows) {
        abort(); /* on failure *ds is zeroed */
    }
    dpt_dataset_deinit(&ds);
    dpt_error_clear();
    return 0;
}
