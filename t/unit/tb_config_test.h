/*
 * What the configuration's unit tests share: a fixed environment, a load
 * from a string, and a load that must fail with a message.
 */

#ifndef TB_CONFIG_TEST_H
#define TB_CONFIG_TEST_H

#include "tb_config.h"
#include "tb_test.h"


static char  err[TB_CONFIG_ERRLEN];


/* a fixed environment, so that the tests do not depend on the caller's */
static const char *
test_getenv(const char *name)
{
    static const struct {
        const char  *name;
        const char  *value;
    } env[] = {
        { "ANTHROPIC_API_KEY", "sk-ant-test-0001" },
        { "A", "alpha" },
        { "B", "beta" },
        { "PORT", "9000" },
        { "EMPTY", "" },
        { "REGION", "eu-west-1" },
        { "CLAUDE_TOKEN", "sk-ant-oat01-from-env" },
        { "BAD_TOKEN", "sk-ant\r\nx-evil: 1" },
        { NULL, NULL }
    };

    int  i;

    for (i = 0; env[i].name != NULL; i++) {
        if (strcmp(env[i].name, name) == 0) {
            return env[i].value;
        }
    }

    return NULL;
}


static tb_config_t *
load(const char *yaml)
{
    err[0] = '\0';

    return tb_config_load_buffer("test.yaml", yaml, strlen(yaml),
                                 test_getenv, err, sizeof(err));
}


/* the load must fail, with a message containing needle */
#define EXPECT_ERROR(yaml, needle)                                            \
    do {                                                                      \
        tb_config_t  *cf_ = load(yaml);                                       \
        TB_CHECK(cf_ == NULL);                                                \
        tb_config_free(cf_);                                                  \
        TB_CHECK_CONTAINS(err, needle);                                       \
    } while (0)


#define ACCOUNT_OK  "accounts:\n  - id: a1\n    api_key: sk-1\n"


#endif /* TB_CONFIG_TEST_H */
