/*
 * dpt/dataset.h — in-memory datasets for supervised jobs: IDX files (the
 * MNIST / Fashion-MNIST format), CSV files, and two interleaved spirals
 * generated from a seed.
 *
 * A dataset is `rows` samples of `dim` float features (row-major) and one
 * int32 class label each, all in memory and owned by the dpt_dataset_t.
 *
 * IDX (http://yann.lecun.com/exdb/mnist/): a 4-byte magic 0x0000TTDD (TT the
 * element type, DD the number of dimensions), DD big-endian 32-bit sizes,
 * then the elements. dpt reads unsigned-byte files (TT = 0x08): images
 * 0x00000803 [n, rows, cols] (any 2..4 dimensions, the first one being the
 * sample count) and labels 0x00000801 [n]. Image bytes are scaled to [0, 1]
 * (x = byte / 255). Files may be gzipped (recognised by the gzip magic 1f 8b,
 * not by the name); reading those needs zlib (DPT_HAVE_ZLIB in this build's
 * dpt_config.h), without it they are a DPT_ENOTSUP error that says so.
 *
 * CSV: one sample per line, numeric feature cells and one integer label
 * column (chosen by index or, with a header line, by name); lines whose first
 * non-blank character is '#' and blank lines are skipped; "\r\n" line ends
 * are accepted. CSV files may be gzipped too.
 *
 * Labels: with num_classes > 0 every label must be in [0, num_classes);
 * with num_classes == 0 the labels must be in [0, 255] and num_classes
 * becomes the largest label + 1 (a larger value usually means the wrong
 * column was chosen; pass num_classes to allow more classes).
 *
 * Errors name the file and the problem: "dataset /x/train-labels-idx1-ubyte:
 * the header says 60000 labels (60008 bytes), the file has 59000 bytes".
 */
#ifndef DPT_DATASET_H
#define DPT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist package installs the four files
 * (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
 * t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz). */
#define DPT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A dataset. The struct is the caller's; x and labels are owned by it until
 * dpt_dataset_deinit(). */
typedef struct dpt_dataset {
    size_t rows;       /* samples */
    size_t dim;        /* features per sample */
    float *x;          /* [rows, dim] (owned) */
    int32_t *labels;   /* [rows], each in [0, num_classes) (owned); NULL with targets */
    int num_classes;   /* 0 with targets */
    float *targets;    /* regression: [rows, target_dim] (owned), or NULL */
    size_t target_dim; /* columns of targets; 0 for a classification set */
    size_t height;     /* IDX images: rows and columns of one image; */
    size_t width;      /* 0 for CSV data and 2-D IDX files */
} dpt_dataset_t;

/* Frees x and labels and zeroes the struct; safe on a zeroed or already
 * deinitialised dataset. */
void dpt_dataset_deinit(dpt_dataset_t *ds);

/* Loads an IDX image file and its IDX label file (plain or gzipped) into
 * *ds (any previous contents are not freed: pass a zeroed or deinitialised
 * struct). On failure *ds is zeroed.
 * Errors: DPT_ENOENT (missing file, or a path through a file), DPT_EINVAL
 * (not a regular file, a path that cannot be opened for another reason than
 * the system's), DPT_EIO (a read error), DPT_EFORMAT (bad
 * magic, header sizes that do not match the file length, corrupted gzip
 * data, different image and label counts, a label out of range),
 * DPT_ENOTSUP (an IDX element type other than unsigned byte; a gzipped file
 * in a build without zlib), DPT_EINVAL (num_classes < 0), DPT_EOVERFLOW,
 * DPT_ENOMEM. */
int dpt_dataset_load_idx(dpt_dataset_t *ds, const char *images_path, const char *labels_path,
                         int num_classes);

/* CSV options. A zeroed struct means: no header line, the label is the
 * first column (index 0), ',' separates cells, classes from the labels. */
typedef struct dpt_csv_options {
    int header;             /* 1: the first non-comment line names the columns */
    const char *label_name; /* the label column by name (needs header), or NULL */
    long label_index;       /* used when label_name is NULL: 0-based column index;
                              * negative counts from the end (-1 = last column) */
    int num_classes;        /* see "Labels" above; 0 = from the data */
    char delimiter;         /* 0 means ',' */
    /* Regression: the header names of the target columns, separated by
     * commas ("y" or "price,volume"), or NULL for a classification set.
     * Needs a header; the label options are then ignored: every other
     * column is a feature, the targets are decimal numbers like the
     * features, and ds->labels stays NULL. */
    const char *target_names;
} dpt_csv_options_t;

/* Loads a CSV file into *ds (same rules for *ds as dpt_dataset_load_idx).
 * Every data line must have the same number of cells; feature cells are
 * decimal numbers (as strtod reads them, surrounding blanks allowed; NaN and
 * infinities refused), the label cell an integer. `opt` NULL means a zeroed
 * struct.
 * Errors: DPT_ENOENT, DPT_EINVAL and DPT_EIO as for the IDX files,
 * DPT_EFORMAT ("line 7, column 3: \"abc\" is not a number", "line 9 has 4
 * cells, expected 5", label not an integer or out of
 * range, no data lines, only one column), DPT_EINVAL (label_name without a
 * header or not among the header's names, label_index out of range),
 * DPT_ENOTSUP (gzipped without zlib), DPT_ENOMEM. With target_names:
 * DPT_EINVAL for a name not in the header, named twice, or an empty list,
 * DPT_EFORMAT for a file with no feature column left. */
int dpt_dataset_load_csv(dpt_dataset_t *ds, const char *path, const dpt_csv_options_t *opt);

/* The two parts of the (Fashion-)MNIST data. */
typedef enum dpt_split {
    DPT_SPLIT_TRAIN, /* train-*: 60000 samples */
    DPT_SPLIT_TEST   /* t10k-*: 10000 samples */
} dpt_split_t;

/* The four files of an MNIST-format directory. Each path is the plain file
 * (e.g. "train-images-idx3-ubyte") when it exists, otherwise the gzipped one
 * ("train-images-idx3-ubyte.gz"). */
typedef struct dpt_mnist_files {
    char train_images[4096];
    char train_labels[4096];
    char test_images[4096];
    char test_labels[4096];
} dpt_mnist_files_t;

/* Finds the four files in `dir` (NULL means DPT_FASHION_MNIST_DIR).
 * Errors: DPT_ENOENT naming the directory and the first missing file
 * ("dataset directory /d: t10k-labels-idx1-ubyte[.gz] is missing"),
 * DPT_ENOTSUP (only gzipped files and a build without zlib), DPT_EINVAL
 * (a path longer than 4095 bytes). */
int dpt_dataset_find_mnist(dpt_mnist_files_t *files, const char *dir);

/* Finds the files in `dir` (NULL: DPT_FASHION_MNIST_DIR) and loads one
 * split with num_classes 10. Errors: those of dpt_dataset_find_mnist and
 * dpt_dataset_load_idx. */
int dpt_dataset_load_mnist(dpt_dataset_t *ds, const char *dir, dpt_split_t split);

/* Two interleaved spirals in the plane (2 features, 2 classes): a task no
 * linear model solves, small enough to train in seconds. Point i of the
 * sequence train points then test points (i counted across both) has
 *   class c = i & 1,  r = 0.05 + 0.95 u,  angle t = 3.5 pi r + c pi,
 *   x = (r cos t + 0.02 n1, r sin t + 0.02 n2)
 * with u uniform in [0, 1) and n1, n2 standard normal, all drawn in that
 * order from the one stream (seed, rank 0, index 0, DPT_RNG_DATA), so the
 * data are a pure function of (train_points, test_points, seed), and the
 * labels alternate 0, 1, 0, ... (within the test part too when
 * train_points is even). Both structs are filled (pass zeroed or
 * deinitialised ones); on failure both are zeroed.
 * Errors: DPT_EINVAL (a count of 0), DPT_EOVERFLOW, DPT_ENOMEM. */
int dpt_dataset_make_spirals(dpt_dataset_t *train, dpt_dataset_t *test, size_t train_points,
                             size_t test_points, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* DPT_DATASET_H */
