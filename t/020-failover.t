# Silent failover before the commit point; the truth after it.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

# nothing listens here: connecting fails at once
$ENV{TEST_NGINX_DEAD_PORT} ||= 19109;

# open mode (no keys): every caller sees everything
our $Yaml = pool_yaml(accounts => 3, keys => [],
                      yaml => "server:\n  request_timeout_seconds: 1\n");

# the dead account is the first choice, every time
our $YamlDead = pool_yaml(keys => [],
                          accounts => [{ id => 'dead', port => 'dead', priority => 1 },
                                       { id => 'live' }]);

our $YamlAllDead = pool_yaml(keys => [],
                             accounts => [{ id => 'dead1', port => 'dead' },
                                          { id => 'dead2', port => 'dead' }]);

# the k-th attempt of a request gets the k-th step, whatever its account
sub script { "x-mock-script: $_[0]\nx-mock-script-id: " . ($_[1] // 's1') }

sub attempts_ok {
    my ($n, $what) = @_;
    my $log = mock_log();
    is(scalar @$log, $n, "$what: $n upstream attempts");
    my %seen = map { $_->{credential} => 1 } @$log;
    is(scalar keys %seen, $n, "$what: each on another account");
    $log;
}


gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: 429, then 529, then 200: the client only sees the 200
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('429,529,ok')
--- error_code: 200
--- error_log eval
[qr/gave status 429 \(rate_limit\) on attempt 1, retrying on another account/,
 qr/gave status 529 \(overloaded\) on attempt 2, retrying in \d+ms/]
--- upstream
status
429
529
200
--- upstream_distinct: credential
--- verbatim: 3
--- account: answered




=== TEST 2: the same on a stream: exactly one message_start reaches the client
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('429,529,ok')
--- error_code: 200
--- upstream
status
429
529
200
--- upstream_distinct: credential
--- verbatim: 3
--- sse
message_start: 1
error: 0




=== TEST 3: a stream that errors before its first delta is retried invisibly
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('preerr,ok')
--- error_code: 200
--- error_log eval
qr/gave stream error overloaded_error \(overloaded\) on attempt 1, retrying in \d+ms/
--- upstream
step
preerr
ok
--- upstream_distinct: credential
--- verbatim: 2
--- sse
message_start: 1
error: 0




=== TEST 4: 500, 502, 503 and 504 are retried, JSON and streams alike
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . stream_body(),
 "POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . stream_body()]
--- more_headers eval
[script('500,ok', 'a'), script('502,ok', 'b'), script('503,ok', 'c'),
 script('504,ok', 'd')]
--- error_code eval
[200, 200, 200, 200]
--- upstream
script_id status
a         500
a         200
b         502
b         200
c         503
c         200
d         504
d         200
--- check
is(count_events($responses[1]{body}, 'message_start'), 1, 'one message_start');




=== TEST 5: a connection reset and a hung upstream are retried
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . stream_body()]
--- more_headers eval
[script('reset,ok', 'r'), script('hang,ok', 'h')]
--- error_code eval
[200, 200]
--- timeout: 5
--- error_log eval
[qr/connection failed \(transport\) on attempt 1, retrying in \d+ms/,
 qr/timed out \(timeout\) on attempt 1, retrying in \d+ms/]
--- check
my $log = mock_log();
is(scalar(grep { $_->{script_id} eq 'r' } @$log), 2, 'reset: two attempts');
is(scalar(grep { $_->{script_id} eq 'h' } @$log), 2, 'hang: two attempts');
is(count_events($responses[1]{body}, 'message_start'), 1, 'one message_start');



=== TEST 5b: a stream that sends headers but no delta in time is retried
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('slow-prelude:1500,ok')
--- error_code: 200
--- timeout: 6
--- error_log eval
qr/timed out \(timeout\) on attempt 1, retrying in \d+ms/
--- check
# the mock logs the abandoned attempt once its sleep is over
poll_until(5, sub { @{ mock_log() } >= 2 });
my $log = attempts_ok(2, 'slow prelude');
is(count_events($resp->{body}, 'message_start'), 1, 'one message_start');
is(sha256_hex($resp->{body}), $log->[1]{resp_sha256}, 'the second stream, verbatim');



=== TEST 6: an account that refuses connections is skipped
--- user_files eval: $::YamlDead
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . msg_body()]
--- more_headers eval
["", ""]
--- error_code eval
[200, 200]
--- error_log eval
qr/account "dead" connection failed \(transport\) on attempt 1, retrying in \d+ms/
--- upstream
credential
sk-live
sk-live
--- check
is($_->{headers}{'x-tokenbiryani-account'}, 'live', 'named') for @responses;




=== TEST 7: when every attempt fails, the client gets the gateway's own error, with retry-after
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('429:7,529,429:9')
--- error_code: 429
--- response_headers
content-type: application/json
--- error_log eval
qr/gave status 429 \(rate_limit\) on attempt 3, giving up: the request failed on 3 attempts \(retry.max_attempts\)/
--- upstream
status
429
529
429
--- upstream_distinct: credential
--- check
my $err = json_decode($resp->{body});
is($err->{error}{type}, 'rate_limit_error', 'an Anthropic error type');
like($err->{error}{message}, qr/^the request failed on 3 attempts \(retry\.max_attempts\); the last: account "a\d" gave status 429 \(rate_limit\)$/,
     'saying what happened');
# a1 cools 7 s, a3 9 s, a2 5 s after its 529: the soonest is a2
is($resp->{headers}{'retry-after'}, 5, 'retry-after: when the soonest account is back');
ok(!exists $resp->{headers}{'x-tokenbiryani-account'}, 'no account answered');



=== TEST 8: a streaming request whose attempts all fail gets a plain HTTP error
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('529,529,529')
--- error_code: 529
--- response_headers_like
content-type: application/json
--- upstream
status
529
529
529
--- upstream_distinct: credential
--- check
is(json_decode($resp->{body})->{error}{type}, 'overloaded_error', 'JSON, not SSE');




=== TEST 9: retry.max_attempts bounds the attempts
--- user_files eval
$::Yaml =~ s/^server:\n/retry:\n  max_attempts: 2\nserver:\n/mr
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('500,500,ok')
--- error_code: 502
--- upstream
status
500
500
--- upstream_distinct: credential
--- check
is(json_decode($resp->{body})->{error}{type}, 'api_error', 'api_error');




=== TEST 10: a 400 is sent upstream once and returned verbatim
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . stream_body()]
--- more_headers eval
[script('400,ok', 'x'), script('400,ok', 'y')]
--- error_code eval
[400, 400]
--- upstream
script_id status
x         400
y         400
--- check
my $log = mock_log();
is(sha256_hex($responses[$_]{body}), $log->[$_]{resp_sha256}, "400 #$_ verbatim")
    for 0, 1;




=== TEST 11: after the first delta a broken stream ends with one error event
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('midfail,ok')
--- error_code: 200
--- error_log
broke after the commit point
--- upstream
step
midfail
--- sse
message_start: 1
content_block_delta: >= 1
error: 1
--- check
my $ev = sse_events($resp->{body});
is($ev->[-1][0], 'error', '... and it is the last event');
my $err = json_decode($ev->[-1][1]);
is($err->{type}, 'error', 'Anthropic-shaped');
is($err->{error}{type}, 'api_error', 'api_error');
ok(!$resp->{error}, 'the chunked response was ended properly')
    or diag($resp->{error});



=== TEST 12: an error event the upstream sends after the commit point is not doubled
--- request eval
"POST /v1/messages\n" . stream_body()
--- more_headers eval
script('midfail-error,ok')
--- error_code: 200
--- no_error_log
broke after the commit point
--- upstream
step
midfail-error
--- verbatim: 1
--- sse
error: 1




=== TEST 13: a 300 KB body, spooled to disk, is re-sent intact on every attempt
--- config eval
"client_body_buffer_size 16k;\n" . $::Locations
--- request eval
"POST /v1/messages\n" . big_body(300_000)
--- more_headers eval
script('500,502,ok')
--- error_code: 200
--- check
my $log = attempts_ok(3, '300 KB body');
my $sent = $block->request =~ s/^[^\n]*\n//r;
ok(length($sent) >= 300_000, 'the body is 300 KB');
is($_->{body_len}, length $sent, 'attempt got all of it') for @$log;
is($_->{body_sha256}, sha256_hex($sent), 'attempt got it intact') for @$log;



=== TEST 14: no account reachable: an Anthropic-shaped 502
--- user_files eval: $::YamlAllDead
--- request eval
"POST /v1/messages\n" . msg_body()
--- error_code: 502
--- response_headers_like
content-type: application/json
x-tokenbiryani-request-id: tbr_[0-9a-f]{24}
--- response_body_like: ^\{"type":"error","error":\{"type":"api_error","message":"the request failed on 3 attempts \(retry.max_attempts\); the last: account \\"dead\d\\" connection failed \(transport\)"\},"request_id":"tbr_[0-9a-f]{24}"\}$
--- error_log
giving up



=== TEST 15: every attempt timing out: an Anthropic-shaped 504
--- user_files eval
$::Yaml =~ s/^server:\n/retry:\n  max_attempts: 2\nserver:\n/mr
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('hang,hang')
--- timeout: 6
--- error_code: 504
--- response_body_like: ^\{"type":"error","error":\{"type":"timeout_error","message":"the request failed on 2 attempts \(retry.max_attempts\); the last: account \\"a\d\\" timed out \(timeout\)"\}
--- check
my $log = attempts_ok(2, 'two hangs');
is_deeply([map { $_->{step} } @$log], ['hang', 'hang'], 'both hung');
