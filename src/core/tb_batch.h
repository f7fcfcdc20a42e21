/*
 * The Message Batches API's documents, read without building a tree:
 *
 *  - tb_batch_scan(): a create body ({"requests": [{"custom_id": ...,
 *    "params": {...}}, ...]}) checked as far as the gateway acts on it -
 *    one valid document, each request an object with a custom_id the API
 *    takes and a params object, no member it reads given twice, at most
 *    max requests - and each request's params handed to the caller (whose
 *    key scopes and estimates apply to every one of them);
 *  - tb_batch_object(): a message_batch object as the upstream answers
 *    it: its id, status, counts, and where its results_url is;
 *  - tb_batch_result(): one line of a batch's results (JSONL): its type,
 *    and a succeeded one's model and usage;
 *  - tb_object_rec_encode() and _decode(): what the gateway keeps of an
 *    object the upstream holds (a batch, a file), as the payload of the
 *    record a store keeps (tb_record.h), read back strictly.
 *
 * Plain C, no nginx headers.
 */

#ifndef TB_BATCH_H
#define TB_BATCH_H


#include <stddef.h>
#include <stdint.h>

#include "tb_json.h"
#include "tb_body.h"
#include "tb_account.h"


#define TB_BATCH_MAX_REQUESTS  100000     /* the API's, a batch */
#define TB_BATCH_ID_MAX        128        /* a batch's id, at most */
#define TB_BATCH_CUSTOM_ID_MAX 64


/*
 * A request of a batch: its index, its custom_id (NUL-terminated), its
 * params (the object, braces included).  0 to go on, -1 to stop (err set
 * by the callee: the scan returns -1 with it).
 */
typedef int (*tb_batch_each_pt)(void *data, size_t i, const char *custom_id,
    const unsigned char *params, size_t plen, char *err, size_t errlen);

/*
 * 0 with *n the number of requests, or -1 with a message for the client
 * in err ("requests: expected a list", "requests.3.custom_id: ...").
 */
int tb_batch_scan(const unsigned char *p, size_t len, size_t max,
    tb_batch_each_pt each, void *data, size_t *n, char *err, size_t errlen);


/* an id the API gave (or a path names): 1 to 128 of [A-Za-z0-9_-] */
int tb_batch_id_ok(const char *id, size_t len);


typedef enum {
    TB_BATCH_UNKNOWN = 0,
    TB_BATCH_IN_PROGRESS,
    TB_BATCH_CANCELING,
    TB_BATCH_ENDED
} tb_batch_status_e;

enum {
    TB_BATCH_PROCESSING = 0,
    TB_BATCH_SUCCEEDED,
    TB_BATCH_ERRORED,
    TB_BATCH_CANCELED,
    TB_BATCH_EXPIRED,
    TB_BATCH_NCOUNTS
};

/* the API's words for a status (an unknown one: "in_progress") and for
 * request_counts' member i */
const char *tb_batch_status_name(int status);
const char *tb_batch_count_name(size_t i);


typedef struct {
    char                      id[TB_BATCH_ID_MAX + 1];
    size_t                    id_len;
    tb_batch_status_e         status;
    int64_t                   counts[TB_BATCH_NCOUNTS];   /* -1: absent */
    tb_span_t                 results_url;    /* the value as sent (quotes
                                                 included); len 0: absent */
} tb_batch_obj_t;

/*
 * A message_batch object: 0 when it is one valid JSON object of type
 * "message_batch" with an id tb_batch_id_ok() takes, else -1.
 */
int tb_batch_object(const unsigned char *p, size_t len, tb_batch_obj_t *o);


typedef enum {
    TB_RESULT_UNKNOWN = 0,
    TB_RESULT_SUCCEEDED,
    TB_RESULT_ERRORED,
    TB_RESULT_CANCELED,
    TB_RESULT_EXPIRED
} tb_result_type_e;

typedef struct {
    tb_result_type_e          type;
    char                      model[TB_MODEL_MAX + 1];  /* succeeded: "" */
    tb_usage_t                usage;                    /* succeeded */
    tb_span_t                 message;                  /* succeeded: the
                                                           message object */
} tb_batch_result_t;

/*
 * One line of a batch's results (without its newline): 0 when it is one
 * valid JSON object with a result of a known type (a succeeded one with
 * its message's usage), else -1.
 */
int tb_batch_result(const unsigned char *p, size_t len, tb_batch_result_t *r);



/* the Files API's file object, as far as the gateway keeps it */

#define TB_FILE_NAME_MAX       255
#define TB_FILE_MIME_MAX       127

typedef struct {
    char                      id[TB_BATCH_ID_MAX + 1];
    size_t                    id_len;
    char                      filename[TB_FILE_NAME_MAX + 1];
    char                      mime[TB_FILE_MIME_MAX + 1];
    int64_t                   size;           /* bytes, -1: not said */
    int                       downloadable;
} tb_file_obj_t;

/*
 * A file object ({"id", "type": "file", "filename", "mime_type",
 * "size_bytes", "downloadable", ...}) or the answer to its deletion
 * ("type": "file_deleted"): 0 when it is one valid JSON object of either
 * type with an id tb_batch_id_ok() takes (a name or a type longer than
 * the gateway keeps is cut, never at a UTF-8 sequence's middle), else -1.
 */
int tb_file_object(const unsigned char *p, size_t len, tb_file_obj_t *f);


/*
 * The files a Messages body names: the string value of every "file_id"
 * member, at any depth and however its name is escaped, that begins
 * "file_" (a content block's source, {"type": "file", "file_id": ...}; a
 * container upload's).  0 with *n of them (at most max in refs; an
 * id_len of 0 for one that is not an id the API gives), -1 when the body
 * is not one valid JSON document.
 */
typedef struct {
    char                      id[TB_BATCH_ID_MAX + 1];
    size_t                    id_len;
} tb_file_ref_t;

int tb_file_refs(const unsigned char *p, size_t len, tb_file_ref_t *refs,
    size_t max, size_t *n);


/*
 * What the gateway keeps of an object the upstream holds for one account:
 *
 *     o1 <kind> <status> <over> <settled> <created_ms> <seen_ms>
 *        <reserved> <charged> <5 counts> <len>:<account> <len>:<key>
 *
 * on one line, single spaces, decimal numbers (a count is -1 when never
 * said), the account's id and the key's name each after its length (the
 * key's empty in open mode); a file's then goes on
 *
 *        <size> <downloadable> <len>:<filename> <len>:<mime type>
 */

#define TB_OBJECT_BATCH        1
#define TB_OBJECT_FILE         2

typedef struct {
    int                       kind;         /* TB_OBJECT_* */
    int                       status;       /* tb_batch_status_e */
    int                       over;         /* 0 or 1 */
    int                       settled;      /* 0 or 1 */
    int64_t                   created_ms;
    int64_t                   seen_ms;
    int64_t                   reserved;     /* nanodollars, >= 0 */
    int64_t                   charged;      /* nanodollars, >= 0 */
    int64_t                   counts[TB_BATCH_NCOUNTS];   /* >= -1 */
    char                      account[TB_ID_MAX + 1];     /* not empty */
    char                      key[TB_ID_MAX + 1];
    int64_t                   size;         /* a file's, >= -1 (read
                                               back: -1 for a batch) */
    int                       downloadable; /* a file's, 0 or 1 */
    char                      filename[TB_FILE_NAME_MAX + 1];
    char                      mime[TB_FILE_MIME_MAX + 1];
} tb_object_rec_t;

#define TB_OBJECT_REC_MAX                                                   \
    (3 + 4 * 2 + (2 + 4 + TB_BATCH_NCOUNTS) * 21 + 2 * (4 + TB_ID_MAX)      \
     + 21 + 2 + 2 * 5 + TB_FILE_NAME_MAX + TB_FILE_MIME_MAX)

/* its text into out (NUL-terminated): the length, or 0 when it does not
 * fit in size bytes or is not one decode() would take */
size_t tb_object_rec_encode(const tb_object_rec_t *o, char *out, size_t size);

/* 0 when [p, p + len) is exactly one such line, every field in range;
 * else -1 */
int tb_object_rec_decode(const char *p, size_t len, tb_object_rec_t *o);


#endif /* TB_BATCH_H */
