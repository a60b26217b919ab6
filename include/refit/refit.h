/*
 * refit: the public API of librefit for training jobs and inference engines (the umbrella
 * header; docs/api.md). Include this one; the other headers in include/refit/ are the
 * library's internals, installed for refit's own tools and tests, not a stable interface.
 */
#ifndef REFIT_REFIT_H
#define REFIT_REFIT_H

#include "refit/session.h"
#include "refit/status.h"

#endif /* REFIT_REFIT_H */
