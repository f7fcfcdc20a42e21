/*
 * A virtual key minted at runtime: its scope as JSON, the one form both
 * an admin request's body and the store's record take, parsed and checked
 * here field by field, and its secret.
 *
 * A minted key is "bir_" and 43 characters of base64url (32 random
 * bytes); what is kept of it is its SHA-256 digest, stable across
 * restarts (the keys of the YAML file are hashed under a secret drawn per
 * load instead, see tb_keys.h).  32 random bytes need no salt.
 *
 * Plain C (cJSON, OpenSSL's libcrypto), no nginx headers.
 */

#ifndef TB_KEYSPEC_H
#define TB_KEYSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"


#define TB_KEYSPEC_SECRET_LEN   47      /* "bir_" + 43 */
#define TB_KEYSPEC_NAME_MAX     64
#define TB_KEYSPEC_BODY_MAX     65536   /* the longest spec accepted */
#define TB_KEYSPEC_LIST_MAX     256     /* models, pool entries */


/* one key: its scope (conf, whose strings it owns) and its life */
typedef struct {
    tb_key_conf_t             conf;     /* conf.key is NULL */
    int64_t                   created;  /* s since the epoch */
    int64_t                   expires;  /* s since the epoch, 0: never */
} tb_keyspec_t;


/* what a spec may name of the pool: the ids of the accounts that exist */
typedef int (*tb_keyspec_account_pt)(void *data, const char *id);


#define TB_KEYSPEC_CREATE       0       /* an admin's POST: name required */
#define TB_KEYSPEC_PATCH        1       /* an admin's PATCH: onto *ks */
#define TB_KEYSPEC_STORED       2       /* the store's record: trusted
                                           shape, accounts not checked */

/*
 * Parses a spec onto *ks (zeroed and defaulted first, except for PATCH,
 * which changes only the fields it names; null clears rpm,
 * max_wait_seconds, spend_cap_usd, session_cap_usd, session_max_turns,
 * expires_at).  0, or -1 with a message naming the field in err; on -1
 * *ks is as it was (PATCH) or freed.  now: for a relative expiry and to
 * refuse one in the past.
 */
int tb_keyspec_parse(tb_keyspec_t *ks, const char *json, size_t len,
    int mode, tb_keyspec_account_pt account, void *data, int64_t now,
    char *err, size_t errlen);

/* the spec as JSON text, malloc()ed, or NULL: no memory */
char *tb_keyspec_json(const tb_keyspec_t *ks);

/* a deep copy; 0 or -1 (no memory) */
int tb_keyspec_copy(tb_keyspec_t *dst, const tb_keyspec_t *src);

void tb_keyspec_free(tb_keyspec_t *ks);

/* a new secret, NUL-terminated, and its digest; 0 or -1 (no randomness) */
int tb_keyspec_secret(char out[TB_KEYSPEC_SECRET_LEN + 1],
    unsigned char digest[32]);

/* whether a name can be a key's: 1 to 64 of [A-Za-z0-9._-], not "." */
int tb_keyspec_valid_name(const char *name, size_t len);

#endif /* TB_KEYSPEC_H */
