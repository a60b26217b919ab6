/* refit formats: name -> index table on hash64 of the name (see formats_names_int.h). */
#include "formats_names_int.h"

#include <stdlib.h>
#include <string.h>

#include "refit/hashes.h"

rf_status_t rf_name_table_build(rf_name_table_t *t, const char *const *names, size_t n,
                                size_t *dup_p)
{
    size_t cap = 8;
    memset(t, 0, sizeof(*t));
    while (cap < 2 * n + 2) {
        if (cap > SIZE_MAX / 4)
            return RF_ERR_NOMEM;
        cap *= 2;
    }
    t->slots = calloc(cap, sizeof(*t->slots));
    t->names = malloc((n ? n : 1) * sizeof(*t->names));
    if (t->slots == NULL || t->names == NULL) {
        rf_name_table_free(t);
        return RF_ERR_NOMEM;
    }
    t->mask = cap - 1;
    for (size_t i = 0; i < n; i++) {
        size_t s = (size_t)rf_hash64_str(names[i]) & t->mask;
        while (t->slots[s] != 0) {
            if (strcmp(t->names[t->slots[s] - 1], names[i]) == 0) {
                if (dup_p != NULL)
                    *dup_p = i;
                rf_name_table_free(t);
                return RF_ERR_INVALID;
            }
            s = (s + 1) & t->mask;
        }
        t->names[i] = names[i];
        t->slots[s] = i + 1;
    }
    t->n = n;
    return RF_OK;
}

size_t rf_name_table_find(const rf_name_table_t *t, const char *name)
{
    if (t->slots == NULL || name == NULL)
        return SIZE_MAX;
    size_t s = (size_t)rf_hash64_str(name) & t->mask;
    while (t->slots[s] != 0) {
        if (strcmp(t->names[t->slots[s] - 1], name) == 0)
            return t->slots[s] - 1;
        s = (s + 1) & t->mask;
    }
    return SIZE_MAX;
}

void rf_name_table_free(rf_name_table_t *t)
{
    if (t == NULL)
        return;
    free(t->slots);
    free((void *)t->names);
    memset(t, 0, sizeof(*t));
}
