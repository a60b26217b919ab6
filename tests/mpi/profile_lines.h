/*
 * The tests' reader of refit-run's per-rank profile (docs/design.md#profile): one JSON object
 * per line in profile-rank<R>.jsonl. A torn last line (no trailing newline, or the last line
 * fails to parse) is what a killed or disk-full writer leaves and is ignored; a line that does
 * not parse anywhere else is an error.
 */
#ifndef REFIT_TESTS_PROFILE_LINES_H
#define REFIT_TESTS_PROFILE_LINES_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct profile_lines {
    json_t **line; /* the complete lines' objects, in file order */
    size_t n;
    int torn;      /* 1: a torn last line was ignored */
} profile_lines_t;

static inline void profile_lines_free(profile_lines_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        json_decref(p->line[i]);
    free(p->line);
    memset(p, 0, sizeof(*p));
}

/* 0 and *p, or -1 with a message naming the file and line in msg. */
static inline int profile_lines_read(const char *path, profile_lines_t *p, char *msg, size_t cap)
{
    memset(p, 0, sizeof(*p));
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(msg, cap, "%s: cannot open", path);
        return -1;
    }
    size_t len = 0, bcap = 1 << 16, nl = 0;
    char *buf = malloc(bcap);
    for (size_t got; buf != NULL && (got = fread(buf + len, 1, bcap - len, f)) > 0;) {
        len += got;
        if (len == bcap) {
            char *b = realloc(buf, bcap *= 2);
            if (b == NULL)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf == NULL) {
        snprintf(msg, cap, "%s: out of memory", path);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        nl += buf[i] == '\n';
    size_t total = nl + (len > 0 && buf[len - 1] != '\n');
    p->line = calloc(nl + 1, sizeof(json_t *));
    size_t at = 0, no = 0;
    int rc = 0;
    while (at < len) {
        char *end = memchr(buf + at, '\n', len - at);
        no++;
        if (end == NULL) { /* no trailing newline: the writer did not finish it */
            p->torn = 1;
            break;
        }
        json_error_t je;
        json_t *o = json_loadb(buf + at, (size_t)(end - buf) - at, 0, &je);
        int last = (size_t)(end - buf) + 1 == len;
        if (o == NULL || !json_is_object(o)) {
            json_decref(o);
            if (last) {
                p->torn = 1;
                break;
            }
            snprintf(msg, cap, "%s: line %zu of %zu is not a JSON object (%s), and it is not the "
                     "last line", path, no, total, o ? "not an object" : je.text);
            rc = -1;
            break;
        }
        p->line[p->n++] = o;
        at = (size_t)(end - buf) + 1;
    }
    free(buf);
    if (rc != 0)
        profile_lines_free(p);
    return rc;
}

/* The line of update u, borrowed, or NULL. */
static inline json_t *profile_lines_update(const profile_lines_t *p, int u)
{
    for (size_t i = 0; i < p->n; i++)
        if (json_integer_value(json_object_get(p->line[i], "update")) == u)
            return p->line[i];
    return NULL;
}

#endif /* REFIT_TESTS_PROFILE_LINES_H */
