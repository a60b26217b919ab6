/* refit: CLOCK_MONOTONIC seconds and update deadlines (see include/refit/time.h). */
#include "refit/time.h"

#include <time.h>

double rf_time_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double rf_deadline_for_update(double timeout_s, double slack_s, uint64_t payload_bytes,
                              double min_bandwidth)
{
    double d = timeout_s;
    if (min_bandwidth > 0) {
        double need = slack_s + (double)payload_bytes / min_bandwidth;
        if (need < d)
            d = need;
    }
    return rf_time_now() + d;
}
