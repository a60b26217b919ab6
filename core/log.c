/* refit: leveled logging with a host:pid [rank] prefix (NCCL debug.h shape). */
#include "refit/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The only mutable process state: parsed log settings (STYLE.md). */
static int rf_log_level_v = -1;
static int rf_log_rank_v = -1;

rf_log_level_t rf_log_level(void)
{
    if (rf_log_level_v < 0) {
        const char *e = getenv("REFIT_LOG_LEVEL");
        rf_log_level_v = RF_LOG_WARN;
        if (e != NULL) {
            if (strcasecmp(e, "error") == 0)
                rf_log_level_v = RF_LOG_ERROR;
            else if (strcasecmp(e, "warn") == 0)
                rf_log_level_v = RF_LOG_WARN;
            else if (strcasecmp(e, "info") == 0)
                rf_log_level_v = RF_LOG_INFO;
            else if (strcasecmp(e, "debug") == 0)
                rf_log_level_v = RF_LOG_DEBUG;
        }
    }
    return (rf_log_level_t)rf_log_level_v;
}

void rf_log_set_level(rf_log_level_t level) { rf_log_level_v = (int)level; }

void rf_log_set_rank(int rank) { rf_log_rank_v = rank; }

void rf_log_printf(rf_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char host[64] = "?";
    char body[1024];
    va_list ap;
    gethostname(host, sizeof(host) - 1);
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    if (rf_log_rank_v >= 0)
        fprintf(stderr, "%s:%d [%d] refit %s %s (%s:%d)\n", host, (int)getpid(), rf_log_rank_v,
                names[level], body, base, line);
    else
        fprintf(stderr, "%s:%d refit %s %s (%s:%d)\n", host, (int)getpid(), names[level], body,
                base, line);
}
