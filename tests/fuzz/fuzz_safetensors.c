/*
 * refit fuzz target: the safetensors header parser. The input is an 8-byte little-endian
 * data-section size followed by the JSON header, as rf_st_parse_header receives them from
 * rf_st_file_open (which reads the header length instead and takes the data size from the
 * file size). A header it accepts is walked: every entry looked up by name, rows and row
 * bytes computed, metadata read. Built with -DREFIT_FUZZ=ON (tools/fuzz.sh); seeds in
 * tests/fuzz/corpus/fuzz_safetensors/ (the headers of the tests/data/ safetensors files).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "refit/safetensors.h"
#include "refit/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rf_st_header_t h;
    rf_err_t err;
    uint64_t data_bytes = 0;
    if (size < 8)
        return 0;
    for (int i = 7; i >= 0; i--)
        data_bytes = (data_bytes << 8) | data[i];
    memset(&h, 0, sizeof(h));
    rf_err_clear(&err);
    if (rf_st_parse_header((const char *)data + 8, size - 8, data_bytes, "fuzz.safetensors", &h,
                           &err) == RF_OK) {
        for (size_t i = 0; i < h.count; i++) {
            const rf_st_entry_t *e = rf_st_header_find(&h, h.entries[i].name);
            if (e != &h.entries[i])
                __builtin_trap(); /* every parsed name must find its own entry */
            (void)rf_st_entry_numel(e);
            (void)rf_st_entry_rows(e);
            (void)rf_st_entry_row_bytes(e);
        }
        (void)rf_st_header_meta(&h, "format");
    }
    rf_st_header_free(&h);
    return 0;
}
