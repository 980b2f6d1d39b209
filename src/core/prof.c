/*
 * The phase profiler (dpt/profile.h, prof.h): one slot of totals per
 * device, written only by the thread bound to it.
 */
#include "core/prof.h"
#include "dpt/stats.h"
#include "dpt/status.h"

#include <string.h>

atomic_int dpt__prof_on;

static dpt_profile_t dpt__prof_slots[DPT_PROFILE_SLOTS];
static _Thread_local int dpt__prof_slot = -1;
static _Thread_local double dpt__prof_last = -1.0; /* < 0: no mark yet */

static const char *const dpt__prof_names[] = {
#define DPT__PROF_NAME(sym, name) name,
    DPT_PROFILE_PHASE_LIST(DPT__PROF_NAME)
#undef DPT__PROF_NAME
};

void dpt__prof_bind(int slot)
{
    dpt__prof_slot = slot >= 0 && slot < DPT_PROFILE_SLOTS ? slot : -1;
    dpt__prof_last = -1.0;
}

void dpt__prof_start_slow(void)
{
    if (dpt__prof_slot >= 0)
        dpt__prof_last = dpt_now();
}

void dpt__prof_lap_slow(int phase)
{
    if (dpt__prof_slot < 0 || phase < 0 || phase >= DPT_PROF_PHASES)
        return;
    double now = dpt_now();
    if (dpt__prof_last >= 0.0) {
        dpt_profile_t *s = &dpt__prof_slots[dpt__prof_slot];
        s->seconds[phase] += now - dpt__prof_last;
        s->count[phase]++;
    }
    dpt__prof_last = now;
}

void dpt_profile_enable(int on)
{
    if (on) {
        dpt__prof_bind(0);
        dpt__prof_last = dpt_now();
    }
    atomic_store(&dpt__prof_on, on ? 1 : 0);
}

int dpt_profile_enabled(void)
{
    return atomic_load(&dpt__prof_on);
}

void dpt_profile_reset(void)
{
    memset(dpt__prof_slots, 0, sizeof dpt__prof_slots);
    if (dpt__prof_slot >= 0)
        dpt__prof_last = dpt_now();
}

int dpt_profile_get(int slot, dpt_profile_t *out)
{
    if (slot < 0 || slot >= DPT_PROFILE_SLOTS)
        return dpt_error(DPT_EINVAL, "profile: slot %d out of [0, %d)", slot, DPT_PROFILE_SLOTS);
    *out = dpt__prof_slots[slot];
    return DPT_OK;
}

const char *dpt_profile_phase_name(int phase)
{
    return phase >= 0 && phase < DPT_PROF_PHASES ? dpt__prof_names[phase] : "?";
}
