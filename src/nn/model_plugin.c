/* Loading model plug-ins (dpt/nn.h: dpt_model_plugin_load). */
#include "dpt/nn.h"
#include "dpt/status.h"

#include <dlfcn.h>
#include <stddef.h>

int dpt_model_plugin_load(const char *path, const dpt_model_plugin_t **out)
{
    *out = NULL;
    if (!path || !path[0])
        return dpt_error(DPT_EINVAL, "model plug-in: no path given");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return dpt_error(DPT_EINVAL, "model plug-in %s: %s", path, why ? why : "cannot load");
    }
    /* ISO C has no cast from an object pointer to a function pointer. */
    union {
        void *p;
        int (*fn)(void);
    } abi;
    union {
        void *p;
        const dpt_model_plugin_t *(*fn)(void);
    } sym;
    /* The ABI number first: a plug-in built against other headers may lay
     * out the structs differently, so nothing else of it is read. */
    abi.p = dlsym(h, DPT_MODEL_PLUGIN_ABI_SYMBOL);
    int plugin_abi = abi.p ? abi.fn() : 0;
    if (plugin_abi != DPT_MODEL_ABI_VERSION) {
        dlclose(h);
        return dpt_error(DPT_EINVAL,
                         "model plug-in %s was built for model ABI %d, this dpt has %d; rebuild "
                         "it against this dpt's headers%s",
                         path, plugin_abi, DPT_MODEL_ABI_VERSION,
                         abi.p ? ""
                               : " (it does not export " DPT_MODEL_PLUGIN_ABI_SYMBOL "(): "
                                 "end the model file with DPT_MODEL_PLUGIN(object))");
    }
    sym.p = dlsym(h, DPT_MODEL_PLUGIN_SYMBOL);
    const dpt_model_plugin_t *p = sym.p ? sym.fn() : NULL;
    if (!p || !p->name || !p->create || !p->init_params || !p->predict || !p->destroy) {
        dlclose(h);
        return dpt_error(DPT_EINVAL, "model plug-in %s: %s", path,
                         !sym.p ? "does not export " DPT_MODEL_PLUGIN_SYMBOL "()"
                         : !p   ? "returned no plug-in object"
                                : "its object lacks a name, create, init_params, predict or "
                                  "destroy");
    }
    /* Kept loaded: the instances' code lives in it. */
    *out = p;
    return DPT_OK;
}
