/*
 * The rules between config keys that hold for every job that has the keys
 * (dpt_config_finalize calls them once every key holds a value), then the
 * job's own rules (its descriptor's check). They read the config through
 * its accessors and name no job.
 */
#include "dpt/rl.h"
#include "dpt/status.h"
#include "dpt/train.h"
#include "train_internal.h"

#include <stdint.h>
#include <stdio.h>

/* Keys that matter only when another key enables them: a key the user set
 * (dpt__config_user_set: given, not at its default) while the key that
 * enables it is off would be ignored without a word, so it is refused
 * naming both. `on` is an INT, BOOL or ENUM key; `values` are its values
 * that use `key` (bits of a BOOL's or an ENUM's index), 0: any above 0. */
typedef struct dpt__config_need {
    dpt_config_key_t key, on;
    unsigned values;
    const char *when;
} dpt__config_need_t;

static const dpt__config_need_t dpt__config_needs[] = {
    {DPT_CFG_lstm_cell_size, DPT_CFG_use_lstm, 1u << 1, "use_lstm = true"},
    {DPT_CFG_lstm_use_prev_action, DPT_CFG_use_lstm, 1u << 1, "use_lstm = true"},
    {DPT_CFG_lstm_use_prev_reward, DPT_CFG_use_lstm, 1u << 1, "use_lstm = true"},
    {DPT_CFG_max_seq_len, DPT_CFG_use_lstm, 1u << 1, "use_lstm = true"},
    {DPT_CFG_lr_end, DPT_CFG_lr_schedule, 1u << DPT_SCHEDULE_LINEAR, "lr_schedule = linear"},
    {DPT_CFG_momentum, DPT_CFG_optimizer, 1u << DPT_OPTIM_MOMENTUM, "optimizer = momentum"},
    {DPT_CFG_nesterov, DPT_CFG_optimizer, 1u << DPT_OPTIM_MOMENTUM, "optimizer = momentum"},
    {DPT_CFG_adam_eps, DPT_CFG_optimizer, (1u << DPT_OPTIM_ADAM) | (1u << DPT_OPTIM_ADAMW),
     "optimizer = adam or adamw"},
    {DPT_CFG_data_dir, DPT_CFG_dataset, 1u << DPT_DATASET_FASHION_MNIST, "dataset = fashion_mnist"},
    {DPT_CFG_train_csv, DPT_CFG_dataset, 1u << DPT_DATASET_CSV, "dataset = csv"},
    {DPT_CFG_test_csv, DPT_CFG_dataset, 1u << DPT_DATASET_CSV, "dataset = csv"},
    {DPT_CFG_label_column, DPT_CFG_dataset, 1u << DPT_DATASET_CSV, "dataset = csv"},
    {DPT_CFG_spirals_points, DPT_CFG_dataset, 1u << DPT_DATASET_SPIRALS, "dataset = spirals"},
    {DPT_CFG_embedding_dim, DPT_CFG_dataset, 1u << DPT_DATASET_BAGS, "dataset = bags"},
    {DPT_CFG_bags_vocab, DPT_CFG_dataset, 1u << DPT_DATASET_BAGS, "dataset = bags"},
    {DPT_CFG_bags_ids, DPT_CFG_dataset, 1u << DPT_DATASET_BAGS, "dataset = bags"},
    {DPT_CFG_bags_rows, DPT_CFG_dataset, 1u << DPT_DATASET_BAGS, "dataset = bags"},
    {DPT_CFG_evaluation_episodes, DPT_CFG_evaluation_interval, 0, "evaluation_interval > 0"},
};

static int dpt__config_need_checks(const dpt_config_t *c)
{
    for (size_t i = 0; i < sizeof dpt__config_needs / sizeof dpt__config_needs[0]; i++) {
        const dpt__config_need_t *n = &dpt__config_needs[i];
        if (!dpt_config_applies(c, n->key) || !dpt_config_applies(c, n->on) ||
            !dpt__config_user_set(c, n->key))
            continue;
        int64_t v = dpt_config_int(c, n->on);
        if (n->values ? v >= 0 && v < 32 && ((n->values >> v) & 1u) : v > 0)
            continue;
        const char *name = dpt_config_key_info(n->key)->name;
        return dpt_error(DPT_EINVAL,
                         "%s = %s is used only with %s (%s = %s): set %s, or leave %s out", name,
                         dpt_config_str(c, n->key), n->when, dpt_config_key_info(n->on)->name,
                         dpt_config_str(c, n->on), n->when, name);
    }
    /* A network replaces the MLP of hidden and activation; a plug-in and
     * the bags' embedding model have their own. */
    if (dpt_config_applies(c, DPT_CFG_network) && DPT_CS(c, network)[0]) {
        const char *net = DPT_CS(c, network);
        dpt_layer_spec_t layers[DPT_NETWORK_MAX_LAYERS];
        size_t n;
        if (dpt_config_applies(c, DPT_CFG_model) && DPT_CS(c, model)[0])
            return dpt_error(DPT_EINVAL, "network and model = %s both describe the model: keep one",
                             DPT_CS(c, model));
        if (dpt_config_applies(c, DPT_CFG_dataset) && DPT_CI(c, dataset) == DPT_DATASET_BAGS)
            return dpt_error(DPT_EINVAL,
                             "network does not apply to dataset = bags (its model is an embedding "
                             "bag and the MLP of hidden)");
        if (dpt__config_user_set(c, DPT_CFG_hidden) || dpt__config_user_set(c, DPT_CFG_activation))
            return dpt_error(DPT_EINVAL,
                             "%s sizes the built-in MLP, which network replaces: leave it out "
                             "(the network's layers name their activations)",
                             dpt__config_user_set(c, DPT_CFG_hidden) ? "hidden" : "activation");
        char why[512];
        if (dpt_network_parse(net, layers, DPT_NETWORK_MAX_LAYERS, &n) != 0) {
            snprintf(why, sizeof why, "%s", dpt_last_error());
            return dpt_error(DPT_EINVAL, "network: %s", why);
        }
        /* An RL policy acts and learns with the same weights: its encoder
         * has no training mode. */
        for (size_t i = 0; i < n; i++)
            if (layers[i].kind == DPT_LAYER_DROPOUT && ((1u << dpt_config_job(c)) & DPT_JOBS_RL))
                return dpt_error(DPT_EINVAL,
                                 "network: layer %zu is dropout, which the RL jobs do not take "
                                 "(only supervised and sync_replicas)",
                                 i + 1);
        for (size_t i = 0; i < n; i++) {
            if (layers[i].kind != DPT_LAYER_BATCHNORM)
                continue;
            if ((1u << dpt_config_job(c)) & DPT_JOBS_RL)
                return dpt_error(DPT_EINVAL,
                                 "network: layer %zu is batchnorm, which the RL jobs do not take "
                                 "(only supervised and sync_replicas)",
                                 i + 1);
            /* The towers' updates of the running statistics would add up. */
            if (dpt_config_applies(c, DPT_CFG_reduce_op) &&
                (dpt_reduce_op_t)DPT_CI(c, reduce_op) == DPT_REDUCE_SUM)
                return dpt_error(DPT_EINVAL,
                                 "network: layer %zu is batchnorm, which needs reduce_op = avg "
                                 "(with sum the devices' updates of its running statistics would "
                                 "add up)",
                                 i + 1);
        }
    }
    /* The built-in MLP's sizes mean nothing to a model plug-in. */
    if (dpt_config_applies(c, DPT_CFG_model) && DPT_CS(c, model)[0] &&
        dpt__config_user_set(c, DPT_CFG_hidden))
        return dpt_error(DPT_EINVAL,
                         "hidden = %s sizes the built-in MLP, which model = %s replaces: leave "
                         "hidden out",
                         DPT_CS(c, hidden), DPT_CS(c, model));
    return DPT_OK;
}

/* The rules between keys that hold for every job that has the keys; the
 * job's own rules follow (its descriptor's check). The enum keys' values
 * are the enums' values (their lists make the choices). */
static int dpt__config_towers_checks(const dpt_config_t *c)
{
    int async = DPT_CI(c, towers_mode) == DPT_TOWERS_ASYNC;
    if (async && DPT_CI(c, reduce_op) == DPT_REDUCE_SUM)
        return dpt_error(DPT_EINVAL, "reduce_op = sum does not apply to towers_mode = async "
                                     "(each device applies its own gradient, scaled by "
                                     "async_scale)");
    if (!async && DPT_CF(c, async_scale) != 0.0)
        return dpt_error(DPT_EINVAL,
                         "async_scale = %g applies to towers_mode = async only "
                         "(towers_mode = %s)",
                         DPT_CF(c, async_scale), DPT_CS(c, towers_mode));
    return DPT_OK;
}

int dpt__config_reduction_check(const dpt_config_t *c, int64_t b, const char *batch_key, int64_t d,
                                const char *devices_key)
{
    if ((dpt_reduction_order_t)DPT_CI(c, reduction_order) != DPT_REDUCTION_INVARIANT)
        return DPT_OK;
    int64_t k = DPT_CI(c, reduction_chunk);
    int towers = dpt_config_applies(c, DPT_CFG_towers_mode);
    if (towers && (dpt_towers_mode_t)DPT_CI(c, towers_mode) == DPT_TOWERS_ASYNC)
        return dpt_error(DPT_EINVAL, "reduction_order = invariant needs towers_mode = ps or "
                                     "replicated (async devices apply their updates in no fixed "
                                     "order)");
    if (towers && (dpt_reduce_op_t)DPT_CI(c, reduce_op) == DPT_REDUCE_SUM)
        return dpt_error(DPT_EINVAL, "reduction_order = invariant averages over the minibatch; "
                                     "reduce_op = sum (a sum over devices) depends on num_devices: "
                                     "use reduce_op = avg");
    if (b % k)
        return dpt_error(DPT_EINVAL,
                         "%s %lld must be a multiple of reduction_chunk %lld (reduction_order = "
                         "invariant adds whole chunks)",
                         batch_key, (long long)b, (long long)k);
    if (b / k < d)
        return dpt_error(DPT_EINVAL,
                         "%s %lld holds %lld chunks of reduction_chunk %lld rows, fewer than "
                         "%s %lld: every device needs a chunk",
                         batch_key, (long long)b, (long long)(b / k), (long long)k, devices_key,
                         (long long)d);
    return DPT_OK;
}

static const unsigned dpt__config_dataset_jobs[DPT_DATASET_COUNT] = {
#define DPT__DATASET_JOBS(sym, name, jobs) [sym] = jobs,
    DPT_DATASET_LIST(DPT__DATASET_JOBS)
#undef DPT__DATASET_JOBS
};

static int dpt__config_data_checks(const dpt_config_t *c)
{
    int64_t ds = DPT_CI(c, dataset);
    char jobs[64];
    if (!(dpt__config_dataset_jobs[ds] & dpt__job_keys_bit(dpt_config_job(c)))) {
        dpt__jobs_text(dpt__config_dataset_jobs[ds], jobs, sizeof jobs);
        return dpt_error(DPT_EINVAL, "dataset = %s is for job = %s%s", DPT_CS(c, dataset), jobs,
                         ds == DPT_DATASET_BAGS ? " (an embedding table trained with sparse "
                                                  "gradients)"
                                                : "");
    }
    int bags = ds == DPT_DATASET_BAGS;
    if (bags && DPT_CI(c, loss) != DPT_LOSS_MSE)
        return dpt_error(DPT_EINVAL,
                         "dataset = bags is a regression with loss = mse "
                         "(loss = %s)",
                         DPT_CS(c, loss));
    int regress = !bags && DPT_CI(c, loss) != DPT_LOSS_SOFTMAX_XENT;
    if (regress && (ds != DPT_DATASET_CSV || !DPT_CS(c, target_columns)[0]))
        return dpt_error(DPT_EINVAL,
                         "loss = %s regresses CSV targets: it needs dataset = csv "
                         "and target_columns",
                         DPT_CS(c, loss));
    if (!regress && DPT_CS(c, target_columns)[0])
        return dpt_error(DPT_EINVAL,
                         "target_columns = %s needs loss = mse or huber (loss = "
                         "softmax_xent classifies label_column)",
                         DPT_CS(c, target_columns));
    if (ds == DPT_DATASET_CSV && (!DPT_CS(c, train_csv)[0] || !DPT_CS(c, test_csv)[0]))
        return dpt_error(DPT_EINVAL, "dataset = csv needs train_csv and test_csv");
    return DPT_OK;
}

int dpt__config_rules(const dpt_config_t *c)
{
    int rc = DPT_OK;
    if (dpt_config_applies(c, DPT_CFG_towers_mode))
        rc = dpt__config_towers_checks(c);
    if (!rc && dpt_config_applies(c, DPT_CFG_dataset))
        rc = dpt__config_data_checks(c);
    if (!rc)
        rc = dpt__config_need_checks(c);
    if (!rc && dpt_config_applies(c, DPT_CFG_eval_ema) && DPT_CI(c, eval_ema) &&
        DPT_CF(c, ema_decay) <= 0.0)
        rc = dpt_error(DPT_EINVAL, "eval_ema = true needs ema_decay > 0 (there is no "
                                   "moving average to evaluate)");
    size_t sizes[DPT__MAX_HIDDEN > DPT_POLICY_MAX_HIDDEN ? DPT__MAX_HIDDEN : DPT_POLICY_MAX_HIDDEN];
    if (!rc && dpt_config_applies(c, DPT_CFG_hidden)) {
        int n = dpt__config_sizes(c, DPT_CFG_hidden, sizes, DPT__MAX_HIDDEN);
        rc = n < 0 ? n : DPT_OK;
    }
    if (!rc && dpt_config_applies(c, DPT_CFG_policy_hidden)) {
        int n = dpt__config_sizes(c, DPT_CFG_policy_hidden, sizes, DPT_POLICY_MAX_HIDDEN);
        rc = n < 0 ? n : DPT_OK;
    }
    const dpt__job_t *job = dpt__job_get(dpt_config_job(c));
    if (!rc && job->check)
        rc = job->check(c);
    return rc;
}
