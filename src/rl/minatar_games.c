/*
 * Four MinAtar games: Breakout, Freeway, Asterix and Space Invaders (the
 * fifth, Seaquest, is in minatar_seaquest.c). The rules are the minatar
 * package's (version 1.0.15), written here from its description of each
 * game; docs/ENVS.md lists them with their channels. Coordinates are (x, y)
 * with y = 0 the top row; an observation is [channels, 10, 10].
 */
#include "minatar_impl.h"

#include <string.h>

#define MN_LAST (MN_SIZE - 1)

static int mn_min(int a, int b)
{
    return a < b ? a : b;
}

static int mn_max(int a, int b)
{
    return a > b ? a : b;
}

/* ---- Breakout -------------------------------------------------------------
 * A paddle on the bottom row bounces a ball that travels on diagonals and
 * breaks three rows of bricks (+1 each; a cleared wall is rebuilt when the
 * ball next reaches the paddle's row). The episode ends when the ball passes
 * the paddle. Channels: paddle, ball, trail (the ball's last cell), brick. */

typedef struct breakout {
    mn_common_t c;
    int32_t ball_x, ball_y, ball_dir; /* dir 0: up-left, 1: up-right, 2: down-right, 3: down-left */
    int32_t last_x, last_y, pos, strike;
    uint8_t brick[MN_SIZE][MN_SIZE];
} breakout_t;

static void breakout_reset(void *state, dpt_rng_t *rng)
{
    breakout_t *s = state;
    int right = mn_randint(rng, 0, 2);
    s->ball_y = 3;
    s->ball_x = right ? MN_LAST : 0;
    s->ball_dir = right ? 3 : 2;
    s->pos = 4;
    memset(s->brick, 0, sizeof s->brick);
    memset(s->brick[1], 1, 3 * MN_SIZE);
    s->strike = 0;
    s->last_x = s->ball_x;
    s->last_y = s->ball_y;
    s->c.terminal = 0;
}

static int breakout_bricks_left(const breakout_t *s)
{
    for (int y = 0; y < MN_SIZE; y++)
        for (int x = 0; x < MN_SIZE; x++)
            if (s->brick[y][x])
                return 1;
    return 0;
}

static float breakout_act(void *state, int a, dpt_rng_t *rng)
{
    (void)rng;
    static const int flip_x[4] = {1, 0, 3, 2}, flip_y[4] = {3, 2, 1, 0},
                     flip_both[4] = {2, 3, 0, 1};
    breakout_t *s = state;
    float r = 0.0f;
    if (a == MN_LEFT)
        s->pos = mn_max(0, s->pos - 1);
    else if (a == MN_RIGHT)
        s->pos = mn_min(MN_LAST, s->pos + 1);
    s->last_x = s->ball_x;
    s->last_y = s->ball_y;
    int nx = s->ball_x + (s->ball_dir == 1 || s->ball_dir == 2 ? 1 : -1);
    int ny = s->ball_y + (s->ball_dir >= 2 ? 1 : -1);
    int strike = 0;
    if (nx < 0 || nx > MN_LAST) {
        nx = nx < 0 ? 0 : MN_LAST;
        s->ball_dir = flip_x[s->ball_dir];
    }
    if (ny < 0) {
        ny = 0;
        s->ball_dir = flip_y[s->ball_dir];
    } else if (s->brick[ny][nx]) {
        strike = 1;
        if (!s->strike) { /* one brick per contact */
            r += 1.0f;
            s->strike = 1;
            s->brick[ny][nx] = 0;
            ny = s->last_y;
            s->ball_dir = flip_y[s->ball_dir];
        }
    } else if (ny == MN_LAST) {
        if (!breakout_bricks_left(s))
            memset(s->brick[1], 1, 3 * MN_SIZE);
        if (s->ball_x == s->pos) {
            s->ball_dir = flip_y[s->ball_dir];
            ny = s->last_y;
        } else if (nx == s->pos) {
            s->ball_dir = flip_both[s->ball_dir];
            ny = s->last_y;
        } else {
            s->c.terminal = 1;
        }
    }
    if (!strike)
        s->strike = 0;
    s->ball_x = nx;
    s->ball_y = ny;
    return r;
}

MN_OBS_FN
static void breakout_obs(const void *state, float *obs)
{
    const breakout_t *s = state;
    enum { PADDLE, BALL, TRAIL, BRICK };
    MN_CLEAR(obs, PADDLE, 3); /* the brick plane is written whole */
    mn_set(obs, BALL, s->ball_y, s->ball_x);
    mn_set(obs, PADDLE, MN_LAST, s->pos);
    mn_set(obs, TRAIL, s->last_y, s->last_x);
    mn_plane(obs, BRICK, s->brick);
}

static const mn_game_t dpt__mn_breakout = {4, breakout_reset, breakout_act, breakout_obs};
static const int8_t breakout_minimal[] = {MN_NOOP, MN_LEFT, MN_RIGHT};
MN_CLASSES(dpt__env_minatar_breakout_v0, dpt__env_minatar_breakout_v1, "Breakout", dpt__mn_breakout,
           4, breakout_t, breakout_minimal)

/* ---- Freeway --------------------------------------------------------------
 * A chicken in column 4 crosses eight lanes of cars (rows 1..8) upwards; it
 * can move every third frame. Reaching the top row gives +1, sends it back to
 * the bottom and draws new car speeds; a car hitting it sends it back. Each
 * car moves one cell every |speed| frames (1..5) in its direction and wraps
 * around. The episode ends after 2500 frames. Channels: chicken, car, and
 * five trail channels, one per speed, marking the cell behind each car. */

#define FW_CARS 8
#define FW_PLAYER_SPEED 3
#define FW_TIME_LIMIT 2500

typedef struct freeway {
    mn_common_t c;
    int32_t pos, move_timer, terminate_timer;
    int32_t car[FW_CARS][4]; /* x, y, frames until it moves, speed (its sign: direction) */
} freeway_t;

/* New speeds and directions for the eight cars (positions too at reset):
 * eight randint(1, 6), then eight rand() whose sign about 0.5 is the
 * direction. */
static void freeway_randomize(freeway_t *s, dpt_rng_t *rng, int initialize)
{
    int speed[FW_CARS];
    for (int i = 0; i < FW_CARS; i++)
        speed[i] = mn_randint(rng, 1, 6);
    for (int i = 0; i < FW_CARS; i++) {
        double d = mn_rand(rng) - 0.5;
        speed[i] *= d > 0 ? 1 : d < 0 ? -1 : 0;
    }
    for (int i = 0; i < FW_CARS; i++) {
        if (initialize) {
            s->car[i][0] = 0;
            s->car[i][1] = i + 1;
        }
        s->car[i][2] = speed[i] < 0 ? -speed[i] : speed[i];
        s->car[i][3] = speed[i];
    }
}

static void freeway_reset(void *state, dpt_rng_t *rng)
{
    freeway_t *s = state;
    freeway_randomize(s, rng, 1);
    s->pos = MN_LAST;
    s->move_timer = FW_PLAYER_SPEED;
    s->terminate_timer = FW_TIME_LIMIT;
    s->c.terminal = 0;
}

static float freeway_act(void *state, int a, dpt_rng_t *rng)
{
    freeway_t *s = state;
    float r = 0.0f;
    if (a == MN_UP && s->move_timer == 0) {
        s->move_timer = FW_PLAYER_SPEED;
        s->pos = mn_max(0, s->pos - 1);
    } else if (a == MN_DOWN && s->move_timer == 0) {
        s->move_timer = FW_PLAYER_SPEED;
        s->pos = mn_min(MN_LAST, s->pos + 1);
    }
    if (s->pos == 0) {
        r += 1.0f;
        freeway_randomize(s, rng, 0);
        s->pos = MN_LAST;
    }
    for (int i = 0; i < FW_CARS; i++) {
        int32_t *car = s->car[i];
        if (car[0] == 4 && car[1] == s->pos)
            s->pos = MN_LAST;
        if (car[2] == 0) {
            car[2] = car[3] < 0 ? -car[3] : car[3];
            car[0] += car[3] > 0 ? 1 : -1;
            if (car[0] < 0)
                car[0] = MN_LAST;
            else if (car[0] > MN_LAST)
                car[0] = 0;
            if (car[0] == 4 && car[1] == s->pos)
                s->pos = MN_LAST;
        } else {
            car[2]--;
        }
    }
    s->move_timer -= s->move_timer > 0;
    if (--s->terminate_timer < 0)
        s->c.terminal = 1;
    return r;
}

MN_OBS_FN
static void freeway_obs(const void *state, float *obs)
{
    MN_CLEAR(obs, 0, 7);
    const freeway_t *s = state;
    enum { CHICKEN, CAR, SPEED1 };
    mn_set(obs, CHICKEN, s->pos, 4);
    int trail = -1; /* a speed of 0 (a draw of exactly 0.5) keeps the previous car's channel */
    for (int i = 0; i < FW_CARS; i++) {
        const int32_t *car = s->car[i];
        mn_set(obs, CAR, car[1], car[0]);
        int back = car[3] > 0 ? car[0] - 1 : car[0] + 1;
        back = back < 0 ? MN_LAST : back > MN_LAST ? 0 : back;
        int speed = car[3] < 0 ? -car[3] : car[3];
        if (speed >= 1 && speed <= 5)
            trail = SPEED1 + speed - 1;
        if (trail >= 0)
            mn_set(obs, trail, car[1], back);
    }
}

static const mn_game_t dpt__mn_freeway = {7, freeway_reset, freeway_act, freeway_obs};
static const int8_t freeway_minimal[] = {MN_NOOP, MN_UP, MN_DOWN};
MN_CLASSES(dpt__env_minatar_freeway_v0, dpt__env_minatar_freeway_v1, "Freeway", dpt__mn_freeway, 7,
           freeway_t, freeway_minimal)

/* ---- Asterix --------------------------------------------------------------
 * The player moves in rows 1..8; enemies and gold (one in three) enter rows
 * 1..8 from the left or right edge and cross the screen. Touching gold gives
 * +1 and removes it; touching an enemy ends the episode. With ramping, every
 * 100 frames the spawn interval shrinks, and every second time the movement
 * interval too. Channels: player, enemy, trail, gold. */

#define AX_SLOTS 8 /* one entity per row 1..8 */
#define AX_RAMP_INTERVAL 100
#define AX_SPAWN_SPEED 10
#define AX_MOVE_INTERVAL 5

typedef struct asterix {
    mn_common_t c;
    int32_t player_x, player_y;
    int32_t spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer;
    struct {
        int8_t alive, x, right, gold; /* right: moving right (entered on the left) */
    } e[AX_SLOTS];                    /* slot i is row i + 1 */
} asterix_t;

static void asterix_reset(void *state, dpt_rng_t *rng)
{
    (void)rng;
    asterix_t *s = state;
    s->player_x = 5;
    s->player_y = 5;
    memset(s->e, 0, sizeof s->e);
    s->spawn_speed = AX_SPAWN_SPEED;
    s->spawn_timer = s->spawn_speed;
    s->move_speed = AX_MOVE_INTERVAL;
    s->move_timer = s->move_speed;
    s->ramp_timer = AX_RAMP_INTERVAL;
    s->c.ramp_index = 0;
    s->c.terminal = 0;
}

/* rand() for the side, rand() for gold, then randint(free slots) unless no
 * slot is free. */
static void asterix_spawn(asterix_t *s, dpt_rng_t *rng)
{
    int right = mn_rand(rng) < 0.5;
    int gold = mn_rand(rng) < 1.0 / 3.0;
    int free[AX_SLOTS], n = 0;
    for (int i = 0; i < AX_SLOTS; i++)
        if (!s->e[i].alive)
            free[n++] = i;
    if (n == 0)
        return;
    int slot = free[mn_randint(rng, 0, n)];
    s->e[slot].alive = 1;
    s->e[slot].x = (int8_t)(right ? 0 : MN_LAST);
    s->e[slot].right = (int8_t)right;
    s->e[slot].gold = (int8_t)gold;
}

/* The entity in slot i meets the player: gold is taken, an enemy ends it. */
static float asterix_touch(asterix_t *s, int i)
{
    if (!s->e[i].alive || s->e[i].x != s->player_x || i + 1 != s->player_y)
        return 0.0f;
    if (s->e[i].gold) {
        s->e[i].alive = 0;
        return 1.0f;
    }
    s->c.terminal = 1;
    return 0.0f;
}

static float asterix_act(void *state, int a, dpt_rng_t *rng)
{
    asterix_t *s = state;
    float r = 0.0f;
    if (s->spawn_timer == 0) {
        asterix_spawn(s, rng);
        s->spawn_timer = s->spawn_speed;
    }
    if (a == MN_LEFT)
        s->player_x = mn_max(0, s->player_x - 1);
    else if (a == MN_RIGHT)
        s->player_x = mn_min(MN_LAST, s->player_x + 1);
    else if (a == MN_UP)
        s->player_y = mn_max(1, s->player_y - 1);
    else if (a == MN_DOWN)
        s->player_y = mn_min(8, s->player_y + 1);
    for (int i = 0; i < AX_SLOTS; i++)
        r += asterix_touch(s, i);
    if (s->move_timer == 0) {
        s->move_timer = s->move_speed;
        for (int i = 0; i < AX_SLOTS; i++) {
            if (!s->e[i].alive)
                continue;
            s->e[i].x = (int8_t)(s->e[i].x + (s->e[i].right ? 1 : -1));
            if (s->e[i].x < 0 || s->e[i].x > MN_LAST)
                s->e[i].alive = 0;
            r += asterix_touch(s, i);
        }
    }
    s->spawn_timer--;
    s->move_timer--;
    if (s->c.ramping && (s->spawn_speed > 1 || s->move_speed > 1)) {
        if (s->ramp_timer >= 0) {
            s->ramp_timer--;
        } else {
            if (s->move_speed > 1 && s->c.ramp_index % 2)
                s->move_speed--;
            if (s->spawn_speed > 1)
                s->spawn_speed--;
            s->c.ramp_index++;
            s->ramp_timer = AX_RAMP_INTERVAL;
        }
    }
    return r;
}

MN_OBS_FN
static void asterix_obs(const void *state, float *obs)
{
    MN_CLEAR(obs, 0, 4);
    const asterix_t *s = state;
    enum { PLAYER, ENEMY, TRAIL, GOLD };
    mn_set(obs, PLAYER, s->player_y, s->player_x);
    for (int i = 0; i < AX_SLOTS; i++) {
        if (!s->e[i].alive)
            continue;
        int x = s->e[i].x, back = s->e[i].right ? x - 1 : x + 1;
        mn_set(obs, s->e[i].gold ? GOLD : ENEMY, i + 1, x);
        if (back >= 0 && back <= MN_LAST)
            mn_set(obs, TRAIL, i + 1, back);
    }
}

static const mn_game_t dpt__mn_asterix = {4, asterix_reset, asterix_act, asterix_obs};
static const int8_t asterix_minimal[] = {MN_NOOP, MN_LEFT, MN_UP, MN_RIGHT, MN_DOWN};
MN_CLASSES(dpt__env_minatar_asterix_v0, dpt__env_minatar_asterix_v1, "Asterix", dpt__mn_asterix, 4,
           asterix_t, asterix_minimal)

/* ---- Space Invaders -------------------------------------------------------
 * A cannon on the bottom row shoots upwards (every fifth frame at most) at a
 * 4x6 block of aliens that sweeps sideways and steps down at each edge,
 * faster as fewer remain; the alien nearest the cannon's column shoots every
 * tenth frame. +1 per alien hit; a new block comes when all are gone (with
 * ramping, moving one frame faster each time, down to every 6 frames). The
 * episode ends when the cannon is hit or the aliens reach it. Channels:
 * cannon, alien, alien_left, alien_right (the block's direction), friendly
 * bullet, enemy bullet. */

#define SI_SHOT_COOL_DOWN 5
#define SI_MOVE_INTERVAL 12
#define SI_SHOT_INTERVAL 10

typedef struct space_invaders {
    mn_common_t c;
    int32_t pos, alien_dir, move_interval, move_timer, shot_timer_alien, shot_timer;
    uint8_t alien[MN_SIZE][MN_SIZE], f_bullet[MN_SIZE][MN_SIZE], e_bullet[MN_SIZE][MN_SIZE];
} space_invaders_t;

static void si_new_block(space_invaders_t *s)
{
    for (int y = 0; y < 4; y++)
        memset(&s->alien[y][2], 1, 6);
}

static void si_reset(void *state, dpt_rng_t *rng)
{
    (void)rng;
    space_invaders_t *s = state;
    s->pos = 5;
    memset(s->f_bullet, 0, sizeof s->f_bullet);
    memset(s->e_bullet, 0, sizeof s->e_bullet);
    memset(s->alien, 0, sizeof s->alien);
    si_new_block(s);
    s->alien_dir = -1;
    s->move_interval = SI_MOVE_INTERVAL;
    s->move_timer = s->move_interval;
    s->shot_timer_alien = SI_SHOT_INTERVAL;
    s->c.ramp_index = 0;
    s->shot_timer = 0;
    s->c.terminal = 0;
}

static int si_count(uint8_t m[MN_SIZE][MN_SIZE], int y0, int y1, int x0, int x1)
{
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            n += m[y][x] != 0;
    return n;
}

/* The block moves: a step down (rows wrap, as a roll does) when it touches
 * the edge it moves towards, else a step sideways. */
static void si_move_aliens(space_invaders_t *s)
{
    uint8_t tmp[MN_SIZE][MN_SIZE];
    int count = si_count(s->alien, 0, MN_SIZE, 0, MN_SIZE);
    s->move_timer = mn_min(count, s->move_interval);
    if ((si_count(s->alien, 0, MN_SIZE, 0, 1) && s->alien_dir < 0) ||
        (si_count(s->alien, 0, MN_SIZE, MN_LAST, MN_SIZE) && s->alien_dir > 0)) {
        s->alien_dir = -s->alien_dir;
        if (si_count(s->alien, MN_LAST, MN_SIZE, 0, MN_SIZE))
            s->c.terminal = 1;
        memcpy(tmp[1], s->alien[0], (MN_SIZE - 1) * MN_SIZE);
        memcpy(tmp[0], s->alien[MN_LAST], MN_SIZE);
    } else {
        for (int y = 0; y < MN_SIZE; y++)
            for (int x = 0; x < MN_SIZE; x++)
                tmp[y][(x + s->alien_dir + MN_SIZE) % MN_SIZE] = s->alien[y][x];
    }
    memcpy(s->alien, tmp, sizeof tmp);
    if (s->alien[MN_LAST][s->pos])
        s->c.terminal = 1;
}

/* The alien that shoots: in the column nearest the cannon's (the left one
 * on a tie) that holds an alien, the lowest. */
static void si_alien_shot(space_invaders_t *s)
{
    for (int d = 0; d < MN_SIZE; d++)
        for (int side = -1; side <= 1; side += 2) {
            int x = s->pos + side * d;
            if (x < 0 || x > MN_LAST || (d == 0 && side > 0))
                continue;
            for (int y = MN_LAST; y >= 0; y--)
                if (s->alien[y][x]) {
                    s->e_bullet[y][x] = 1;
                    return;
                }
        }
}

static float si_act(void *state, int a, dpt_rng_t *rng)
{
    (void)rng;
    space_invaders_t *s = state;
    if (a == MN_FIRE && s->shot_timer == 0) {
        s->f_bullet[MN_LAST][s->pos] = 1;
        s->shot_timer = SI_SHOT_COOL_DOWN;
    } else if (a == MN_LEFT) {
        s->pos = mn_max(0, s->pos - 1);
    } else if (a == MN_RIGHT) {
        s->pos = mn_min(MN_LAST, s->pos + 1);
    }
    /* Friendly bullets go up (the top row leaves), enemy bullets down. */
    memmove(s->f_bullet[0], s->f_bullet[1], (MN_SIZE - 1) * MN_SIZE);
    memset(s->f_bullet[MN_LAST], 0, MN_SIZE);
    memmove(s->e_bullet[1], s->e_bullet[0], (MN_SIZE - 1) * MN_SIZE);
    memset(s->e_bullet[0], 0, MN_SIZE);
    if (s->e_bullet[MN_LAST][s->pos])
        s->c.terminal = 1;
    if (s->alien[MN_LAST][s->pos])
        s->c.terminal = 1;
    if (s->move_timer == 0)
        si_move_aliens(s);
    if (s->shot_timer_alien == 0) {
        s->shot_timer_alien = SI_SHOT_INTERVAL;
        si_alien_shot(s);
    }
    float r = 0.0f;
    for (int y = 0; y < MN_SIZE; y++)
        for (int x = 0; x < MN_SIZE; x++)
            if (s->alien[y][x] && s->f_bullet[y][x]) {
                r += 1.0f;
                s->alien[y][x] = s->f_bullet[y][x] = 0;
            }
    s->shot_timer -= s->shot_timer > 0;
    s->move_timer--;
    s->shot_timer_alien--;
    if (!si_count(s->alien, 0, MN_SIZE, 0, MN_SIZE)) {
        if (s->move_interval > 6 && s->c.ramping) {
            s->move_interval--;
            s->c.ramp_index++;
        }
        si_new_block(s);
    }
    return r;
}

MN_OBS_FN
static void si_obs(const void *state, float *obs)
{
    const space_invaders_t *s = state;
    enum { CANNON, ALIEN, ALIEN_LEFT, ALIEN_RIGHT, F_BULLET, E_BULLET };
    int left = s->alien_dir < 0;
    MN_CLEAR(obs, CANNON, 1); /* and the direction not taken; the other planes are written whole */
    MN_CLEAR(obs, left ? ALIEN_RIGHT : ALIEN_LEFT, 1);
    mn_set(obs, CANNON, MN_LAST, s->pos);
    mn_plane(obs, ALIEN, s->alien);
    mn_plane(obs, left ? ALIEN_LEFT : ALIEN_RIGHT, s->alien);
    mn_plane(obs, F_BULLET, s->f_bullet);
    mn_plane(obs, E_BULLET, s->e_bullet);
}

static const mn_game_t dpt__mn_space_invaders = {6, si_reset, si_act, si_obs};
static const int8_t si_minimal[] = {MN_NOOP, MN_LEFT, MN_RIGHT, MN_FIRE};
MN_CLASSES(dpt__env_minatar_space_invaders_v0, dpt__env_minatar_space_invaders_v1, "SpaceInvaders",
           dpt__mn_space_invaders, 6, space_invaders_t, si_minimal)
