# A JSON answer reaches the client whole or not at all: it is held until
# it is complete, and one cut short, broken, late or not JSON is an attempt
# that failed - retried on another account, or the final error.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = pool_yaml(accounts => 3, keys => [],
                      yaml => "server:\n  request_timeout_seconds: 1\n"
                            . "retry:\n  backoff_base_seconds: 0.01\n"
                            . "  backoff_max_seconds: 0.02\n");

# the k-th attempt of a request gets the k-th step, whatever its account
sub script { "x-mock-script: $_[0]\nx-mock-script-id: " . ($_[1] // 's1') }

# a whole answer: a 200, well framed, with its length, a Message (that it
# is the last attempt's, byte for byte, a block says with --- verbatim)
sub whole_answer_ok {
    my ($r, $what) = @_;
    is($r->{status}, 200, "$what: 200");
    ok(!$r->{error}, "$what: a well-framed response") or diag($r->{error});
    is($r->{headers}{'content-length'}, length $r->{body}, "$what: with its length");
    is(json_decode($r->{body})->{type}, 'message', "$what: a Message");
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: an answer cut short is retried; the client never sees the half
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('midfail,ok')
--- upstream
step
midfail
ok
--- upstream_distinct: credential
--- verbatim: last
--- check
whole_answer_ok($resp, 'cut short');




=== TEST 2: a chunked answer cut before its last chunk is retried; a whole one goes on with its length
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('chunked-midfail,chunked')
--- upstream
step
chunked-midfail
chunked
--- verbatim: last
--- check
whole_answer_ok($resp, 'chunked');
ok(!exists $resp->{headers}{'transfer-encoding'}, 'decoded, not chunked');




=== TEST 3: a 200 whose body is not JSON is retried
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('badjson,ok')
--- error_log
answered 2xx with a body that is not JSON
--- upstream
step
badjson
ok
--- verbatim: last
--- check
whole_answer_ok($resp, 'not JSON');




=== TEST 4: an answer slower than the request timeout is retried
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('drip:400,ok')
--- timeout: 10
--- check
# the dripping attempt is logged when the mock is done with it
ok(poll_until(8, sub { @{ mock_log() } == 2 }), 'both attempts logged');
my $log = mock_log();
my ($drip) = grep { $_->{step} eq 'drip:400' } @$log;
ok($drip && $drip->{client_aborted}, 'the gateway gave the slow one up');
my ($ok) = grep { $_->{step} eq 'ok' } @$log;
is(sha256_hex($resp->{body}), $ok->{resp_sha256}, "the client got the second attempt's answer");
is(json_decode($resp->{body})->{type}, 'message', 'a Message');



=== TEST 5: every attempt cut: an Anthropic-shaped error, never a cut 200
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
script('midfail,midfail,midfail')
--- error_code: 502
--- upstream
step
midfail
midfail
midfail
--- check
my $e = json_decode($resp->{body});
is($e->{type}, 'error', 'an error');
is($e->{error}{type}, 'api_error', 'api_error');
like($e->{error}{message}, qr/3 attempts/, 'saying how many attempts');




=== TEST 6: count_tokens and models answers are held whole too
--- request eval
["POST /v1/messages/count_tokens\n" . msg_body(), "GET /v1/models"]
--- more_headers eval
[script('midfail,ok', 'ct'), script('chunked-midfail,ok', 'md')]
--- error_code eval
[200, 200]
--- upstream
script_id path
ct        /v1/messages/count_tokens
ct        /v1/messages/count_tokens
md        /v1/models
md        /v1/models
--- check
like($responses[0]{body}, qr/^\{"input_tokens":\d+\}$/, 'count_tokens: whole');
like($responses[1]{body}, qr/"last_id":"claude-haiku-4-5"\}$/, 'models: whole');




=== TEST 7: a 3 MB answer: held in O(size) memory, intact, its usage read
--- request eval
"POST /v1/messages\n" . msg_body(max_tokens => 800000)
--- more_headers
x-mock-output-tokens: 450000
--- timeout: 30
--- init
mock_config({ defaults => { output_limit => 10_000_000 } });
our @Hwm0 = map { hwm($_) } worker_pids();
sub hwm { (TB::Nginx::slurp("/proc/$_[0]/status") =~ /^VmHWM:\s+(\d+) kB/m)[0] * 1024 }
--- upstream
status
200
--- verbatim: 1
--- record
usage.output_tokens: 450000
--- check
whole_answer_ok($resp, '3 MB');
my $n = length $resp->{body};
ok($n > 3_000_000 && $n < 4_194_304, "the answer is $n bytes, below the 4 MiB bound");
my @hwm = map { hwm($_) } worker_pids();
my ($grew) = sort { $b <=> $a } map { $hwm[$_] - $::Hwm0[$_] } 0 .. $#hwm;
my $per = $grew / $n;
note(sprintf 'peak worker memory grew %.1f MB for a %.1f MB answer: %.2f bytes per answer byte',
             $grew / 1e6, $n / 1e6, $per);
SKIP: {
    # memcheck's shadow memory and redzones count in the worker's peak
    skip 'under valgrind the peak is memcheck\'s as much as the module\'s', 1
        if $ENV{TEST_NGINX_VALGRIND};
    cmp_ok($per, '<', 3, 'memory per answer byte stays below 3');
}



=== TEST 8: above retry.hold_response_bytes an answer is passed on as it comes
--- user_files eval
$::Yaml =~ s/^retry:\n/retry:\n  hold_response_bytes: 1000\n/mr
--- request eval
"POST /v1/messages\n" . msg_body(max_tokens => 4000)
--- more_headers
x-mock-output-tokens: 3000
--- upstream
status
200
--- verbatim: 1
--- check
whole_answer_ok($resp, 'not held');
ok(length $resp->{body} > 1000, 'larger than the bound');
