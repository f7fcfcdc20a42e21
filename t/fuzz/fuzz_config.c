/*
 * libFuzzer: the YAML configuration loader on arbitrary files.
 */

#include <stdint.h>
#include <stddef.h>

#include "tb_config.h"


static const char *
fuzz_getenv(const char *name)
{
    return name[0] == 'A' ? "value" : NULL;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char          err[TB_CONFIG_ERRLEN];
    tb_config_t  *cf;

    cf = tb_config_load_buffer("fuzz.yaml", (const char *) data, size,
                               fuzz_getenv, err, sizeof(err));
    if (cf) {
        tb_config_free(cf);
    }

    return 0;
}
