/*
 * An env plug-in that does not match this dpt's env ABI (env_abi_test.sh):
 * built with -DPLUGIN_ABI=N it declares ABI N (another dpt's headers: a
 * newer one, or the previous one, whose class had no obs_shape after
 * obs_dim); with -DPLUGIN_NO_ABI it exports only dpt_env_plugin(),
 * as plug-ins written before the ABI was numbered did. The loader must refuse
 * every one before it calls dpt_env_plugin() (which would abort here).
 */
#include <dpt/env.h>

#include <stdlib.h>

int dpt_env_plugin_abi(void);
const dpt_env_class_t *dpt_env_plugin(void);

#ifndef PLUGIN_NO_ABI
int dpt_env_plugin_abi(void)
{
    return PLUGIN_ABI;
}
#endif

const dpt_env_class_t *dpt_env_plugin(void)
{
    abort(); /* a refused plug-in's class must never be read */
}
