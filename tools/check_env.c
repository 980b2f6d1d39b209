/*
 * tools/check_env.c — `dpt check-env NAME|PLUGIN`: the env contract
 * (dpt_env_check_contract) of a built-in env or a plug-in, with its
 * env_config.* values, one line per rule.
 */
#include "cli.h"
#include "dpt/env.h"
#include "dpt/status.h"
#include "dpt/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_env_usage(FILE *f, int code)
{
    fprintf(f, "usage: dpt check-env NAME|PLUGIN.so [--set env_config.NAME=value]... [--steps N] "
               "[--seed S]\n\n"
               "Runs N steps (default 20000) of the env with random actions and checks its\n"
               "contract, one line per rule: every observation value written by reset and step,\n"
               "nothing written past the observation or the state block, finite observations\n"
               "and rewards, the same episodes from the same seed, and the same continuation\n"
               "from a copy of the state block (no state kept elsewhere). Each violation names\n"
               "the rule and the step. Then the steps/s of a runner of 8 envs.\n"
               "Exit codes: 0 every rule holds, 1 a rule is broken, 2 bad usage or an env that\n"
               "cannot be loaded or configured.\n\n"
               "NAME is a built-in env:");
    for (size_t i = 0; i < dpt_env_count(); i++)
        fprintf(f, "%s %s", i % 4 ? "," : "\n ", dpt_env_get(i)->name);
    fprintf(f, "\nanything else with a '/' or \".so\" is a plug-in's path.\n");
    return code;
}

int dpt_cmd_check_env(int argc, char **argv)
{
    const char *name = NULL;
    uint64_t steps = 20000, seed = 1;
    dpt_config_t *c = NULL;
    dpt_env_class_t *cls = NULL;
    int code = DPT_EXIT_USAGE, rc = dpt_config_create(&c);
    if (rc || (rc = dpt_config_set(c, "job=ppo")) != 0) {
        fprintf(stderr, "dpt check-env: %s\n", dpt_last_error());
        code = DPT_EXIT_FAIL;
        goto out;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            code = check_env_usage(stdout, DPT_EXIT_OK);
            goto out;
        }
        if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--steps") ||
            !strcmp(argv[i], "--seed")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "dpt check-env: %s needs a value\n", argv[i]);
                goto out;
            }
            const char *opt = argv[i], *val = argv[++i];
            if (!strcmp(opt, "--steps")) {
                if (dpt_cli_parse_u64("check-env", opt, val, 2, 100000000, &steps))
                    goto out;
            } else if (!strcmp(opt, "--seed")) {
                if (dpt_cli_parse_u64("check-env", opt, val, 0, 4294967295u, &seed))
                    goto out;
            } else if (strncmp(val, DPT_CONFIG_ENV_PREFIX, strlen(DPT_CONFIG_ENV_PREFIX)) != 0) {
                fprintf(stderr,
                        "dpt check-env: --set takes " DPT_CONFIG_ENV_PREFIX
                        "NAME=value, got \"%.60s\"\n",
                        val);
                goto out;
            } else if (dpt_config_set(c, val) != 0) {
                fprintf(stderr, "dpt check-env: %s\n", dpt_last_error());
                goto out;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "dpt check-env: unknown option \"%s\" (try dpt check-env --help)\n",
                    argv[i]);
            goto out;
        } else if (!name) {
            name = argv[i];
        } else {
            fprintf(stderr, "dpt check-env: unexpected argument \"%s\"\n", argv[i]);
            goto out;
        }
    }
    if (!name) {
        code = check_env_usage(stderr, DPT_EXIT_USAGE);
        goto out;
    }
    char kv[4200];
    snprintf(kv, sizeof kv, "env=%s", name);
    if ((rc = dpt_config_set(c, kv)) != 0 || (rc = dpt_config_finalize(c)) != 0 ||
        (rc = dpt_config_make_env(c, &cls)) != 0) {
        fprintf(stderr, "dpt check-env: %s\n", dpt_last_error());
        code = dpt_cli_exit_code(rc) == DPT_EXIT_FAIL ? DPT_EXIT_USAGE : dpt_cli_exit_code(rc);
        goto out;
    }
    dpt_env_check_report_t r;
    if ((rc = dpt_env_check_contract(cls, seed, steps, &r)) != 0) {
        fprintf(stderr, "dpt check-env: %s\n", dpt_last_error());
        code = DPT_EXIT_FAIL;
        goto out;
    }
    dpt_shape_t shape = dpt_env_obs_shape(cls);
    char layout[96] = "";
    if (shape.h * shape.w > 1)
        snprintf(layout, sizeof layout, " (shape [%zu, %zu, %zu])", shape.c, shape.h, shape.w);
    printf("env %s: %zu observations%s, %s actions, %llu steps, %llu episodes (seed %llu)\n",
           cls->name, cls->obs_dim, layout,
           cls->action_kind == DPT_ACTION_DISCRETE ? "discrete" : "box",
           (unsigned long long)r.steps, (unsigned long long)r.episodes, (unsigned long long)seed);
    for (int k = 0; k < DPT_ENV_RULE_COUNT; k++) {
        const dpt_env_violation_t *v = NULL;
        for (size_t j = 0; j < r.count; j++)
            if (r.violations[j].rule == (dpt_env_rule_t)k)
                v = &r.violations[j];
        if (!v)
            printf("  ok    %-15s %s\n", dpt_env_rule_name((dpt_env_rule_t)k),
                   dpt_env_rule_text((dpt_env_rule_t)k));
        else
            printf("  FAIL  %-15s at step %llu: %s\n", dpt_env_rule_name(v->rule),
                   (unsigned long long)v->step, v->message);
    }
    if (r.count == 0)
        printf("every rule holds; %.0f steps/s (a runner of 8 envs, one thread)\n", r.steps_per_s);
    else
        printf("%zu rule%s broken\n", r.count, r.count > 1 ? "s" : "");
    code = r.count ? DPT_EXIT_FAIL : DPT_EXIT_OK;
out:
    dpt_env_class_destroy(cls);
    dpt_config_destroy(c);
    return code;
}
