/*
 * refit: what the programs in cli/ share (cli/cli_common.h): reading a small text file (a
 * topology, a model config) whole, and why it failed; the message for a bad option. Built into
 * each program, not part of librefit.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_common.h"

static char cli_err[96];

const char *cli_file_error(void)
{
    return cli_err;
}

char *cli_file_read(const char *path, long max_bytes, size_t *len_p)
{
    char *buf = NULL;
    long n = -1;
    snprintf(cli_err, sizeof(cli_err), "unknown error");
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(cli_err, sizeof(cli_err), "%s", strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) { /* fopen opens a directory too */
        snprintf(cli_err, sizeof(cli_err), "%s", S_ISDIR(sb.st_mode) ? "is a directory"
                                                                     : "not a regular file");
        fclose(f);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && (max_bytes <= 0 || n < max_bytes) &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        if (len_p != NULL)
            *len_p = (size_t)n;
    } else {
        if (max_bytes > 0 && n >= max_bytes)
            snprintf(cli_err, sizeof(cli_err), "larger than the %ld-byte limit", max_bytes);
        else
            snprintf(cli_err, sizeof(cli_err), "%s", errno ? strerror(errno) : "read failed");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

void cli_bad_option(const char *prog, int c, char **argv)
{
    const char *opt = argv[optind - 1];
    if (c == ':')
        fprintf(stderr, "%s: option '%s' needs a value (see --help)\n", prog, opt);
    else
        fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, opt);
}
