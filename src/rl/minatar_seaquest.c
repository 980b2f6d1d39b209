/*
 * MinAtar Seaquest. A submarine (rows 0..8, row 0 the surface) shoots enemy
 * fish and subs (+1 each) that cross rows 1..8, collects up to six divers,
 * and must surface before its oxygen (200 frames) runs out. Surfacing with
 * no diver ends the episode; with six, it gives oxygen * 10 / 200 and empties
 * the diver count; otherwise it uses one diver. Touching an enemy or an enemy
 * sub's bullet ends the episode. With ramping, each surfacing spawns enemies
 * one frame sooner, and every second one moves them one frame faster.
 * Channels: sub front, sub back, friendly bullet, trail, enemy bullet, enemy
 * fish, enemy sub, oxygen gauge, diver gauge, diver.
 *
 * The package keeps each kind of object in a Python list, walks most of them
 * backwards while removing from them, and removes by value (the first equal
 * entry). Those rules decide which object goes and which is visited when two
 * are equal, so this file keeps them: a list is an array of objects, a
 * backwards walk visits index i = n-1, n-2, ... while i < n, and a removal
 * takes out the first entry equal to the object. A sub removed in its own
 * turn still counts down and may still fire, as in the package.
 */
#include "minatar_impl.h"

#include <string.h>

#define SQ_LAST (MN_SIZE - 1)
#define SQ_RAMP_INTERVAL 100
#define SQ_MAX_OXYGEN 200
#define SQ_SPAWN_SPEED 20
#define SQ_DIVER_SPAWN_SPEED 30
#define SQ_MOVE_INTERVAL 5
#define SQ_SHOT_COOL_DOWN 5
#define SQ_ENEMY_SHOT_INTERVAL 10
#define SQ_DIVER_MOVE_INTERVAL 5
/* A list's capacity. At most one enemy spawns a frame and one crosses the
 * screen in at most 61 frames, so no list nears it; an object that would not
 * fit is dropped rather than overflow. */
#define SQ_CAP 64

/* An object: bullets use x, y, right; fish and divers add a move timer; subs
 * a shot timer too. Unused fields stay 0, so equal objects compare equal
 * byte by byte. */
typedef struct sq_obj {
    int8_t x, y, right, move, shot;
} sq_obj_t;

typedef struct sq_list {
    int32_t n;
    sq_obj_t a[SQ_CAP];
} sq_list_t;

typedef struct seaquest {
    mn_common_t c;
    int32_t oxygen, diver_count, sub_x, sub_y, sub_right, surface;
    int32_t e_spawn_speed, e_spawn_timer, d_spawn_timer, move_speed, shot_timer;
    sq_list_t f_bullets, e_bullets, e_fish, e_subs, divers;
} seaquest_t;

static int sq_eq(const sq_obj_t *a, const sq_obj_t *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static void sq_append(sq_list_t *l, sq_obj_t o)
{
    if (l->n < SQ_CAP)
        l->a[l->n++] = o;
}

/* Removes the first entry equal to o; returns its index (-1: none). */
static int sq_remove(sq_list_t *l, const sq_obj_t *o)
{
    for (int i = 0; i < l->n; i++)
        if (sq_eq(&l->a[i], o)) {
            memmove(&l->a[i], &l->a[i + 1], (size_t)(l->n - i - 1) * sizeof l->a[0]);
            l->n--;
            return i;
        }
    return -1;
}

static int sq_at(const sq_obj_t *o, int x, int y)
{
    return o->x == x && o->y == y;
}

static int sq_at_sub(const seaquest_t *s, const sq_obj_t *o)
{
    return sq_at(o, s->sub_x, s->sub_y);
}

static void sq_reset(void *state, dpt_rng_t *rng)
{
    (void)rng;
    seaquest_t *s = state;
    s->oxygen = SQ_MAX_OXYGEN;
    s->diver_count = 0;
    s->sub_x = 5;
    s->sub_y = 0;
    s->sub_right = 0;
    s->f_bullets.n = s->e_bullets.n = s->e_fish.n = s->e_subs.n = s->divers.n = 0;
    s->e_spawn_speed = SQ_SPAWN_SPEED;
    s->e_spawn_timer = s->e_spawn_speed;
    s->d_spawn_timer = SQ_DIVER_SPAWN_SPEED;
    s->move_speed = SQ_MOVE_INTERVAL;
    s->c.ramp_index = 0;
    s->shot_timer = 0;
    s->surface = 1;
    s->c.terminal = 0;
}

/* rand() for the side, rand() for a sub (one in three), randint(1, 9) for
 * the row; nothing spawns in a row where an enemy moves the other way. */
static void sq_spawn_enemy(seaquest_t *s, dpt_rng_t *rng)
{
    int right = mn_rand(rng) < 0.5;
    int is_sub = mn_rand(rng) < 1.0 / 3.0;
    int y = mn_randint(rng, 1, 9);
    const sq_list_t *lists[2] = {&s->e_subs, &s->e_fish};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < lists[k]->n; i++)
            if (lists[k]->a[i].y == y && lists[k]->a[i].right != right)
                return;
    sq_obj_t o = {(int8_t)(right ? 0 : SQ_LAST), (int8_t)y, (int8_t)right, (int8_t)s->move_speed,
                  (int8_t)(is_sub ? SQ_ENEMY_SHOT_INTERVAL : 0)};
    sq_append(is_sub ? &s->e_subs : &s->e_fish, o);
}

static void sq_spawn_diver(seaquest_t *s, dpt_rng_t *rng)
{
    int right = mn_rand(rng) < 0.5;
    int y = mn_randint(rng, 1, 9);
    sq_obj_t o = {(int8_t)(right ? 0 : SQ_LAST), (int8_t)y, (int8_t)right, SQ_DIVER_MOVE_INTERVAL,
                  0};
    sq_append(&s->divers, o);
}

static void sq_step_x(sq_obj_t *o)
{
    o->x = (int8_t)(o->x + (o->right ? 1 : -1));
}

static int sq_out(const sq_obj_t *o)
{
    return o->x < 0 || o->x > SQ_LAST;
}

/* The first entry of l at o's cell, removed with o from its own list; 1 if
 * one was there. */
static int sq_hit(sq_list_t *l, sq_list_t *own, const sq_obj_t *o)
{
    for (int j = 0; j < l->n; j++)
        if (sq_at(&l->a[j], o->x, o->y)) {
            sq_obj_t hit = l->a[j];
            sq_remove(own, o);
            sq_remove(l, &hit);
            return 1;
        }
    return 0;
}

static float sq_friendly_bullets(seaquest_t *s)
{
    float r = 0.0f;
    sq_list_t *l = &s->f_bullets;
    for (int i = l->n - 1; i >= 0 && i < l->n; i--) {
        sq_step_x(&l->a[i]);
        sq_obj_t b = l->a[i];
        if (sq_out(&b))
            sq_remove(l, &b);
        else if (sq_hit(&s->e_fish, l, &b) || sq_hit(&s->e_subs, l, &b))
            r += 1.0f;
    }
    return r;
}

static void sq_divers(seaquest_t *s)
{
    sq_list_t *l = &s->divers;
    for (int i = l->n - 1; i >= 0 && i < l->n; i--) {
        sq_obj_t *d = &l->a[i];
        if (sq_at_sub(s, d) && s->diver_count < 6) {
            sq_obj_t o = *d;
            sq_remove(l, &o);
            s->diver_count++;
        } else if (d->move == 0) {
            d->move = SQ_DIVER_MOVE_INTERVAL;
            sq_step_x(d);
            sq_obj_t o = *d;
            if (sq_out(&o)) {
                sq_remove(l, &o);
            } else if (sq_at_sub(s, &o) && s->diver_count < 6) {
                sq_remove(l, &o);
                s->diver_count++;
            }
        } else {
            d->move--;
        }
    }
}

/* Fish (subs = 0) or subs (subs = 1): a collision ends the episode; each
 * moves when its timer runs out, leaving at the edge or dying on a friendly
 * bullet; a sub then fires every eleventh frame, even one that just left. */
static float sq_enemies(seaquest_t *s, sq_list_t *l, int subs)
{
    float r = 0.0f;
    for (int i = l->n - 1; i >= 0 && i < l->n; i--) {
        sq_obj_t cur = l->a[i];
        int at = i; /* where cur is in l; -1 once it is not */
        if (sq_at_sub(s, &cur))
            s->c.terminal = 1;
        if (cur.move == 0) {
            cur.move = (int8_t)s->move_speed;
            sq_step_x(&cur);
            l->a[at] = cur;
            if (sq_out(&cur)) {
                at = sq_remove(l, &cur) == at ? -1 : at - 1;
            } else if (sq_at_sub(s, &cur)) {
                s->c.terminal = 1;
            } else {
                for (int j = 0; j < s->f_bullets.n; j++)
                    if (sq_at(&s->f_bullets.a[j], cur.x, cur.y)) {
                        sq_obj_t b = s->f_bullets.a[j];
                        at = sq_remove(l, &cur) == at ? -1 : at - 1;
                        sq_remove(&s->f_bullets, &b);
                        r += 1.0f;
                        break;
                    }
            }
        } else {
            cur.move--;
        }
        if (subs) {
            if (cur.shot == 0) {
                cur.shot = SQ_ENEMY_SHOT_INTERVAL;
                sq_obj_t b = {cur.x, cur.y, cur.right, 0, 0};
                sq_append(&s->e_bullets, b);
            } else {
                cur.shot--;
            }
        }
        if (at >= 0)
            l->a[at] = cur;
    }
    return r;
}

static void sq_enemy_bullets(seaquest_t *s)
{
    sq_list_t *l = &s->e_bullets;
    for (int i = l->n - 1; i >= 0 && i < l->n; i--) {
        sq_obj_t *b = &l->a[i];
        if (sq_at_sub(s, b))
            s->c.terminal = 1;
        sq_step_x(b);
        sq_obj_t o = *b;
        if (sq_out(&o))
            sq_remove(l, &o);
        else if (sq_at_sub(s, &o))
            s->c.terminal = 1;
    }
}

static float sq_surface(seaquest_t *s)
{
    float r = 0.0f;
    s->surface = 1;
    if (s->diver_count == 6) {
        s->diver_count = 0;
        r = (float)(s->oxygen * 10 / SQ_MAX_OXYGEN);
    }
    s->oxygen = SQ_MAX_OXYGEN;
    s->diver_count--; /* also after six: the package's count then reads -1 */
    if (s->c.ramping && (s->e_spawn_speed > 1 || s->move_speed > 2)) {
        if (s->move_speed > 2 && s->c.ramp_index % 2)
            s->move_speed--;
        if (s->e_spawn_speed > 1)
            s->e_spawn_speed--;
        s->c.ramp_index++;
    }
    return r;
}

static void sq_player(seaquest_t *s, int a)
{
    if (a == MN_FIRE && s->shot_timer == 0) {
        sq_obj_t b = {(int8_t)s->sub_x, (int8_t)s->sub_y, (int8_t)s->sub_right, 0, 0};
        sq_append(&s->f_bullets, b);
        s->shot_timer = SQ_SHOT_COOL_DOWN;
    } else if (a == MN_LEFT) {
        s->sub_x = s->sub_x > 0 ? s->sub_x - 1 : 0;
        s->sub_right = 0;
    } else if (a == MN_RIGHT) {
        s->sub_x = s->sub_x < SQ_LAST ? s->sub_x + 1 : SQ_LAST;
        s->sub_right = 1;
    } else if (a == MN_UP) {
        s->sub_y = s->sub_y > 0 ? s->sub_y - 1 : 0;
    } else if (a == MN_DOWN) {
        s->sub_y = s->sub_y < 8 ? s->sub_y + 1 : 8;
    }
}

static float sq_act(void *state, int a, dpt_rng_t *rng)
{
    seaquest_t *s = state;
    float r = 0.0f;
    if (s->e_spawn_timer == 0) {
        sq_spawn_enemy(s, rng);
        s->e_spawn_timer = s->e_spawn_speed;
    }
    if (s->d_spawn_timer == 0) {
        sq_spawn_diver(s, rng);
        s->d_spawn_timer = SQ_DIVER_SPAWN_SPEED;
    }
    sq_player(s, a);
    r += sq_friendly_bullets(s);
    sq_divers(s);
    r += sq_enemies(s, &s->e_subs, 1);
    sq_enemy_bullets(s);
    r += sq_enemies(s, &s->e_fish, 0);
    s->e_spawn_timer -= s->e_spawn_timer > 0;
    s->d_spawn_timer -= s->d_spawn_timer > 0;
    s->shot_timer -= s->shot_timer > 0;
    if (s->oxygen <= 0)
        s->c.terminal = 1;
    if (s->sub_y > 0) {
        s->oxygen--;
        s->surface = 0;
    } else if (!s->surface) {
        if (s->diver_count == 0)
            s->c.terminal = 1;
        else
            r += sq_surface(s);
    }
    return r;
}

/* The cell behind a moving object, if on the grid. */
static void sq_trail(float *obs, int ch, const sq_obj_t *o)
{
    int back = o->right ? o->x - 1 : o->x + 1;
    if (back >= 0 && back <= SQ_LAST)
        mn_set(obs, ch, o->y, back);
}

MN_OBS_FN
static void sq_obs(const void *state, float *obs)
{
    MN_CLEAR(obs, 0, 10);
    const seaquest_t *s = state;
    enum { FRONT, BACK, F_BULLET, TRAIL, E_BULLET, FISH, SUB, OXYGEN, DIVERS, DIVER };
    mn_set(obs, FRONT, s->sub_y, s->sub_x);
    int back = s->sub_right ? s->sub_x - 1 : s->sub_x + 1;
    if (back < 0)
        back += MN_SIZE; /* the package's index -1: the last column */
    if (back <= SQ_LAST)
        mn_set(obs, BACK, s->sub_y, back);
    int oxygen = (s->oxygen > 0 ? s->oxygen : 0) * 10 / SQ_MAX_OXYGEN;
    for (int x = 0; x < oxygen && x < MN_SIZE; x++)
        mn_set(obs, OXYGEN, SQ_LAST, x);
    for (int x = SQ_LAST - s->diver_count; x < SQ_LAST; x++)
        if (x >= 0)
            mn_set(obs, DIVERS, SQ_LAST, x);
    const struct {
        const sq_list_t *l;
        int ch, trail;
    } kinds[] = {{&s->f_bullets, F_BULLET, 0},
                 {&s->e_bullets, E_BULLET, 0},
                 {&s->e_fish, FISH, 1},
                 {&s->e_subs, SUB, 1},
                 {&s->divers, DIVER, 1}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int i = 0; i < kinds[k].l->n; i++) {
            const sq_obj_t *o = &kinds[k].l->a[i];
            mn_set(obs, kinds[k].ch, o->y, o->x);
            if (kinds[k].trail)
                sq_trail(obs, TRAIL, o);
        }
}

static const mn_game_t dpt__mn_seaquest = {10, sq_reset, sq_act, sq_obs};
static const int8_t sq_minimal[] = MN_ALL_ACTIONS;
MN_CLASSES(dpt__env_minatar_seaquest_v0, dpt__env_minatar_seaquest_v1, "Seaquest", dpt__mn_seaquest,
           10, seaquest_t, sq_minimal)
