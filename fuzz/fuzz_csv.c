/*
 * fuzz_csv — the CSV reader, plain and gzipped.
 * Input layout: [flags] [label_index, as int8] [num_classes, as int8] [file].
 * flags: bit 0 header line; bit 1 label by name ("label"); bits 2-3 the
 * delimiter (',', ';', tab, ' '); bit 4 gzip the file first (when this build
 * has zlib; without it the file is read plain).
 */
#include "fuzz_common.h"

#include "dpt/dataset.h"
#include "dpt/status.h"
#include "dpt_config.h"

#if DPT_HAVE_ZLIB
#include <zlib.h>
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const char delims[4] = {',', ';', '\t', ' '};
    dpt_csv_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.header = data[0] & 1;
    opt.label_name = (data[0] & 2) ? "label" : NULL;
    opt.delimiter = delims[(data[0] >> 2) & 3];
    opt.label_index = (int8_t)data[1];
    opt.num_classes = (int8_t)data[2];
    int gz = (data[0] >> 4) & 1;
    data += 3;
    size -= 3;

    const char *path = dpt_fuzz_path(0, "csv");
#if DPT_HAVE_ZLIB
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f)
            abort();
        if (size && gzwrite(f, data, (unsigned)size) != (int)size)
            abort();
        if (gzclose(f) != Z_OK)
            abort();
    } else
#endif
    {
        (void)gz;
        dpt_fuzz_spill(path, data, size);
    }

    dpt_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    if (dpt_dataset_load_csv(&ds, path, &opt) == 0) {
        if (ds.rows == 0 || ds.dim == 0 || ds.num_classes <= 0)
            abort();
        for (size_t i = 0; i < ds.rows; i++)
            if (ds.labels[i] < 0 || ds.labels[i] >= ds.num_classes)
                abort();
        for (size_t i = 0; i < ds.rows * ds.dim; i++)
            if (ds.x[i] - ds.x[i] != 0.0f) /* NaN and infinities are refused */
                abort();
    } else if (ds.x || ds.labels || ds.rows) {
        abort();
    }
    dpt_dataset_deinit(&ds);
    dpt_error_clear();
    return 0;
}
