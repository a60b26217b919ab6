/* refit: status strings and rf_err_t helpers. */
#include "refit/status.h"

#include <stdio.h>
#include <string.h>

const char *rf_status_name(rf_status_t status)
{
    switch (status) {
#define RF_STATUS_NAME_(name, value, str)                                                  \
    case name:                                                                             \
        return #name;
        RF_STATUS_LIST(RF_STATUS_NAME_)
#undef RF_STATUS_NAME_
    }
    return "RF_ERR_UNKNOWN";
}

const char *rf_status_string(rf_status_t status)
{
    switch (status) {
#define RF_STATUS_STR_(name, value, str)                                                   \
    case name:                                                                             \
        return str;
        RF_STATUS_LIST(RF_STATUS_STR_)
#undef RF_STATUS_STR_
    }
    return "unknown status";
}

void rf_err_clear(rf_err_t *err)
{
    if (err == NULL)
        return;
    err->status = RF_OK;
    err->msg[0] = '\0';
}

rf_status_t rf_err_vset(rf_err_t *err, rf_status_t status, const char *fmt, va_list ap)
{
    if (err == NULL || err->status != RF_OK)
        return status;
    err->status = status;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    return status;
}

rf_status_t rf_err_set(rf_err_t *err, rf_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rf_err_vset(err, status, fmt, ap);
    va_end(ap);
    return status;
}

rf_status_t rf_err_reset(rf_err_t *err, rf_status_t status, const char *fmt, ...)
{
    va_list ap;
    if (err == NULL)
        return status;
    err->status = RF_OK;
    va_start(ap, fmt);
    rf_err_vset(err, status, fmt, ap);
    va_end(ap);
    return status;
}
