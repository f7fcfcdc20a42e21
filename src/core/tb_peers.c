/*
 * What a gateway tells the peers of its keys and conversations, as lines
 * (see tb_peers.h):
 *
 *   k <key> <cost> <turns> <reserved> <reserved turns> <rpm>
 *   c <session> <cost> <turns> <reserved> <reserved turns> <all cost>
 *     <all turns> <unpriced> <in> <out> <cache read> <cache write>
 *     <first ms> <last ms> <key name> <account>
 *
 * the ids in 16 hex digits, every number a decimal from 0 to 10^18 - 1,
 * the names in hex (an account "-" when there is none), one space apart.
 */

#include <stdio.h>
#include <string.h>

#include "tb_peers.h"


#define TB_PEER_DIGITS        18


static const char  tb_peer_hex[] = "0123456789abcdef";


static char *
tb_peer_name(char *p, const char *name)
{
    size_t  i, n;

    n = strlen(name);

    if (n == 0) {
        *p++ = '-';
        return p;
    }

    for (i = 0; i < n; i++) {
        *p++ = tb_peer_hex[(unsigned char) name[i] >> 4];
        *p++ = tb_peer_hex[(unsigned char) name[i] & 0xf];
    }

    return p;
}


size_t
tb_peer_key_print(const tb_peer_key_t *k, char *buf)
{
    return (size_t) sprintf(buf, "k %016llx %lld %lld %lld %lld %lld",
                            (unsigned long long) k->key,
                            (long long) k->spend.window_cost,
                            (long long) k->spend.window_turns,
                            (long long) k->spend.reserved,
                            (long long) k->spend.reserved_turns,
                            (long long) k->rpm);
}


size_t
tb_peer_session_print(const tb_peer_session_t *s, char *buf)
{
    char  *p;

    p = buf + sprintf(buf, "c %016llx %lld %lld %lld %lld %lld %lld %lld "
                      "%lld %lld %lld %lld %lld %lld ",
                      (unsigned long long) s->session,
                      (long long) s->spend.window_cost,
                      (long long) s->spend.window_turns,
                      (long long) s->spend.reserved,
                      (long long) s->spend.reserved_turns,
                      (long long) s->cost, (long long) s->turns,
                      (long long) s->unpriced,
                      (long long) s->tokens[0], (long long) s->tokens[1],
                      (long long) s->tokens[2], (long long) s->tokens[3],
                      (long long) s->first_ms, (long long) s->last_ms);

    p = tb_peer_name(p, s->key);
    *p++ = ' ';
    p = tb_peer_name(p, s->account);

    return (size_t) (p - buf);
}


/* the scanner: a cursor over the line */

typedef struct {
    const char  *p;
    const char  *end;
} tb_peer_cur_t;


static int
tb_peer_space(tb_peer_cur_t *c)
{
    if (c->p == c->end || *c->p != ' ') {
        return 0;
    }

    c->p++;

    return 1;
}


static int
tb_peer_num(tb_peer_cur_t *c, int64_t *v)
{
    int      digits;
    int64_t  x;

    x = 0;

    for (digits = 0; c->p < c->end && *c->p >= '0' && *c->p <= '9';
         digits++)
    {
        if (digits == TB_PEER_DIGITS) {
            return 0;
        }

        x = x * 10 + (*c->p++ - '0');
    }

    *v = x;

    /* as the printer writes it: no leading zero */
    return digits > 0 && !(digits > 1 && c->p[-digits] == '0');
}


static int
tb_peer_xdigit(int ch)
{
    if (ch >= '0' && ch <= '9') {
        return ch - '0';
    }

    if (ch >= 'a' && ch <= 'f') {
        return ch - 'a' + 10;
    }

    return -1;
}


static int
tb_peer_id(tb_peer_cur_t *c, uint64_t *v)
{
    int       i, d;
    uint64_t  x;

    if (c->end - c->p < 16) {
        return 0;
    }

    x = 0;

    for (i = 0; i < 16; i++) {
        d = tb_peer_xdigit(*c->p++);

        if (d < 0) {
            return 0;
        }

        x = (x << 4) | (uint64_t) d;
    }

    *v = x;

    return 1;
}


/* a name in hex ("-": none), up to the next space or the end */
static int
tb_peer_name_scan(tb_peer_cur_t *c, char *name)
{
    int     hi, lo;
    size_t  n;

    if (c->p < c->end && *c->p == '-') {
        c->p++;
        name[0] = '\0';
        return 1;
    }

    for (n = 0; c->p < c->end && *c->p != ' '; n++) {
        if (n == TB_ID_MAX || c->end - c->p < 2) {
            return 0;
        }

        hi = tb_peer_xdigit(c->p[0]);
        lo = tb_peer_xdigit(c->p[1]);

        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            /* no NUL inside a name */
            return 0;
        }

        name[n] = (char) (hi << 4 | lo);
        c->p += 2;
    }

    name[n] = '\0';

    return n > 0;
}


static int
tb_peer_spend(tb_peer_cur_t *c, tb_peer_spend_t *s)
{
    return tb_peer_space(c) && tb_peer_num(c, &s->window_cost)
           && tb_peer_space(c) && tb_peer_num(c, &s->window_turns)
           && tb_peer_space(c) && tb_peer_num(c, &s->reserved)
           && tb_peer_space(c) && tb_peer_num(c, &s->reserved_turns);
}


int
tb_peer_scan(const char *p, size_t len, tb_peer_key_t *k,
    tb_peer_session_t *s)
{
    int            i;
    char           kind;
    tb_peer_cur_t  c;

    c.p = p;
    c.end = p + len;

    if (len < 2) {
        return 0;
    }

    kind = *c.p++;

    if (kind == 'k') {
        memset(k, 0, sizeof(tb_peer_key_t));

        if (tb_peer_space(&c) && tb_peer_id(&c, &k->key)
            && tb_peer_spend(&c, &k->spend)
            && tb_peer_space(&c) && tb_peer_num(&c, &k->rpm)
            && c.p == c.end)
        {
            return TB_PEER_KEY;
        }

        return 0;
    }

    if (kind != 'c') {
        return 0;
    }

    memset(s, 0, sizeof(tb_peer_session_t));

    if (!(tb_peer_space(&c) && tb_peer_id(&c, &s->session)
          && tb_peer_spend(&c, &s->spend)
          && tb_peer_space(&c) && tb_peer_num(&c, &s->cost)
          && tb_peer_space(&c) && tb_peer_num(&c, &s->turns)
          && tb_peer_space(&c) && tb_peer_num(&c, &s->unpriced)))
    {
        return 0;
    }

    for (i = 0; i < 4; i++) {
        if (!(tb_peer_space(&c) && tb_peer_num(&c, &s->tokens[i]))) {
            return 0;
        }
    }

    if (tb_peer_space(&c) && tb_peer_num(&c, &s->first_ms)
        && tb_peer_space(&c) && tb_peer_num(&c, &s->last_ms)
        && tb_peer_space(&c) && tb_peer_name_scan(&c, s->key)
        && s->key[0] != '\0'
        && tb_peer_space(&c) && tb_peer_name_scan(&c, s->account)
        && c.p == c.end)
    {
        return TB_PEER_SESSION;
    }

    return 0;
}
