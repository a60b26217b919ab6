/*
 * refit: what the programs in cli/ share (built into each of them, not part of librefit).
 */
#ifndef REFIT_CLI_COMMON_H
#define REFIT_CLI_COMMON_H

#include <stddef.h>

/* The size limit of the text files refit-convert and refit-info read (configs, topologies). */
#define CLI_TEXT_MAX (16L << 20)

/* The whole of the file at path, NUL-terminated, in memory the caller frees; its length in
 * *len_p when len_p is not NULL. NULL when it cannot be opened or read, or (max_bytes > 0)
 * when it holds max_bytes bytes or more. */
char *cli_file_read(const char *path, long max_bytes, size_t *len_p);

/* Why the last cli_file_read returned NULL: strerror(errno) of the failed call, or "larger than
 * the N-byte limit". Valid until the next cli_file_read. */
const char *cli_file_error(void);

/* getopt_long's verdict on argv[optind - 1] when it returned '?' or ':' (opterr = 0 and an
 * optstring starting with ':'): prints "PROG: unknown option 'X' (see --help)" or
 * "PROG: option 'X' needs a value" on stderr. */
void cli_bad_option(const char *prog, int c, char **argv);

#endif
