/*
 * dpt/dpt.h — umbrella header and build information.
 *
 * Includes every public module header. dpt_version() and dpt_features()
 * describe what this build of the library contains (the optional
 * dependencies found at build time), for `dpt info` and for programs that
 * want to check before they ask for MPI or gzipped data.
 */
#ifndef DPT_DPT_H
#define DPT_DPT_H

#include "dpt/arena.h"
#include "dpt/batch.h"
#include "dpt/conv.h"
#include "dpt/gemm.h"
#include "dpt/learner.h"
#include "dpt/lstm.h"
#include "dpt/nn.h"
#include "dpt/norm.h"
#include "dpt/optim.h"
#include "dpt/profile.h"
#include "dpt/queue.h"
#include "dpt/rng.h"
#include "dpt/shape.h"
#include "dpt/stats.h"
#include "dpt/status.h"
#include "dpt/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Optional features. */
#define DPT_FEATURE_LIST(X)                                          \
    X(DPT_FEATURE_CBLAS, "cblas", "GEMM through a CBLAS (OpenBLAS)") \
    X(DPT_FEATURE_MPI, "mpi", "MPI and hierarchical collectives")    \
    X(DPT_FEATURE_ZLIB, "zlib", "gzipped dataset files")

/* clang-format off */ /* (it misreads an enum made from an X-macro list) */
typedef enum dpt_feature {
#define DPT__FEATURE_ENUM(sym, name, desc) sym,
    DPT_FEATURE_LIST(DPT__FEATURE_ENUM)
#undef DPT__FEATURE_ENUM
    DPT_FEATURE_COUNT
} dpt_feature_t;
/* clang-format on */

/* The library's version, "0.2.0" (DPT_VERSION_STRING of the build) — static
 * string. DPT_VERSION_MAJOR/MINOR/PATCH (dpt/version.h) are the headers'. */
const char *dpt_version(void);
/* 1 when this build has the feature, 0 otherwise (also for unknown values). */
int dpt_has_feature(dpt_feature_t f);
/* Short name ("mpi") and description of a feature; "unknown" otherwise. */
const char *dpt_feature_name(dpt_feature_t f);
const char *dpt_feature_description(dpt_feature_t f);

#ifdef __cplusplus
}
#endif
#endif /* DPT_DPT_H */
