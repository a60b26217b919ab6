/*
 * refit: the session's local check (include/refit/session.h, rf_session_check_arm /
 * rf_session_check_post; docs/api.md).
 *
 * A caller may hand one update a verdict of its own that another thread computes while the
 * update runs: the Python binding's check that no registered tensor moved, over thousands of
 * tensors, costs milliseconds of Python that would otherwise come before the C call. The
 * calling thread arms a ticket, the update runs (ctypes releases the GIL), a helper thread
 * posts the ticket's verdict; the update waits for it, bounded, right before its completion
 * gate, so a failed check fails the update on every rank (the gate carries it) and nothing
 * of it is committed. The helper makes no MPI call: MPI stays on the calling thread, and the
 * thread level rf_session_create checks is all this needs.
 *
 * The only session state another thread touches is rf_session_check_t, under its mutex.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "refit/time.h"
#include "session_int.h"

/* rf_session_check_arm's bound: a check of 1e6 tensors in Python takes about a second */
#define CHECK_TIMEOUT_MAX_S 3600.0

rf_status_t rf_session_check_init(rf_session_check_t *c, rf_err_t *err)
{
    memset(c, 0, sizeof(*c));
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return rf_err_set(err, RF_ERR_NOMEM, "rf_session_create: pthread_condattr_init failed");
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return rf_err_set(err, RF_ERR_NOMEM, "rf_session_create: the local check's condition "
                          "variable: %s", strerror(rc));
    rc = pthread_mutex_init(&c->mu, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&c->cv);
        return rf_err_set(err, RF_ERR_NOMEM, "rf_session_create: the local check's mutex: %s",
                          strerror(rc));
    }
    c->ok = true;
    return RF_OK;
}

void rf_session_check_fini(rf_session_check_t *c)
{
    if (!c->ok)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    c->ok = false;
}

rf_status_t rf_session_check_arm(rf_session_t *s, double timeout_s, uint64_t *ticket_p)
{
    if (s == NULL)
        return RF_ERR_INVALID;
    rf_err_clear(&s->last);
    if (ticket_p == NULL || !(timeout_s > 0.0) || !(timeout_s <= CHECK_TIMEOUT_MAX_S))
        return rf_err_set(&s->last, RF_ERR_INVALID, "rank %d: rf_session_check_arm: %s",
                          s->rank, ticket_p == NULL ? "NULL ticket_p"
                                                    : "timeout_s not in (0, 3600] seconds");
    if (s->lost) { /* a ticket that arms nothing: the call it precedes (rf_session_update,
                    * rf_session_finish) refuses itself, naming the call the user made */
        pthread_mutex_lock(&s->check.mu);
        *ticket_p = ++s->check.last;
        pthread_mutex_unlock(&s->check.mu);
        return RF_OK;
    }
    if (!s->planned)
        return rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_check_arm before a "
                          "successful rf_session_plan", s->rank);
    rf_status_t st = RF_OK;
    pthread_mutex_lock(&s->check.mu);
    if (s->check.armed != 0) {
        st = rf_err_set(&s->last, RF_ERR_STATE, "rank %d: rf_session_check_arm: ticket %" PRIu64
                        " is armed already (the next rf_session_update or rf_session_finish "
                        "consumes it)", s->rank, s->check.armed);
    } else {
        s->check.armed = ++s->check.last;
        s->check.posted = false;
        s->check.timeout_s = timeout_s;
        s->check.st = RF_OK;
        s->check.msg[0] = '\0';
        *ticket_p = s->check.armed;
    }
    pthread_mutex_unlock(&s->check.mu);
    return st;
}

rf_status_t rf_session_check_post(rf_session_t *s, uint64_t ticket, int status,
                                  const char *reason)
{
    /* no text for this call's own errors: s->last belongs to the thread of the collectives */
    if (s == NULL || status > 0)
        return RF_ERR_INVALID;
    rf_status_t st = RF_OK;
    pthread_mutex_lock(&s->check.mu);
    if (ticket == 0 || ticket != s->check.armed || s->check.posted) {
        st = RF_ERR_STATE; /* consumed, timed out, posted already, or never armed */
    } else {
        s->check.st = (rf_status_t)status;
        snprintf(s->check.msg, sizeof(s->check.msg), "%s",
                 reason && *reason ? reason : "(no reason given)");
        s->check.posted = true;
        pthread_cond_signal(&s->check.cv);
    }
    pthread_mutex_unlock(&s->check.mu);
    return st;
}

static struct timespec abs_time(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

rf_status_t rf_session_check_wait(rf_session_t *s, rf_status_t st, rf_err_t *err)
{
    rf_session_check_t *c = &s->check;
    pthread_mutex_lock(&c->mu);
    if (c->armed == 0) {
        pthread_mutex_unlock(&c->mu);
        return st;
    }
    if (st == RF_OK) {
        double t0 = rf_time_now(), end = t0 + c->timeout_s;
        if (s->deadline > 0.0 && end > s->deadline)
            end = s->deadline;
        while (!c->posted && rf_time_now() < end) {
            struct timespec ts = abs_time(end);
            int rc = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            if (rc != 0 && rc != ETIMEDOUT && rc != EINTR)
                break;
        }
        const char *role = rf_session_role_name(s);
        if (!c->posted)
            st = rf_err_set(err, RF_ERR_TIMEOUT, "rank %d (%s): update %u: its local check "
                            "(rf_session_check_arm, ticket %" PRIu64 ") was not posted within "
                            "%.3f s (rf_session_check_post): this rank cannot vouch for its "
                            "registered tensors", s->rank, role, s->seq, c->armed,
                            rf_time_now() - t0);
        else if (c->st != RF_OK)
            st = rf_err_set(err, c->st, "rank %d (%s): update %u: its local check failed: %s",
                            s->rank, role, s->seq, c->msg);
    }
    c->armed = 0;
    c->posted = false;
    pthread_mutex_unlock(&c->mu);
    return st;
}

void rf_session_check_drop(rf_session_t *s)
{
    pthread_mutex_lock(&s->check.mu);
    s->check.armed = 0;
    s->check.posted = false;
    pthread_mutex_unlock(&s->check.mu);
}
