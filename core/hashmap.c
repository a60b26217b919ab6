/* refit: open-addressing u64 -> u64 map with probe counting (see include/refit/hashmap.h). */
#include "refit/hashmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t rf_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

rf_status_t rf_map_init(rf_map_t *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 1)
        cap <<= 1;
    memset(m, 0, sizeof(*m));
    m->keys = calloc(cap, sizeof(uint64_t));
    m->vals = calloc(cap, sizeof(uint64_t));
    m->used = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        rf_map_free(m);
        return RF_ERR_NOMEM;
    }
    m->cap = cap;
    return RF_OK;
}

void rf_map_free(rf_map_t *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof(*m));
}

static rf_status_t rf_map_grow(rf_map_t *m)
{
    rf_map_t n;
    rf_status_t st = rf_map_init(&n, m->cap);
    if (st != RF_OK)
        return st;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i])
            rf_map_put(&n, m->keys[i], m->vals[i]);
    n.probes = m->probes;
    rf_map_free(m);
    *m = n;
    return RF_OK;
}

rf_status_t rf_map_put(rf_map_t *m, uint64_t key, uint64_t val)
{
    if ((m->count + 1) * 2 > m->cap) {
        rf_status_t st = rf_map_grow(m);
        if (st != RF_OK)
            return st;
    }
    size_t mask = m->cap - 1;
    for (size_t i = rf_mix64(key) & mask;; i = (i + 1) & mask) {
        m->probes++;
        if (!m->used[i]) {
            m->used[i] = 1;
            m->keys[i] = key;
            m->vals[i] = val;
            m->count++;
            return RF_OK;
        }
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return RF_OK;
        }
    }
}

bool rf_map_get(rf_map_t *m, uint64_t key, uint64_t *val_p)
{
    if (m->cap == 0)
        return false;
    size_t mask = m->cap - 1;
    for (size_t i = rf_mix64(key) & mask;; i = (i + 1) & mask) {
        m->probes++;
        if (!m->used[i])
            return false;
        if (m->keys[i] == key) {
            if (val_p)
                *val_p = m->vals[i];
            return true;
        }
    }
}

uint64_t rf_map_strkey(const char *s) { return XXH3_64bits(s, strlen(s)); }
