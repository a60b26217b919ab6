/*
 * refit fuzz target: the topology parser. The input is YAML text given to rf_topology_parse
 * as if read from a file; a topology it accepts is also hashed and printed in canonical form,
 * so those paths see every parsed shape. Built with -DREFIT_FUZZ=ON (tools/fuzz.sh); seeds in
 * tests/fuzz/corpus/fuzz_topology/ (every jobs/topologies/ YAML file).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "refit/status.h"
#include "refit/topology.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rf_topology_t *topo = calloc(1, sizeof(*topo));
    rf_err_t err;
    if (topo == NULL)
        return 0;
    rf_err_clear(&err);
    if (rf_topology_parse((const char *)data, size, "fuzz.yaml", topo, &err) == RF_OK) {
        char buf[8192];
        (void)rf_topology_hash(topo);
        (void)rf_topology_canonical(topo, buf, sizeof(buf));
        (void)rf_topology_trainer_size(topo);
        (void)rf_topology_rollout_size(topo);
    }
    free(topo);
    return 0;
}
