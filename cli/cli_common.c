/*
 * refit: what the programs in cli/ share (cli/cli_common.h): reading a small text file (a
 * topology, a model config) whole. Built into each program, not part of librefit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli_common.h"

char *cli_file_read(const char *path, long max_bytes, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && (max_bytes <= 0 || n < max_bytes) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        if (len_p != NULL)
            *len_p = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}
