/*
 * refit formats (private): an open-addressing table from tensor name to index, keyed on
 * hash64 (XXH3_64bits) of the name, linear probing, load factor <= 1/2. Built once, read
 * many times; lookups are O(1) expected. Not collective; read-only use is thread safe.
 */
#ifndef REFIT_FORMATS_NAMES_INT_H
#define REFIT_FORMATS_NAMES_INT_H

#include <stddef.h>
#include <stdint.h>

#include "refit/status.h"

typedef struct rf_name_table {
    size_t mask;         /* capacity - 1, capacity a power of two */
    size_t *slots;       /* index + 1, 0 = empty; owned */
    const char **names;  /* n names, borrowed strings, array owned */
    size_t n;
} rf_name_table_t;

/*
 * Builds t over names[0..n) (the strings are borrowed and must outlive t; the array is
 * copied). A repeated name: RF_ERR_INVALID with *dup_p = the index of its second copy.
 * RF_ERR_NOMEM on allocation failure. On error t is left empty (free is still safe).
 */
rf_status_t rf_name_table_build(rf_name_table_t *t, const char *const *names, size_t n,
                                size_t *dup_p);
/* Index of name, or SIZE_MAX if absent. */
size_t rf_name_table_find(const rf_name_table_t *t, const char *name);
/* Releases what build allocated; t may be zeroed or NULL. */
void rf_name_table_free(rf_name_table_t *t);

#endif /* REFIT_FORMATS_NAMES_INT_H */
