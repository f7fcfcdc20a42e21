/*
 * The operator's own Claude subscription (an account of type oauth,
 * docs/subscription.md): its token, from the file's options or this
 * machine's Claude Code login file, checked before it may reach a
 * header.
 *
 * Anthropic's terms do not permit using a subscription's tokens in other
 * tools, nor pooling them to add limits up: a gateway takes one such
 * account at most, and only while it listens on loopback alone.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_OAUTH_H
#define TB_OAUTH_H

#include <stddef.h>
#include <stdint.h>


#define TB_OAUTH_BETA         "oauth-2025-04-20"
#define TB_OAUTH_TOKEN_MAX    4096
#define TB_OAUTH_FILE_MAX     (1024 * 1024)

#define TB_OAUTH_TERMS                                                        \
    "Anthropic's terms do not permit using a Claude subscription's tokens "   \
    "in other tools or pooling them "                                         \
    "(code.claude.com/docs/en/legal-and-compliance): one account of type "    \
    "oauth, the operator's own, on a gateway that listens on loopback "       \
    "alone, is the most this gateway takes"


/* 1 when s can go in an Authorization header: 1 to TB_OAUTH_TOKEN_MAX of
 * A-Z a-z 0-9 - . _ ~ + / = */
int tb_oauth_token_ok(const char *s, size_t len);

/*
 * A Claude Code login file's token: {"claudeAiOauth": {"accessToken":
 * "...", "expiresAt": <ms since the epoch>}}.  0 with *token malloc'ed
 * and *expires_ms (0 when it says none), or -1 with err saying why.
 */
int tb_oauth_creds_parse(const char *json, size_t len, char **token,
    int64_t *expires_ms, char *err, size_t errlen);

/* the same, read from a file (at most TB_OAUTH_FILE_MAX bytes) */
int tb_oauth_creds_file(const char *path, char **token, int64_t *expires_ms,
    char *err, size_t errlen);


#endif /* TB_OAUTH_H */
