/*
 * refit: the reload planner's private header (runtime/plan*.c only): what its two files share.
 *
 *   plan_build.c  the per-layer decisions, the expected applications, the rebuild before an
 *                 update (rf_plan_begin), the source dtypes, the model-layout read back
 *   plan_apply.c  the per-piece path: rf_plan_apply, stage, flush, check, finalize with the
 *                 deferred stage, abort, the device scratch pool and timeline, rf_plan_free
 *
 * plan_build.c calls into plan_apply.c (rf_plan_abort, rf_plan_free, rf_plan_tl_mark), never
 * the other way:
 * what plan_apply.c needs of the build side is here, inline.
 */
#ifndef REFIT_PLAN_INT_H
#define REFIT_PLAN_INT_H

#include <stdint.h>

#include "refit/plan.h"
#include "refit/storage.h"

/* The app_index key of (tensor, sender); broadcast applications have sender -1. */
static inline uint64_t plan_app_key(int tensor, int sender)
{
    return ((uint64_t)(uint32_t)tensor << 20) | (uint64_t)(uint32_t)(sender + 1);
}

/* Runtime slots of module m as a pointer array. */
static inline int plan_layer_runtime(rf_plan_t *p, int m, rf_slot_t **rt)
{
    int n = rf_storage_module_nslots(p->st, m);
    for (int i = 0; i < n; i++)
        rt[i] = rf_storage_module_slot(p->st, m, i);
    return n;
}

/* First slot whose signature differs from the one recorded at the last (re)build, or -1
 * (rf_plan_begin rebuilds on it, rf_plan_finalize fails the update on it). */
static inline int plan_changed_slot(const rf_plan_t *p)
{
    if (p->nsigs != p->st->nslots)
        return p->nsigs < p->st->nslots ? p->nsigs : 0;
    for (int i = 0; i < p->nsigs; i++)
        if (!rf_signature_equal(&p->sigs[i], &p->st->slots[i].sig))
            return i;
    return -1;
}

/* Device timeline mark k (0 at rf_plan_begin: host time, 1 at rf_plan_finalize's entry: an
 * event); nothing when the timeline is off (plan_apply.c). */
void rf_plan_tl_mark(rf_plan_t *p, int k);

#endif
