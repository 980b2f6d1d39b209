/*
 * `dpt eval CHECKPOINT [CONFIG]`: loads a checkpoint written by dpt train
 * and evaluates it: test-set loss and accuracy for the supervised job,
 * mean return of greedy episodes for the RL jobs. Without CONFIG the run's
 * saved config (CHECKPOINT's directory/../config.conf) is used.
 */
#include "cli.h"
#include "config.h"
#include "train.h"
#include "dpt/checkpoint.h"
#include "dpt/dataset.h"
#include "dpt/dpt.h"
#include "dpt/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int eval_fail(const char *what, int rc)
{
    fprintf(stderr, "dpt eval: %s: %s: %s\n", what, dpt_strerror(rc), dpt_last_error());
    return DPT_EXIT_FAIL;
}

static int eval_supervised(const dpt_config_t *c, const dpt_safetensors_t *st)
{
    dpt_dataset_t test;
    memset(&test, 0, sizeof test);
    int rc;
    if (CFG_I(c, dataset) == 0)
        rc = dpt_dataset_load_mnist(&test, CFG_S(c, data_dir), DPT_SPLIT_TEST);
    else {
        dpt_csv_options_t o = {0};
        o.header = 1;
        o.label_name = CFG_S(c, label_column);
        rc = dpt_dataset_load_csv(&test, CFG_S(c, test_csv), &o);
    }
    if (rc)
        return eval_fail("dataset", rc);
    size_t hidden[8];
    int nh = dpt_config_parse_sizes(CFG_S(c, hidden), hidden, 8), nl = 0;
    const dpt_safetensors_tensor_t *out_w = NULL;
    dpt_layer_spec_t layers[17];
    for (int i = 0; i < nh; i++) {
        layers[nl++] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, hidden[i], DPT_INIT_DEFAULT, 0};
        layers[nl++] = (dpt_layer_spec_t){CFG_I(c, activation) == 0 ? DPT_LAYER_RELU
                                                                     : DPT_LAYER_TANH,
                                          0, DPT_INIT_DEFAULT, 0};
    }
    /* The number of classes is the output layer's rows in the checkpoint. */
    char name[64];
    snprintf(name, sizeof name, "params.%d.weight", nl);
    out_w = dpt_safetensors_find(st, name);
    if (nh < 0 || !out_w || out_w->ndim != 2) {
        dpt_dataset_deinit(&test);
        fprintf(stderr, "dpt eval: %s does not match the config's model (hidden = %s)\n",
                dpt_safetensors_path(st), CFG_S(c, hidden));
        return DPT_EXIT_FAIL;
    }
    layers[nl++] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, out_w->shape[0], DPT_INIT_DEFAULT, 0};
    dpt_mlp_t *mlp = NULL;
    dpt_arena_t p = {0};
    int code = DPT_EXIT_FAIL;
    if ((rc = dpt_mlp_create(&mlp, test.dim, layers, (size_t)nl, DPT_LOSS_SOFTMAX_XENT, 1000)) ||
        (rc = dpt_arena_init(&p, dpt_mlp_vars(mlp)->total)) ||
        (rc = dpt_safetensors_load_arena(st, "params.", dpt_mlp_vars(mlp), p.data, p.count))) {
        code = eval_fail("model", rc);
        goto out;
    }
    dpt_batch_t b;
    dpt_batch_init(&b, test.rows);
    dpt_batch_add(&b, DPT_MLP_X, DPT_F32, test.dim, 0, test.x);
    dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, test.labels);
    dpt_loss_out_t o;
    if ((rc = dpt_mlp_evaluate(mlp, p.data, &b, &o)) != 0) {
        code = eval_fail("evaluation", rc);
        goto out;
    }
    printf("%s: %zu test samples, loss %.4f, accuracy %.4f\n", dpt_safetensors_path(st),
           test.rows, o.loss, o.correct / (double)test.rows);
    code = DPT_EXIT_OK;
out:
    dpt_arena_deinit(&p);
    dpt_mlp_destroy(mlp);
    dpt_dataset_deinit(&test);
    return code;
}

static int eval_rl(const dpt_config_t *c, const dpt_safetensors_t *st, long episodes)
{
    const dpt_env_class_t *cls = dpt_cli_find_env(CFG_S(c, env));
    if (!cls) {
        fprintf(stderr, "dpt eval: env: %s\n", dpt_last_error());
        return DPT_EXIT_FAIL;
    }
    size_t hidden[DPT_POLICY_MAX_HIDDEN];
    int nh = dpt_config_parse_sizes(CFG_S(c, policy_hidden), hidden, DPT_POLICY_MAX_HIDDEN);
    dpt_policy_t *pol = NULL;
    dpt_arena_t p = {0};
    int rc, code = DPT_EXIT_FAIL;
    if (nh < 0 || (rc = dpt_policy_create(&pol, cls, hidden, nh, 1)) != 0 ||
        (rc = dpt_arena_init(&p, dpt_policy_vars(pol)->total)) != 0 ||
        (rc = dpt_safetensors_load_arena(st, "params.", dpt_policy_vars(pol), p.data,
                                         p.count)) != 0) {
        code = eval_fail("policy", nh < 0 ? DPT_EINVAL : rc);
        goto out;
    }
    double ret, len;
    size_t n = episodes > 0 ? (size_t)episodes : (size_t)CFG_I(c, eval_episodes);
    if ((rc = dpt_rl_evaluate(pol, p.data, (uint64_t)CFG_I(c, seed), n, &ret, &len)) != 0) {
        code = eval_fail("evaluation", rc);
        goto out;
    }
    printf("%s: greedy policy on %s, %zu episodes: mean return %.2f, mean length %.1f\n",
           dpt_safetensors_path(st), cls->name, n, ret, len);
    code = DPT_EXIT_OK;
out:
    dpt_arena_deinit(&p);
    dpt_policy_destroy(pol);
    return code;
}

int dpt_cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *config = NULL;
    long episodes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: dpt eval CHECKPOINT [CONFIG] [--episodes N]\n\n"
                   "Evaluates a checkpoint written by dpt train: test accuracy (supervised) or\n"
                   "the mean return of greedy episodes (ppo, ddppo). CONFIG defaults to the\n"
                   "config.conf of the checkpoint's run directory.\n");
            return DPT_EXIT_OK;
        }
        if (!strcmp(argv[i], "--episodes") && i + 1 < argc)
            episodes = atol(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "dpt eval: unknown option \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        } else if (!ckpt)
            ckpt = argv[i];
        else if (!config)
            config = argv[i];
        else {
            fprintf(stderr, "dpt eval: unexpected argument \"%s\"\n", argv[i]);
            return DPT_EXIT_USAGE;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "usage: dpt eval CHECKPOINT [CONFIG] [--episodes N]\n");
        return DPT_EXIT_USAGE;
    }
    dpt_safetensors_t *st;
    int rc = dpt_safetensors_load(&st, ckpt);
    if (rc)
        return eval_fail("checkpoint", rc);
    char cfgpath[4200];
    if (!config) {
        /* runs/x/checkpoints/checkpoint-N.safetensors -> runs/x/config.conf */
        snprintf(cfgpath, sizeof cfgpath, "%s", ckpt);
        char *slash = strrchr(cfgpath, '/');
        if (slash)
            *slash = '\0';
        else
            strcpy(cfgpath, ".");
        strncat(cfgpath, "/../config.conf", sizeof cfgpath - strlen(cfgpath) - 1);
        config = cfgpath;
    }
    dpt_config_t c;
    dpt_config_defaults(&c);
    if ((rc = dpt_config_load(&c, config)) != 0) {
        fprintf(stderr, "dpt eval: %s\n", dpt_last_error());
        dpt_safetensors_destroy(st);
        return DPT_EXIT_USAGE;
    }
    const char *job = dpt_safetensors_meta(st, "job");
    if (job && strcmp(job, CFG_S(&c, job)) != 0) {
        fprintf(stderr, "dpt eval: %s is a %s checkpoint but %s says job = %s\n", ckpt, job,
                config, CFG_S(&c, job));
        dpt_safetensors_destroy(st);
        return DPT_EXIT_USAGE;
    }
    int code = CFG_I(&c, job) == 0 ? eval_supervised(&c, st) : eval_rl(&c, st, episodes);
    dpt_safetensors_destroy(st);
    return code;
}
