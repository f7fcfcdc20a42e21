# Admission that counts what the upstream counts: how a window comes back
# (a token bucket or fixed windows, learned from the headers or
# configured), the input estimate calibrated from the model's answers, and
# the owner of a conversation leased only the part of the prompt its cache
# does not hold.  The mock counts as the API does: cache reads are free.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes qw(time);
use Time::Local qw(timegm);

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
>>> tb.yaml
queue:
  default_max_wait_seconds: 20
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
  - id: warm
    api_key: sk-warm
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: a1-key
    name: a1-only
    pool: [a1]
  - key: a2-key
    name: a2-only
    pool: [a2]
  - key: warm-key
    name: warm-only
    pool: [warm]
  - key: conv-key
    name: conversations
    pool: [a1, a2]
_EOY_

sub send_as {
    my ($key, $body, %h) = @_;
    http_request(method => 'POST', path => '/v1/messages', timeout => 30,
                 body => $body // msg_body(), headers => { 'x-api-key' => $key, %h });
}

sub rfc3339 { my @t = $_[0] =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)/; timegm($t[5], $t[4], $t[3], $t[2], $t[1] - 1, $t[0]) }

sub window_of { my ($id, $w) = @_; account_of(pool_status(), $id)->{limits}{$w} }

# same-length prompts, so that their token counts are all the same
sub prompt { my $i = shift; msg_body(text => sprintf('%05d ', $i) . ('lorem ipsum ' x 60)) }

# the model's estimator learns the mock's tokens per byte
sub calibrate {
    for my $i (1 .. 8) {
        my $r = send_as('warm-key', prompt(900 + $i));
        die "calibrating: $r->{status}\n" unless $r->{status} == 200;
    }
    my $m = admin_get('/admin/estimation')->{models}{'claude-sonnet-4-6'};
    die "not calibrated\n" unless $m->{input}{calibrated};
    $m->{input};
}

# the tokens the mock counts for one prompt()
sub calibrate_tokens {
    my ($e) = grep { $_->{credential} eq 'sk-warm' && $_->{usage} } @{ mock_log() };
    $e->{usage}{input_tokens};
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: fixed windows are learned from their headers: nothing is sent before the reset
--- timeout: 40
--- check
mock_config({ credentials => { 'sk-a1' => { requests_limit => 4, window_seconds => 6,
                                            window_mode => 'fixed' } } });
is(send_as('a1-key')->{status}, 200, 'request 1') for 1 .. 4;
my $w = window_of('a1', 'requests');
is($w->{replenishment}, 'fixed_window', 'learned: a fixed window');
is($w->{remaining}, 0, 'empty');
my $reset = rfc3339($w->{reset_at});
my $r = send_as('a1-key');
is($r->{status}, 200, 'a fifth request: served');
my $log = mock_log();
is(scalar @$log, 5, 'sent once');
ok(!grep({ $_->{refused} } @$log), 'the mock refused nothing');
ok($log->[-1]{ts} >= $reset - 1, sprintf('sent only once the window ended (%.2f s after its reset)',
                                         $log->[-1]{ts} - $reset));



=== TEST 2: the same windows taken for a token bucket (replenishment: token_bucket): sent too early
--- timeout: 40
--- user_files eval
$::Yaml =~ s/(  - id: a1\n)/$1    replenishment: token_bucket\n/r
--- check
mock_config({ credentials => { 'sk-a1' => { requests_limit => 4, window_seconds => 6,
                                            window_mode => 'fixed' } } });
is(send_as('a1-key')->{status}, 200, 'request 1') for 1 .. 4;
is(window_of('a1', 'requests')->{replenishment}, 'token_bucket', 'as configured');
my $r = send_as('a1-key');
is($r->{status}, 200, 'a fifth request: served in the end');
my $log = mock_log();
ok(scalar(grep { $_->{refused} } @$log) >= 1,
   'but first sent before the reset, and refused: what learning avoids');



=== TEST 3: a token bucket is learned too: its reset moves as it is drawn from
--- check
mock_config({ credentials => { 'sk-a1' => { requests_limit => 20, window_seconds => 10 } } });
is(send_as('a1-key')->{status}, 200, 'request 1') for 1 .. 6;
is(window_of('a1', 'requests')->{replenishment}, 'token_bucket', 'learned: a token bucket');



=== TEST 4: the input estimate follows the upstream's tokenizer: a window is filled exactly
--- timeout: 40
--- check
my $before = admin_get('/admin/estimation')->{models}{'claude-sonnet-4-6'};
ok(!$before || !$before->{input}{calibrated}, 'a cold pool: not calibrated');
my $in = calibrate();
my @log = grep { $_->{credential} eq 'sk-warm' } @{ mock_log() };
my $truth = 1000 * $log[0]{usage}{input_tokens} / $log[0]{body_len};
ok(abs($in->{tokens_per_kb} - $truth) / $truth < 0.02,
   sprintf('calibrated: %.1f tokens per KB, the mock counts %.1f', $in->{tokens_per_kb}, $truth));
# a2's input window holds 5.5 prompts once the first is counted
my $t = $log[0]{usage}{input_tokens};
mock_config({ credentials => { 'sk-a2' => { input_limit => int(6.5 * $t) } } });
is(send_as('a2-key', prompt(1))->{status}, 200, 'a2 observed');
my $n = scalar @{ mock_log() };
my @r = @{ http_requests_concurrent([map { +{ method => 'POST', path => '/v1/messages', timeout => 30,
                                             body => prompt(10 + $_),
                                             headers => { 'x-api-key' => 'a2-key',
                                                          'x-tokenbiryani-max-wait' => '0' } } } 1 .. 8]) };
my $sent = mock_log($n);
is(scalar(grep { $_->{status} == 200 } @r), 5, 'five of eight admitted: all the window held');
is(scalar @$sent, 5, 'and only those sent');
ok(!grep({ $_->{refused} } @$sent), 'none refused upstream');
is(scalar(grep { $_->{status} == 429 && !$_->{headers}{'x-tokenbiryani-account'} } @r), 3,
   'the other three refused by the gateway, at once');



=== TEST 5: the owner of a conversation is leased only what its cache does not hold
--- timeout: 40
--- check
calibrate();
my $turn1 = turn_body(7, 1);
admin_post('/admin/accounts/a2/disable');
my $r1 = send_as('conv-key', $turn1);
is($r1->{headers}{'x-tokenbiryani-account'}, 'a1', 'turn 1 on a1');
admin_post('/admin/accounts/a2/enable');
my $u1 = mock_log()->[-1]{usage};
my $cached = $u1->{cache_creation_input_tokens} + $u1->{cache_read_input_tokens};
ok($cached > 1000, "turn 1 wrote $cached tokens to a1's cache");
# a1's input window now holds less than the whole next prompt, more than its uncached part
my $p = calibrate_tokens();
mock_config({ credentials => { 'sk-a1' => { input_limit => $p + 400 } } });
is(send_as('a1-key', prompt(1))->{status}, 200, 'a1 observed with its new window');
my $left = window_of('a1', 'input_tokens')->{remaining};
ok($left < $cached && $left > 200, "a1 has $left input tokens left, its cache $cached");
my $r2 = send_as('conv-key', turn_body(7, 2));
is($r2->{status}, 200, 'turn 2 served');
is($r2->{headers}{'x-tokenbiryani-account'}, 'a1', 'on the owner: the cache it holds is not leased');
my $u2 = mock_log()->[-1]{usage};
ok($u2->{cache_read_input_tokens} > 1000, "it read $u2->{cache_read_input_tokens} tokens from the cache (turn 1 wrote $cached)");
ok(!grep({ $_->{refused} } @{ mock_log() }), 'the mock refused nothing');



=== TEST 6: where cache reads count (cache_reads_count: true) the owner is leased the whole prompt
--- timeout: 40
--- user_files eval
$::Yaml =~ s/(  - id: a1\n)/$1    cache_reads_count: true\n/r
--- check
calibrate();
admin_post('/admin/accounts/a2/disable');
my $r1 = send_as('conv-key', turn_body(8, 1));
is($r1->{headers}{'x-tokenbiryani-account'}, 'a1', 'turn 1 on a1');
admin_post('/admin/accounts/a2/enable');
my $u1 = mock_log()->[-1]{usage};
my $cached = $u1->{cache_creation_input_tokens} + $u1->{cache_read_input_tokens};
mock_config({ credentials => { 'sk-a1' => { input_limit => calibrate_tokens() + 400 } } });
is(send_as('a1-key', prompt(1))->{status}, 200, 'a1 observed with its new window');
ok(window_of('a1', 'input_tokens')->{remaining} < $cached, 'less left than the whole prompt');
my $r2 = send_as('conv-key', turn_body(8, 2));
is($r2->{status}, 200, 'turn 2 served');
is($r2->{headers}{'x-tokenbiryani-account'}, 'a2', 'elsewhere: the whole prompt does not fit a1');
