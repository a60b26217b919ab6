/*
 * Checks the shape of the profile refit-run left in a folder (docs/design.md#profile), for
 * runs that were killed as well as runs that ended:
 *
 *   check_profile DIR NRANKS MIN MAX summary|no-summary
 *
 * Every rank's profile-rank<R>.jsonl must read (a torn last line is ignored, any other line
 * that does not parse fails), hold between MIN and MAX complete lines, the lines being
 * updates 1, 2, ... of that rank in order with "v": 2. "summary": profile-rank<R>.json is a
 * whole version-2 summary counting those lines; "no-summary": it is absent (a killed run).
 * A leftover profile-rank<R>.json.tmp always fails. Prints one line per rank, then
 * "check_profile: ok" or "check_profile: FAILED: <reason>" (exit 1).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile_lines.h"

static int check_rank(const char *dir, int r, long min, long max, int want_summary, char *msg,
                      size_t cap)
{
    char path[1024];
    profile_lines_t p;
    snprintf(path, sizeof(path), "%s/profile-rank%d.jsonl", dir, r);
    if (profile_lines_read(path, &p, msg, cap) != 0)
        return -1;
    int rc = 0;
    if ((long)p.n < min || (long)p.n > max) {
        snprintf(msg, cap, "%s: %zu complete lines, expected %ld to %ld", path, p.n, min, max);
        rc = -1;
    }
    for (size_t i = 0; i < p.n && rc == 0; i++) {
        json_t *o = p.line[i];
        if (json_integer_value(json_object_get(o, "v")) != 2 ||
            json_integer_value(json_object_get(o, "rank")) != r ||
            json_integer_value(json_object_get(o, "update")) != (json_int_t)i + 1) {
            snprintf(msg, cap, "%s: line %zu is not update %zu of rank %d with \"v\": 2", path,
                     i + 1, i + 1, r);
            rc = -1;
        }
    }
    printf("check_profile: rank %d: %zu complete lines%s\n", r, p.n,
           p.torn ? " (a torn last line ignored)" : "");
    snprintf(path, sizeof(path), "%s/profile-rank%d.json.tmp", dir, r);
    if (rc == 0 && access(path, F_OK) == 0) {
        snprintf(msg, cap, "%s: left behind", path);
        rc = -1;
    }
    snprintf(path, sizeof(path), "%s/profile-rank%d.json", dir, r);
    if (rc == 0 && !want_summary && access(path, F_OK) == 0) {
        snprintf(msg, cap, "%s: present, expected no summary", path);
        rc = -1;
    }
    if (rc == 0 && want_summary) {
        json_error_t je;
        json_t *s = json_load_file(path, 0, &je);
        if (s == NULL) {
            snprintf(msg, cap, "%s: %s", path, je.text);
            rc = -1;
        } else if (!json_is_string(json_object_get(s, "format")) ||
                   strcmp(json_string_value(json_object_get(s, "format")), "refit-profile") != 0 ||
                   json_integer_value(json_object_get(s, "version")) != 2 ||
                   json_integer_value(json_object_get(s, "updates")) != (json_int_t)p.n) {
            snprintf(msg, cap, "%s: not a version 2 refit-profile summary of %zu updates", path,
                     p.n);
            rc = -1;
        }
        json_decref(s);
    }
    profile_lines_free(&p);
    return rc;
}

int main(int argc, char **argv)
{
    char msg[2048] = "";
    if (argc != 6 || (strcmp(argv[5], "summary") && strcmp(argv[5], "no-summary"))) {
        fprintf(stderr, "usage: %s DIR NRANKS MIN MAX summary|no-summary\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    long min = atol(argv[3]), max = atol(argv[4]);
    for (int r = 0; r < n; r++)
        if (check_rank(argv[1], r, min, max, strcmp(argv[5], "summary") == 0, msg,
                       sizeof(msg)) != 0) {
            printf("check_profile: FAILED: %s\n", msg);
            return 1;
        }
    printf("check_profile: ok: %d rank(s)\n", n);
    return 0;
}
