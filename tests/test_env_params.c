/*
 * Env parameters and the memory envs (dpt/env.h): parsing and declaring
 * parameters, configured classes and the values an env receives, the saved
 * state's parameter digest, dims past the 32 of env ABI 1, and the two
 * memory tasks: StatelessCartPole-v1 against CartPole-v1 under the same seed
 * and actions, RepeatPrevious-v0's rewards against a reference written here
 * (k = 0, 1, 2 with 2 and 3 tokens), and their determinism.
 */
#include "dpt_test.h"

#include "dpt/arena.h"
#include "dpt/env.h"
#include "dpt/rl.h"
#include "dpt/rng.h"
#include "rl/rl_trainers.h"

#include <stdint.h>

/* ---- a class with one parameter of each type ------------------------------------
 * Params-v0: obs_dim = 4 + count; reset and step write
 * [count, gain, flip, label[0], 1 x count] from what init kept. */

typedef struct params_state {
    int count;
    float gain;
    int flip;
    char label0;
} params_state_t;

enum { P_COUNT, P_GAIN, P_FLIP, P_LABEL, P_NUM };

static const dpt_env_param_t params_decl[P_NUM] = {
    [P_COUNT] = {"count", DPT_ENV_PARAM_INT, "3", 1, 10, "extra observation slots"},
    [P_GAIN] = {"gain", DPT_ENV_PARAM_FLOAT, "0.5", 0, 2, "a number"},
    [P_FLIP] = {"flip", DPT_ENV_PARAM_BOOL, "false", 0, 0, "a switch"},
    [P_LABEL] = {"label", DPT_ENV_PARAM_STRING, "abc", 0, 0, NULL},
};

static int params_configure(dpt_env_class_t *cls, const dpt_env_value_t *v, char *why,
                            size_t why_size)
{
    if (v[P_FLIP].i && v[P_COUNT].i > 5) {
        snprintf(why, why_size, "flip needs count <= 5, got %d", (int)v[P_COUNT].i);
        return 1;
    }
    cls->obs_dim = 4 + (size_t)v[P_COUNT].i;
    cls->name = "Renamed"; /* ignored: configure may change only the dims and limits */
    return 0;
}

static void params_init(void *state, const dpt_env_value_t *v)
{
    params_state_t *s = state;
    s->count = (int)v[P_COUNT].i;
    s->gain = (float)v[P_GAIN].f;
    s->flip = (int)v[P_FLIP].i;
    s->label0 = v[P_LABEL].s[0];
}

static void params_obs(const params_state_t *s, float *obs)
{
    obs[0] = (float)s->count;
    obs[1] = s->gain;
    obs[2] = (float)s->flip;
    obs[3] = (float)s->label0;
    for (int i = 0; i < s->count; i++)
        obs[4 + i] = 1.0f;
}

static void params_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)rng;
    params_obs(state, obs);
}

static void params_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                        int *terminated)
{
    (void)action, (void)rng;
    params_obs(state, obs);
    *reward = ((params_state_t *)state)->gain;
    *terminated = 0;
}

static dpt_env_class_t params_class(void)
{
    dpt_env_class_t c;
    memset(&c, 0, sizeof c);
    c.name = "Params-v0";
    c.obs_dim = 7; /* 4 + the default count */
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 2;
    c.max_episode_steps = 10;
    c.state_size = sizeof(params_state_t);
    c.params = params_decl;
    c.num_params = P_NUM;
    c.configure = params_configure;
    c.init = params_init;
    c.reset = params_reset;
    c.step = params_step;
    return c;
}

/* ---- parameters ------------------------------------------------------------------ */

static void test_param_parse(void)
{
    dpt_env_class_t c = params_class();
    const dpt_env_param_t *count = dpt_env_param_find(&c, "count");
    const dpt_env_param_t *gain = dpt_env_param_find(&c, "gain");
    const dpt_env_param_t *flip = dpt_env_param_find(&c, "flip");
    const dpt_env_param_t *label = dpt_env_param_find(&c, "label");
    REQUIRE(count == &params_decl[P_COUNT] && gain && flip && label);
    CHECK(dpt_env_param_find(&c, "Count") == NULL);
    CHECK(dpt_env_param_find(&c, NULL) == NULL);
    CHECK(dpt_env_param_find(dpt_env_find("CartPole-v1"), "count") == NULL);
    CHECK(strcmp(dpt_env_param_type_name(DPT_ENV_PARAM_INT), "int") == 0);
    CHECK(strcmp(dpt_env_param_type_name(DPT_ENV_PARAM_STRING), "string") == 0);
    CHECK(strcmp(dpt_env_param_type_name((dpt_env_param_type_t)9), "?") == 0);

    dpt_env_value_t v;
    CHECK_OK(dpt_env_param_parse(count, "7", &v));
    CHECK(v.i == 7 && strcmp(v.s, "7") == 0);
    CHECK_OK(dpt_env_param_parse(count, "010", &v)); /* decimal, not octal */
    CHECK(v.i == 10);
    CHECK_ERR(dpt_env_param_parse(count, "7x", &v), DPT_EINVAL,
              "count expects an integer, got \"7x\"");
    CHECK_ERR(dpt_env_param_parse(count, " 7", &v), DPT_EINVAL, "expects an integer");
    CHECK_ERR(dpt_env_param_parse(count, "", &v), DPT_EINVAL, "expects an integer");
    CHECK_ERR(dpt_env_param_parse(count, "2.5", &v), DPT_EINVAL, "expects an integer");
    CHECK_ERR(dpt_env_param_parse(count, "99999999999999999999", &v), DPT_EINVAL,
              "expects an integer");
    CHECK_ERR(dpt_env_param_parse(count, "11", &v), DPT_EINVAL,
              "count = 11 is out of range [1, 10]");
    CHECK_ERR(dpt_env_param_parse(count, "0", &v), DPT_EINVAL, "count = 0 is out of range");
    CHECK_OK(dpt_env_param_parse(gain, "1.25", &v));
    CHECK(v.f == 1.25);
    CHECK_OK(dpt_env_param_parse(gain, "2e-1", &v));
    CHECK(v.f == 0.2);
    CHECK_ERR(dpt_env_param_parse(gain, "nan", &v), DPT_EINVAL, "gain expects a finite number");
    CHECK_ERR(dpt_env_param_parse(gain, "inf", &v), DPT_EINVAL, "finite number");
    CHECK_ERR(dpt_env_param_parse(gain, "half", &v), DPT_EINVAL, "got \"half\"");
    CHECK_ERR(dpt_env_param_parse(gain, "2.5", &v), DPT_EINVAL,
              "gain = 2.5 is out of range [0, 2]");
    static const char *const yes[] = {"true", "yes", "1"}, *const no[] = {"false", "no", "0"};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(dpt_env_param_parse(flip, yes[i], &v));
        CHECK(v.i == 1);
        CHECK_OK(dpt_env_param_parse(flip, no[i], &v));
        CHECK(v.i == 0);
    }
    CHECK_ERR(dpt_env_param_parse(flip, "True", &v), DPT_EINVAL, "flip expects true or false");
    CHECK_OK(dpt_env_param_parse(label, "", &v));
    CHECK_OK(dpt_env_param_parse(label, "any text, even # and =", &v));
    CHECK_ERR(dpt_env_param_parse(label, "a\tb", &v), DPT_EINVAL, "control character");
    CHECK_ERR(dpt_env_param_parse(label, NULL, &v), DPT_EINVAL, "NULL");
    CHECK_ERR(dpt_env_param_parse(NULL, "1", &v), DPT_EINVAL, "NULL");
}

static void test_param_declarations(void)
{
    dpt_env_class_t c = params_class();
    CHECK_OK(dpt_env_class_check(&c));
    dpt_env_param_t p[P_NUM];
    memcpy(p, params_decl, sizeof p);
    c.params = p;
    p[P_GAIN].name = "two words";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter #1 needs a name of 1..63 letters");
    p[P_GAIN].name = "";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter #1 needs a name");
    p[P_GAIN].name = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter #1 needs a name");
    p[P_GAIN].name = "count";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter count is declared twice");
    memcpy(p, params_decl, sizeof p);
    p[P_FLIP].type = (dpt_env_param_type_t)9;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter flip has type 9");
    memcpy(p, params_decl, sizeof p);
    p[P_GAIN].min = 3;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter gain has the range [3, 2]");
    p[P_GAIN].min = NAN;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "finite with min <= max");
    memcpy(p, params_decl, sizeof p);
    p[P_LABEL].def = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "parameter label has no default");
    p[P_LABEL].def = "abc";
    p[P_COUNT].def = "12";
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL,
              "the default of parameter count: count = 12 is out of range");
    memcpy(p, params_decl, sizeof p);
    CHECK_OK(dpt_env_class_check(&c));
    c.num_params = DPT_ENV_PARAMS_LIMIT + 1;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "num_params is 1025, at most 1024");
    c = params_class();
    c.params = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "num_params is 4 but params is NULL");
    /* As written, the class must be its configuration at the defaults. */
    c = params_class();
    c.obs_dim = 8;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL,
              "as written it is not the env at its default parameters: its obs_dim differs");
    c = params_class();
    c.configure = NULL; /* then nothing ties the dims to the values */
    c.obs_dim = 8;
    CHECK_OK(dpt_env_class_check(&c));
    /* Values of a configured class are checked against their parameters. */
    c = params_class();
    dpt_env_value_t v[P_NUM] = {{.i = 3}, {.f = 0.5}, {.i = 0}, {.s = "abc"}};
    c.values = v;
    CHECK_OK(dpt_env_class_check(&c));
    v[P_COUNT].i = 11;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "values[0] is not a valid int value");
    v[P_COUNT].i = 3;
    v[P_FLIP].i = 2;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "values[2] is not a valid bool value");
    v[P_FLIP].i = 0;
    v[P_LABEL].s = NULL;
    CHECK_ERR(dpt_env_class_check(&c), DPT_EINVAL, "values[3] is not a valid string value");
    /* Every built-in passes, parameters and all. */
    for (size_t i = 0; i < dpt_env_count(); i++)
        CHECK_OK(dpt_env_class_check(dpt_env_get(i)));
}

static void test_configure(void)
{
    dpt_env_class_t c = params_class();
    dpt_env_class_t *d = (dpt_env_class_t *)&d; /* must become NULL on failure */
    REQUIRE_OK(dpt_env_class_create(&d, &c, NULL, NULL, 0));
    CHECK(d->obs_dim == 7 && d->values != NULL && d->values[P_COUNT].i == 3);
    CHECK(d->values[P_GAIN].f == 0.5 && d->values[P_FLIP].i == 0);
    CHECK(strcmp(d->values[P_LABEL].s, "abc") == 0);
    CHECK(strcmp(d->name, "Params-v0") == 0 && d->reset == params_reset && d->init == params_init);
    dpt_env_class_destroy(d);

    /* The texts are copied: the caller's may go away. */
    char count[8] = "5", label[8] = "xyz";
    const char *names[] = {"label", "count"}, *texts[] = {label, count};
    REQUIRE_OK(dpt_env_class_create(&d, &c, names, texts, 2));
    memset(count, 0, sizeof count);
    memset(label, 0, sizeof label);
    CHECK(d->obs_dim == 9 && d->values[P_COUNT].i == 5 && strcmp(d->values[P_COUNT].s, "5") == 0);
    CHECK(strcmp(d->values[P_LABEL].s, "xyz") == 0 && d->values[P_GAIN].f == 0.5);
    CHECK(strcmp(d->name, "Params-v0") == 0); /* configure's rename was not taken */
    CHECK_OK(dpt_env_class_check(d));
    /* Configuring a configured class starts from the defaults again. */
    dpt_env_class_t *e;
    REQUIRE_OK(dpt_env_class_create(&e, d, NULL, NULL, 0));
    CHECK(e->obs_dim == 7 && e->values[P_COUNT].i == 3);
    dpt_env_class_destroy(e);
    dpt_env_class_destroy(d);
    dpt_env_class_destroy(NULL);

    const char *bad_name[] = {"nope"}, *one[] = {"1"};
    CHECK_ERR(dpt_env_class_create(&d, &c, bad_name, one, 1), DPT_EINVAL,
              "env \"Params-v0\" has no parameter \"nope\" (its parameters: count, gain, flip, "
              "label)");
    CHECK(d == NULL);
    const char *twice[] = {"count", "count"}, *two[] = {"1", "2"};
    CHECK_ERR(dpt_env_class_create(&d, &c, twice, two, 2), DPT_EINVAL,
              "parameter count is given twice");
    const char *gain[] = {"gain"}, *big[] = {"7"};
    CHECK_ERR(dpt_env_class_create(&d, &c, gain, big, 1), DPT_EINVAL,
              "env \"Params-v0\": gain = 7 is out of range [0, 2]");
    const char *cf[] = {"count", "flip"}, *cf_v[] = {"8", "yes"};
    CHECK_ERR(dpt_env_class_create(&d, &c, cf, cf_v, 2), DPT_EINVAL,
              "env \"Params-v0\" refuses these parameters: flip needs count <= 5, got 8");
    CHECK_ERR(dpt_env_class_create(&d, &c, NULL, NULL, 1), DPT_EINVAL, "no names");
    const char *null_text[] = {NULL};
    CHECK_ERR(dpt_env_class_create(&d, &c, gain, null_text, 1), DPT_EINVAL, "no value");
    CHECK_ERR(dpt_env_class_create(NULL, &c, NULL, NULL, 0), DPT_EINVAL, "NULL");
    dpt_env_class_t bad = params_class();
    bad.obs_dim = 0;
    CHECK_ERR(dpt_env_class_create(&d, &bad, NULL, NULL, 0), DPT_EINVAL, "obs_dim is 0");
    /* A class without parameters: the same class, values of none. */
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    REQUIRE_OK(dpt_env_class_create(&d, cp, NULL, NULL, 0));
    CHECK(d->obs_dim == 4 && d->values != NULL && d->num_params == 0 && d->step == cp->step);
    dpt_env_class_destroy(d);
    CHECK_ERR(dpt_env_class_create(&d, cp, gain, one, 1), DPT_EINVAL,
              "env \"CartPole-v1\" has no parameter \"gain\" (it takes no parameters)");
}

/* Each env of a runner gets the values of its class when it is created. */
static void test_env_receives_params(void)
{
    dpt_env_class_t c = params_class();
    const char *names[] = {"count", "gain", "flip", "label"}, *texts[] = {"2", "1.5", "yes", "Q"};
    dpt_env_class_t *d;
    REQUIRE_OK(dpt_env_class_create(&d, &c, names, texts, 4));
    REQUIRE(d->obs_dim == 6);
    dpt_vecenv_t *v, *w;
    REQUIRE_OK(dpt_vecenv_create(&v, d, 3, 1, 0));
    float obs[3 * 7], rew[3], fin[3 * 7];
    uint8_t term[3], trunc[3];
    dpt_vecenv_reset(v, obs);
    int32_t act[3] = {0, 1, 0};
    REQUIRE_OK(dpt_vecenv_step(v, act, obs, rew, term, trunc, fin));
    for (int i = 0; i < 3; i++) {
        const float *o = obs + 6 * i;
        CHECK(o[0] == 2.0f && o[1] == 1.5f && o[2] == 1.0f && o[3] == (float)'Q');
        CHECK(o[4] == 1.0f && o[5] == 1.0f && rew[i] == 1.5f);
    }
    /* A class as written runs with its defaults. */
    REQUIRE_OK(dpt_vecenv_create(&w, &c, 2, 1, 0));
    dpt_vecenv_reset(w, obs);
    CHECK(obs[0] == 3.0f && obs[1] == 0.5f && obs[2] == 0.0f && obs[3] == (float)'a');
    CHECK(obs[7] == 3.0f && obs[13] == 1.0f);
    dpt_vecenv_destroy(w);

    /* The saved state records the values: same sizes, other gain: refused. */
    const char *g[] = {"count", "flip", "label", "gain"}, *gt[] = {"2", "yes", "Q", "0.25"};
    dpt_env_class_t *e;
    REQUIRE_OK(dpt_env_class_create(&e, &c, g, gt, 4));
    REQUIRE_OK(dpt_vecenv_create(&w, e, 3, 1, 0));
    size_t bytes = dpt_vecenv_state_bytes(v);
    REQUIRE(bytes == dpt_vecenv_state_bytes(w));
    unsigned char *buf = malloc(bytes);
    REQUIRE(buf != NULL);
    REQUIRE_OK(dpt_vecenv_save_state(v, buf, bytes));
    CHECK_ERR(dpt_vecenv_load_state(w, buf, bytes), DPT_EINVAL,
              "env \"Params-v0\": saved runner state has other parameter values");
    /* The same values written otherwise ("1.50" for "1.5") are the same. */
    dpt_vecenv_destroy(w);
    dpt_env_class_destroy(e);
    const char *same[] = {"1.50", "Q", "1", "002"}, *sn[] = {"gain", "label", "flip", "count"};
    REQUIRE_OK(dpt_env_class_create(&e, &c, sn, same, 4));
    REQUIRE_OK(dpt_vecenv_create(&w, e, 3, 1, 0));
    CHECK_OK(dpt_vecenv_load_state(w, buf, bytes));
    /* A class without parameters keeps 0 there (states saved before the
     * digest existed load as they did). */
    dpt_vecenv_t *x;
    REQUIRE_OK(dpt_vecenv_create(&x, dpt_env_find("CartPole-v1"), 1, 1, 0));
    size_t xb = dpt_vecenv_state_bytes(x);
    unsigned char *xbuf = malloc(xb);
    REQUIRE(xbuf != NULL);
    REQUIRE_OK(dpt_vecenv_save_state(x, xbuf, xb));
    uint32_t digest;
    memcpy(&digest, xbuf + 116, 4);
    CHECK(digest == 0);
    free(xbuf);
    dpt_vecenv_destroy(x);
    free(buf);
    dpt_vecenv_destroy(w);
    dpt_vecenv_destroy(v);
    dpt_env_class_destroy(e);
    dpt_env_class_destroy(d);
}

/* ---- dims past 32 ---------------------------------------------------------------- */

#define WIDE_OBS 100
#define WIDE_ACT 40

static void wide_reset(void *state, dpt_rng_t *rng, float *obs)
{
    (void)state;
    for (int i = 0; i < WIDE_OBS; i++)
        obs[i] = dpt_rng_uniform(rng);
}

/* obs[i] = the clipped action i (i < 40), then its sum; reward: obs[99]. */
static void wide_step(void *state, const void *action, dpt_rng_t *rng, float *obs, float *reward,
                      int *terminated)
{
    (void)state, (void)rng;
    const float *a = action;
    float sum = 0.0f;
    for (int i = 0; i < WIDE_OBS; i++)
        obs[i] = i < WIDE_ACT ? a[i] : 0.0f;
    for (int i = 0; i < WIDE_ACT; i++)
        sum += a[i];
    obs[WIDE_OBS - 1] = sum;
    *reward = -sum * sum;
    *terminated = 0;
}

static void test_wide_dims(void)
{
    float lo[WIDE_ACT], hi[WIDE_ACT];
    for (int i = 0; i < WIDE_ACT; i++) {
        lo[i] = -1.0f - (float)i;
        hi[i] = 1.0f + (float)i;
    }
    dpt_env_class_t c;
    memset(&c, 0, sizeof c);
    c.name = "Wide-v0";
    c.obs_dim = WIDE_OBS;
    c.action_kind = DPT_ACTION_BOX;
    c.action_dim = WIDE_ACT;
    c.action_low = lo;
    c.action_high = hi;
    c.max_episode_steps = 7;
    c.reset = wide_reset;
    c.step = wide_step;
    REQUIRE_OK(dpt_env_class_check(&c));
    enum { N = 3 };
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, &c, N, 2, 0));
    float *obs = calloc(N * WIDE_OBS, sizeof *obs), *fin = calloc(N * WIDE_OBS, sizeof *fin);
    float act[N * WIDE_ACT], rew[N];
    uint8_t term[N], trunc[N];
    REQUIRE(obs && fin);
    dpt_vecenv_reset(v, NULL); /* into the runner's own obs_dim-sized scratch */
    dpt_vecenv_reset(v, obs);
    for (int i = 0; i < N * WIDE_ACT; i++)
        act[i] = 100.0f * (float)((i % 3) - 1); /* -100, 0, 100: clipped per dimension */
    for (int s = 0; s < 7; s++)
        REQUIRE_OK(dpt_vecenv_step(v, act, obs, rew, term, trunc, fin));
    for (int e = 0; e < N; e++) {
        CHECK(trunc[e] == 1 && term[e] == 0);
        float sum = 0.0f;
        for (int k = 0; k < WIDE_ACT; k++) {
            float x = act[e * WIDE_ACT + k], want = x < lo[k] ? lo[k] : (x > hi[k] ? hi[k] : x);
            CHECK(fin[e * WIDE_OBS + k] == want);
            sum += want;
        }
        CHECK(fin[e * WIDE_OBS + WIDE_OBS - 1] == sum);
    }
    dpt_vecenv_destroy(v);
    /* A policy and a greedy evaluation over 100 observations and 40
     * actions (the evaluation sizes its buffers from the class). */
    size_t hidden[1] = {16};
    dpt_policy_t *p;
    REQUIRE_OK(dpt_policy_create(&p, &c, hidden, 1, 4));
    dpt_arena_t params;
    REQUIRE_OK(dpt_arena_init(&params, dpt_policy_vars(p)->total));
    dpt_rng_t init;
    dpt_rng_init(&init, 1, 0, 0, DPT_RNG_INIT);
    dpt_policy_init_params(p, params.data, &init);
    double ret, len;
    CHECK_OK(dpt_rl_evaluate(p, params.data, 3, 2, 0, &ret, &len));
    CHECK(len == 7.0 && ret <= 0.0);
    dpt_arena_deinit(&params);
    dpt_policy_destroy(p);
    free(obs);
    free(fin);
    /* A thousand observations work as well; absurd dims are refused. */
    c.obs_dim = 1000;
    c.action_kind = DPT_ACTION_DISCRETE;
    c.num_actions = 2;
    CHECK_OK(dpt_env_class_check(&c));
    c.obs_dim = (size_t)1 << 40;
    dpt_vecenv_t *x = (dpt_vecenv_t *)&x;
    CHECK_ERR(dpt_vecenv_create(&x, &c, 1, 1, 0), DPT_EINVAL, "obs_dim is 1099511627776");
    CHECK(x == NULL);
}

/* ---- StatelessCartPole-v1 --------------------------------------------------------- */

static void test_stateless_cartpole(void)
{
    const dpt_env_class_t *cp = dpt_env_find("CartPole-v1");
    const dpt_env_class_t *sc = dpt_env_find("StatelessCartPole-v1");
    REQUIRE(cp && sc);
    CHECK(sc->obs_dim == 2 && sc->action_kind == DPT_ACTION_DISCRETE && sc->num_actions == 2);
    CHECK(sc->max_episode_steps == 500 && sc->reward_threshold == 475.0);
    CHECK(sc->state_size == 4 * sizeof(double) && sc->num_params == 0);
    enum { N = 4, STEPS = 2000 };
    dpt_vecenv_t *a, *b;
    REQUIRE_OK(dpt_vecenv_create(&a, cp, N, 9, 2));
    REQUIRE_OK(dpt_vecenv_create(&b, sc, N, 9, 2));
    float oa[N * 4], fa[N * 4], ra[N], ob[N * 2], fb[N * 2], rb[N];
    uint8_t ta[N], ua[N], tb[N], ub[N];
    dpt_vecenv_reset(a, oa);
    dpt_vecenv_reset(b, ob);
    for (int i = 0; i < N; i++)
        CHECK(ob[2 * i] == oa[4 * i] && ob[2 * i + 1] == oa[4 * i + 2]);
    dpt_rng_t rng;
    dpt_rng_init(&rng, 4, 0, 0, DPT_RNG_TEST);
    int terminated = 0, truncated = 0, same = 1;
    for (int s = 0; s < STEPS; s++) {
        int32_t act[N];
        for (int i = 0; i < N; i++) {
            /* Envs 0 and 1 balance (from CartPole's full observation), so
             * episodes reach the 500-step limit; 2 and 3 act at random. */
            const float *o = oa + 4 * i;
            act[i] = i < 2 ? 0.1f * o[0] + 0.5f * o[1] + 10.0f * o[2] + 2.0f * o[3] > 0.0f
                           : (int32_t)dpt_rng_below(&rng, 2);
        }
        REQUIRE_OK(dpt_vecenv_step(a, act, oa, ra, ta, ua, fa));
        REQUIRE_OK(dpt_vecenv_step(b, act, ob, rb, tb, ub, fb));
        for (int i = 0; i < N; i++) {
            same &= ob[2 * i] == oa[4 * i] && ob[2 * i + 1] == oa[4 * i + 2];
            same &= rb[i] == ra[i] && tb[i] == ta[i] && ub[i] == ua[i];
            if (ta[i] | ua[i])
                same &= fb[2 * i] == fa[4 * i] && fb[2 * i + 1] == fa[4 * i + 2];
            terminated += ta[i];
            truncated += ua[i];
        }
    }
    CHECK(same);
    CHECK(terminated > 10 && truncated >= 4); /* both kinds of episode end happened */
    double r1[64], r2[64];
    uint32_t l1[64], l2[64];
    size_t n1 = dpt_vecenv_pop_episodes(a, r1, l1, 64, NULL);
    size_t n2 = dpt_vecenv_pop_episodes(b, r2, l2, 64, NULL);
    CHECK(n1 == n2 && n1 > 0);
    CHECK(memcmp(r1, r2, n1 * sizeof *r1) == 0 && memcmp(l1, l2, n1 * sizeof *l1) == 0);
    dpt_vecenv_destroy(a);
    dpt_vecenv_destroy(b);
}

/* ---- RepeatPrevious-v0 ------------------------------------------------------------ */

static dpt_env_class_t *repeat_class(int num_tokens, int k)
{
    char n[16], kk[16];
    snprintf(n, sizeof n, "%d", num_tokens);
    snprintf(kk, sizeof kk, "%d", k);
    const char *names[] = {"k", "num_tokens"}, *texts[] = {kk, n};
    dpt_env_class_t *c = NULL;
    if (dpt_env_class_create(&c, dpt_env_find("RepeatPrevious-v0"), names, texts, 2) != 0)
        return NULL;
    return c;
}

/* The token of a one-hot observation, or -1 when it is not one. */
static int one_hot(const float *o, int n)
{
    int at = -1;
    for (int i = 0; i < n; i++) {
        if (o[i] == 1.0f && at < 0)
            at = i;
        else if (o[i] != 0.0f)
            return -1;
    }
    return at;
}

static void test_repeat_previous_class(void)
{
    const dpt_env_class_t *rp = dpt_env_find("RepeatPrevious-v0");
    REQUIRE(rp != NULL);
    CHECK(rp->obs_dim == 2 && rp->num_actions == 2 && rp->action_kind == DPT_ACTION_DISCRETE);
    CHECK(rp->max_episode_steps == 100 && rp->reward_threshold == 98.0 && rp->num_params == 2);
    const dpt_env_param_t *k = dpt_env_param_find(rp, "k"),
                          *n = dpt_env_param_find(rp, "num_tokens");
    REQUIRE(k && n);
    CHECK(k->type == DPT_ENV_PARAM_INT && strcmp(k->def, "2") == 0 && k->min == 0 && k->max == 99);
    CHECK(n->type == DPT_ENV_PARAM_INT && strcmp(n->def, "2") == 0 && n->min == 2);
    dpt_env_class_t *c = repeat_class(3, 5);
    REQUIRE(c != NULL);
    CHECK(c->obs_dim == 3 && c->num_actions == 3 && c->reward_threshold == 95.0);
    CHECK(c->state_size == 3 * sizeof(uint32_t) + 6 * sizeof(uint32_t));
    dpt_env_class_destroy(c);
    CHECK(repeat_class(3, 100) == NULL);
    CHECK(strstr(dpt_last_error(), "k = 100 is out of range [0, 99]") != NULL);
    CHECK(repeat_class(1, 2) == NULL);
    CHECK(strstr(dpt_last_error(), "num_tokens = 1 is out of range [2, 1024]") != NULL);
}

/* Two envs over 2.5 episodes: env 0 answers right (the token shown k steps
 * back; token 0 before there is one), env 1 answers t mod N. Every reward is
 * compared with the rule: 0 for t < k, else +1 when the answer is x_{t-k}
 * and -1 when not; episodes are truncated at exactly 100 steps. */
static void check_repeat(int ntok, int k)
{
    dpt_env_class_t *c = repeat_class(ntok, k);
    REQUIRE(c != NULL);
    dpt_vecenv_t *v;
    REQUIRE_OK(dpt_vecenv_create(&v, c, 2, 7, 0));
    float obs[2 * 3], fin[2 * 3], rew[2];
    uint8_t term[2], trunc[2];
    int hist[2][100], t = 0, ok = 1;
    double ret[2] = {0, 0}, want_ret[2] = {0, 0};
    dpt_vecenv_reset(v, obs);
    for (int i = 0; i < 2; i++)
        ok &= (hist[i][0] = one_hot(obs + i * ntok, ntok)) >= 0;
    int ended = 0;
    for (int s = 0; s < 250; s++) {
        int32_t act[2];
        act[0] = t >= k ? hist[0][t - k] : 0;
        act[1] = t % ntok;
        REQUIRE_OK(dpt_vecenv_step(v, act, obs, rew, term, trunc, fin));
        for (int i = 0; i < 2; i++) {
            float want = t < k ? 0.0f : (act[i] == hist[i][t - k] ? 1.0f : -1.0f);
            ok &= rew[i] == want && term[i] == 0 && trunc[i] == (t == 99);
            ret[i] += (double)rew[i];
            want_ret[i] += (double)want;
        }
        if (t == 99) {
            /* Env 0 scored the best return, 100 - k. */
            ok &= ret[0] == 100 - k && ret[1] == want_ret[1];
            ret[0] = ret[1] = want_ret[0] = want_ret[1] = 0.0;
            ended++;
            t = 0;
        } else {
            t++;
        }
        for (int i = 0; i < 2; i++)
            ok &= (hist[i][t] = one_hot(obs + i * ntok, ntok)) >= 0;
    }
    CHECK(ok && ended == 2);
    double r[4];
    uint32_t l[4];
    REQUIRE(dpt_vecenv_pop_episodes(v, r, l, 4, NULL) == 4);
    CHECK(r[0] == 100 - k && r[2] == 100 - k && l[0] == 100 && l[1] == 100);
    CHECK(r[1] < 100 - k); /* the pattern is not the memory */
    dpt_vecenv_destroy(v);
    dpt_env_class_destroy(c);
}

static void test_repeat_previous_rewards(void)
{
    for (int ntok = 2; ntok <= 3; ntok++)
        for (int k = 0; k <= 2; k++)
            check_repeat(ntok, k);
}

/* Same seed: the same tokens; another seed or env index: others. Tokens are
 * uniform, and a saved state continues bitwise. */
static void test_repeat_previous_determinism(void)
{
    dpt_env_class_t *c = repeat_class(3, 2);
    REQUIRE(c != NULL);
    enum { N = 4, STEPS = 3000 };
    dpt_vecenv_t *a, *b, *d;
    REQUIRE_OK(dpt_vecenv_create(&a, c, N, 11, 0));
    REQUIRE_OK(dpt_vecenv_create(&b, c, N, 11, 0));
    REQUIRE_OK(dpt_vecenv_create(&d, c, N, 12, 0));
    float oa[N * 3], ob[N * 3], od[N * 3], ra[N], rb[N], rd[N];
    uint8_t t1[N], t2[N];
    dpt_vecenv_reset(a, oa);
    dpt_vecenv_reset(b, ob);
    dpt_vecenv_reset(d, od);
    int same = 1, differ_seed = 0, differ_env = 0;
    size_t counts[3] = {0, 0, 0};
    size_t bytes = dpt_vecenv_state_bytes(a);
    unsigned char *saved = malloc(bytes);
    float after[N * 3];
    REQUIRE(saved != NULL);
    for (int s = 0; s < STEPS; s++) {
        int32_t act[N] = {0, 1, 2, (int32_t)(s % 3)};
        if (s == 150)
            REQUIRE_OK(dpt_vecenv_save_state(a, saved, bytes));
        REQUIRE_OK(dpt_vecenv_step(a, act, oa, ra, t1, t2, NULL));
        REQUIRE_OK(dpt_vecenv_step(b, act, ob, rb, t1, t2, NULL));
        REQUIRE_OK(dpt_vecenv_step(d, act, od, rd, t1, t2, NULL));
        if (s == 150)
            memcpy(after, oa, sizeof oa);
        same &= memcmp(oa, ob, sizeof oa) == 0 && memcmp(ra, rb, sizeof ra) == 0;
        differ_seed |= memcmp(oa, od, sizeof oa) != 0;
        differ_env |= memcmp(oa, oa + 3, 3 * sizeof *oa) != 0;
        for (int i = 0; i < N; i++) {
            int tok = one_hot(oa + 3 * i, 3);
            REQUIRE(tok >= 0);
            counts[tok]++;
        }
    }
    CHECK(same && differ_seed && differ_env);
    for (int j = 0; j < 3; j++)
        CHECK(counts[j] > N * STEPS / 4 && counts[j] < N * STEPS * 5 / 12);
    /* Back to step 150: the same next observation. */
    REQUIRE_OK(dpt_vecenv_load_state(b, saved, bytes));
    int32_t act[N] = {0, 1, 2, 0};
    REQUIRE_OK(dpt_vecenv_step(b, act, ob, rb, t1, t2, NULL));
    CHECK(memcmp(ob, after, sizeof ob) == 0);
    /* Another k is another state size: refused. */
    dpt_env_class_t *c4 = repeat_class(3, 4);
    dpt_vecenv_t *e;
    REQUIRE(c4 != NULL);
    REQUIRE_OK(dpt_vecenv_create(&e, c4, N, 11, 0));
    CHECK_ERR(dpt_vecenv_load_state(e, saved, bytes), DPT_EINVAL, "state_size");
    dpt_vecenv_destroy(e);
    dpt_env_class_destroy(c4);
    free(saved);
    dpt_vecenv_destroy(a);
    dpt_vecenv_destroy(b);
    dpt_vecenv_destroy(d);
    dpt_env_class_destroy(c);
}

int main(void)
{
    static const dpt_test_case_t cases[] = {
        DPT_TEST(test_param_parse),
        DPT_TEST(test_param_declarations),
        DPT_TEST(test_configure),
        DPT_TEST(test_env_receives_params),
        DPT_TEST(test_wide_dims),
        DPT_TEST(test_stateless_cartpole),
        DPT_TEST(test_repeat_previous_class),
        DPT_TEST(test_repeat_previous_rewards),
        DPT_TEST(test_repeat_previous_determinism),
    };
    return DPT_TEST_RUN(cases);
}
