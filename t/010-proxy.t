# The proxy: what reaches the upstream, what reaches the client.
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
  - id: a3
    api_key: sk-a3
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
    headers:
      anthropic-beta: from-the-account
keys:
  - key: tenant-key
    name: tenant
  - key: admin-key
    name: admin
    admin: true
_EOY_

our %Account = ('sk-a1' => 'a1', 'sk-a2' => 'a2', 'sk-a3' => 'a3');

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: a JSON response reaches the client byte for byte
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers
x-api-key: tenant-key
content-type: application/json
--- error_code: 200
--- response_headers_like
x-tokenbiryani-request-id: tbr_[0-9a-f]{24}
x-tokenbiryani-account: a[123]
content-type: application/json
--- upstream
method path         status credential
POST   /v1/messages 200    ~^sk-a[123]$
--- verbatim: 1
--- account: answered
--- check
is(json_decode($resp->{body})->{type}, 'message', 'a Message');



=== TEST 2: a stream reaches the client byte for byte, with the account header
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers
Authorization: Bearer tenant-key
--- error_code: 200
--- response_headers_like
content-type: text/event-stream.*
x-tokenbiryani-account: a[123]
x-tokenbiryani-request-id: tbr_[0-9a-f]{24}
--- upstream
method path         status
POST   /v1/messages 200
--- verbatim: 1
--- sse
message_start: 1
message_stop: 1
content_block_delta: >= 3
--- account: answered



=== TEST 3: the account's credential goes upstream, never the client's key or our headers
--- request eval
"POST /v1/messages?beta=true\n" . msg_body()
--- more_headers
x-api-key: tenant-key
Authorization: Bearer tenant-key
X-TokenBiryani-Session: conversation-1
X-TokenBiryani-Priority: batch
X-TokenBiryani-Max-Wait: 5
anthropic-beta: client-beta-1,client-beta-2
X-Client-Thing: kept
Accept-Encoding: gzip
--- error_code: 200
--- upstream
credential   auth_header_count path                   h:x-client-thing h:anthropic-version h:accept-encoding
~^sk-a[123]$ 1                 /v1/messages?beta=true kept             2023-06-01          -
--- check
my $e = mock_log()->[0];
my @ours = grep { /^x-tokenbiryani-/ } keys %{ $e->{headers} };
is("@ours", '', 'no x-tokenbiryani-* header upstream');
unlike(join(' ', values %{ $e->{headers} }), qr/tenant-key/,
       'the client key appears in no upstream header');
my $want = $e->{credential} eq 'sk-a3' ? 'from-the-account'
                                        : 'client-beta-1,client-beta-2';
is($e->{headers}{'anthropic-beta'}, $want,
   "anthropic-beta: the account's own header wins, else the client's");
is($e->{body_sha256}, sha256_hex($block->request =~ s/^[^\n]*\n//r),
   'the body went upstream byte for byte');



=== TEST 4: the client's anthropic-version is kept
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers
x-api-key: tenant-key
anthropic-version: 2023-01-01
--- error_code: 200
--- upstream
h:anthropic-version
2023-01-01



=== TEST 5: count_tokens and models
--- request eval
["POST /v1/messages/count_tokens\n" . msg_body(),
 "GET /v1/models",
 "GET /v1/models/claude-opus-4-6",
 "GET /v1/models/claude-nope"]
--- more_headers eval
["x-api-key: tenant-key", "x-api-key: tenant-key", "x-api-key: tenant-key",
 "x-api-key: tenant-key"]
--- error_code eval
[200, 200, 200, 404]
--- response_body_like eval
['^\{"input_tokens":\d+\}$', '"has_more":false', '"id":"claude-opus-4-6"',
 'not_found_error']
--- upstream
method path                       status h:content-length
POST   /v1/messages/count_tokens  200    *
GET    /v1/models                 200    -
GET    /v1/models/claude-opus-4-6 200    -
GET    /v1/models/claude-nope     404    -
--- account: answered



=== TEST 6: paths the gateway does not serve, and wrong methods
--- request eval
["GET /v1/messages", "POST /v1/complete\n{}", "DELETE /v1/models"]
--- more_headers eval
["x-api-key: tenant-key", "x-api-key: tenant-key", "x-api-key: tenant-key"]
--- error_code eval
[405, 404, 405]
--- response_body_like eval
['^\{"type":"error","error":\{"type":"invalid_request_error","message":"/v1/messages expects POST, not GET"\},"request_id":"tbr_[0-9a-f]{24}"\}$',
 '"type":"not_found_error"',
 '"type":"invalid_request_error"']
--- upstream: none
--- check
is($_->{headers}{'content-type'}, 'application/json', 'JSON errors') for @responses;
like($_->{headers}{'x-tokenbiryani-request-id'}, qr/^tbr_/, 'request id on errors')
    for @responses;



=== TEST 7: limit headers reach admin keys only
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . msg_body()]
--- more_headers eval
["x-api-key: tenant-key", "x-api-key: admin-key"]
--- error_code eval
[200, 200]
--- check
my @rl = grep { /^anthropic-ratelimit-/ } keys %{ $responses[0]{headers} };
is("@rl", '', 'a tenant sees none of the pool limits');
ok(!exists $responses[0]{headers}{'anthropic-organization-id'},
   '... nor the organization');
ok(exists $responses[0]{headers}{'request-id'}, "the upstream's request-id passes");
is(scalar(grep { /^anthropic-ratelimit-/ } keys %{ $responses[1]{headers} }), 9,
   'an admin key sees the nine limit headers');



=== TEST 8: a chunked request body goes upstream with its length
--- check
my $body = msg_body(text => 'x' x 5000);
my $chunked = join('', map { sprintf("%x\r\n%s\r\n", length $_, $_) }
                       unpack('(a700)*', $body)) . "0\r\n\r\n";
my $r = http_request(raw => "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\n"
    . "Connection: close\r\nx-api-key: tenant-key\r\n"
    . "Transfer-Encoding: chunked\r\n\r\n$chunked");
is($r->{status}, 200, 'served');
my $e = mock_log()->[0];
is($e->{headers}{'content-length'}, length $body, 'Content-Length upstream');
ok(!exists $e->{headers}{'transfer-encoding'}, 'no chunked upstream');
is($e->{body_sha256}, sha256_hex($body), 'the body, de-chunked, byte for byte');



=== TEST 9: a client that goes away mid-stream releases its attempt
--- check
my $got = http_request_abort(method => 'POST', path => '/v1/messages',
    body => stream_body(), after => 200,
    headers => { 'x-api-key' => 'admin-key', 'x-mock-event-delay-ms' => 300 });
ok(length $got > 0, 'the client read the beginning of the stream');
my $inflight = sub {
    my $r = http_request(method => 'GET', path => '/admin/status',
                         headers => { 'x-api-key' => 'admin-key' });
    my $n = 0;
    $n += $_->{inflight} for @{ json_decode($r->{body})->{accounts} };
    $n;
};
ok(poll_until(5, sub { $inflight->() == 0 }), 'inflight back to 0 across the pool');
ok(poll_until(5, sub { my $l = mock_log(); @$l && $l->[0]{client_aborted} }),
   'the upstream saw the gateway hang up too');



=== TEST 10: HEAD gets the headers and no body, without waiting for one
--- request eval
["HEAD /v1/models", "GET /v1/models"]
--- more_headers eval
["x-api-key: tenant-key", "x-api-key: tenant-key"]
--- timeout: 3
--- error_code eval
# the mock does not take HEAD: its 405 comes back, without the body it sent
[405, 200]
--- check
is($responses[0]{body}, '', 'no body');
is($responses[1]{status}, 200, 'the next request is served');
