// One call of the official Anthropic SDK against the gateway, as a user's
// program makes it; prints what came back as one line of JSON.
//
//   node client.mjs '{"op":"create","params":{...},"maxRetries":2,
//                     "headers":{...}}'
//
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY come from the environment, as
// for any user of the SDK.  "fetches" counts the HTTP requests the SDK
// made, retries included.

import Anthropic from '@anthropic-ai/sdk';

const spec = JSON.parse(process.argv[2]);
let fetches = 0;

const client = new Anthropic({
    maxRetries: spec.maxRetries ?? 2,
    timeout: 30000,
    defaultHeaders: spec.headers ?? {},
    fetch: (url, init) => { fetches++; return fetch(url, init); },
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
process.stdout.write(JSON.stringify(out) + '\n');
