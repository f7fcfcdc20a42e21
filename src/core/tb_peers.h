/*
 * What one gateway tells the peers that share its pool (store.backend:
 * redis) of what its keys and conversations ran up, so that caps and key
 * rpm hold on the sum of every gateway: a key's and a conversation's
 * spend window (settled cost and turns) and what their requests in flight
 * reserved; of a key its admissions in the last minute; of a conversation
 * what its report shows (cost, turns, tokens, first and last seen, the key
 * and the account that last served it).
 *
 * One record a line of text, decimal numbers and hex, and back: a line
 * that is not exactly what the printer writes is refused whole.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_PEERS_H
#define TB_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "tb_account.h"


typedef struct {
    int64_t                   window_cost;    /* nanodollars, settled */
    int64_t                   window_turns;
    int64_t                   reserved;       /* nanodollars, in flight */
    int64_t                   reserved_turns;
} tb_peer_spend_t;


typedef struct {
    uint64_t                  key;            /* the key's name hashed */
    tb_peer_spend_t           spend;
    int64_t                   rpm;            /* admitted in the last
                                                 minute */
} tb_peer_key_t;


typedef struct {
    uint64_t                  session;
    tb_peer_spend_t           spend;
    int64_t                   cost;           /* every turn, nanodollars */
    int64_t                   turns;
    int64_t                   unpriced;
    int64_t                   tokens[4];      /* in, out, cache r/w */
    int64_t                   first_ms;
    int64_t                   last_ms;
    char                      key[TB_ID_MAX + 1];      /* its key's name */
    char                      account[TB_ID_MAX + 1];  /* "": none */
} tb_peer_session_t;


#define TB_PEER_KEY           1
#define TB_PEER_SESSION       2

/* a line's length at most, without its newline */
#define TB_PEER_LINE_MAX      (2 + 17 + 15 * 21 + 2 * (2 * TB_ID_MAX + 1))

/* one record as a line (no newline, no NUL): its length */
size_t tb_peer_key_print(const tb_peer_key_t *k, char *buf);
size_t tb_peer_session_print(const tb_peer_session_t *s, char *buf);

/* one line (without its newline): TB_PEER_KEY or _SESSION, 0 malformed */
int tb_peer_scan(const char *p, size_t len, tb_peer_key_t *k,
    tb_peer_session_t *s);


#endif /* TB_PEERS_H */
