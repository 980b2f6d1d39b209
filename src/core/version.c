/* Build information: version and the optional features compiled in. */
#include "dpt/dpt.h"
#include "dpt_config.h"

const char *dpt_version(void)
{
    return DPT_VERSION_STRING;
}

int dpt_has_feature(dpt_feature_t f)
{
    switch (f) {
    case DPT_FEATURE_CBLAS: return DPT_HAVE_CBLAS;
    case DPT_FEATURE_MPI: return DPT_HAVE_MPI;
    case DPT_FEATURE_ZLIB: return DPT_HAVE_ZLIB;
    default: return 0;
    }
}

const char *dpt_feature_name(dpt_feature_t f)
{
    switch (f) {
#define DPT__FEATURE_NAME(sym, name, desc) \
    case sym: return name;
        DPT_FEATURE_LIST(DPT__FEATURE_NAME)
#undef DPT__FEATURE_NAME
    default: return "unknown";
    }
}

const char *dpt_feature_description(dpt_feature_t f)
{
    switch (f) {
#define DPT__FEATURE_DESC(sym, name, desc) \
    case sym: return desc;
        DPT_FEATURE_LIST(DPT__FEATURE_DESC)
#undef DPT__FEATURE_DESC
    default: return "unknown";
    }
}
