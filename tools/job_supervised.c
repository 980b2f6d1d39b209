/*
 * The supervised job: an MLP classifier trained on towers over a dataset
 * (Fashion-MNIST IDX files or CSV), one iteration per epoch, evaluated on
 * the test set after each epoch, checkpointed and resumable bitwise.
 */
#include "cli.h"
#include "train.h"
#include "dpt/dataset.h"
#include "dpt/dpt.h"
#include "dpt/towers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUP_MAX_LAYERS 17

typedef struct sup {
    dpt_run_t *run;
    dpt_dataset_t train, test;
    dpt_mlp_t *mlp, *eval_mlp;
    dpt_towers_t *towers;
    dpt_arena_t params;
    float *xs;          /* shuffled epoch copy [rows, dim] */
    int32_t *ys;
    size_t *perm;
    dpt_rng_t shuffle_rng;
    uint64_t epoch, samples, steps;
} sup_t;

static void sup_free(sup_t *s)
{
    dpt_towers_destroy(s->towers);
    dpt_mlp_destroy(s->mlp);
    dpt_mlp_destroy(s->eval_mlp);
    dpt_arena_deinit(&s->params);
    dpt_dataset_deinit(&s->train);
    dpt_dataset_deinit(&s->test);
    free(s->xs);
    free(s->ys);
    free(s->perm);
}

static int sup_load_data(sup_t *s)
{
    const dpt_config_t *c = &s->run->cfg;
    int rc;
    if (CFG_I(c, dataset) == 0) {
        if ((rc = dpt_dataset_load_mnist(&s->train, CFG_S(c, data_dir), DPT_SPLIT_TRAIN)) != 0 ||
            (rc = dpt_dataset_load_mnist(&s->test, CFG_S(c, data_dir), DPT_SPLIT_TEST)) != 0)
            return rc;
    } else {
        dpt_csv_options_t o = {0};
        o.header = 1;
        o.label_name = CFG_S(c, label_column);
        if (!CFG_S(c, train_csv)[0] || !CFG_S(c, test_csv)[0])
            return dpt_error(DPT_EINVAL, "dataset = csv needs train_csv and test_csv");
        if ((rc = dpt_dataset_load_csv(&s->train, CFG_S(c, train_csv), &o)) != 0)
            return rc;
        o.num_classes = s->train.num_classes;
        if ((rc = dpt_dataset_load_csv(&s->test, CFG_S(c, test_csv), &o)) != 0)
            return rc;
        if (s->test.dim != s->train.dim)
            return dpt_error(DPT_EINVAL, "%s has %zu features, %s has %zu", CFG_S(c, test_csv),
                             s->test.dim, CFG_S(c, train_csv), s->train.dim);
    }
    return DPT_OK;
}

static int sup_build(sup_t *s)
{
    const dpt_config_t *c = &s->run->cfg;
    size_t hidden[8];
    int nh = dpt_config_parse_sizes(CFG_S(c, hidden), hidden, 8);
    if (nh < 0)
        return dpt_error(DPT_EINVAL, "hidden: %s", dpt_last_error());
    dpt_layer_spec_t layers[SUP_MAX_LAYERS];
    int nl = 0;
    dpt_layer_kind_t act = CFG_I(c, activation) == 0 ? DPT_LAYER_RELU : DPT_LAYER_TANH;
    for (int i = 0; i < nh; i++) {
        layers[nl++] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, hidden[i], DPT_INIT_DEFAULT, 0};
        layers[nl++] = (dpt_layer_spec_t){act, 0, DPT_INIT_DEFAULT, 0};
    }
    layers[nl++] = (dpt_layer_spec_t){DPT_LAYER_LINEAR, (size_t)s->train.num_classes,
                                      DPT_INIT_DEFAULT, 0};
    int devices = (int)CFG_I(c, num_devices);
    size_t batch = (size_t)CFG_I(c, batch_size);
    if (batch % (size_t)devices)
        return dpt_error(DPT_EINVAL, "batch_size %zu must be divisible by num_devices %d", batch,
                         devices);
    size_t pdb = batch / (size_t)devices;
    int rc;
    if ((rc = dpt_mlp_create(&s->mlp, s->train.dim, layers, (size_t)nl, DPT_LOSS_SOFTMAX_XENT,
                             pdb)) != 0 ||
        (rc = dpt_mlp_create(&s->eval_mlp, s->train.dim, layers, (size_t)nl,
                             DPT_LOSS_SOFTMAX_XENT, 1000)) != 0)
        return rc;
    dpt_model_t model = dpt_mlp_model(s->mlp);
    dpt_towers_config_t tc = dpt_towers_defaults();
    tc.num_devices = devices;
    tc.mode = (dpt_towers_mode_t)CFG_I(c, towers_mode);
    tc.max_per_device_batch_size = pdb;
    tc.max_load_rows = s->train.rows;
    tc.grad_clip = CFG_F(c, grad_clip);
    tc.optim = dpt_optim_defaults((dpt_optim_kind_t)CFG_I(c, optimizer));
    tc.optim.momentum = (float)CFG_F(c, momentum);
    tc.optim.nesterov = (int)CFG_I(c, nesterov);
    tc.optim.eps = (float)CFG_F(c, adam_eps);
    tc.optim.weight_decay = (float)CFG_F(c, weight_decay);
    if (tc.optim.kind != DPT_OPTIM_MOMENTUM)
        tc.optim.nesterov = 0;
    dpt_batch_t lay;
    dpt_batch_init(&lay, 0);
    dpt_batch_add(&lay, DPT_MLP_X, DPT_F32, s->train.dim, 0, NULL);
    dpt_batch_add(&lay, DPT_MLP_LABEL, DPT_I32, 1, 0, NULL);
    if ((rc = dpt_towers_create(&s->towers, &model, &lay, &tc)) != 0)
        return rc;
    size_t n = model.vars->total;
    if ((rc = dpt_arena_init(&s->params, n)) != 0)
        return rc;
    dpt_rng_t init;
    dpt_rng_init(&init, (uint64_t)CFG_I(c, seed), 0, 0, DPT_RNG_INIT);
    dpt_mlp_init_params(s->mlp, s->params.data, &init);
    dpt_rng_init(&s->shuffle_rng, (uint64_t)CFG_I(c, seed), 0, 0, DPT_RNG_SHUFFLE);
    s->xs = malloc(s->train.rows * s->train.dim * sizeof(float));
    s->ys = malloc(s->train.rows * sizeof(int32_t));
    s->perm = malloc(s->train.rows * sizeof(size_t));
    if (!s->xs || !s->ys || !s->perm)
        return dpt_error(DPT_ENOMEM, "cannot allocate the epoch buffers");
    return dpt_towers_set_weights(s->towers, s->params.data, n);
}

/* "optim.<slot name>." (dpt_optim_slot_name): the names the RL jobs use. */
static void sup_slot_prefix(const dpt_optim_t *opt, int k, char *buf, size_t size)
{
    snprintf(buf, size, "optim.%s.", dpt_optim_slot_name(opt, k));
}

static int sup_checkpoint(sup_t *s, double time_total)
{
    const dpt_vartable_t *vars = dpt_mlp_vars(s->mlp);
    dpt_optim_t *opt = dpt_towers_optimizer(s->towers);
    dpt_safetensors_writer_t *w;
    int rc = dpt_towers_get_weights(s->towers, s->params.data, s->params.count);
    if (rc || (rc = dpt_safetensors_writer_create(&w)) != 0)
        return rc;
    rc = dpt_safetensors_add_arena(w, "params.", vars, s->params.data, s->params.count);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        char prefix[32];
        sup_slot_prefix(opt, k, prefix, sizeof prefix);
        rc = dpt_safetensors_add_arena(w, prefix, vars, dpt_optim_slot(opt, k),
                                       dpt_optim_count(opt));
    }
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "optim_step", dpt_optim_get_t(opt));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "shuffle_rng", dpt_rng_tell(&s->shuffle_rng));
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "samples_total", s->samples);
    if (!rc)
        rc = dpt_safetensors_set_meta_u64(w, "steps_total", s->steps);
    if (!rc)
        rc = dpt_run_save_checkpoint(s->run, w, s->epoch, time_total);
    dpt_safetensors_writer_destroy(w);
    return rc;
}

static int sup_restore(sup_t *s, const dpt_safetensors_t *st)
{
    const dpt_vartable_t *vars = dpt_mlp_vars(s->mlp);
    dpt_optim_t *opt = dpt_towers_optimizer(s->towers);
    size_t n = vars->total;
    uint64_t t, pos, samples, steps, epoch;
    int rc;
    if ((rc = dpt_safetensors_meta_u64(st, "optim_step", &t)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "shuffle_rng", &pos)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "samples_total", &samples)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "steps_total", &steps)) != 0 ||
        (rc = dpt_safetensors_meta_u64(st, "training_iteration", &epoch)) != 0)
        return rc;
    /* Validate every tensor before changing anything. */
    float *tmp = calloc(3 * n, sizeof(float));
    if (!tmp)
        return dpt_error(DPT_ENOMEM, "resume: cannot allocate");
    rc = dpt_safetensors_load_arena(st, "params.", vars, tmp, n);
    for (int k = 0; !rc && k < dpt_optim_num_slots(opt); k++) {
        char prefix[32];
        sup_slot_prefix(opt, k, prefix, sizeof prefix);
        rc = dpt_safetensors_load_arena(st, prefix, vars, tmp + (size_t)(k + 1) * n, n);
    }
    if (!rc)
        rc = dpt_towers_set_weights(s->towers, tmp, n);
    if (!rc) {
        for (int k = 0; k < dpt_optim_num_slots(opt); k++)
            memcpy(dpt_optim_slot(opt, k), tmp + (size_t)(k + 1) * n, n * sizeof(float));
        dpt_optim_set_t(opt, t);
        rc = dpt_towers_set_optimizer_state(s->towers, opt);
    }
    free(tmp);
    if (rc)
        return rc;
    dpt_rng_seek(&s->shuffle_rng, pos);
    s->samples = samples;
    s->steps = steps;
    s->epoch = epoch;
    return DPT_OK;
}

int dpt_job_supervised(dpt_run_t *run)
{
    sup_t s;
    memset(&s, 0, sizeof s);
    s.run = run;
    const dpt_config_t *c = &run->cfg;
    int rc, code = DPT_EXIT_FAIL;
    if ((rc = sup_load_data(&s)) != 0) {
        code = dpt_run_fail("dataset", rc);
        goto out;
    }
    if ((rc = sup_build(&s)) != 0) {
        code = dpt_run_fail("model", rc);
        goto out;
    }
    if (run->ckpt && (rc = sup_restore(&s, run->ckpt)) != 0) {
        code = dpt_run_fail("resume", rc);
        goto out;
    }
    if ((rc = dpt_run_open_metrics(run, s.epoch)) != 0) {
        code = dpt_run_fail("metrics", rc);
        goto out;
    }
    uint64_t epochs = (uint64_t)CFG_I(c, epochs), epochs_run = epochs;
    size_t rows = s.train.rows, dim = s.train.dim;
    size_t steps_per_epoch = rows / (size_t)CFG_I(c, batch_size);
    dpt_schedule_t sched = {(dpt_schedule_kind_t)CFG_I(c, lr_schedule), (float)CFG_F(c, lr),
                            (float)CFG_F(c, lr_end), epochs * steps_per_epoch};
    if (!run->quiet)
        printf("dpt train: %zu training and %zu test samples of %zu features, %d classes; "
               "%zu parameters; %d devices (%s); gemm %s\n",
               rows, s.test.rows, dim, s.train.num_classes, s.params.count,
               (int)CFG_I(c, num_devices), CFG_S(c, towers_mode),
               dpt_gemm_describe(dpt_gemm_get_backend()));
    uint64_t stop = (uint64_t)CFG_I(c, stop_iters);
    if (stop && stop < epochs)
        epochs_run = stop;
    double run_start = dpt_now();
    uint64_t samples_start = s.samples;
    dpt_loss_out_t test = {0};
    while (s.epoch < epochs_run) {
        double t0 = dpt_now();
        /* Each epoch's order depends only on the stream position, so a
         * resumed run shuffles exactly as an uninterrupted one. */
        for (size_t i = 0; i < rows; i++)
            s.perm[i] = i;
        if (CFG_I(c, shuffle))
            dpt_rng_shuffle(&s.shuffle_rng, s.perm, rows);
        for (size_t i = 0; i < rows; i++) {
            memcpy(s.xs + i * dim, s.train.x + s.perm[i] * dim, dim * sizeof(float));
            s.ys[i] = s.train.labels[s.perm[i]];
        }
        dpt_batch_t b;
        dpt_batch_init(&b, rows);
        dpt_batch_add(&b, DPT_MLP_X, DPT_F32, dim, 0, s.xs);
        dpt_batch_add(&b, DPT_MLP_LABEL, DPT_I32, 1, 0, s.ys);
        dpt_towers_load_info_t li;
        if ((rc = dpt_towers_load(s.towers, 0, &b, &li)) != 0) {
            code = dpt_run_fail("loading the epoch", rc);
            goto out;
        }
        double loss = 0.0, hits = 0.0;
        size_t used = 0;
        double tl = dpt_now();
        for (size_t k = 0; k < li.steps; k++) {
            dpt_towers_stats_t st;
            float lr = dpt_schedule_lr(&sched, s.steps);
            if ((rc = dpt_towers_optimize(s.towers, 0, k * li.per_device_batch, lr, &st)) != 0) {
                code = dpt_run_fail("training step", rc);
                goto out;
            }
            s.steps++;
            loss += st.loss * (double)st.rows;
            hits += st.correct;
            used += st.rows;
            char line[256];
            double el = dpt_now() - tl;
            snprintf(line, sizeof line, "epoch %llu/%llu  step %zu/%zu  loss %.4f  acc %.3f  "
                     "%.0f samples/s", (unsigned long long)s.epoch + 1,
                     (unsigned long long)epochs, k + 1, li.steps, loss / (double)used,
                     hits / (double)used, el > 0 ? (double)used / el : 0.0);
            dpt_progress_update(&run->progress, line,
                                ((double)s.epoch + (double)(k + 1) / (double)li.steps) /
                                    (double)epochs, 0);
        }
        double train_time = dpt_now() - tl;
        s.samples += used;
        s.epoch++;
        double te = dpt_now();
        if ((rc = dpt_towers_get_weights(s.towers, s.params.data, s.params.count)) != 0) {
            code = dpt_run_fail("weights", rc);
            goto out;
        }
        dpt_batch_t tb;
        dpt_batch_init(&tb, s.test.rows);
        dpt_batch_add(&tb, DPT_MLP_X, DPT_F32, dim, 0, s.test.x);
        dpt_batch_add(&tb, DPT_MLP_LABEL, DPT_I32, 1, 0, s.test.labels);
        if ((rc = dpt_mlp_evaluate(s.eval_mlp, s.params.data, &tb, &test)) != 0) {
            code = dpt_run_fail("evaluation", rc);
            goto out;
        }
        double eval_time = dpt_now() - te;
        double total = run->time_offset + (dpt_now() - run_start);
        dpt_metrics_t *m = &run->metrics;
        dpt_metrics_begin(m);
        dpt_metrics_add(m, "training_iteration", (double)s.epoch);
        dpt_metrics_add(m, "epoch", (double)s.epoch);
        dpt_metrics_add(m, "samples_total", (double)s.samples);
        dpt_metrics_add(m, "steps_total", (double)s.steps);
        dpt_metrics_add(m, "train_loss", loss / (double)used);
        dpt_metrics_add(m, "train_accuracy", hits / (double)used);
        dpt_metrics_add(m, "test_loss", test.loss);
        dpt_metrics_add(m, "test_accuracy", test.correct / (double)s.test.rows);
        dpt_metrics_add(m, "lr", (double)dpt_schedule_lr(&sched, s.steps));
        dpt_metrics_add(m, "rows_dropped", (double)li.rows_dropped);
        dpt_metrics_add(m, "samples_per_s", (double)used / train_time);
        dpt_metrics_add(m, "time_this_iter_s", dpt_now() - t0);
        dpt_metrics_add(m, "time_total_s", total);
        dpt_metrics_add(m, "timing_breakdown/train_time_ms", train_time * 1e3);
        dpt_metrics_add(m, "timing_breakdown/eval_time_ms", eval_time * 1e3);
        if ((rc = dpt_metrics_end(m)) != 0) {
            code = dpt_run_fail("metrics", rc);
            goto out;
        }
        char line[256];
        snprintf(line, sizeof line, "epoch %llu/%llu  train loss %.4f acc %.4f  test loss %.4f "
                 "acc %.4f  %.0f samples/s", (unsigned long long)s.epoch,
                 (unsigned long long)epochs, loss / (double)used, hits / (double)used, test.loss,
                 test.correct / (double)s.test.rows, (double)used / train_time);
        dpt_progress_update(&run->progress, line, (double)s.epoch / (double)epochs, 1);
        if (!run->progress.quiet && run->progress.tty)
            printf("\n");
        uint64_t every = (uint64_t)CFG_I(c, checkpoint_every);
        if ((every && s.epoch % every == 0) || s.epoch == epochs_run) {
            if ((rc = sup_checkpoint(&s, total)) != 0) {
                code = dpt_run_fail("checkpoint", rc);
                goto out;
            }
        }
    }
    double secs = dpt_now() - run_start;
    if (!run->quiet)
        printf("dpt train: test accuracy %.4f after %llu epochs; this run %.1f s "
               "(%.0f samples/s overall)\n",
               test.correct / (double)(s.test.rows ? s.test.rows : 1),
               (unsigned long long)s.epoch, secs,
               secs > 0 ? (double)(s.samples - samples_start) / secs : 0.0);
    code = DPT_EXIT_OK;
out:
    sup_free(&s);
    return code;
}
