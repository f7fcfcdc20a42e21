/*
 * Bedrock and Vertex: the body, the model, the errors (see tb_provider.h).
 */

#include <string.h>
#include <strings.h>
#include <stdio.h>

#include "tb_provider.h"
#include "tb_parse.h"
#include "tb_json_int.h"


typedef struct {
    tb_account_type_e         type;
    unsigned char            *out;
    size_t                    size;
    size_t                    len;
    const unsigned char      *member;      /* the key's opening quote */
    unsigned                  keep:1;
    unsigned                  has_beta:1;
} tb_pbody_t;


static void
tb_pb_put(tb_pbody_t *b, const void *p, size_t n)
{
    if (b->out && b->len + n <= b->size) {
        memcpy(b->out + b->len, p, n);
    }

    b->len += n;
}


static int
tb_pb_key_is(const unsigned char *k, size_t len, unsigned esc,
    const char *name, size_t nlen)
{
    return esc ? tb_json_key_eq(k, k + len, name, nlen)
               : len == nlen && memcmp(k, name, nlen) == 0;
}


static int
tb_pb_key(tb_json_walk_t *w, const unsigned char *k, size_t len,
    unsigned esc)
{
    tb_pbody_t  *b = w->data;

    b->member = k - 1;
    b->keep = !(tb_pb_key_is(k, len, esc, "model", 5)
                || tb_pb_key_is(k, len, esc, "anthropic_version", 17)
                || (b->type == TB_ACCOUNT_BEDROCK
                    && tb_pb_key_is(k, len, esc, "stream", 6)));

    if (tb_pb_key_is(k, len, esc, "anthropic_beta", 14)) {
        b->has_beta = 1;
    }

    return 1;
}


static void
tb_pb_value(tb_json_walk_t *w, const unsigned char *v, size_t len)
{
    tb_pbody_t  *b = w->data;

    if (b->keep) {
        /* the member as it came: key, colon and value */
        tb_pb_put(b, ",", 1);
        tb_pb_put(b, b->member, (size_t) (v + len - b->member));
    }
}


/*
 * The anthropic-beta values as a JSON array, into b: a value is a name
 * of printable ASCII ("prompt-caching-2024-07-31"); one with a quote, a
 * backslash or any other byte is not one Bedrock could know, and is left
 * out rather than escaped.
 */
static void
tb_pb_betas(tb_pbody_t *b, const char *betas, size_t blen)
{
    int          first;
    const char  *p, *end, *comma, *s, *e, *c;

    first = 1;
    p = betas;
    end = betas + blen;

    while (p < end) {
        comma = tb_find_end(p, end, ',');

        for (s = p; s < comma && (*s == ' ' || *s == '\t'); s++) {
            /* void */
        }

        for (e = comma; e > s && (e[-1] == ' ' || e[-1] == '\t'); e--) {
            /* void */
        }

        p = comma + 1;

        for (c = s; c < e; c++) {
            if (*c <= ' ' || *c >= 0x7f || *c == '"' || *c == '\\') {
                break;
            }
        }

        if (e == s || c < e) {
            continue;
        }

        if (first) {
            tb_pb_put(b, ",\"anthropic_beta\":[\"",
                      sizeof(",\"anthropic_beta\":[\"") - 1);
            first = 0;

        } else {
            tb_pb_put(b, ",\"", 2);
        }

        tb_pb_put(b, s, (size_t) (e - s));
        tb_pb_put(b, "\"", 1);
    }

    if (!first) {
        tb_pb_put(b, "]", 1);
    }
}


int
tb_provider_version_valid(const char *version)
{
    size_t  i;

    for (i = 0; version[i]; i++) {
        if (i >= TB_PROVIDER_VERSION_MAX
            || !((version[i] >= 'a' && version[i] <= 'z')
                 || (version[i] >= 'A' && version[i] <= 'Z')
                 || (version[i] >= '0' && version[i] <= '9')
                 || version[i] == '.' || version[i] == '_'
                 || version[i] == '-'))
        {
            return 0;
        }
    }

    return i > 0;
}


size_t
tb_provider_body(tb_account_type_e type, const char *version,
    const unsigned char *body, size_t len, const char *betas, size_t blen,
    unsigned char *out, size_t size)
{
    tb_pbody_t            b;
    tb_json_walk_t        w;
    const unsigned char  *p;

    p = tb_json_ws(body, body + len);

    if (p == body + len || *p != '{') {
        return (size_t) -1;
    }

    memset(&b, 0, sizeof(tb_pbody_t));
    b.type = type;
    b.out = out;
    b.size = size;

    if (version == NULL || !tb_provider_version_valid(version)) {
        version = (type == TB_ACCOUNT_BEDROCK) ? TB_BEDROCK_VERSION
                                               : TB_VERTEX_VERSION;
    }

    tb_pb_put(&b, "{\"anthropic_version\":\"", 22);
    tb_pb_put(&b, version, strlen(version));
    tb_pb_put(&b, "\"", 1);

    tb_json_walk_init(&w, body, len, tb_pb_key, tb_pb_value, &b);

    if (tb_json_walk(&w) != 0) {
        return (size_t) -1;
    }

    if (type == TB_ACCOUNT_BEDROCK && !b.has_beta && blen) {
        tb_pb_betas(&b, betas, blen);
    }

    tb_pb_put(&b, "}", 1);

    return b.len;
}


const char *
tb_model_map(const tb_account_conf_t *ac, const char *model, size_t len)
{
    size_t        i, n;
    const char   *k;

    for (i = 0; i < ac->options.model_map.n; i++) {
        k = ac->options.model_map.items[i].key;

        if (strlen(k) == len && memcmp(k, model, len) == 0) {
            return ac->options.model_map.items[i].value;
        }
    }

    for (i = 0; i < ac->options.model_map.n; i++) {
        k = ac->options.model_map.items[i].key;
        n = strlen(k);

        if (n && k[n - 1] == '*' && n - 1 <= len
            && memcmp(k, model, n - 1) == 0)
        {
            return ac->options.model_map.items[i].value;
        }
    }

    return NULL;
}


size_t
tb_provider_path_segment(const char *s, char *out, size_t size)
{
    size_t          w;
    unsigned char   c;

    static const char  hex[] = "0123456789ABCDEF";

    for (w = 0; *s; s++) {
        c = (unsigned char) *s;

        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
            || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'
            || c == '~')
        {
            if (w < size) {
                out[w] = (char) c;
            }

            w++;
            continue;
        }

        if (w + 3 <= size) {
            out[w] = '%';
            out[w + 1] = hex[c >> 4];
            out[w + 2] = hex[c & 0x0f];
        }

        w += 3;
    }

    if (w < size) {
        out[w] = '\0';
    }

    return w;
}


/* one platform error name, in Anthropic's terms */
typedef struct {
    const char               *name;
    int                       status;
    const char               *type;
    unsigned                  caller:1;     /* the message is the caller's */
} tb_perr_map_t;


/* Bedrock's exceptions, compared without case (frames say them in
 * lowerCamelCase, x-amzn-ErrorType in UpperCamelCase) */
static const tb_perr_map_t  tb_bedrock_errors[] = {
    { "ThrottlingException", 429, "rate_limit_error", 0 },
    { "ServiceQuotaExceededException", 429, "rate_limit_error", 0 },
    { "TooManyRequestsException", 429, "rate_limit_error", 0 },
    { "ModelNotReadyException", 529, "overloaded_error", 0 },
    { "ServiceUnavailableException", 529, "overloaded_error", 0 },
    { "InternalServerException", 500, "api_error", 0 },
    { "ModelStreamErrorException", 500, "api_error", 0 },
    { "ModelErrorException", 500, "api_error", 0 },
    { "ModelTimeoutException", 500, "api_error", 0 },
    { "ValidationException", 400, "invalid_request_error", 1 },
    { "AccessDeniedException", 403, "permission_error", 0 },
    { "ResourceNotFoundException", 403, "permission_error", 0 },
    { "UnrecognizedClientException", 401, "authentication_error", 0 },
    { "InvalidSignatureException", 401, "authentication_error", 0 },
    { "ExpiredTokenException", 401, "authentication_error", 0 },
    { "IncompleteSignatureException", 401, "authentication_error", 0 },
    { NULL, 0, NULL, 0 }
};


/* Google's canonical codes (google.rpc.Code), by name */
static const tb_perr_map_t  tb_google_errors[] = {
    { "RESOURCE_EXHAUSTED", 429, "rate_limit_error", 0 },
    { "UNAVAILABLE", 529, "overloaded_error", 0 },
    { "INTERNAL", 500, "api_error", 0 },
    { "DEADLINE_EXCEEDED", 500, "api_error", 0 },
    { "UNKNOWN", 500, "api_error", 0 },
    { "INVALID_ARGUMENT", 400, "invalid_request_error", 1 },
    { "FAILED_PRECONDITION", 400, "invalid_request_error", 1 },
    { "OUT_OF_RANGE", 400, "invalid_request_error", 1 },
    { "PERMISSION_DENIED", 403, "permission_error", 0 },
    { "NOT_FOUND", 403, "permission_error", 0 },
    { "UNAUTHENTICATED", 401, "authentication_error", 0 },
    { NULL, 0, NULL, 0 }
};


static const tb_perr_map_t *
tb_perr_find(const tb_perr_map_t *m, const char *name)
{
    for ( /* void */ ; m->name; m++) {
        if (strcasecmp(m->name, name) == 0) {
            return m;
        }
    }

    return NULL;
}


/* what a status alone says */
static const tb_perr_map_t *
tb_perr_status(int status)
{
    static const tb_perr_map_t  s429 = { "", 429, "rate_limit_error", 0 },
                                s529 = { "", 529, "overloaded_error", 0 },
                                s400 = { "", 400, "invalid_request_error", 1 },
                                s401 = { "", 401, "authentication_error", 0 },
                                s403 = { "", 403, "permission_error", 0 },
                                s404 = { "", 403, "permission_error", 0 },
                                s413 = { "", 413, "request_too_large", 1 },
                                s500 = { "", 500, "api_error", 0 };

    switch (status) {
    case 429:
        return &s429;
    case 503:
    case 529:
        return &s529;
    case 401:
        return &s401;
    case 403:
        return &s403;
    case 404:
        return &s404;
    case 413:
        return &s413;
    default:
        return (status >= 400 && status < 500) ? &s400 : &s500;
    }
}


void
tb_provider_error(tb_account_type_e type, int status,
    const unsigned char *name, size_t nlen, const unsigned char *body,
    size_t blen, tb_perror_t *e)
{
    size_t                 n, i;
    const char            *from;
    char                   s[64], message[TB_PROVIDER_MSG_MAX];
    const tb_perr_map_t   *m;

    memset(e, 0, sizeof(tb_perror_t));
    message[0] = '\0';
    m = NULL;

    if (body && blen
        && tb_json_get_str(body, blen, "type", s, sizeof(s), &n) == 0
        && strcmp(s, "error") == 0
        && tb_json_get_str(body, blen, "error.type", s, sizeof(s), &n) == 0)
    {
        /* Anthropic's own words, passed on by the platform */

        (void) tb_json_get_str(body, blen, "error.message", e->message,
                               sizeof(e->message), &n);
        snprintf(e->name, sizeof(e->name), "%s", s);

        m = tb_perr_status(status);
        e->status = status ? status : m->status;
        e->type = (strcmp(s, "rate_limit_error") == 0) ? "rate_limit_error"
                  : (strcmp(s, "overloaded_error") == 0) ? "overloaded_error"
                  : (strcmp(s, "invalid_request_error") == 0)
                    ? "invalid_request_error"
                  : (strcmp(s, "authentication_error") == 0)
                    ? "authentication_error"
                  : (strcmp(s, "permission_error") == 0) ? "permission_error"
                  : (strcmp(s, "not_found_error") == 0) ? "not_found_error"
                  : (strcmp(s, "request_too_large") == 0)
                    ? "request_too_large"
                  : (strcmp(s, "billing_error") == 0) ? "billing_error"
                  : m->type;
        return;
    }

    if (type == TB_ACCOUNT_BEDROCK) {

        /* the header's name up to ':', else the body's "__type" after '#' */

        n = 0;

        if (name && nlen) {
            for (n = 0; n < nlen && n < sizeof(s) - 1 && name[n] != ':'; n++) {
                s[n] = (char) name[n];
            }

        } else if (body && blen
                   && tb_json_get_str(body, blen, "__type", s, sizeof(s), &n)
                      == 0)
        {
            from = strrchr(s, '#');
            if (from) {
                memmove(s, from + 1, strlen(from));
            }

            n = strlen(s);
        }

        s[n < sizeof(s) ? n : sizeof(s) - 1] = '\0';

        m = s[0] ? tb_perr_find(tb_bedrock_errors, s) : NULL;

        if (body && blen) {
            if (tb_json_get_str(body, blen, "message", message,
                                sizeof(message), &n) != 0)
            {
                (void) tb_json_get_str(body, blen, "Message", message,
                                       sizeof(message), &n);
            }
        }

    } else {

        /* {"error": {"code": 429, "message": ..., "status": ...}} */

        s[0] = '\0';

        if (body && blen) {
            (void) tb_json_get_str(body, blen, "error.status", s, sizeof(s),
                                   &n);
            (void) tb_json_get_str(body, blen, "error.message", message,
                                   sizeof(message), &n);
        }

        m = s[0] ? tb_perr_find(tb_google_errors, s) : NULL;
    }

    for (i = 0; s[i]; i++) {
        /* a name is shown: letters, digits and '_' only */
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z')
              || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
        {
            s[i] = '\0';
            break;
        }
    }

    snprintf(e->name, sizeof(e->name), "%s", s);

    if (m == NULL) {
        m = tb_perr_status(status ? status : 500);
    }

    e->status = m->status;
    e->type = m->type;

    if (m->caller && message[0]) {
        snprintf(e->message, sizeof(e->message), "%s", message);

    } else {
        snprintf(e->message, sizeof(e->message), "the %s account refused "
                 "the request%s%s%s", type == TB_ACCOUNT_BEDROCK ? "Bedrock"
                                                                 : "Vertex",
                 e->name[0] ? " (" : "", e->name, e->name[0] ? ")" : "");
    }
}


size_t
tb_provider_error_body(const tb_perror_t *e, char *out, size_t size)
{
    int     n;
    size_t  m;
    char    esc[6 * TB_PROVIDER_MSG_MAX];

    m = tb_json_escape(esc, sizeof(esc), e->message, strlen(e->message));
    if (m >= sizeof(esc)) {
        m = sizeof(esc) - 1;
    }

    n = snprintf(out, size, "{\"type\":\"error\",\"error\":{\"type\":\"%s\","
                 "\"message\":\"%.*s\"}}", e->type, (int) m, esc);

    return n < 0 ? 0 : (size_t) n;
}
