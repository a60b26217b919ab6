/*
 * refit: logging.
 *
 * NCCL-style: a level from REFIT_LOG_LEVEL (error, warn, info, debug; default warn) read
 * once, lines prefixed with "host:pid [rank] refit LEVEL". The rank is set once by the
 * program (rf_log_set_rank); -1 prints no rank. Library code logs an error once, where it is
 * decided; most errors travel as rf_err_t instead.
 */
#ifndef REFIT_LOG_H
#define REFIT_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RF_LOG_ERROR = 0,
    RF_LOG_WARN = 1,
    RF_LOG_INFO = 2,
    RF_LOG_DEBUG = 3,
} rf_log_level_t;

/* Current level (parsed once from REFIT_LOG_LEVEL). */
rf_log_level_t rf_log_level(void);
/* Overrides the level (CLIs: -v / -q). */
void rf_log_set_level(rf_log_level_t level);
/* Sets the rank printed in the prefix (world rank), -1 for none. */
void rf_log_set_rank(int rank);

void rf_log_printf(rf_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define RF_LOG(level, ...)                                                                 \
    do {                                                                                   \
        if ((level) <= rf_log_level())                                                     \
            rf_log_printf((level), __FILE__, __LINE__, __VA_ARGS__);                       \
    } while (0)
#define rf_error(...) RF_LOG(RF_LOG_ERROR, __VA_ARGS__)
#define rf_warn(...) RF_LOG(RF_LOG_WARN, __VA_ARGS__)
#define rf_info(...) RF_LOG(RF_LOG_INFO, __VA_ARGS__)
#define rf_debug(...) RF_LOG(RF_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* REFIT_LOG_H */
