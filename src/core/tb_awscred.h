/*
 * AWS's shared credentials file (~/.aws/credentials, or
 * AWS_SHARED_CREDENTIALS_FILE): the access key, secret and session token
 * of one profile, as the AWS SDKs read them.
 *
 *   [profile]
 *   aws_access_key_id = AKIA...
 *   aws_secret_access_key = ...
 *   aws_session_token = ...        (temporary credentials)
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_AWSCRED_H
#define TB_AWSCRED_H

#include <stddef.h>


typedef struct {
    char                     *access_key_id;      /* malloc()ed, or NULL */
    char                     *secret_access_key;
    char                     *session_token;
} tb_awscred_t;


/*
 * The profile's credentials from the file's text: 1 when it has both a
 * key id and a secret, 0 when the profile is not there or lacks one, -1
 * when out of memory.  '#' and ';' begin comments; names are compared
 * without case, values trimmed.
 */
int tb_awscred_parse(const char *text, size_t len, const char *profile,
    tb_awscred_t *out);

/* the same from a file: 0 too when it cannot be read */
int tb_awscred_file(const char *path, const char *profile,
    tb_awscred_t *out);

void tb_awscred_free(tb_awscred_t *c);


#endif /* TB_AWSCRED_H */
