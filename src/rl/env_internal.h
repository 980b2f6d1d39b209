/*
 * Internal to the env module (src/rl/env.c, src/rl/env_params.c) and to the
 * config code that reports env_config errors. Not installed.
 */
#ifndef DPT_RL_ENV_INTERNAL_H
#define DPT_RL_ENV_INTERNAL_H

#include "dpt/env.h"

#include <stddef.h>
#include <stdint.h>

/* The checks of dpt_env_class_check on cls->params and cls->values (the
 * declarations, their defaults, and the values when set). */
int dpt__env_params_check(const dpt_env_class_t *cls);

/* "its parameters: a, b" or "it takes no parameters" into buf [size]
 * (truncated with "..." when long). */
void dpt__env_param_list(const dpt_env_class_t *cls, char *buf, size_t size);

/* A digest of the parameter values (name=value of each, canonical text),
 * for saved runner states: 0 for a class without parameters, never 0
 * otherwise. */
uint32_t dpt__env_values_digest(const dpt_env_class_t *cls, const dpt_env_value_t *values);

/* dpt_env_class_create without checking cls first (the caller did). */
int dpt__env_configure(dpt_env_class_t **out, const dpt_env_class_t *cls, const char *const *names,
                       const char *const *texts, size_t n);

#endif
