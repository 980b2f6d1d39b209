/*
 * Internal: strings that live as long as the process, for names that
 * results borrow as "static storage" (dpt_metric_t) but that are made at
 * run time (the metrics of a policy named in the config).
 */
#ifndef DPT_CORE_INTERN_H
#define DPT_CORE_INTERN_H

/* A copy of s kept until the process ends; equal strings give the same
 * pointer, so a name made again by every run costs memory once. NULL when
 * out of memory (with an error message). Thread-safe. */
const char *dpt__intern(const char *s);

#endif
