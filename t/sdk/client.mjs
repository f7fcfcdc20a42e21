// One call of the official Anthropic SDK against the gateway, as a user's
// program makes it; prints what came back as one line of JSON.
//
//   node client.mjs '{"op":"create","params":{...},"maxRetries":2,
//                     "headers":{...}}'
//
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY come from the environment, as
// for any user of the SDK.  "fetches" counts the HTTP requests the SDK
// made, retries included; "requests" lists them ("METHOD URL"), so a
// results_url the SDK followed shows where it led.

import Anthropic from '@anthropic-ai/sdk';

const spec = JSON.parse(process.argv[2]);
let fetches = 0;
const requests = [];

const client = new Anthropic({
    maxRetries: spec.maxRetries ?? 2,
    timeout: 30000,
    defaultHeaders: spec.headers ?? {},
    fetch: (url, init) => {
        fetches++;
        requests.push((init?.method ?? 'GET') + ' ' + String(url));
        return fetch(url, init);
    },
});

const out = { fetches: 0 };

try {
    if (spec.op === 'create') {
        const { data, response } = await client.messages
            .create(spec.params).withResponse();
        out.status = response.status;
        out.account = response.headers.get('x-tokenbiryani-account');
        out.message = data;

    } else if (spec.op === 'stream') {
        const stream = client.messages.stream(spec.params);
        const events = [];
        stream.on('streamEvent', (e) => events.push(e.type));
        out.message = await stream.finalMessage();
        out.text = await stream.finalText();
        out.events = events;

    } else if (spec.op === 'count_tokens') {
        out.result = await client.messages.countTokens(spec.params);

    } else if (spec.op === 'models') {
        const page = await client.models.list();
        out.ids = page.data.map((m) => m.id);

    } else if (spec.op === 'batch_create') {
        const { data, response } = await client.messages.batches
            .create(spec.params).withResponse();
        out.account = response.headers.get('x-tokenbiryani-account');
        out.batch = data;

    } else if (spec.op === 'batch_retrieve') {
        out.batch = await client.messages.batches.retrieve(spec.id);

    } else if (spec.op === 'batch_wait') {
        // retrieve until it ended, as a user's program polls (10 s at most)
        out.polls = 0;
        const deadline = Date.now() + 10000;
        for (;;) {
            out.polls++;
            out.batch = await client.messages.batches.retrieve(spec.id);
            if (out.batch.processing_status === 'ended'
                || Date.now() > deadline)
            {
                break;
            }
            await new Promise((r) => setTimeout(r, 50));
        }

    } else if (spec.op === 'batch_list') {
        // every page, as the SDK pages on by itself
        out.ids = [];
        out.batches = [];
        for await (const b of client.messages.batches.list(spec.params ?? {})) {
            out.ids.push(b.id);
            out.batches.push(b);
        }

    } else if (spec.op === 'batch_results') {
        out.results = [];
        for await (const line of await client.messages.batches.results(spec.id)) {
            out.results.push(line);
        }

    } else if (spec.op === 'batch_cancel') {
        out.batch = await client.messages.batches.cancel(spec.id);

    } else if (spec.op === 'batch_delete') {
        out.result = await client.messages.batches.delete(spec.id);

    } else {
        throw new Error('unknown op ' + spec.op);
    }

    out.ok = true;

} catch (e) {
    out.ok = false;
    out.name = e.constructor.name;
    out.status = e.status ?? null;
    out.type = e.error?.error?.type ?? null;
    out.error_message = e.error?.error?.message ?? String(e.message);
    out.should_retry = e.headers?.get?.('x-should-retry') ?? null;
}

out.fetches = fetches;
out.requests = requests;
process.stdout.write(JSON.stringify(out) + '\n');
