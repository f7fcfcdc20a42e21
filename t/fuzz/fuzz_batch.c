/*
 * libFuzzer: the Message Batches API's documents (tb_batch.c) - a create
 * body scanned (every request handed over is a custom_id the API takes and
 * a params object that is itself one valid JSON document inside the
 * input, at most max of them, and none once the scan refuses), a
 * message_batch object and a results line read (never outside the input),
 * a file object read (its id one the API gives, its names cut within
 * their bounds), and an object's record read back: one that is taken is
 * written again
 * byte for byte (the text is canonical), every field in range.
 */

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tb_batch.h"


typedef struct {
    const uint8_t  *data;
    size_t          size;
    size_t          n;
} seen_t;


static int
each(void *data, size_t i, const char *custom_id, const unsigned char *p,
    size_t len, char *err, size_t errlen)
{
    seen_t  *s = data;

    if (i != s->n++
        || !tb_batch_id_ok(custom_id, strlen(custom_id))
        || strlen(custom_id) > TB_BATCH_CUSTOM_ID_MAX
        || p < s->data || p + len > s->data + s->size
        || len < 2 || p[0] != '{' || p[len - 1] != '}'
        || tb_json_validate(p, len) != 0)
    {
        abort();
    }

    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t             n;
    seen_t             s;
    tb_batch_obj_t     o;
    size_t             i, nrefs;
    tb_file_ref_t      refs[4];
    tb_file_obj_t      f;
    tb_object_rec_t    rec;
    tb_batch_result_t  r;
    char               err[256], again[TB_OBJECT_REC_MAX + 1];

    s.data = data;
    s.size = size;
    s.n = 0;

    if (tb_batch_scan(data, size, 8, each, &s, &n, err, sizeof(err)) == 0) {
        if (n == 0 || n > 8 || n != s.n) {
            abort();
        }

    } else if (n != 0 || err[0] == '\0') {
        abort();
    }

    if (tb_batch_object(data, size, &o) == 0) {
        if (!tb_batch_id_ok(o.id, o.id_len) || strlen(o.id) != o.id_len
            || o.results_url.off + o.results_url.len > size)
        {
            abort();
        }

    } else if (o.id_len != 0) {
        abort();
    }

    if (tb_batch_result(data, size, &r) == 0) {
        if (r.type == TB_RESULT_SUCCEEDED
            && (r.message.off + r.message.len > size || r.message.len < 2
                || data[r.message.off] != '{'
                || data[r.message.off + r.message.len - 1] != '}'))
        {
            abort();
        }

        if (r.type == TB_RESULT_UNKNOWN
            || (r.type == TB_RESULT_SUCCEEDED
                && (r.usage.input_tokens < 0 || r.usage.output_tokens < 0)))
        {
            abort();
        }

    } else if (r.type != TB_RESULT_UNKNOWN) {
        abort();
    }

    if (tb_file_object(data, size, &f) == 0
        && (!tb_batch_id_ok(f.id, f.id_len) || strlen(f.id) != f.id_len
            || strlen(f.filename) > TB_FILE_NAME_MAX
            || strlen(f.mime) > TB_FILE_MIME_MAX || f.size < -1))
    {
        abort();
    }

    if (tb_file_refs(data, size, refs, 4, &nrefs) == 0) {
        for (i = 0; i < nrefs && i < 4; i++) {
            if (refs[i].id_len
                && (!tb_batch_id_ok(refs[i].id, refs[i].id_len)
                    || strncmp(refs[i].id, "file_", 5) != 0))
            {
                abort();
            }
        }

    } else if (nrefs != 0 || tb_json_validate(data, size) == 0) {
        abort();
    }

    if (tb_object_rec_decode((const char *) data, size, &rec) == 0
        && (tb_object_rec_encode(&rec, again, sizeof(again)) != size
            || memcmp(again, data, size) != 0))
    {
        abort();
    }

    return 0;
}
