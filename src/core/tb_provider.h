/*
 * Bedrock and Vertex accounts: the only two translations the gateway
 * makes, in one place.
 *
 * Both platforms address the model in the URL and take the API version
 * in the body.  For their accounts, and only theirs, the request body
 * loses "model" (Bedrock's also "stream", which is in its URL) and gains
 * "anthropic_version"; Bedrock takes the caller's anthropic-beta header
 * as "anthropic_beta" in the body.  Every other member travels as its
 * bytes came: the body is cut and joined at the members' spans, never
 * parsed into a tree and written again.
 *
 * The model goes through the account's options.model_map; a model with
 * no entry is not servable there.  Errors of either platform are said in
 * Anthropic's words, so that the classifier and the client read one
 * language.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_PROVIDER_H
#define TB_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "tb_config.h"


#define TB_BEDROCK_VERSION    "bedrock-2023-05-31"
#define TB_VERTEX_VERSION     "vertex-2023-10-16"

#define TB_PROVIDER_MSG_MAX   384

/* options.anthropic_version: 1 to 64 letters, digits, '.', '_' or '-' */
#define TB_PROVIDER_VERSION_MAX  64

int tb_provider_version_valid(const char *version);


/* whether accounts of this type take the model in the URL */
static inline int
tb_provider_platform(tb_account_type_e type)
{
    return type == TB_ACCOUNT_BEDROCK || type == TB_ACCOUNT_VERTEX;
}


/*
 * The platform's id for a model (NUL-terminated, the map's): an exact
 * entry, else the first entry in file order whose name ends in '*' and
 * is a prefix of the model; NULL when there is none.
 */
const char *tb_model_map(const tb_account_conf_t *ac, const char *model,
    size_t len);

/*
 * The body for a platform account: '{', "anthropic_version" (version, or
 * the type's TB_*_VERSION when NULL), every member
 * of the caller's body but "model", "anthropic_version" and (Bedrock)
 * "stream" with its bytes as they came, then (Bedrock, when betas is not
 * empty and the body has none of its own) "anthropic_beta" made of the
 * comma-separated anthropic-beta values in betas (those of printable
 * ASCII without quotes or backslashes), '}'.  Bytes needed,
 * like snprintf (out may be NULL with size 0), or (size_t) -1 when the
 * body is not one JSON object.  Never more than
 * tb_provider_body_max(len, blen).
 */
size_t tb_provider_body(tb_account_type_e type, const char *version,
    const unsigned char *body, size_t len, const char *betas, size_t blen,
    unsigned char *out, size_t size);

static inline size_t
tb_provider_body_max(size_t len, size_t blen)
{
    /* the version member, and the betas with their quotes and commas */
    return len + 32 + TB_PROVIDER_VERSION_MAX + 32 + 3 * blen;
}

/*
 * A platform model id as one URL path segment: every byte but
 * A-Z a-z 0-9 - . _ ~ percent-encoded (Bedrock's ':' as %3A, an ARN's
 * '/' as %2F; Vertex's '@' as %40).  Bytes needed, like snprintf.
 */
size_t tb_provider_path_segment(const char *s, char *out, size_t size);


/* a platform's error, said as Anthropic would have said it */
typedef struct {
    int                       status;     /* 429, 529, 400, 401, 403, 500 */
    const char               *type;       /* "rate_limit_error", ... */
    char                      name[64];   /* what the platform called it */
    char                      message[TB_PROVIDER_MSG_MAX];
} tb_perror_t;

/*
 * From the response's status, the platform's name for the error (Bedrock:
 * x-amzn-ErrorType up to its ':', or an exception frame's
 * :exception-type; NULL to look in the body's "__type") and its body
 * (Bedrock's {"message": ...}; Google's {"error": {"code", "status",
 * "message"}}; or Anthropic's own error, which Vertex passes on from the
 * model and which is kept as it is).  Throttling and quotas are rate
 * limits; a model not ready, a service unavailable, overloaded; a
 * validation error the caller's (its message kept, for the caller to
 * fix); access denied or a model not found there, a refusal of the
 * model on that account; bad credentials, authentication.  Only a
 * caller's error keeps the platform's message: the others may name the
 * operator's cloud account, and get words of the gateway's.
 */
void tb_provider_error(tb_account_type_e type, int status,
    const unsigned char *name, size_t nlen, const unsigned char *body,
    size_t blen, tb_perror_t *e);

/* {"type":"error","error":{"type":...,"message":...}}: bytes needed */
size_t tb_provider_error_body(const tb_perror_t *e, char *out, size_t size);


#endif /* TB_PROVIDER_H */
