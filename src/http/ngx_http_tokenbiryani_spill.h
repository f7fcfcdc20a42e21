/*
 * The spill lane (batch.enabled): a Message of batch priority, not
 * streamed, that finds the pool saturated with a known time to capacity
 * goes to the Message Batches API as a batch of one, on the account that
 * holds its conversation's cache (else the first of its key's pool that
 * can take a batch).  The client's connection is held while the gateway
 * polls the batch (batch.poll_interval_seconds), within the request's own
 * wait budget; it gets the message as if it were answered at once, with
 * x-tokenbiryani-via: batch and x-tokenbiryani-batch-id, charged at the
 * batch price.  Past its budget the batch is cancelled upstream and the
 * client gets a 429 naming it; a submission that fails goes back to the
 * queue.  The batch is one of its key's, kept like any other
 * (ngx_http_tokenbiryani_batches.c): a client that leaves before the end
 * leaves it to the gateway's own poll, which charges it all the same.
 */

#ifndef _NGX_HTTP_TOKENBIRYANI_SPILL_H_INCLUDED_
#define _NGX_HTTP_TOKENBIRYANI_SPILL_H_INCLUDED_


#include "ngx_http_tokenbiryani.h"


/* the queue, for a spill whose submission failed (the queue's stage,
 * registered: nothing here calls it by name) */
typedef void (*ngx_http_tokenbiryani_spill_back_pt)(ngx_http_request_t *r);

/*
 * A request the queue is about to take for saturation, or (paced) one
 * pacing would hold back: NGX_DECLINED when it may not spill; NGX_OK when
 * it spilled - the request is the lane's from here, finalized by it, or
 * handed to back.
 */
ngx_int_t ngx_http_tokenbiryani_spill(ngx_http_request_t *r,
    ngx_http_tokenbiryani_ctx_t *ctx, ngx_http_tokenbiryani_spill_back_pt back,
    ngx_uint_t paced);


#endif /* _NGX_HTTP_TOKENBIRYANI_SPILL_H_INCLUDED_ */
