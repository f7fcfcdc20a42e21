/*
 * The configuration engine's insides, shared by the engine
 * (tb_conf_engine.c: YAML nodes, ${VAR} expansion, typed fields, sections
 * and their errors) and the schema it walks (tb_config.c).  Not a public
 * interface: src/core only.
 */

#ifndef TB_CONF_INT_H
#define TB_CONF_INT_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "tb_config.h"


#define TB_CONF_OK          0
#define TB_CONF_ERROR       -1
#define TB_CONF_NONE        1           /* tb_conf_mapping(): null */

#define TB_CONF_MAX_FILE    (16 * 1024 * 1024)
#define TB_CONF_MAX_NODES   100000
#define TB_CONF_MAX_MERGE   32          /* nesting of "<<" merge keys */
#define TB_CONF_MAX_WORK    (32 * 1024 * 1024)
#define TB_CONF_MAX_HEADERS 64
#define TB_CONF_MAX_VAR     255         /* longest ${NAME} */

#define TB_CONF_PATHLEN     256
#define TB_CONF_SHOWLEN     64          /* values quoted in messages */


/* field flags */
#define TB_CONF_GE          0x01        /* value >= min */
#define TB_CONF_GT          0x02        /* value > min */
#define TB_CONF_LE          0x04        /* value <= max */
#define TB_CONF_NULLABLE    0x08        /* null means TB_UNSET */
#define TB_CONF_NONEMPTY    0x10        /* a string must not be "" */


typedef enum {
    TB_CONF_CUSTOM = 0,                 /* the handler does everything */
    TB_CONF_STR,                        /* char * */
    TB_CONF_CHOICE,                     /* char *, one of .choices */
    TB_CONF_INT,                        /* int64_t */
    TB_CONF_NUM,                        /* double */
    TB_CONF_BOOL,                       /* a bit field, via .set_bit */
    TB_CONF_ENUM,                       /* int, or a bit field via .set_bit:
                                           .values[] of one of .choices (the
                                           choice's index without .values) */
    TB_CONF_STRLIST,                    /* tb_strlist_t */
    TB_CONF_STRMAP,                     /* tb_kvlist_t */
    TB_CONF_SECTION                     /* .fields, at .offset */
} tb_conf_type_e;


typedef struct tb_conf_ctx_s    tb_conf_ctx_t;
typedef struct tb_conf_field_s  tb_conf_field_t;

/* bit fields have no address: each one gets a tiny setter */
typedef void (*tb_conf_bit_pt)(void *base, unsigned on);

typedef int (*tb_conf_handler_pt)(tb_conf_ctx_t *ctx,
    const tb_conf_field_t *f, yaml_node_t *node, const char *path,
    void *base);

/* checks the entry just appended to a string map */
typedef int (*tb_conf_kv_check_pt)(tb_conf_ctx_t *ctx, tb_kvlist_t *list,
    const char *path, unsigned line);


struct tb_conf_field_s {
    const char                   *name;
    tb_conf_type_e                type;
    size_t                        offset;
    unsigned                      flags;
    double                        min;
    double                        max;
    double                        dnum;     /* default number or flag */
    const char                   *dstr;     /* default string, or the
                                               single item of a list */
    const char *const            *choices;
    const int                    *values;   /* TB_CONF_ENUM's, by choice */
    const tb_conf_field_t        *fields;
    tb_conf_bit_pt                set_bit;
    tb_conf_handler_pt            handler;  /* replaces generic parsing */
    const char                   *ignored;  /* why nginx ignores the key */
};


struct tb_conf_ctx_s {
    const char                   *name;
    tb_getenv_pt                  getenv_fn;
    yaml_document_t              *doc;
    tb_config_t                  *cf;
    char                         *err;
    size_t                        errlen;
    size_t                        work;     /* against alias expansion */
};


typedef struct {
    const char                   *name;
    yaml_node_t                  *key;
    yaml_node_t                  *value;
    yaml_node_t                  *map;      /* where it was written */
    size_t                        order;    /* precedence, file order */
} tb_conf_pair_t;


typedef struct {
    tb_conf_pair_t               *items;
    size_t                        n;
    size_t                        cap;
} tb_conf_pairs_t;


#ifdef __GNUC__
#define TB_CONF_PRINTF(a, b)  __attribute__((format(printf, a, b)))
#else
#define TB_CONF_PRINTF(a, b)
#endif


/*
 * A list of sections (accounts[], keys[]): each item a mapping read with
 * fields into an array of size-byte entries, each entry's line at
 * line_off, then checked by finish.  The count grows as each entry is
 * started, so tb_config_free() releases a half-built one.
 */

typedef int (*tb_conf_finish_pt)(tb_conf_ctx_t *ctx, void *item,
    const char *path);


int tb_conf_choice(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *const *choices, int *index);

int tb_conf_error(tb_conf_ctx_t *ctx, unsigned line, const char *fmt, ...)
    TB_CONF_PRINTF(3, 4);

int tb_conf_expand(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    char **out, int *is_null);

int tb_conf_expected(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what);

int tb_conf_init(const tb_conf_field_t *fields, void *base);

void tb_conf_join(char *buf, const char *path, const char *name);

unsigned tb_conf_line(yaml_node_t *node);

int tb_conf_nomem(tb_conf_ctx_t *ctx);

int tb_conf_null_node(yaml_node_t *node);

int tb_conf_pairs(tb_conf_ctx_t *ctx, yaml_node_t *map, const char *path,
    tb_conf_pair_t **out, size_t *nout);

/*
 * A mapping's pairs (tb_conf_pairs), and unless items is NULL an array of
 * as many zeroed items of size for what they become (*items left alone
 * when there are none).  TB_CONF_NONE for null ("key:" with nothing keeps
 * every default), TB_CONF_ERROR, said, for another kind of node; on
 * failure nothing is kept.
 */
int tb_conf_mapping(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, tb_conf_pair_t **pairs, size_t *n, void **items,
    size_t size);

void tb_conf_release(const tb_conf_field_t *fields, void *base);

int tb_conf_section(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const tb_conf_field_t *fields, void *base);

int tb_conf_sections(tb_conf_ctx_t *ctx, yaml_node_t *node, const char *path,
    const char *what, const char *mapping, const tb_conf_field_t *fields,
    size_t size, size_t line_off, void **items, size_t *nitems,
    tb_conf_finish_pt finish);

/* tb_config_each() over a table, its paths below prefix ("routing.") */
int tb_conf_each(const tb_conf_field_t *fields, const void *base,
    const char *prefix, tb_config_each_pt cb, void *data);
int tb_conf_set(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);

int tb_conf_set_map(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base,
    tb_conf_kv_check_pt check);

int tb_conf_set_str(tb_conf_ctx_t *ctx, const tb_conf_field_t *f,
    yaml_node_t *node, const char *path, void *base);

const char *tb_conf_show(const char *s, char *buf);

char *tb_conf_strndup(const char *s, size_t len);

/* for qsort: by name, and where two names are the same, by place */
int tb_conf_cmp_placed(const char *a, size_t a_at, const char *b,
    size_t b_at);


/* a notice about the file that does not stop it loading (warnings) */
int tb_conf_notice(tb_conf_ctx_t *ctx, unsigned line, const char *fmt, ...)
    TB_CONF_PRINTF(3, 4);


/* a Bedrock or Vertex account's credentials (tb_conf_creds.c) */
int tb_conf_bedrock_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a);
int tb_conf_vertex_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a);

/* the rules across entries, once all are read (tb_conf_check.c) */
int tb_conf_validate(tb_conf_ctx_t *ctx);

/* "keys[1] (name tenant)", in buf (TB_CONF_PATHLEN bytes) */
const char *tb_conf_key_label(tb_config_t *cf, tb_key_conf_t *k, char *buf);

/* the operator's own subscription's token (tb_conf_creds.c) */
int tb_conf_oauth_credentials(tb_conf_ctx_t *ctx, tb_account_conf_t *a);


#endif /* TB_CONF_INT_H */
