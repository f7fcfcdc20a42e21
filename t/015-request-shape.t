# What reaches an upstream connection: exactly the request the gateway
# checked, whatever shape the client's request had.  Each attack is sent
# with a plain request pipelined behind it on the same client connection
# (so on the same worker and, with one account and keepalive, the same
# upstream connection): bytes an attack left on that connection would turn
# the follow-up into something else, which the mock's log shows.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

$ENV{TEST_NGINX_H2_PORT} //= 19180;

our $Yaml = pool_yaml(keys => [{ key => 'tenant-key', name => 'tenant' }]);

our $Follow = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n"
            . "x-api-key: tenant-key\r\nConnection: close\r\n\r\n";

# the responses on one connection, in order; @head: which answer HEADs
sub split_responses {
    my ($raw, @head) = @_;
    my @out;
    while (length $raw) {
        my $i = index($raw, "\r\n\r\n");
        last if $i < 0;
        my $head = substr($raw, 0, $i + 4);
        my $rest = substr($raw, $i + 4);
        my $len;
        if (shift @head) {
            $len = 0;
        } elsif ($head =~ /^transfer-encoding:\s*chunked/mi) {
            $len = 0;
            while ($rest =~ /\G([0-9a-f]+)\r\n/gci) {
                my $n = hex $1;
                $len = pos($rest) + $n + 2;
                pos($rest) = $len;
                last if $n == 0;
            }
        } else {
            ($len) = $head =~ /^content-length:\s*(\d+)/mi;
            $len //= length $rest;
        }
        push @out, TB::Nginx::parse_response($head . substr($rest, 0, $len));
        $raw = substr($rest, $len);
    }
    \@out;
}

# the upstream saw exactly these requests, and nothing it could not parse
sub upstream_saw {
    my ($want, $what) = @_;
    my $log = TB::Nginx::mock_log();
    Test::More::is_deeply([map { "$_->{method} $_->{path}" } @$log], $want,
                          "$what: the upstream saw exactly these requests");
    Test::More::is(TB::Nginx::mock_stats()->{bad_requests}, 0,
                   "$what: no unparseable bytes reached the upstream");
    $log;
}

sub refused_400 {
    my ($r, $what) = @_;
    Test::More::is($r->{status}, 400, "$what: 400");
    Test::More::like($r->{body}, qr/"type":"invalid_request_error"/,
                     "$what: an Anthropic-shaped error");
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: a GET whose body is a second request: refused, nothing smuggled
--- check
my $junk = "GET /v1/files HTTP/1.1\r\nX-Junk: ";
my $rs = ::split_responses(http_request(raw =>
    "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nx-api-key: tenant-key\r\n"
    . "Content-Length: " . length($junk) . "\r\n\r\n$junk" . $::Follow)->{raw});
is(scalar @$rs, 2, 'two answers on the connection');
::refused_400($rs->[0], 'a body on GET');
like($rs->[0]{body}, qr/GET .*no body/, 'the message says why');
is($rs->[1]{status}, 200, 'the follow-up is served');
like($rs->[1]{body}, qr/"has_more"/, '... with the models list');
::upstream_saw(['GET /v1/models'], 'body on GET');



=== TEST 2: HEAD and a chunked GET with bodies are refused too
--- check
my $rs = ::split_responses(http_request(raw =>
    "HEAD /v1/models HTTP/1.1\r\nHost: localhost\r\nx-api-key: tenant-key\r\n"
    . "Content-Length: 5\r\n\r\nhello"
    . "GET /v1/models/claude-opus-4-6 HTTP/1.1\r\nHost: localhost\r\n"
    . "x-api-key: tenant-key\r\nTransfer-Encoding: chunked\r\n\r\n"
    . "5\r\nhello\r\n0\r\n\r\n" . $::Follow)->{raw}, 1);
is(scalar @$rs, 3, 'three answers');
is($rs->[0]{status}, 400, 'HEAD with a body: 400');
::refused_400($rs->[1], 'a chunked body on GET');
is($rs->[2]{status}, 200, 'the follow-up is served');
::upstream_saw(['GET /v1/models'], 'bodies on HEAD and GET');



=== TEST 3: a POST always carries its Content-Length upstream, an empty one too
--- check
my $body = msg_body();
my $rs = ::split_responses(http_request(raw =>
    "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: tenant-key\r\n"
    . "Content-Length: " . length($body) . "\r\n\r\n$body" . $::Follow)->{raw});
is(scalar @$rs, 2, 'two answers');
is($rs->[0]{status}, 200, 'served');
my $log = ::upstream_saw(['POST /v1/messages', 'GET /v1/models'], 'a POST');
is($log->[0]{headers}{'content-length'}, length $body, 'Content-Length upstream');
ok(!exists $log->[1]{headers}{'content-length'}, 'none on the GET');
is($log->[1]{conn}, $log->[0]{conn}, 'one upstream connection carried both');



=== TEST 4: framing the client got wrong never reaches the upstream
--- check
my $body = msg_body();
my $n = length $body;
for my $t (["Transfer-Encoding and Content-Length",
            "Transfer-Encoding: chunked\r\nContent-Length: $n\r\n\r\n"
            . sprintf("%x\r\n%s\r\n0\r\n\r\n", $n, $body)],
           ["two Content-Lengths",
            "Content-Length: $n\r\nContent-Length: " . ($n + 30) . "\r\n\r\n"
            . $body . ('x' x 30)],
           ["a Content-Length that is not a number",
            "Content-Length: 1e3\r\n\r\n$body"],
           ["an unknown transfer coding",
            "Transfer-Encoding: gzip, chunked\r\n\r\n"
            . sprintf("%x\r\n%s\r\n0\r\n\r\n", $n, $body)]) {
    my $r = http_request(raw => "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\n"
        . "x-api-key: tenant-key\r\nConnection: close\r\n$t->[1]");
    ok($r->{status} == 400 || $r->{status} == 501, "$t->[0]: refused ($r->{status})");
}
::upstream_saw([], 'bad framing');



=== TEST 5: dot-segments, encoded dots and encoded slashes: 400, nothing upstream
--- check
for my $path ('/v1/models/../messages', '/v1/./models', '/v1//models',
              '/v1/models/%2e%2e/messages', '/v1/%2E%2E/v1/models',
              '/v1/models/claude%2Fopus', '/v1/models/a%2f..%2f..%2ffiles',
              '/v1/mod%65ls', '/v1/models?x=1#frag') {
    my $r = http_request(method => 'GET', path => $path,
                         headers => { 'x-api-key' => 'tenant-key' });
    ::refused_400($r, $path);
}
::upstream_saw([], 'unnormalised paths');



=== TEST 6: the path and query string sent are the ones checked
--- check
my $body = msg_body();
my @r = map { http_request(method => 'POST', path => $_, body => $body,
                           headers => { 'x-api-key' => 'tenant-key' }) }
        '/v1/messages?beta=true', '/v1/messages?beta=true&x=%20a';
is($_->{status}, 200, 'served') for @r;
::upstream_saw(['POST /v1/messages?beta=true', 'POST /v1/messages?beta=true&x=%20a'],
               'query strings');



=== TEST 7: CR, LF and NUL in a header value are refused by nginx itself
--- check
for my $t (["CR", "x-evil: a\rGET /v1/files HTTP/1.1"],
           ["NUL", "x-evil: a\0b"],
           ["LF then a request line", "x-evil: a\nGET /v1/files HTTP/1.1"]) {
    my $r = http_request(raw => "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n"
        . "x-api-key: tenant-key\r\n$t->[1]\r\nConnection: close\r\n\r\n");
    is($r->{status}, 400, "$t->[0] in a header value: 400");
}
::upstream_saw([], 'control bytes in headers');



=== TEST 8: a very long header and very many headers go up intact, or not at all
--- check
my $long = 'v' x 7000;
my @many = map { ["x-many-$_", "value $_"] } 1 .. 90;
my @r = (http_request(method => 'GET', path => '/v1/models',
                      headers => [['x-api-key', 'tenant-key'], ['x-long', $long]]),
         http_request(method => 'GET', path => '/v1/models',
                      headers => [['x-api-key', 'tenant-key'], @many]),
         http_request(method => 'GET', path => '/v1/models',
                      headers => [['x-api-key', 'tenant-key'], ['x-huge', 'h' x 20000]]));
is($r[0]{status}, 200, 'a 7000-byte header: served');
is($r[1]{status}, 200, '90 headers: served');
ok($r[2]{status} == 400 || $r[2]{status} == 494, "a 20000-byte header: refused ($r[2]{status})");
like($r[2]{body}, qr/"type":"invalid_request_error"/, '... with an Anthropic-shaped error');
my $log = ::upstream_saw(['GET /v1/models', 'GET /v1/models'], 'big headers');
is($log->[0]{headers}{'x-long'}, $long, 'the long header, byte for byte');
is($log->[1]{headers}{"x-many-$_"}, "value $_", "header $_ of 90") for (1, 45, 90);



=== TEST 9: an absolute-form request line: the gateway's path and Host go up
--- check
my $body = msg_body();
my $r = http_request(raw => "POST http://files.example:9999/v1/messages?beta=true HTTP/1.1\r\n"
    . "Host: other.example\r\nx-api-key: tenant-key\r\nConnection: close\r\n"
    . "Content-Length: " . length($body) . "\r\n\r\n$body");
is($r->{status}, 200, 'served');
my $log = ::upstream_saw(['POST /v1/messages?beta=true'], 'absolute form');
is($log->[0]{headers}{host}, "127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}", "the account's Host");



=== TEST 10: HTTP/1.0 clients: one upstream request each, HTTP/1.1 upstream
--- check
my $body = msg_body();
my $r = http_request(raw => "POST /v1/messages HTTP/1.0\r\nHost: localhost\r\n"
    . "x-api-key: tenant-key\r\nContent-Length: " . length($body) . "\r\n\r\n$body");
is($r->{status}, 200, 'a JSON answer');
my $s = http_request(raw => "POST /v1/messages HTTP/1.0\r\nHost: localhost\r\n"
    . "x-api-key: tenant-key\r\nContent-Length: " . length(stream_body()) . "\r\n\r\n"
    . stream_body());
is($s->{status}, 200, 'a stream');
is(count_events($s->{body}, 'message_stop'), 1, '... whole, delimited by the close');
my $log = ::upstream_saw(['POST /v1/messages', 'POST /v1/messages'], 'HTTP/1.0');



=== TEST 11: HTTP/2 clients: the same request upstream, a body on GET refused
--- http_config eval
$::HttpConfig . <<_EOC_;
    server {
        listen 127.0.0.1:$ENV{TEST_NGINX_H2_PORT} http2;
        location /v1/ { tokenbiryani_pass; }
    }
_EOC_
--- check
my $url = "http://127.0.0.1:$ENV{TEST_NGINX_H2_PORT}";
my $body = msg_body();
# curl's output, what it said on stderr, and its exit status
my $h2 = sub {
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>&', \*STDOUT;
        exec 'curl', '-sS', '--http2-prior-knowledge', '-o', '-',
             '-w', '\n%{http_code} %{http_version}', '-H', 'x-api-key: tenant-key',
             '-H', 'content-type: application/json', @_;
        exit 127;
    }
    my $out = do { local $/; <$fh> };
    close $fh;
    "$out (curl exit " . ($? >> 8) . ")";
};
like($h2->('-X', 'POST', '--data-binary', $body, "$url/v1/messages?beta=true"),
     qr/"type":"message".*\n200 2 \(curl exit 0\)$/s, 'a POST over HTTP/2 is served');
like($h2->('-X', 'GET', '--data-binary', 'GET /v1/files HTTP/1.1', "$url/v1/models"),
     qr/"type":"invalid_request_error".*\n400 2 \(curl exit 0\)$/s,
     'a GET with a body over HTTP/2: 400');
my $log = ::upstream_saw(['POST /v1/messages?beta=true'], 'HTTP/2');
is($log->[0]{body_sha256}, sha256_hex($body), 'the body byte for byte');
is($log->[0]{headers}{'content-length'}, length $body, 'with its length');



=== TEST 12: an upstream that sends more than its Content-Length loses its connection
--- check
my $body = msg_body();
my $rs = ::split_responses(http_request(raw =>
    "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: tenant-key\r\n"
    . "x-mock-script: overlong\r\nContent-Length: " . length($body) . "\r\n\r\n$body"
    . "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: tenant-key\r\n"
    . "Connection: close\r\nContent-Length: " . length($body) . "\r\n\r\n$body")->{raw});
is(scalar @$rs, 2, 'two answers');
like($rs->[0]{body}, qr/"type":"message"/, 'the first answer');
like($rs->[1]{body}, qr/"type":"message"/, 'the second is a real answer');
unlike($rs->[1]{body}, qr/smuggled/, '... not the bytes past the first one');
my $log = ::upstream_saw(['POST /v1/messages', 'POST /v1/messages'], 'an overlong response');
isnt($log->[1]{conn}, $log->[0]{conn}, 'the second request went on a new connection');
--- error_log
sent more than its Content-Length: its connection is not kept



=== TEST 13: X-Accel-* headers from an upstream are neither obeyed nor passed on
--- timeout: 5
--- check
for my $body (msg_body(), stream_body()) {
    my $r = http_request(method => 'POST', path => '/v1/messages', body => $body,
                         headers => { 'x-api-key' => 'tenant-key', 'x-mock-script' => 'accel' });
    is($r->{status}, 200, 'served');
    like($r->{body}, qr/"type":"message|message_stop/, "the upstream's own answer, not /healthz");
    is(scalar(grep { /^x-accel-/ } keys %{ $r->{headers} }), 0, 'no x-accel-* header');
}
::upstream_saw(['POST /v1/messages', 'POST /v1/messages'], 'x-accel');



=== TEST 14: a member the gateway acts on given twice (model, stream, max_tokens, messages, ...) is refused: the scope checked and the one the upstream reads cannot differ
--- user_files eval
pool_yaml(keys => [{ key => 'narrow-key', name => 'narrow', models => '["claude-haiku-*"]' }])
--- request
GET /healthz
--- check
my @bodies = (
    '{"model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"model":"claude-opus-4-1"}',
    '{"model":"claude-opus-4-1","mod\u0065l":"claude-haiku-4-5","max_tokens":8,"messages":[]}',
    '{"model":"claude-haiku-4-5","stream":false,"stream":true,"max_tokens":8,"messages":[]}',
    '{"model":"claude-haiku-4-5","max_tokens":8,"max_tokens":64000,"messages":[]}',
);
for my $b (@bodies) {
    my $r = http_request(method => 'POST', path => '/v1/messages', body => $b,
                         headers => { 'x-api-key' => 'narrow-key', 'content-type' => 'application/json' });
    is($r->{status}, 400, "refused: $b");
    like(json_decode($r->{body})->{error}{message}, qr/: given more than once in the request body/, 'saying which');
}
is(scalar @{ mock_log() }, 0, 'nothing went upstream');
