# The failure taxonomy end to end: every class of upstream outcome, streamed
# and not, with what the client gets, what becomes of the account and how
# many attempts the upstream saw; the circuit breaker; the retry budget;
# grace commit and prelude stalls; the events; an operator's re-enable.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes qw(time);

master_on();
workers(2);
no_shuffle();
mock_start();

our $Accounts = join '', map { <<"_EOA_" } 1 .. 3;
  - id: a$_
    api_key: sk-a$_
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT@{[ $_ == 1 ? '' : $_ ]}}
_EOA_

our $Keys = <<'_EOK_';
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: pin-a1
    name: pinned
    pool: [a1]
_EOK_

our $Yaml = <<"_EOY_";
>>> tb.yaml
server:
  request_timeout_seconds: 1
retry:
  max_attempts: 3
  backoff_base_seconds: 0.02
  backoff_max_seconds: 0.05
breaker:
  overloaded_cooldown_seconds: 3
  exhausted_cooldown_seconds: 600
accounts:
$Accounts$Keys
_EOY_

sub script { ('x-mock-script' => $_[0], 'x-mock-script-id' => $_[1]) }

sub send_msg {
    my ($stream, %h) = @_;
    http_request(method => 'POST', path => '/v1/messages', timeout => 8,
                 body => $stream ? stream_body(text => 'the secret prompt 4711')
                                 : msg_body(text => 'the secret prompt 4711'),
                 headers => { 'x-api-key' => 'admin-key', %h });
}

sub id_of { my $c = shift; $c =~ s/^sk-//; $c }


gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: the fault matrix: every class, streamed and not
--- http_config eval
# a fresh connection per attempt: a reset is then the account's, never an
# idle connection the upstream had closed
"tokenbiryani_keepalive 0;\n" . $::HttpConfig
--- timeout: 120
--- check
my $spend400 = 'err:400:invalid_request_error:Your credit balance is too low '
             . 'to access the Anthropic API.';
# step => [class, status the client gets, attempts, state of the account
#          that had the first attempt, its reason]
my @rows = (
    ['429:7',          'rate_limit',     200, 2, 'cooling',
     qr/^rate limited \(429\), retry-after 7s$/],
    ['429-spend',      'spend_limit',    200, 2, 'exhausted',
     qr/^spend limit reached$/],
    [$spend400,        'spend_limit',    200, 2, 'exhausted',
     qr/^spend limit reached$/],
    ['402',            'billing',        200, 2, 'exhausted',
     qr/^billing_error \(402\)$/],
    ['529',            'overloaded',     200, 2, 'cooling',
     qr/^overloaded \(529\)$/],
    ['401',            'invalid_auth',   200, 2, 'disabled', qr/^invalid_auth$/],
    ['err:403:authentication_error:key revoked',
                       'invalid_auth',   200, 2, 'disabled', qr/^invalid_auth$/],
    ['403-model',      'model_not_permitted', 200, 2, 'ready', undef],
    ['403',            'model_not_permitted', 200, 2, 'ready', undef],
    ['400',            'client_error',   400, 1, 'ready', undef],
    ['404',            'client_error',   404, 1, 'ready', undef],
    ['413',            'client_error',   413, 1, 'ready', undef],
    ['err:409:quantum_flux_error',
                       'client_error',   409, 1, 'ready', undef],
    ['408',            'upstream_error', 200, 2, 'ready', undef],
    ['500',            'upstream_error', 200, 2, 'ready', undef],
    ['502',            'upstream_error', 200, 2, 'ready', undef],
    ['503',            'upstream_error', 200, 2, 'ready', undef],
    ['504',            'upstream_error', 200, 2, 'ready', undef],
    ['err:500:quantum_flux_error',
                       'upstream_error', 200, 2, 'ready', undef],
    # no answer at all since its last success: failing, not ready
    ['reset',          'transport',      200, 2, 'failing',
     qr/^no answer: connect error, reset or TLS failure$/],
    ['garbage',        'transport',      200, 2, 'failing',
     qr/^no answer: connect error, reset or TLS failure$/],
    ['hang',           'timeout',        200, 2, 'failing',
     qr/^no answer within the request timeout$/],
    ['preerr',         'overloaded',     200, 2, 'cooling',
     qr/^overloaded \((529|stream error)\)$/],
);

my $n = 0;
for my $row (@rows) {
    my ($step, $class, $status, $attempts, $state, $reason) = @$row;
    for my $stream (0, 1) {
        my $what = "$step " . ($stream ? 'streamed' : 'not streamed');
        admin_post("/admin/accounts/a$_/enable") for 1 .. 3;
        mock_reset();
        my %before = map { $_->{id} => $_->{outcomes} } @{ pool_status()->{accounts} };

        my $r = send_msg($stream, script("$step,ok", 'm' . ++$n));
        is($r->{status}, $status, "$what: client status $status");

        # the abandoned attempt of a hang is logged when it is dropped
        my $log = mock_log();
        is(scalar @$log, $attempts, "$what: $attempts upstream attempt(s)");
        my $first = id_of($log->[0]{credential});

        if ($status == 200) {
            is(sha256_hex($r->{body}), $log->[-1]{resp_sha256},
               "$what: the answer, verbatim");
            if ($stream) {
                is(count_events($r->{body}, 'message_start'), 1,
                   "$what: one message_start");
                is(count_events($r->{body}, 'error'), 0, "$what: no error event");
            }
        } else {
            is(sha256_hex($r->{body}), $log->[0]{resp_sha256},
               "$what: returned verbatim");
            is($r->{headers}{'x-tokenbiryani-account'}, $first,
               "$what: named after its account");
        }

        my $acct = account_of(pool_status(), $first);
        is($acct->{state}, $state, "$what: $first is $state");
        like($acct->{reason}, $reason, "$what: $first: $acct->{reason}")
            if $reason;
        is(($acct->{outcomes}{$class} // 0) - ($before{$first}{$class} // 0), 1,
           "$what: counted once as $class");
        if ($class eq 'model_not_permitted') {
            is_deeply($acct->{rejected_models}, ['claude-sonnet-4-6'],
                      "$what: the model is refused on $first only");
        }
        if ($state eq 'cooling') {
            # retry-after 7; breaker.overloaded_cooldown_seconds 3 (not 5)
            my $max = $class eq 'rate_limit' ? 7 : 3;
            ok($acct->{until_in} > $max - 1.5 && $acct->{until_in} <= $max,
               "$what: with a countdown of at most ${max}s ($acct->{until_in}s)");
        }
        if ($state eq 'exhausted') {
            ok($acct->{until_in} > 590, "$what: for a long while ($acct->{until_in}s)");
        }
        if ($class =~ /^(upstream_error|transport|timeout|overloaded)$/) {
            # unless the retry found the same account and its success closed it
            ok($acct->{breaker}{failures} >= 1, "$what: a breaker failure")
                if $log->[-1]{credential} ne $log->[0]{credential};
        } else {
            is($acct->{breaker}{failures}, 0, "$what: breaker-neutral");
        }
    }
}

# an operator's enable clears every state
admin_post("/admin/accounts/a$_/enable") for 1 .. 3;
my $st = quiet_pool_ok();
is($_->{state}, 'ready', "$_->{id} ready again") for @{ $st->{accounts} };
is_deeply($_->{rejected_models}, [], "$_->{id}: no refused model")
    for @{ $st->{accounts} };



=== TEST 2: a refused model is not tried again on that account, others still serve it
--- check
my $r = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                     headers => { 'x-api-key' => 'pin-a1', script('403-model,ok', 'x') });
# a permission the operator has to grant, not a model nobody offers
is($r->{status}, 403, 'the only account of the key refused the model: 403');
is(json_decode($r->{body})->{error}{type}, 'permission_error', 'permission_error');
is($r->{headers}{'x-should-retry'}, 'false', 'not to be retried');
like(json_decode($r->{body})->{error}{message},
     qr/no account in this pool can serve this request: every account in this key's pool that offers model "claude-sonnet-4-6" refused it; the last: account "a1" gave status 403 \(model_not_permitted\)/,
     'and the client is told why');
is(scalar @{ mock_log() }, 1, 'sent once');
my $r2 = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                      headers => { 'x-api-key' => 'pin-a1' });
is($r2->{status}, 403, 'at once the next time');
like(json_decode($r2->{body})->{error}{message}, qr/every account in this key's pool that offers model "claude-sonnet-4-6" refused it$/,
     'saying so without an attempt of its own');
is(scalar @{ mock_log() }, 1, 'without asking the upstream again');
my $r3 = http_request(method => 'POST', path => '/v1/messages',
                      body => msg_body(model => 'claude-haiku-4-5'),
                      headers => { 'x-api-key' => 'pin-a1' });
is($r3->{status}, 200, 'another model still goes to that account');
my $r4 = send_msg(0);
is($r4->{status}, 200, 'and the model still goes to the others');
isnt($r4->{headers}{'x-tokenbiryani-account'}, 'a1', '... never to a1');



=== TEST 3: the breaker: open, half-open, one probe, re-open, closed
--- user_files eval
my $y = $::Yaml;
$y =~ s/breaker:\n/breaker:\n  failure_threshold: 2\n  cooldown_seconds: 1\n/;
$y =~ s/max_attempts: 3/max_attempts: 1/;
# a2 first in the score: a1 is evaluated without being chosen
$y =~ s/(  - id: a2\n)/$1    priority: 1\n/;
$y
--- timeout: 30
--- check
mock_config({ credentials => { 'sk-a1' => { behavior => '500' } } });
my %pin = ('x-api-key' => 'pin-a1', 'x-tokenbiryani-max-wait' => 0);
my $pin = sub { http_request(method => 'POST', path => '/v1/messages',
                             body => msg_body(), headers => { %pin, @_ }) };

is($pin->()->{status}, 502, 'a 500: api_error');
is(account_of(pool_status(), 'a1')->{breaker}{state}, 'closed', 'one failure: closed');
is($pin->()->{status}, 502, 'a second 500');
my $a1 = account_of(pool_status(), 'a1');
is($a1->{breaker}{state}, 'open', 'two in a row: open');
is($a1->{state}, 'failing', 'the account is failing, not cooling as if a window would refill it');
is($a1->{reason}, 'circuit open after 2 failures in a row: upstream error 500', 'because of the breaker, and why');
ok(defined $a1->{failing_for} && !defined $a1->{last_success_ago}, 'failing since its first failure; never a success');
ok($a1->{breaker}{half_open_in} > 0 && $a1->{breaker}{half_open_in} <= 1,
   "half-open in $a1->{breaker}{half_open_in}s");

my $r = $pin->();
is($r->{status}, 429, 'open: the request is not sent');
is($r->{headers}{'retry-after'}, 1, 'retry-after: when it half-opens');
is(scalar @{ mock_log() }, 2, 'nothing reached the upstream');

ok(poll_until(3, sub { account_of(pool_status(), 'a1')->{breaker}{state} eq 'half_open' }),
   'half-open after its cooldown');

# evaluated, not chosen: the probe slot stays free
for (1 .. 3) {
    my $o = send_msg(0);
    is($o->{headers}{'x-tokenbiryani-account'}, 'a2', 'a2 wins the score');
}
$a1 = account_of(pool_status(), 'a1');
is($a1->{breaker}{state}, 'half_open', 'a1 still half-open');
ok(!$a1->{breaker}{probe_in_flight}, 'its probe slot untouched by the decisions');
is($a1->{state}, 'failing', 'it may take a probe, and is not ready');

is($pin->()->{status}, 502, 'the probe fails');
$a1 = account_of(pool_status(), 'a1');
is($a1->{breaker}{state}, 'open', 're-opened');
is($a1->{breaker}{opened_total}, 2, 'twice now');

ok(poll_until(3, sub { account_of(pool_status(), 'a1')->{breaker}{state} eq 'half_open' }),
   'half-open again');
mock_config({ credentials => { 'sk-a1' => { behavior => undef } } });

# a slow probe is out: the next request waits for it instead of failing
my $probe = bg_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                       headers => { 'x-api-key' => 'pin-a1', script('slow-headers:700', 'p') });
ok(poll_until(3, sub { account_of(pool_status(), 'a1')->{breaker}{probe_in_flight} }),
   'the probe is in flight');
my $t0 = time;
my $w = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                     timeout => 10, headers => { 'x-api-key' => 'pin-a1',
                                                 'x-tokenbiryani-max-wait' => 5 });
is($w->{status}, 200, 'the waiter is served');
is(bg_result($probe)->{status}, 200, 'the probe succeeded');
my $rec = request_record($w);
is($rec->{queue}{waits}, 1, 'after waiting in the queue');
$a1 = account_of(pool_status(), 'a1');
is($a1->{breaker}{state}, 'closed', 'the probe closed the breaker');
is($a1->{breaker}{failures}, 0, 'and reset the count');
quiet_pool_ok();



=== TEST 4: the retry budget, bound by accounts
--- user_files eval
$::Yaml =~ s/max_attempts: 3/max_attempts: 5\n  max_accounts: 2/r
--- request eval
"POST /v1/messages\n" . msg_body()
--- more_headers eval
"x-api-key: admin-key\nx-mock-script: 429,429,ok\nx-mock-script-id: b"
--- error_code: 429
--- check
my $log = mock_log();
is(scalar @$log, 2, 'two accounts tried, no third');
isnt($log->[0]{credential}, $log->[1]{credential}, 'two distinct accounts');
my $err = json_decode($resp->{body});
is($err->{error}{type}, 'rate_limit_error', 'rate_limit_error');
like($err->{error}{message}, qr/^the request failed on 2 attempts \(retry\.max_accounts\)/,
     'the bound that bit');
is($resp->{headers}{'retry-after'}, 1, 'the third account could take it: retry-after 1');



=== TEST 5: the retry budget, bound by the deadline
--- user_files eval
$::Yaml =~ s/max_attempts: 3\n  backoff_base_seconds: 0.02\n  backoff_max_seconds: 0.05/max_attempts: 50\n  deadline_seconds: 1\n  backoff_base_seconds: 0.3\n  backoff_max_seconds: 0.3/r
--- check
my $t0 = time;
my $r = send_msg(0, script(join(',', ('500') x 50), 'd'));
my $dt = time - $t0;
is($r->{status}, 504, '504 when the deadline passes');
my $err = json_decode($r->{body});
is($err->{error}{type}, 'timeout_error', 'timeout_error');
like($err->{error}{message}, qr/deadline of 1s/, 'naming the deadline');
my $n = scalar @{ mock_log() };
ok($n >= 2 && $n < 50, "$n attempts within the deadline");
ok($dt >= 0.95 && $dt < 3, sprintf('answered at the deadline (%.2fs)', $dt));



=== TEST 6: a slow stream is committed after first_token_grace_seconds, then never retried
--- user_files eval
$::Yaml =~ s/retry:\n/retry:\n  first_token_grace_seconds: 0.5\n  prelude_timeout_seconds: 5\n/r =~ s/request_timeout_seconds: 1/request_timeout_seconds: 10/r
--- error_log eval
qr/no content delta from account "a\d" after \d+ms: committing the stream/
--- check
my $r = send_msg(1, script('ping-preerr:300:4,ok', 'g'));
is($r->{status}, 200, 'status 200');
is(scalar @{ mock_log() }, 1, 'one attempt: committed before its error');
my @ev = map { $_->[0] } @{ sse_events($r->{body}) };
is_deeply(\@ev, ['message_start', 'ping', 'ping', 'ping', 'ping', 'error'],
          'the client got the stream as it came, its error event last');
is(sha256_hex($r->{body}), mock_log()->[0]{resp_sha256}, 'verbatim');
my $rec = request_record($r);
ok($rec->{ttft_ms} >= 500 && $rec->{ttft_ms} < 1500,
   "committed at the first bytes after the grace ($rec->{ttft_ms} ms)");



=== TEST 7: before the grace period the same stream is retried invisibly
--- user_files eval
$::Yaml =~ s/request_timeout_seconds: 1/request_timeout_seconds: 10/r
--- check
my $r = send_msg(1, script('ping-preerr:100:4,ok', 'h'));
is($r->{status}, 200, 'status 200');
my $log = mock_log();
is(scalar @$log, 2, 'retried');
is(count_events($r->{body}, 'error'), 0, 'no error event reached the client');
is(count_events($r->{body}, 'ping') , 1, 'only the good stream\'s events');
is(sha256_hex($r->{body}), $log->[1]{resp_sha256}, 'the second stream, verbatim');



=== TEST 8: a stream silent for prelude_timeout_seconds is abandoned for another account
--- user_files eval
$::Yaml =~ s/retry:\n/retry:\n  prelude_timeout_seconds: 0.5\n/r =~ s/request_timeout_seconds: 1/request_timeout_seconds: 10/r
--- timeout: 20
--- error_log eval
[qr/sent nothing for 0\.5s before its first content delta \(stalled\) on attempt 1, retrying on another account/]
--- check
for my $step ('slow-prelude:3000', 'hang') {
    mock_reset();
    my $t0 = time;
    my $r = send_msg(1, script("$step,ok", $step));
    my $dt = time - $t0;
    is($r->{status}, 200, "$step: 200");
    ok($dt < 2.5, sprintf("$step: abandoned after the prelude timeout, not %s (%.2fs)",
                          'the request timeout', $dt));
    ok(poll_until(5, sub { @{ mock_log() } >= 2 }), "$step: two attempts");
    my $log = mock_log();
    my ($bad) = grep { $_->{step} eq $step } @$log;
    my ($good) = grep { $_->{step} eq 'ok' } @$log;
    isnt($bad->{credential}, $good->{credential}, "$step: retried on another account");
    is(sha256_hex($r->{body}), $good->{resp_sha256}, "$step: the good stream, verbatim");
    my $acct = account_of(pool_status(), id_of($bad->{credential}));
    is($acct->{outcomes}{stalled}, 1, "$step: counted as stalled");
}



=== TEST 9: one admission and one settlement event per attempt, sanitized
--- check
my $r = send_msg(0, script('429:7,ok', 'e'));
is($r->{status}, 200, '200 after a 429');
my $id = $r->{headers}{'x-tokenbiryani-request-id'};
my $logs = error_log_since_block_start();
my @adm = grep { /event=admission request=$id / } split /\n/, $logs;
my @set = grep { /event=settlement request=$id / } split /\n/, $logs;
is(scalar @adm, 2, 'two admissions');
is(scalar @set, 2, 'two settlements');
like($adm[0], qr/attempt=1 account=a\d need=1\/\d+\/\d+ remaining_before=\S+ decision=admit reason="score [\d.]+, 3 eligible, affinity none"/,
     'admission: attempt, account, need vector, remaining, decision, reason');
like($set[0], qr/attempt=1 account=a\d status=429 class=rate_limit account_action=cooldown breaker=neutral usage=-1\/-1\/-1\/-1 retry_after_ms=7000 latency_ms=\d+ next="retry"/,
     'settlement of the 429: status, class, action, retry-after');
like($set[1], qr/attempt=2 account=a\d status=200 class=ok account_action=none breaker=success usage=\d+\/\d+\/\d+\/\d+ retry_after_ms=-1/,
     'settlement of the answer, with its usage');
unlike($logs, qr/secret prompt 4711/, 'no prompt text in the log');
unlike($logs, qr/sk-a\d/, 'no credential in the log');



=== TEST 10: an operator disables and enables an account
--- check
my $r = admin_post('/admin/accounts/a1/disable');
is($r->{status}, 200, 'disabled');
my $a = json_decode($r->{body});
is($a->{state}, 'disabled', 'answered with the account, disabled');
is($a->{reason}, 'disabled by an operator', 'by an operator');
my @r = map { send_msg(0) } 1 .. 6;
is(scalar(grep { $_->{status} == 200 } @r), 6, 'the others serve');
ok(!grep({ $_->{headers}{'x-tokenbiryani-account'} eq 'a1' } @r), 'a1 takes nothing');
is(admin_post('/admin/accounts/a1/enable')->{status}, 200, 'enabled');
is(account_of(pool_status(), 'a1')->{state}, 'ready', 'ready');
is(admin_get('/admin/accounts/a1')->{id}, 'a1', 'GET /admin/accounts/{id}');
my $x = admin_post('/admin/accounts/nope/enable');
is($x->{status}, 404, 'an unknown account: 404');
like($x->{body}, qr/"type":"not_found_error"/, 'as not_found_error');
my $y = http_request(method => 'GET', path => '/admin/accounts/a1/enable',
                     headers => { 'x-api-key' => 'admin-key' });
is($y->{status}, 405, 'enable wants POST');
my $z = http_request(method => 'POST', path => '/admin/accounts/a1/enable', body => '',
                     headers => { 'x-api-key' => 'pin-a1' });
is($z->{status}, 403, 'and an admin key');



=== TEST 11: fail fast only when no account could ever serve, saying which
--- check
# windows the mirror learns: 4000 input and 1000 output tokens on every account
mock_config({ defaults => { input_limit => 4000, output_limit => 1000 } });
for my $i (1 .. 12) {
    my $r = http_request(method => 'POST', path => '/v1/messages',
                         body => msg_body(text => "prime $i"),
                         headers => { 'x-api-key' => 'admin-key' });
    die "prime $i: $r->{status}\n" unless $r->{status} == 200;
    last unless grep { !defined $_->{limits}{input_tokens}{limit} }
                     @{ pool_status()->{accounts} };
}
ok(!grep({ !defined $_->{limits}{input_tokens}{limit} } @{ pool_status()->{accounts} }),
   'every account observed');

my $n = scalar @{ mock_log() };
my $big = http_request(method => 'POST', path => '/v1/messages',
                       body => big_body(40_000), headers => { 'x-api-key' => 'admin-key' });
is($big->{status}, 400, 'larger than every window: 400');
my $e = json_decode($big->{body})->{error};
is($e->{type}, 'invalid_request_error', 'invalid_request_error');
is($big->{headers}{'x-should-retry'}, 'false', 'not to be retried');
like($e->{message}, qr/^no account in this pool can serve this request: it exceeds every account's rate limit \(about \d+ input tokens, max_tokens 64\)$/,
     $e->{message});

my $long = http_request(method => 'POST', path => '/v1/messages',
                        body => msg_body(max_tokens => 5000), headers => { 'x-api-key' => 'admin-key' });
is($long->{status}, 400, 'max_tokens over every output window: 400');
like(json_decode($long->{body})->{error}{message}, qr/max_tokens 5000\)$/, 'saying so');

admin_post('/admin/accounts/a1/disable');
my $pin = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                       headers => { 'x-api-key' => 'pin-a1' });
is($pin->{status}, 403, "the key's only account disabled: 403");
is(json_decode($pin->{body})->{error}{type}, 'permission_error', 'permission_error');
is($pin->{headers}{'x-should-retry'}, 'false', 'not to be retried');
is(json_decode($pin->{body})->{error}{message},
   "no account in this pool can serve this request: every account is disabled or outside this key's pool",
   'saying so');
is(scalar @{ mock_log() }, $n, 'none of them reached an upstream');
