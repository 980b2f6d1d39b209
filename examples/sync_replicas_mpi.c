/*
 * A sync-replicas parameter service across processes from your own
 * program, through dpt/sync_replicas_remote.h alone (no trainer):
 *
 *   mpirun -np 3 sync_replicas_mpi [STEPS]     (default 200)
 *
 * Rank 0 is the service, ranks 1 and 2 one worker each (N = R = 2). The
 * model regresses a bag of 3 ids onto a target: an embedding table
 * emb [64, 4] whose gradients are row-sparse (a worker fetches only the
 * rows of its batch), pooled by the mean, then w [4] and b [1]. A worker's
 * batch is a function of (worker, token index), so rank 0 then replays the
 * same steps in its own process (the engine with two local clients, one
 * thread) and checks that both ran bitwise the same. Exit 0 on success, 1
 * on a failure, 77 when this build has no MPI.
 */
#include <dpt/comm.h>
#include <dpt/rng.h>
#include <dpt/status.h>
#include <dpt/sync_replicas.h>
#include <dpt/sync_replicas_remote.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 64 /* ids */
#define E 4  /* embedding width */
#define L 3  /* ids per bag */
#define B 16 /* bags per gradient */

typedef struct work {
    float *params, *grads;
    size_t off_emb, off_w, off_b;
    int64_t ids[B * L], uniq[B * L];
    float rows[B * L * E];
    dpt_sparse_rows_t g;
} work_t;

static int fail(const char *what)
{
    fprintf(stderr, "sync_replicas_mpi: %s: %s\n", what, dpt_last_error());
    return 1;
}

/* The variables: emb (sparse), w, b. */
static int make_vars(dpt_vartable_t *t, work_t *k)
{
    size_t se[2] = {V, E}, sw[1] = {E}, sb[1] = {1};
    dpt_vartable_init(t);
    int rc = dpt_vartable_add(t, "emb", 2, se, &k->off_emb);
    if (!rc)
        rc = dpt_vartable_add(t, "w", 1, sw, &k->off_w);
    if (!rc)
        rc = dpt_vartable_add(t, "b", 1, sb, &k->off_b);
    return rc;
}

static size_t find(const int64_t *u, size_t n, int64_t id)
{
    size_t i = 0;
    while (i < n && u[i] != id)
        i++;
    return i;
}

/* One step of a worker through its client: token, fetch, gradient of the
 * batch of (worker, index), push. DPT_ECLOSED when the session or the run
 * is over. */
static int work_one(dpt_sr_client_t *c, work_t *k)
{
    dpt_sr_token_t tok;
    int rc = dpt_sr_client_take_token(c, &tok);
    if (rc)
        return rc;
    dpt_rng_t rng;
    dpt_rng_init(&rng, 7, (uint32_t)dpt_sr_client_worker(c), (uint32_t)tok.index, DPT_RNG_DATA);
    size_t nu = 0;
    for (size_t j = 0; j < B * L; j++) {
        k->ids[j] = (int64_t)dpt_rng_below(&rng, V);
        if (find(k->uniq, nu, k->ids[j]) == nu)
            k->uniq[nu++] = k->ids[j];
    }
    if ((rc = dpt_sr_client_fetch(c, k->params)) != 0 ||
        (rc = dpt_sr_client_fetch_rows(c, 0, k->uniq, nu, k->rows)) != 0)
        return rc;
    const float *w = k->params + k->off_w, *b = k->params + k->off_b;
    float *dw = k->grads + k->off_w, *db = k->grads + k->off_b;
    memset(dw, 0, E * sizeof(float));
    db[0] = 0.0f;
    dpt_sparse_rows_clear(&k->g);
    double loss = 0.0;
    for (size_t i = 0; i < B; i++) {
        float pooled[E] = {0}, y = 0.0f, pred = b[0];
        for (size_t j = 0; j < L; j++) {
            const float *row = k->rows + find(k->uniq, nu, k->ids[i * L + j]) * E;
            for (size_t e = 0; e < E; e++)
                pooled[e] += row[e] / (float)L;
            y += (float)k->ids[i * L + j] / (float)(L * V);
        }
        for (size_t e = 0; e < E; e++)
            pred += pooled[e] * w[e];
        float d = (pred - y) / (float)B; /* d(mean of (pred - y)^2 / 2) / d pred */
        loss += 0.5 * (double)(pred - y) * (double)(pred - y) / B;
        db[0] += d;
        for (size_t e = 0; e < E; e++)
            dw[e] += d * pooled[e];
        for (size_t j = 0; j < L; j++) {
            float *gr;
            if ((rc = dpt_sparse_rows_add(&k->g, k->ids[i * L + j], NULL, &gr)) != 0)
                return rc;
            for (size_t e = 0; e < E; e++)
                gr[e] = d * w[e] / (float)L;
        }
    }
    const dpt_sparse_rows_t *sparse[1] = {&k->g};
    return dpt_sr_client_push(c, tok.step, k->grads, sparse, &loss, NULL);
}

/* The variables from the seed, the global step 0. */
static void init_service(dpt_sr_t *sr)
{
    dpt_rng_t rng;
    dpt_rng_init(&rng, 7, 0, 0, DPT_RNG_INIT);
    float *p = dpt_sr_params(sr);
    for (size_t i = 0; i < dpt_sr_vars(sr)->total; i++)
        p[i] = 0.1f * (float)dpt_rng_normal(&rng);
    dpt_sr_set_global_step(sr, 0);
}

/* Rank 0 again: the same steps with the engine in this process and two
 * local clients taking turns in one thread; 0 when its variables equal
 * `remote` bitwise. */
static int replay(const dpt_sr_remote_config_t *rc_, uint64_t steps, const float *remote, work_t *k)
{
    dpt_sr_t *sr = NULL;
    dpt_sr_client_t *c[2] = {NULL, NULL};
    int rc = dpt_sr_create(&sr, &rc_->sr);
    if (!rc) {
        init_service(sr);
        rc = dpt_sr_begin(sr, -1, steps);
    }
    for (int w = 0; !rc && w < 2; w++)
        if ((rc = dpt_sr_client_create_local(&c[w], sr, w)) == 0)
            dpt_sr_client_begin(c[w], 0, 0);
    while (!rc)
        for (int w = 0; !rc && w < 2; w++)
            rc = work_one(c[w], k);
    if (rc == DPT_ECLOSED)
        rc = memcmp(dpt_sr_params(sr), remote, dpt_sr_vars(sr)->total * sizeof(float)) == 0
                 ? DPT_OK
                 : dpt_error(DPT_ECOMM, "the variables differ from the service's");
    for (int w = 0; w < 2; w++)
        dpt_sr_client_destroy(c[w]);
    dpt_sr_destroy(sr);
    return rc;
}

static int service(const dpt_sr_remote_config_t *rc_, dpt_comm_t *comm, uint64_t steps, work_t *k)
{
    dpt_sr_server_t *s;
    if (dpt_sr_server_create(&s, rc_, comm))
        return fail("service");
    init_service(dpt_sr_server_engine(s));
    int rc = dpt_sr_server_session(s, steps, 0, 0);
    dpt_sr_worker_info_t a = {0}, b = {0};
    dpt_sr_server_worker(s, 0, &a);
    dpt_sr_server_worker(s, 1, &b);
    int stop = dpt_sr_server_stop(s);
    size_t n = dpt_sr_vars(dpt_sr_server_engine(s))->total;
    float *remote = malloc(n * sizeof(float));
    if (!rc && !stop && remote) {
        memcpy(remote, dpt_sr_params(dpt_sr_server_engine(s)), n * sizeof(float));
        printf("%llu steps over 2 worker ranks: mean loss %.5f (worker 0, %llu pushes) and %.5f "
               "(worker 1, %llu pushes)\n",
               (unsigned long long)steps, a.figures[0] / (double)a.accepted,
               (unsigned long long)a.pushes, b.figures[0] / (double)b.accepted,
               (unsigned long long)b.pushes);
        rc = replay(rc_, steps, remote, k);
        if (!rc)
            printf("the same steps in one process give bitwise the same variables\n");
    }
    free(remote);
    dpt_sr_server_destroy(s);
    if (rc || stop)
        return fail("service");
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t steps = argc > 1 ? strtoull(argv[1], NULL, 10) : 200;
    int rc = dpt_comm_mpi_init(&argc, &argv, DPT_COMM_MPI_FUNNELED);
    if (rc == DPT_ENOTSUP) {
        printf("skipped: this build has no MPI\n");
        return 77;
    }
    dpt_comm_mpi_options_t mo;
    dpt_comm_mpi_options_init(&mo);
    mo.timeout_s = 30;
    dpt_comm_t *comm = NULL;
    if (rc || dpt_comm_mpi_create(&comm, &mo))
        return fail("MPI");
    work_t k;
    memset(&k, 0, sizeof k);
    dpt_vartable_t vars;
    unsigned char sparse[3] = {1, 0, 0};
    if (make_vars(&vars, &k) || dpt_sparse_rows_init(&k.g, E, B * L))
        return fail("variables");
    k.params = calloc(vars.total, sizeof(float));
    k.grads = calloc(vars.total, sizeof(float));
    if (!k.params || !k.grads)
        return fail("memory");
    dpt_sr_remote_config_t cfg = {.sr = dpt_sr_defaults(), .nfigures = 1};
    cfg.sr.vars = &vars;
    cfg.sr.sparse = sparse;
    cfg.sr.optim = dpt_optim_defaults(DPT_OPTIM_SGD);
    cfg.sr.schedule.lr0 = 0.5f;
    cfg.sr.replicas_to_aggregate = cfg.sr.total_num_replicas = 2;
    cfg.sr.timeout_s = 10;
    if (dpt_comm_size(comm) != 3) {
        fprintf(stderr, "sync_replicas_mpi: run it with mpirun -np 3 (1 service + 2 workers)\n");
        return 1;
    }
    if (dpt_comm_rank(comm) == 0) {
        rc = service(&cfg, comm, steps, &k);
    } else {
        dpt_sr_client_t *c;
        if (dpt_sr_client_create_remote(&c, &cfg, comm))
            return fail("worker");
        while ((rc = work_one(c, &k)) == 0)
            ;
        rc = rc == DPT_ECLOSED ? 0 : fail("worker");
        dpt_sr_client_destroy(c);
    }
    free(k.params);
    free(k.grads);
    dpt_sparse_rows_deinit(&k.g);
    dpt_vartable_deinit(&vars);
    dpt_comm_destroy(comm);
    if (rc)
        dpt_comm_mpi_abort(rc);
    dpt_comm_mpi_finalize();
    return rc;
}
