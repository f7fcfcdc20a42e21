# Errors the gateway itself produces: always Anthropic-shaped JSON with the
# right status and a request id, never an nginx page, never sent upstream.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
  - id: opus-only
    api_key: sk-a3
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
    models: ["claude-opus-*"]
keys:
  - key: tenant-key
    name: tenant
  - key: pinned-key
    name: pinned
    pool: [a2]
  - key: haiku-key
    name: haiku
    models: ["claude-haiku-4-5"]
_EOY_

our $Shape = qr/^\{"type":"error","error":\{"type":"[a-z_]+","message":"[^"]*(?:\\"[^"]*)*"\},"request_id":"tbr_[0-9a-f]{24}"\}$/;

sub json_error_ok {
    my ($r, $status, $type, $msg_re) = @_;
    is($r->{status}, $status, "status $status");
    is($r->{headers}{'content-type'}, 'application/json', 'JSON');
    like($r->{body}, $::Shape, 'Anthropic error shape with our request id');
    my $e = eval { json_decode($r->{body}) } || {};
    is($e->{error}{type}, $type, "type $type");
    like($e->{error}{message} // '', $msg_re, 'message') if $msg_re;
    is($e->{request_id}, $r->{headers}{'x-tokenbiryani-request-id'},
       'the body names the request id the header carries');
}

{
    no strict 'refs';
    *{"TB::Nginx::json_error_ok"} = \&json_error_ok;
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: malformed JSON never reaches an upstream
--- request eval
["POST /v1/messages\n{\"model\":\"m\",", "POST /v1/messages\n[1,2]",
 "POST /v1/messages\n{\"max_tokens\":5}", "POST /v1/messages\n{\"model\":5}",
 "POST /v1/messages\n{\"model\":\"m\",\"stream\":\"yes\"}",
 "POST /v1/messages/count_tokens\nnot json"]
--- more_headers eval
[("x-api-key: tenant-key") x 6]
--- error_code eval
[(400) x 6]
--- upstream: none
--- check
json_error_ok($responses[0], 400, 'invalid_request_error',
              qr/^request body is not valid JSON: .* at byte \d+$/);
json_error_ok($responses[1], 400, 'invalid_request_error', qr/must be a JSON object/);
json_error_ok($responses[2], 400, 'invalid_request_error', qr/^model: field required$/);
json_error_ok($responses[3], 400, 'invalid_request_error', qr/^model: expected a string$/);
json_error_ok($responses[4], 400, 'invalid_request_error', qr/^stream: /);
json_error_ok($responses[5], 400, 'invalid_request_error', qr/not valid JSON/);



=== TEST 2: a body over client_max_body_size: 413 request_too_large, as JSON
--- config eval
$::Locations =~ s/(\{ tokenbiryani_pass;)/{ client_max_body_size 4k; tokenbiryani_pass;/r
--- request eval
"POST /v1/messages\n" . big_body(10_000)
--- more_headers
x-api-key: tenant-key
--- error_code: 413
--- upstream: none
--- check
json_error_ok($resp, 413, 'request_too_large', qr/client_max_body_size 4096 bytes/);



=== TEST 3: the same for a chunked body, found too large while reading it
--- config eval
$::Locations =~ s/(\{ tokenbiryani_pass;)/{ client_max_body_size 4k; tokenbiryani_pass;/r
--- check
my $body = big_body(10_000);
my $chunked = join('', map { sprintf("%x\r\n%s\r\n", length $_, $_) }
                       unpack('(a1000)*', $body)) . "0\r\n\r\n";
my $r = http_request(method => 'POST', path => '/v1/messages', raw =>
    "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
    . "x-api-key: tenant-key\r\nTransfer-Encoding: chunked\r\n\r\n$chunked");
json_error_ok($r, 413, 'request_too_large');



=== TEST 4: keys: missing, unknown, and a malformed Authorization header
--- request eval
[("POST /v1/messages\n" . msg_body()) x 4]
--- more_headers eval
["", "x-api-key: nope", "Authorization: Basic dGVuYW50LWtleQ==",
 "Authorization: Bearer tenant-key"]
--- error_code eval
[401, 401, 401, 200]
--- check
json_error_ok($responses[0], 401, 'authentication_error', qr/missing credentials/);
json_error_ok($responses[1], 401, 'authentication_error', qr/^invalid key$/);
json_error_ok($responses[2], 401, 'authentication_error', qr/missing credentials/);
is(scalar @{ mock_log() }, 1, 'only the authenticated request went upstream');



=== TEST 5: a key's model scope: 403 permission_error
--- request eval
["POST /v1/messages\n" . msg_body(model => 'claude-sonnet-4-6'),
 "POST /v1/messages\n" . msg_body(model => 'claude-haiku-4-5')]
--- more_headers eval
["x-api-key: haiku-key", "x-api-key: haiku-key"]
--- error_code eval
[403, 200]
--- check
json_error_ok($responses[0], 403, 'permission_error',
              qr/^key "haiku" may not use model "claude-sonnet-4-6"$/);
is(scalar @{ mock_log() }, 1, 'the refused one never went upstream');



=== TEST 6: a key's pool restricts the accounts it reaches
--- request eval
[("POST /v1/messages\n" . msg_body()) x 6]
--- more_headers eval
[("x-api-key: pinned-key") x 6]
--- error_code eval
[(200) x 6]
--- check
is_deeply(credentials_of(mock_log()), [('sk-a2') x 6], 'always a2');



=== TEST 7: an account's model allowlist
--- request eval
[("POST /v1/messages\n" . msg_body(model => 'claude-haiku-4-5')) x 6,
 "POST /v1/messages\n" . msg_body(model => 'claude-opus-4-6')]
--- more_headers eval
[("x-api-key: tenant-key") x 7]
--- error_code eval
[(200) x 7]
--- check
my $log = mock_log();
ok(!grep({ $_->{credential} eq 'sk-a3' } @$log[0 .. 5]), 'haiku never on opus-only');



=== TEST 8: no account can serve the model: 404 not_found_error, at once, not to be retried
--- user_files eval
$::Yaml =~ s/(  - id: a[12]\n)/$1    models: ["claude-opus-*"]\n/gr
--- request eval
"POST /v1/messages\n" . msg_body(model => 'claude-haiku-4-5')
--- more_headers
x-api-key: tenant-key
--- error_code: 404
--- upstream: none
--- check
json_error_ok($resp, 404, 'not_found_error', qr/model "claude-haiku-4-5"/);
is($resp->{headers}{'x-should-retry'}, 'false', 'x-should-retry: false');



=== TEST 9: a streaming request refused before any byte: a plain JSON error, not SSE
--- request eval
"POST /v1/messages\n" . stream_body(model => 'claude-sonnet-4-6')
--- more_headers
x-api-key: haiku-key
--- error_code: 403
--- response_headers
content-type: application/json



=== TEST 10: a body only the upstream can judge goes once, and its 400 comes back verbatim
--- check
# the gateway checks what it routes on (JSON, model, stream, max_tokens when
# present); the rest is the upstream's: without max_tokens, or with messages
# that are not a list, the API (and the mock) answer 400
for my $body ('{"model":"claude-sonnet-4-6","messages":[{"role":"user","content":"hi"}]}',
              '{"model":"claude-sonnet-4-6","max_tokens":16,"messages":"hi"}',
              '{"model":"claude-sonnet-4-6","max_tokens":16,"messages":[{"role":"tool","content":"hi"}]}') {
    my $n = scalar @{ mock_log() };
    my $r = http_request(method => 'POST', path => '/v1/messages', body => $body,
                         headers => { 'x-api-key' => 'tenant-key' });
    is($r->{status}, 400, "400 for $body");
    my $e = eval { json_decode($r->{body}) } || {};
    is($e->{error}{type}, 'invalid_request_error', 'invalid_request_error');
    like($e->{error}{message}, qr/^(?:max_tokens: Field required|messages: Input should be a valid list|messages\.0\.role: Input should be 'user', 'assistant' or 'system')$/,
         "the upstream's words: $e->{error}{message}");
    unlike($e->{request_id} // '', qr/^tbr_/, 'its body, not one the gateway made');
    like($r->{headers}{'x-tokenbiryani-account'} // '', qr/^a[12]$/, 'named by the account that judged it');
    my $log = mock_log($n);
    is(scalar @$log, 1, 'sent exactly once');
    is($log->[0]{status}, 400, 'and refused there');
}
# a system message among the turns is the API's to accept (Claude Code sends
# one after the first user message)
is(http_request(method => 'POST', path => '/v1/messages',
                body => '{"model":"claude-sonnet-4-6","max_tokens":16,"messages":'
                      . '[{"role":"user","content":"hi"},{"role":"system","content":"agents"}]}',
                headers => { 'x-api-key' => 'tenant-key' })->{status},
   200, 'a system message among the turns: 200');
