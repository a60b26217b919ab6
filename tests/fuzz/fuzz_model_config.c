/*
 * refit fuzz target: config.json parsing and the model inventory. The input is config.json
 * text for rf_model_config_parse; a config it accepts goes on to rf_inventory_build (dense,
 * as the job builds it without quantization) and a few name lookups. Built with
 * -DREFIT_FUZZ=ON (tools/fuzz.sh); seeds in tests/fuzz/corpus/fuzz_model_config/
 * (the jobs/models/ JSON files and tests/data/ config.json files).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "refit/model.h"
#include "refit/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rf_model_config_t cfg;
    rf_inventory_t inv;
    rf_err_t err;
    memset(&cfg, 0, sizeof(cfg));
    memset(&inv, 0, sizeof(inv));
    rf_err_clear(&err);
    if (rf_model_config_parse((const char *)data, size, "fuzz.json", &cfg, &err) != RF_OK)
        return 0;
    for (int64_t l = 0; l < 4 && l < cfg.num_hidden_layers; l++)
        (void)rf_model_layer_is_moe(&cfg, l);
    if (rf_inventory_build(&cfg, RF_QUANT_NONE, 0, &inv, &err) == RF_OK) {
        (void)rf_inventory_find(&inv, "model.embed_tokens.weight");
        (void)rf_inventory_find(&inv, "lm_head.weight");
        if (inv.ntensors > 0)
            (void)rf_inventory_find(&inv, inv.tensors[inv.ntensors - 1].name);
        (void)rf_inventory_apply_layout(&inv, RF_ROLLOUT_LAYOUT_HF, &err); /* the hf rewrite */
        rf_inventory_free(&inv);
    }
    rf_model_config_free(&cfg);
    return 0;
}
