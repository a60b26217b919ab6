/*
 * refit: time and deadlines (the ground floor, core/time.c).
 *
 * Every time in refit is CLOCK_MONOTONIC seconds as a double, and every deadline is absolute
 * in that clock: a wait compares rf_time_now() with it, so a deadline computed once holds
 * across every wait of an update (DESIGN.md section 9 "Deadlines"). Nothing here blocks.
 */
#ifndef REFIT_TIME_H
#define REFIT_TIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC now, in seconds. Local. */
double rf_time_now(void);

/*
 * Absolute deadline of an update that starts now: now + min(timeout_s, slack_s +
 * payload_bytes / min_bandwidth) (DESIGN.md section 9). min_bandwidth in bytes per second;
 * <= 0 means timeout_s alone. Local.
 */
double rf_deadline_for_update(double timeout_s, double slack_s, uint64_t payload_bytes,
                              double min_bandwidth);

#ifdef __cplusplus
}
#endif
#endif /* REFIT_TIME_H */
