/*
 * refit: small open-addressing hash maps (library-internal: the planner, inventory and storage).
 *
 * rf_map_t maps 64-bit keys to 64-bit values with linear probing; keys are hashed with a
 * 64-bit mixer, so callers may use XXH3 of a string or a packed tuple as the key. Lookups and
 * inserts are O(1) expected; every probe is counted so the planner can prove its bookkeeping
 * stays O(1) per tensor (DESIGN.md section 8, `bookkeeping_probes`).
 */
#ifndef REFIT_HASHMAP_H
#define REFIT_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "refit/status.h"

typedef struct rf_map {
    uint64_t *keys;
    uint64_t *vals;
    uint8_t *used;
    size_t cap;   /* power of two */
    size_t count;
    uint64_t probes; /* slots inspected by get/put since creation */
} rf_map_t;

rf_status_t rf_map_init(rf_map_t *m, size_t expected);
void rf_map_free(rf_map_t *m);
/* Inserts or replaces. */
rf_status_t rf_map_put(rf_map_t *m, uint64_t key, uint64_t val);
/* True and *val_p set when found. */
bool rf_map_get(rf_map_t *m, uint64_t key, uint64_t *val_p);

/* XXH3 of a NUL-terminated string. */
uint64_t rf_map_strkey(const char *s);

#endif /* REFIT_HASHMAP_H */
