/*
 * What an account added at runtime may be: the admin API's rules, applied
 * where one is added and again wherever one is read back (the store, the
 * zone, another instance), so that a record nobody checked cannot carry
 * what the API would have refused.
 *
 * A runtime account's spec (JSON, its credential sealed apart) names only
 * the fields the API takes; its type is anthropic_api; it has no headers
 * and no options; its id is its record's; its base_url is http(s), and
 * points at a loopback, link-local or private address only where the
 * operator allows it (server.allow_private_hosts).
 *
 * Plain C (cJSON), no nginx headers.
 */

#ifndef TB_RACCT_H
#define TB_RACCT_H

#include <stddef.h>
#include <sys/socket.h>


/* the fields an added account may be given */
extern const char  *tb_racct_fields[];

/* whether an id can be a runtime account's: 1 to 64 of [A-Za-z0-9_-],
 * beginning with a letter or digit, and not "test" */
int tb_racct_valid_id(const char *id, size_t len);

/*
 * The spec (without its credential) of the account id checked: 0, or -1
 * with the first rule broken in err.
 */
int tb_racct_check(const char *spec, size_t len, const char *id,
    size_t idlen, int allow_private, char *err, size_t errlen);

/* a base_url's scheme and host: 0, or -1 with why in err */
int tb_racct_base_url(const char *url, int allow_private, char *err,
    size_t errlen);

/*
 * Whether a host (as a URL names it, without brackets) is one no runtime
 * account may reach unless allowed: "localhost" and its subdomains, or an
 * address literal that is loopback, unspecified, link-local (the cloud
 * metadata address among them), private (10/8, 172.16/12, 192.168/16,
 * 100.64/10, fc00::/7), multicast or broadcast.  A name is checked again
 * by the addresses it resolves to (tb_racct_private_addr).
 */
int tb_racct_private_host(const char *host);
int tb_racct_private_addr(const struct sockaddr *sa);

#endif /* TB_RACCT_H */
