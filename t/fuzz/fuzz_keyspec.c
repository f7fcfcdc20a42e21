/*
 * libFuzzer: an admin's key spec (POST and PATCH /admin/keys) - parsed,
 * written back as the store's record, read again: what is read back is
 * what was written.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_keyspec.h"


static int
account(void *data, const char *id)
{
    (void) data;

    return strcmp(id, "a1") == 0 || strcmp(id, "a2") == 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char          err[256], *one, *two;
    tb_keyspec_t  ks, back;

    if (tb_keyspec_parse(&ks, (const char *) data, size, TB_KEYSPEC_CREATE,
                         account, NULL, 1700000000, err, sizeof(err))
        != 0)
    {
        return 0;
    }

    one = tb_keyspec_json(&ks);
    if (one == NULL) {
        abort();
    }

    if (tb_keyspec_parse(&back, one, strlen(one), TB_KEYSPEC_STORED, NULL,
                         NULL, 0, err, sizeof(err))
        != 0)
    {
        abort();
    }

    two = tb_keyspec_json(&back);
    if (two == NULL || strcmp(one, two) != 0) {
        abort();
    }

    /* the same text as a PATCH onto it: refused or applied, never half */
    (void) tb_keyspec_parse(&back, (const char *) data, size,
                            TB_KEYSPEC_PATCH, account, NULL, 1700000000,
                            err, sizeof(err));

    free(one);
    free(two);
    tb_keyspec_free(&ks);
    tb_keyspec_free(&back);

    return 0;
}
