# Amazon Bedrock accounts in the pool: requests translated (model into the
# URL through model_map, anthropic_version and the betas into the body,
# nothing else changed), signed with SigV4 per attempt - the mock
# recomputes every signature with the test secret - or sent with a
# Bedrock API key; the event-stream decoded into the SSE the client
# expects, at every split; exceptions, throttling and a corrupt CRC in the
# failure taxonomy; failover between Anthropic and Bedrock before the
# commit point.  Two workers, the real module, the mock.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Map = <<'_EOM_';
      model_map:
        claude-sonnet-4-6: us.anthropic.claude-sonnet-4-6-v1:0
        "claude-haiku-*": anthropic.claude-haiku-4-5-20251001-v1:0
_EOM_

our $Yaml = <<"_EOY_";
>>> tb.yaml
retry:
  max_attempts: 3
  backoff_base_seconds: 0.01
  backoff_max_seconds: 0.02
accounts:
  - id: br1
    type: bedrock
    priority: 5
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}
    options:
      region: us-east-1
      access_key_id: AKIDTESTBR1
      secret_access_key: br1-secret/with+odd=chars
$Map  - id: br2
    type: bedrock
    priority: 4
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT3}
    options:
      region: us-east-1
      access_key_id: ASIATESTBR2
      secret_access_key: br2-secret
      session_token: FwoGZXIvYXdzEBYaDTEST+session/token==
$Map  - id: brk
    type: bedrock
    priority: 3
    api_key: br-api-key-1
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT4}
    options:
$Map  - id: an1
    api_key: sk-an1
    priority: 1
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

# the client's headers never reach Bedrock, x-mock-script neither: a step
# is set as the credential's behaviour
sub behave {
    my ($cred, $step) = @_;
    mock_config({ credentials => { $cred => { behavior => $step } } });
}

our $Bedrock = { bedrock => { region => 'us-east-1',
    keys => { AKIDTESTBR1 => { secret => 'br1-secret/with+odd=chars' },
              ASIATESTBR2 => { secret => 'br2-secret',
                               session_token => 'FwoGZXIvYXdzEBYaDTEST+session/token==' } },
    api_keys => ['br-api-key-1'] } };

# only these accounts take traffic
sub only {
    my %on = map { $_ => 1 } @_;
    for my $id (qw(br1 br2 brk an1)) {
        my $r = admin_post("/admin/accounts/$id/" . ($on{$id} ? 'enable' : 'disable'));
        die "$id: $r->{status}\n" unless $r->{status} == 200;
    }
}

sub send_msg {
    my (%o) = @_;
    my $body = delete $o{body};
    my %h = %{ delete $o{headers} // {} };
    TB::Nginx::http_request(method => 'POST', path => $o{path} // '/v1/messages', timeout => 10,
        headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json',
                     'anthropic-version' => '2023-06-01', %h },
        body => $body // msg_body(%o));
}

sub platform_log { [grep { ($_->{platform} // '') eq 'bedrock' } @{ mock_log() }] }

sub body_of { TB::Nginx::json_decode($_[0]{body}) }

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(only send_msg platform_log body_of behave);
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: a request served by Bedrock with SigV4: the model in the URL, the body translated, nothing of the client's but what the body says
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br1');
my $r = send_msg(path => '/v1/messages?beta=true', text => 'hello bedrock',
                 headers => { 'anthropic-beta' => 'prompt-caching-2024-07-31, token-efficient-tools-2025-02-19',
                              'x-tenant-secret' => 'not for aws', 'user-agent' => 'claude-cli/2.0',
                              'x-tokenbiryani-session' => 'conv-1' });
is($r->{status}, 200, 'answered') or diag($r->{body});
my $m = body_of($r);
is($m->{type}, 'message', 'an Anthropic Message');
like($m->{content}[0]{text}, qr/^Hello from the mock/, 'its text');
is($m->{usage}{output_tokens}, 12, 'its usage');
is($r->{headers}{'x-tokenbiryani-account'}, 'br1', 'answered by br1');
my @amz = grep { /^x-amz/i } keys %{ $r->{headers} };
is_deeply(\@amz, [], 'no x-amz* header of the platform reaches the client');

my $log = platform_log();
is(scalar @$log, 1, 'one request to Bedrock');
my $e = $log->[0];
is($e->{status}, 200, 'the mock verified its signature and served it');
is($e->{auth}, 'sigv4', 'signed with SigV4');
is($e->{credential}, 'AKIDTESTBR1', 'with br1\'s access key');
is($e->{path}, '/model/us.anthropic.claude-sonnet-4-6-v1%3A0/invoke',
   'model_map\'s id in the path, its ":" encoded, the client\'s query string gone');
is_deeply($e->{betas}, ['prompt-caching-2024-07-31', 'token-efficient-tools-2025-02-19'],
          'the anthropic-beta header as anthropic_beta in the body');
like($e->{headers}{authorization}, qr{^AWS4-HMAC-SHA256 Credential=AKIDTESTBR1/\d{8}/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=[0-9a-f]{64}$},
     'the Authorization header');
for my $h (qw(x-tenant-secret user-agent anthropic-version anthropic-beta x-api-key x-tokenbiryani-session)) {
    ok(!exists $e->{headers}{$h}, "the client's $h did not reach Bedrock");
}
is($e->{headers}{'content-type'}, 'application/json', 'content-type');
is($e->{headers}{accept}, 'application/json', 'accept');

# the inspector counts its usage
my $rec = request_record($r->{headers}{'x-tokenbiryani-request-id'});
is($rec->{usage}{output_tokens}, 12, 'the inspector has its usage');


=== TEST 2: unknown body members travel byte for byte; model and stream leave, the caller's anthropic_version is replaced
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br1');
my $raw = '{"max_tokens":32, "model" : "claude-sonnet-4-6","x_future":{"deep":[1,2.50,"\u00e9"]},'
        . '"anthropic_version":"2023-01-01","messages":[{"role":"user","content":"hi"}],"stream":false}';
my $r = send_msg(body => $raw);
is($r->{status}, 200, 'answered') or diag($r->{body});
my $e = platform_log()->[0];
my $want = '{"anthropic_version":"bedrock-2023-05-31","max_tokens":32,"x_future":{"deep":[1,2.50,"\u00e9"]},'
         . '"messages":[{"role":"user","content":"hi"}]}';
is($e->{body_len}, length $want, 'the translated body\'s length');
is($e->{body_sha256}, TB::Nginx::sha256_hex($want), 'byte for byte: every member as it came, model and stream out, the version in');


=== TEST 3: a stream served by Bedrock reaches the client as Anthropic's SSE, whatever the split of the event-stream
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br1');
for my $step ('ok', 'evs-split') {
    behave('AKIDTESTBR1', $step);
    my $r = send_msg(stream => 1, text => 'stream me');
    is($r->{status}, 200, "$step: answered") or diag($r->{body});
    like($r->{headers}{'content-type'}, qr{^text/event-stream}, "$step: as SSE");
    ok(!defined $r->{headers}{'content-length'}, "$step: no Content-Length of the event-stream's");
    my @ev = @{ sse_events($r->{body}) };
    my @names = map { $_->[0] } @ev;
    is($names[0], 'message_start', "$step: message_start first");
    is($names[-1], 'message_stop', "$step: message_stop last");
    ok((grep { $_ eq 'content_block_delta' } @names) >= 3, "$step: three deltas or more");
    my $ok = 1;
    for my $e (@ev) {
        my $d = eval { TB::Nginx::json_decode($e->[1]) };
        $ok = 0 unless $d && $d->{type} eq $e->[0];
    }
    ok($ok, "$step: every event's data is its JSON, of its own type");
    unlike($r->{body}, qr/event: error/, "$step: no error event");
    my $text = join '', map { my $d = TB::Nginx::json_decode($_->[1]); $d->{delta}{text} // '' }
        grep { $_->[0] eq 'content_block_delta' } @ev;
    like($text, qr/^Hello from the mock \(/, "$step: the text whole");
    my $e = platform_log()->[-1];
    like($e->{path}, qr{/invoke-with-response-stream$}, "$step: invoke-with-response-stream");
    is($e->{headers}{accept}, 'application/vnd.amazon.eventstream', "$step: accept");
    my $rec = request_record($r->{headers}{'x-tokenbiryani-request-id'});
    is($rec->{usage}{output_tokens}, 12, "$step: the usage read from the stream");
    mock_reset();
    mock_config($::Bedrock);
}


=== TEST 4: a session token is signed and sent; a Bedrock API key goes as a bearer token
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br2');
my $r = send_msg(stream => 1);
is($r->{status}, 200, 'br2 answered') or diag($r->{body});
my $e = platform_log()->[-1];
is($e->{credential}, 'ASIATESTBR2', 'with its access key');
is($e->{headers}{'x-amz-security-token'}, 'FwoGZXIvYXdzEBYaDTEST+session/token==', 'its session token');
like($e->{headers}{authorization}, qr/SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,/, 'signed too');

only('brk');
$r = send_msg(model => 'claude-haiku-4-5');
is($r->{status}, 200, 'brk answered') or diag($r->{body});
$e = platform_log()->[-1];
is($e->{auth}, 'api_key', 'with its API key');
is($e->{headers}{authorization}, 'Bearer br-api-key-1', 'as a bearer token');
is($e->{path}, '/model/anthropic.claude-haiku-4-5-20251001-v1%3A0/invoke', 'a prefix entry of model_map');


=== TEST 5: a model model_map does not name is never sent to Bedrock; count_tokens is not Bedrock's
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br1');
my $r = send_msg(model => 'claude-opus-4-6');
is($r->{status}, 404, 'no account can serve it') or diag($r->{body});
my $j = body_of($r);
is($j->{type}, 'error', 'an Anthropic error');
is(scalar @{ platform_log() }, 0, 'nothing went to Bedrock');
like($j->{error}{message}, qr/none supports model "claude-opus-4-6"/, 'the refusal says why') or diag($r->{body});

$r = send_msg(path => '/v1/messages/count_tokens');
isnt($r->{status}, 200, 'count_tokens has no Bedrock account to go to');
is(scalar @{ platform_log() }, 0, 'nothing went to Bedrock');
like(body_of($r)->{error}{message}, qr{can serve this request}, 'refused at once') or diag($r->{body});


=== TEST 6: Bedrock's errors in the taxonomy: throttling cools and fails over, not ready is overloaded, a wrong signature disables, a validation error is the caller's
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
my @rows = (
    # step, the account after, its state, the client's status, attempts
    ['429', 'cooling', 200, 2],
    ['529', 'cooling', 200, 2],
    ['503', 'cooling', 200, 2],
    ['500', 'ready', 200, 2],
    ['403', 'ready', 200, 2],
    ['400', 'ready', 400, 1],
);
for my $row (@rows) {
    my ($step, $state, $status, $attempts) = @$row;
    for my $stream (0, 1) {
        admin_post("/admin/accounts/$_/enable") for qw(br1 br2 brk an1);
        only('br1', 'an1');
        mock_reset();
        mock_config($::Bedrock);
        behave('AKIDTESTBR1', $step);
        my $r = send_msg(stream => $stream);
        my $what = "$step " . ($stream ? 'streamed' : 'not streamed');
        is($r->{status}, $status, "$what: the client gets $status") or diag($r->{body});
        my $log = mock_log();
        is(scalar @$log, $attempts, "$what: $attempts attempts");
        is($log->[0]{platform}, 'bedrock', "$what: Bedrock first");
        is($r->{headers}{'x-tokenbiryani-account'}, 'an1', "$what: then an1") if $attempts == 2;
        my $a = account_of(pool_status(), 'br1');
        is($a->{state}, $state, "$what: br1 is $state");
        # a cooldown or an error the score remembers outlasts the row: the
        # zone begins again
        restart();
        if ($status == 400) {
            my $j = body_of($r);
            is($j->{type}, 'error', "$what: an Anthropic error");
            is($j->{error}{type}, 'invalid_request_error', "$what: invalid_request_error");
            is($j->{error}{message}, 'mock: scripted validation error', "$what: Bedrock's message, the caller's to fix");
            ok(!grep({ /^x-amzn/i } keys %{ $r->{headers} }), "$what: no x-amzn header");
        }
    }
}

# a wrong secret: the mock's signature differs - the account is disabled
mock_reset();
mock_config({ bedrock => { %{ $::Bedrock->{bedrock} },
              keys => { AKIDTESTBR1 => { secret => 'another secret' } } } });
admin_post("/admin/accounts/$_/enable") for qw(br1 an1);
only('br1', 'an1');
my $r = send_msg();
is($r->{status}, 200, 'a bad signature: failed over') or diag($r->{body});
my $log = mock_log();
is($log->[0]{error_type}, 'InvalidSignatureException', 'the mock refused the signature');
is($r->{headers}{'x-tokenbiryani-account'}, 'an1', 'an1 answered');
my $a = account_of(pool_status(), 'br1');
is($a->{state}, 'disabled', 'br1 is disabled');


=== TEST 7: an exception frame or a corrupt CRC before the first delta is retried unseen; a corrupt CRC after it ends the stream with one error event, never garbage
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
for my $step ('preerr', 'evs-badcrc') {
    restart();
    admin_post("/admin/accounts/$_/enable") for qw(br1 an1);
    only('br1', 'an1');
    mock_reset();
    mock_config($::Bedrock);
    behave('AKIDTESTBR1', $step);
    my $r = send_msg(stream => 1);
    is($r->{status}, 200, "$step: answered") or diag($r->{body});
    is($r->{headers}{'x-tokenbiryani-account'}, 'an1', "$step: by an1, after br1 failed");
    unlike($r->{body}, qr/event: error/, "$step: the client saw nothing of it");
    is(count_events($r->{body}, 'message_start'), 1, "$step: one message_start");
    my $log = mock_log();
    is(scalar @$log, 2, "$step: two attempts");
}

restart();
only('br1');
mock_reset();
mock_config($::Bedrock);
behave('AKIDTESTBR1', 'evs-badcrc-late');
my $r = send_msg(stream => 1);
is($r->{status}, 200, 'late: the stream had begun');
is(count_events($r->{body}, 'error'), 1, 'late: exactly one error event');
my @ev = @{ sse_events($r->{body}) };
is($ev[-1][0], 'error', 'late: the error event last');
my $ok = 1;
for my $e (@ev) { $ok = 0 unless eval { TB::Nginx::json_decode($e->[1]) } }
ok($ok, 'late: every event the client got is JSON: no byte of the broken frame');
like($r->{body}, qr/^event: message_start\n/, 'late: it began as a stream should');
ok(!grep({ $_->[0] eq 'message_stop' } @ev), 'late: no message_stop');
--- error_log
a frame's message CRC does not match


=== TEST 8: failover from Anthropic to Bedrock before the commit point, streamed and not
--- user_files eval
(my $y = $::Yaml) =~ s/priority: 1\n/priority: 9\n/;
$y
--- init
mock_config({ %$::Bedrock, credentials => { 'sk-an1' => { behavior => '529' } } });
--- request
GET /healthz
--- check
for my $stream (0, 1) {
    admin_post("/admin/accounts/$_/enable") for qw(br1 an1);
    only('br1', 'an1');
    my $n = scalar @{ mock_log() };
    my $r = send_msg(stream => $stream);
    is($r->{status}, 200, "stream $stream: answered") or diag($r->{body});
    my @log = @{ mock_log() }[$n .. $#{ mock_log() }];
    is(scalar @log, 2, "stream $stream: two attempts");
    is($log[0]{credential}, 'sk-an1', "stream $stream: an1 first (its priority)");
    is($log[0]{status}, 529, "stream $stream: overloaded");
    is($log[1]{platform}, 'bedrock', "stream $stream: then Bedrock");
    is($r->{headers}{'x-tokenbiryani-account'}, 'br1', "stream $stream: br1 answered");
    unlike($r->{body}, qr/overloaded/, "stream $stream: the client saw nothing of an1's error");
    like($r->{body}, $stream ? qr/^event: message_start/ : qr/^\{"id":"msg_mock_/, "stream $stream: a whole answer");
}


=== TEST 9: limits unobservable: never read as full, the concurrency its 429s teach
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
only('br1', 'an1');
my $a = account_of(pool_status(), 'br1');
is($a->{limits}{observable}, JSON::PP::false, 'its limits are not observable');
like($a->{limits}{unobservable}, qr/^limits unobservable: it sends no rate-limit headers/, 'and the status says so');
is($a->{headroom}, 0.5, 'read as its assumed headroom, not as full');
is($a->{concurrency}{max}, 16, 'max_concurrency');
is($a->{concurrency}{learned}, undef, 'nothing taught yet');
is(account_of(pool_status(), 'an1')->{limits}{observable}, JSON::PP::true, 'an Anthropic account\'s are');

# four at once: three held at the mock, the fourth throttled while they are
behave('AKIDTESTBR1', 'slow-headers:500,slow-headers:500,slow-headers:500,429');
my @r = @{ http_requests_concurrent([map { { method => 'POST', path => '/v1/messages', timeout => 10,
    headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json' },
    body => msg_body() } } 1 .. 4]) };
is(scalar(grep { $_->{status} == 200 } @r), 4, 'all four served') or diag(join "\n", map { "$_->{status} $_->{body}" } @r);
is(scalar(grep { $_->{headers}{'x-tokenbiryani-account'} eq 'an1' } @r), 1, 'the throttled one by an1');
$a = account_of(pool_status(), 'br1');
is($a->{concurrency}{learned}, 3, 'three quarters of the four in flight when the 429 came');
is($a->{state}, 'cooling', 'and it cools');

my $rec = request_record((grep { $_->{headers}{'x-tokenbiryani-account'} eq 'an1' } @r)[0]{headers}{'x-tokenbiryani-request-id'});
my ($c) = grep { $_->{account} eq 'br1' } @{ $rec->{decision}{candidates} };
is($c->{limits}, 'unobservable', 'the inspector says its limits are unobservable');


=== TEST 10: the header check is not a Bedrock account's: refused, saying why, nothing sent
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts/br1/test', {});
is($st, 409, 'refused');
like($j->{error}{message}, qr/is a bedrock account: the header check is for Anthropic API keys/, 'saying why');
is(scalar @{ mock_log() }, 0, 'nothing sent');


=== TEST 11: a first frame that breaks on every attempt moves the request to another account, whatever the preferred one's priority
--- user_files eval
(my $y = $::Yaml) =~ s/^retry:/routing:\n  strategy: priority\nretry:/m;
$y
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
for my $case (['evs-badcrc-first', 1], ['evs-badcrc', 1], ['reset', 0], ['reset', 1]) {
    my ($step, $stream) = @$case;
    restart();
    only('br1', 'an1');
    mock_reset();
    mock_config($::Bedrock);
    behave('AKIDTESTBR1', $step);
    $step .= $stream ? ' streamed' : ' JSON';
    my $r = send_msg(stream => $stream);
    is($r->{status}, 200, "$step: answered") or diag($r->{body});
    is($r->{headers}{'x-tokenbiryani-account'}, 'an1', "$step: by an1");
    my @log = @{ mock_log() };
    is_deeply([map { $_->{platform} // 'anthropic' } @log], ['bedrock', 'anthropic'],
              "$step: br1 once, then the healthy account");
    unlike($r->{body}, qr/event: error/, "$step: the client saw nothing of it");
}

# the same account again only when no other can take it
restart();
only('br1');
mock_reset();
mock_config($::Bedrock);
behave('AKIDTESTBR1', 'evs-badcrc-first');
my $r = send_msg(stream => 1);
is($r->{status}, 502, 'alone: every attempt broke, 502') or diag($r->{body});
is(body_of($r)->{error}{type}, 'api_error', 'alone: api_error');
# the mock logs an answer once it is sent: the client may have its 502 first
ok(TB::Nginx::poll_until(5, sub { @{ platform_log() } >= 3 }), 'alone: br1 took each of the three attempts');
is(scalar @{ platform_log() }, 3, 'alone: and no more');
--- error_log
a frame's message CRC does not match


=== TEST 12: Bedrock's AccessDeniedException reaches the client as docs/providers.md says: 403 permission_error
--- init
mock_config($::Bedrock);
--- request
GET /healthz
--- check
for my $stream (0, 1) {
    restart();
    only('br1');
    mock_reset();
    mock_config($::Bedrock);
    behave('AKIDTESTBR1', '403');
    my $r = send_msg(stream => $stream);
    is($r->{status}, 403, "stream $stream: 403") or diag($r->{body});
    my $j = body_of($r);
    is($j->{error}{type}, 'permission_error', "stream $stream: permission_error");
    like($j->{error}{message}, qr/AccessDeniedException/, "stream $stream: naming Bedrock's exception");
    unlike($j->{error}{message}, qr/don't have access to the model/, "stream $stream: not Bedrock's own message");
    is(scalar @{ platform_log() }, 1, "stream $stream: one attempt");
}


=== TEST 13: options.anthropic_version replaces the documented bedrock-2023-05-31 for that account only; a value that could break the body fails nginx -t
--- user_files eval
(my $y = $::Yaml) =~ s/(secret_access_key: br2-secret\n)/$1      anthropic_version: bedrock-2026-10-21\n/;
$y
--- init
mock_config({ %$::Bedrock, bedrock => { %{ $::Bedrock->{bedrock} },
              versions => ['bedrock-2023-05-31', 'bedrock-2026-10-21'] } });
--- request
GET /healthz
--- check
for my $id ('br1', 'br2') {
    only($id);
    my $r = send_msg(text => "to $id");
    is($r->{status}, 200, "$id: answered") or diag($r->{body});
}
my @log = @{ platform_log() };
is($log[0]{anthropic_version}, 'bedrock-2023-05-31', 'br1: the documented version');
is($log[1]{anthropic_version}, 'bedrock-2026-10-21', 'br2: its own option');
# one request over both: each attempt's body carries its account's version
only('br1', 'br2');
behave('AKIDTESTBR1', 'preerr');
my $n = scalar @{ platform_log() };
my $r = send_msg(stream => 1);
is($r->{status}, 200, 'failed over between them') or diag($r->{body});
my @two = @{ platform_log() }[$n .. $#{ platform_log() }];
is_deeply([map { $_->{anthropic_version} } @two], ['bedrock-2023-05-31', 'bedrock-2026-10-21'],
          'each attempt with its account\'s version');

(my $bad = $::Yaml) =~ s/(secret_access_key: br2-secret\n)/$1      anthropic_version: 'x","model":"y'\n/;
$bad =~ s/^>>> tb.yaml\n//;
my ($rc, $out) = nginx_t($bad);
isnt($rc, 0, 'nginx -t fails');
like($out, qr/account br2: options\.anthropic_version .* is not valid/, 'naming the account and the option');
