# The probe of one upstream account (the doctor check), through the
# temporary POST /admin/accounts/test: one small request, what came back,
# and what it means for routing - without blocking the worker, and without
# the credential ever reaching a log line or the answer.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IO::Socket::INET;
use Time::HiRes ();

master_on();
workers(1);
no_shuffle();
mock_start();

# a port nothing listens on: bound once for its number, then let go
our $DeadPort = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1) or die "bind: $!\n";
    my $p = $s->sockport;
    close $s;
    $p;
};

# a name other than localhost that resolves to 127.0.0.1, for a certificate
# that is not for it (the test certificate is for localhost and 127.0.0.1)
our $OtherName = do {
    my $found;
    for my $n (grep { defined && length } (`hostname 2>/dev/null` =~ /(\S+)/), 'localhost.localdomain', 'localhost4') {
        my @a = gethostbyname($n);
        next unless @a && $n ne 'localhost';
        if (grep { join('.', unpack 'C4', $_) eq '127.0.0.1' } @a[4 .. $#a]) { $found = $n; last }
    }
    $found;
};

our $Expected = '{"model":"claude-haiku-4-5","max_tokens":1,'
              . '"messages":[{"role":"user","content":"ping"}]}';

our @Nine = map { my $w = $_; map { "anthropic-ratelimit-$w-$_" } qw(limit remaining reset) }
            qw(requests input-tokens output-tokens);

# one probe: (the HTTP status, the answer decoded, the raw response)
sub probe {
    my (%body) = @_;
    my $r = http_request(method => 'POST', path => '/admin/accounts/test',
                         headers => { 'x-api-key' => 'admin-key',
                                      'content-type' => 'application/json' },
                         body => json_encode(\%body), timeout => 30);
    my $j = eval { json_decode($r->{body}) };
    ($r->{status}, $j, $r);
}

sub mock_url { "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}" }
sub tls_url  { "https://$_[0]:$ENV{TEST_NGINX_MOCK_TLS_PORT}" }

# the credential is in no log of the block
sub no_secret_ok {
    my ($secret, @texts) = @_;
    my $log = TB::Nginx::slurp(servroot() . '/logs/error.log')
            . TB::Nginx::slurp(servroot() . '/logs/stderr.log');
    unlike($log, qr/\Q$secret\E/, "the credential $secret is in no log line");
    unlike($_, qr/\Q$secret\E/, 'nor in the answer') for @texts;
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(probe mock_url tls_url no_secret_ok);
}

# an https account, so that the gateway sets up its TLS context; the store
# brings the thread pool a host name is looked up in
our $Yaml = <<'_EOY_';
>>> tb.yaml
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: sqlite
  path: tb.db
accounts:
  - id: plain
    api_key: sk-plain
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: tls
    api_key: sk-tls
    base_url: https://localhost:${TEST_NGINX_MOCK_TLS_PORT}
keys:
  - key: admin-key
    name: admin
    admin: true
_EOY_

our $HttpCa = "tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n"
            . $TB::Gateway::HttpConfig;
our $HttpWrongCa = "tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_WRONG_CA;\n"
                 . $TB::Gateway::HttpConfig;

gateway_suite(yaml => $Yaml, http_config => $HttpCa);
run_tests();

__DATA__

=== TEST 1: a good credential: ok, status 200, the nine headers as the mock sent them, parsed as the mirror would
--- log_level: debug
--- init
mock_config({ credentials => { 'sk-probe-good' => { requests_limit => 50, input_limit => 40000,
                                                    output_limit => 8000, org => 'org-probe' } } });
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => mock_url(), api_key => 'sk-probe-good');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::true, 'ok');
is($j->{status}, 200, 'status 200');
is($j->{error}, undef, 'no error');
is($j->{detail}, undef, 'no detail');
is($j->{family}, 'limits', 'the classic family');
is_deeply($j->{missing}, [], 'nothing missing');
is_deeply([map { $_->{header} } @{ $j->{checked} }], \@Nine, 'the nine, in order');
ok($_->{present} && defined $_->{value} && length $_->{value}, "$_->{header} present with a value")
    for @{ $j->{checked} };
ok($j->{latency_ms} >= 0 && $j->{latency_ms} < 5000, "latency $j->{latency_ms} ms");
is($j->{organization_id}, 'org-probe', 'organization id');
is($j->{retry_after_seconds}, undef, 'no retry-after');
is($j->{consequence}, "routing sees this account's limits", 'the consequence');

my $log = mock_log();
is(scalar @$log, 1, 'one request upstream');
my $e = $log->[0];
is($e->{method}, 'POST', 'POST');
is($e->{path}, '/v1/messages', 'to /v1/messages');
is($e->{credential}, 'sk-probe-good', 'with the credential');
is($e->{auth_header_count}, 1, 'one credential line');
is($e->{headers}{'anthropic-version'}, '2023-06-01', 'anthropic-version');
is($e->{headers}{'content-type'}, 'application/json', 'content-type');
is($e->{headers}{connection}, 'close', 'Connection: close');
is($e->{headers}{'user-agent'}, 'tokenbiryani/0.1.0 probe', 'User-Agent');
is($e->{headers}{host}, "127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}", 'Host');
is($e->{headers}{'content-length'}, length $::Expected, 'Content-Length');
is($e->{body_sha256}, sha256_hex($::Expected), 'the body, byte for byte');
is($e->{status}, 200, 'the mock answered 200');

# the numbers the mock sent (its window: 50 requests, 40000 in, 8000 out)
my %v = map { $_->{header} => $_->{value} } @{ $j->{checked} };
my $p = $j->{parsed};
is($p->{requests}{limit}, 50, 'requests limit');
is($p->{requests}{remaining}, 49, 'requests remaining: this one taken');
is($p->{input_tokens}{limit}, 40000, 'input limit');
is($p->{input_tokens}{remaining}, 40000 - $e->{usage}{input_tokens},
   'input remaining: the prompt taken');
is($p->{output_tokens}{limit}, 8000, 'output limit');
is($p->{output_tokens}{remaining}, 8000, "output remaining: not this response's own");
for my $w (['requests', 'requests'], ['input_tokens', 'input-tokens'], ['output_tokens', 'output-tokens']) {
    is($p->{$w->[0]}{limit}, $v{"anthropic-ratelimit-$w->[1]-limit"}, "$w->[0] limit is the header's value");
    is($p->{$w->[0]}{remaining}, $v{"anthropic-ratelimit-$w->[1]-remaining"},
       "$w->[0] remaining is the header's value");
    like($v{"anthropic-ratelimit-$w->[1]-reset"}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/,
         "$w->[0] reset is RFC 3339");
    my $reset = $p->{$w->[0]}{reset_in_seconds};
    ok(defined $reset && $reset >= 0 && $reset <= 61, "$w->[0] reset in $reset s");
}
no_secret_ok('sk-probe-good', $r->{body});
--- error_log
tokenbiryani probe: request sent
tokenbiryani: probe of 127.0.0.1:



=== TEST 2: an unknown credential, strict: ok false, status 401, the error's message as the detail
--- init
mock_config({ strict_credentials => JSON::PP::true });
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => mock_url(), api_key => 'sk-probe-unknown');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::false, 'not ok');
is($j->{status}, 401, 'status 401');
is($j->{detail}, 'invalid x-api-key', 'detail: the message of the error');
is($j->{error}, undef, 'no transport error');
like($j->{consequence}, qr/^the credential was refused/, 'the consequence');
is(mock_log()->[0]{status}, 401, 'the mock refused it');
no_secret_ok('sk-probe-unknown', $r->{body});



=== TEST 3: a port nothing listens on: ok false, status null, the connection failure named
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => "http://127.0.0.1:$::DeadPort", api_key => 'sk-probe-dead');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::false, 'not ok');
is($j->{status}, undef, 'status null');
like($j->{error}, qr/^connect\(\) to 127\.0\.0\.1:$::DeadPort failed \(111: Connection refused\)$/,
     'the error names the connection failure');
is($j->{family}, 'none', 'no header family');
is(scalar @{ $j->{missing} }, 9, 'all nine missing');
is($j->{parsed}{requests}{limit}, undef, 'nothing parsed');
like($j->{consequence}, qr/^no response/, 'the consequence');
no_secret_ok('sk-probe-dead', $r->{body});



=== TEST 4: TLS to the mock with the test CA: verified, SNI the host, ok
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => tls_url('localhost'), api_key => 'sk-probe-tls');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::true, 'ok') or diag(explain($j));
is($j->{status}, 200, 'status 200');
is($j->{error}, undef, 'no error');
is($j->{family}, 'limits', 'the nine came back');
my $log = mock_log();
is(scalar @$log, 1, 'one request');
ok($log->[0]{tls}, 'over TLS');
is($log->[0]{sni}, 'localhost', 'SNI is the host');
is($log->[0]{headers}{host}, "localhost:$ENV{TEST_NGINX_MOCK_TLS_PORT}", 'Host');
is($log->[0]{credential}, 'sk-probe-tls', 'the credential went, encrypted');
no_secret_ok('sk-probe-tls', $r->{body});



=== TEST 5: TLS with a certificate from a CA the gateway does not trust: a verification error, no request sent
--- http_config eval: $::HttpWrongCa
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => tls_url('localhost'), api_key => 'sk-probe-wrongca');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::false, 'not ok');
is($j->{status}, undef, 'no status');
like($j->{error}, qr/^the certificate of localhost:\d+ does not verify: /, 'a verification error')
    or diag($j->{error});
is(scalar @{ mock_log() }, 0, 'nothing reached the upstream');
no_secret_ok('sk-probe-wrongca', $r->{body});



=== TEST 6: TLS to a name the certificate is not for: a verification error, no request sent
--- request
GET /healthz
--- check
SKIP: {
    skip('no name other than localhost resolves to 127.0.0.1 here', 6) unless $::OtherName;
    my ($st, $j, $r) = probe(base_url => tls_url($::OtherName), api_key => 'sk-probe-name');
    is($st, 200, 'the admin answer is 200') or diag($r->{body});
    is($j->{ok}, JSON::PP::false, 'not ok');
    like($j->{error}, qr/^the certificate of \Q$::OtherName\E:\d+ does not verify: it is not for "\Q$::OtherName\E"$/,
         "a certificate not for $::OtherName") or diag($j->{error});
    is(scalar @{ mock_log() }, 0, 'nothing reached the upstream');
    no_secret_ok('sk-probe-name', $r->{body});
}



=== TEST 7: a slow upstream and a short timeout: timed out, and the worker served others meanwhile
--- init
mock_config({ credentials => { 'sk-probe-slow' => { behavior => 'slow-headers:3000' } } });
--- request
GET /healthz
--- check
my $bg = bg_request(method => 'POST', path => '/admin/accounts/test',
                    headers => { 'x-api-key' => 'admin-key', 'content-type' => 'application/json' },
                    body => json_encode({ base_url => mock_url(), api_key => 'sk-probe-slow',
                                          timeout_ms => 1500 }),
                    timeout => 30);
# the one worker answers while the probe waits for the mock, which has
# the request (it counts a request as it reads it)
ok(poll_until(5, sub { mock_stats()->{total_requests} >= 1 }), 'the mock has the request');
my $t1 = Time::HiRes::time();
my $h = http_request(method => 'GET', path => '/healthz');
my $t2 = Time::HiRes::time();
is($h->{status}, 200, '/healthz answered during the probe');
ok($t2 - $t1 < 0.5, sprintf('at once (%.3f s): the worker is not blocked', $t2 - $t1));
my $r = bg_result($bg);
ok($r->{done_at} - $t2 > 0, 'the probe answered after /healthz');
is($r->{status}, 200, 'the admin answer is 200') or diag($r->{body});
my $j = json_decode($r->{body});
is($j->{ok}, JSON::PP::false, 'not ok');
is($j->{status}, undef, 'no status');
like($j->{error}, qr/^timed out after 1500 ms waiting for the response of 127\.0\.0\.1:\d+$/,
     'the error says it timed out') or diag($j->{error});
ok($j->{latency_ms} >= 1450 && $j->{latency_ms} < 2900, "latency $j->{latency_ms} ms");
no_secret_ok('sk-probe-slow', $r->{body});



=== TEST 8: a response that is not HTTP, and a chunked one
--- init
mock_config({ credentials => { 'sk-probe-garbage' => { behavior => 'garbage' },
                               'sk-probe-chunked' => { behavior => 'chunked' },
                               'sk-probe-err' => { behavior => 'err:529:overloaded_error:' . ('x' x 300) } } });
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => mock_url(), api_key => 'sk-probe-garbage');
is($st, 200, 'the admin answer is 200') or diag($r->{body});
is($j->{ok}, JSON::PP::false, 'garbage: not ok');
is($j->{status}, undef, 'garbage: no status');
like($j->{error}, qr/^a malformed response from 127\.0\.0\.1:\d+: it does not begin with an HTTP\/1\.x status line$/,
     'garbage: a malformed response, in words');
($st, $j, $r) = probe(base_url => mock_url(), api_key => 'sk-probe-chunked');
is($j->{ok}, JSON::PP::true, 'chunked: ok');
is($j->{status}, 200, 'chunked: 200');
is($j->{error}, undef, 'chunked: no error');
($st, $j, $r) = probe(base_url => mock_url(), api_key => 'sk-probe-err');
is($j->{ok}, JSON::PP::false, '529: not ok');
is($j->{status}, 529, "status 529");
is($j->{detail}, 'x' x 200, 'the detail is cut at 200 bytes');
like($j->{consequence}, qr/^the upstream answered with an error/, '529: the consequence');



=== TEST 9: the admin client goes away during the probe: the probe ends by its timeout, the gateway goes on
--- init
mock_config({ credentials => { 'sk-probe-gone' => { behavior => 'hang' } } });
--- request
GET /healthz
--- check
http_request_abort(method => 'POST', path => '/admin/accounts/test',
                   headers => { 'x-api-key' => 'admin-key', 'content-type' => 'application/json' },
                   body => json_encode({ base_url => mock_url(), api_key => 'sk-probe-gone',
                                         timeout_ms => 500 }));
poll_until(5, sub { TB::Nginx::slurp(servroot() . '/logs/error.log') =~ /probe of 127\.0\.0\.1:\d+: timed out/ });
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/probe of 127\.0\.0\.1:\d+: timed out after 500 ms/,
     'the probe ended by its timeout');
my ($st, $j) = probe(base_url => mock_url(), api_key => 'sk-probe-after');
is($j->{status}, 200, 'the next probe works');
no_secret_ok('sk-probe-gone');



=== TEST 10: a body without api_key is refused, and one with a field an account does not have
--- request eval
["POST /admin/accounts/test\n{\"base_url\": \"http://127.0.0.1:1\"}",
 "POST /admin/accounts/test\n{\"api_key\": \"sk-x\", \"nope\": 1}",
 "POST /admin/accounts/test\n{\"api_key\": \"sk-x\", \"timeout_ms\": 5}"]
--- more_headers
x-api-key: admin-key
content-type: application/json
--- error_code eval: [400, 400, 400]
--- response_body_like eval
['"api_key is required"', 'unknown field ..nope', 'timeout_ms must be']



=== TEST 11: https when no account of the file uses it and no store: the gateway has no TLS context, said at once
--- user_files eval
TB::Gateway::pool_yaml(accounts => [{ id => 'plain' }], keys => [{ key => 'admin-key', name => 'admin', admin => 'true' }],
                      yaml => "server:\n  allow_private_hosts: true\n")
--- request
GET /healthz
--- check
my ($st, $j, $r) = probe(base_url => tls_url('localhost'), api_key => 'sk-probe-notls');
is($st, 400, 'refused') or diag($r->{body});
like($j->{error}{message}, qr/^base_url: https needs the trusted certificates/, 'the error says why');
is(scalar @{ mock_log() }, 0, 'nothing reached the upstream');
no_secret_ok('sk-probe-notls', $r->{body});
