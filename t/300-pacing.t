# Pacing, "should this be spent now": GET /admin/pacing reads the pool's
# weekly budget from the usage history (its week starting when
# pacing.week_starts says, in pacing.time_zone) and every key's and
# account's spend cap from the zone's ledgers by the rate of its last hour,
# each with a verdict in words; the tightest is named.  Without a budget,
# or without a store to read the week from, the answer says so.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use POSIX ();
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
mock_start();

sub yaml_of {
    my (%o) = @_;
    main::pool_yaml(accounts => [{ id => 'a1', spend_cap_usd => '5' }, { id => 'a2', port => 2 }],
                    yaml => "pricing: builtin\n" . ($o{yaml} // ''),
                    keys => [{ key => 'key-big', name => 'big', spend_cap_usd => '50' },
                             { key => 'key-tiny', name => 'tiny', spend_cap_usd => '0.0001' },
                             { key => 'key-free', name => 'free' },
                             { key => 'key-narrow', name => 'narrow', models => '["claude-opus-4-5", "claude-sonnet-4-6"]' },
                             { key => 'admin-key', name => 'admin', admin => 'true' }]);
}

sub pacing { my ($s, $j) = admin(GET => '/admin/pacing'); die "/admin/pacing: $s\n" unless $s == 200; $j }
sub reading { my ($j, $scope, $name) = @_; (grep { $_->{scope} eq $scope && $_->{name} eq $name } @{ $j->{readings} })[0] }
sub epoch_of { my ($y, $mo, $d, $h, $mi, $s) = $_[0] =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)/; POSIX::mktime($s, $mi, $h, $d, $mo - 1, $y - 1900) - POSIX::mktime(0, 0, 0, 1, 0, 70) }

our $Store = "store:\n  backend: sqlite\n";

$ENV{TZ} = 'UTC';
POSIX::tzset();

gateway_suite(yaml => yaml_of(yaml => "${Store}pacing:\n  weekly_budget_usd: 1\n"));
run_tests();

__DATA__

=== TEST 1: every cap read with its verdict; the pool's week from the usage history; the tightest named
--- check
for my $i (1 .. 4) {
    is(message_with('key-big', text => "hello $i")->{status}, 200, "big: request $i");
}
is(message_with('key-tiny')->{status}, 200, 'tiny: one request, past its cap');
my $spent = 0;
$spent += $_->{spend}{window_usd} for grep { $_->{name} =~ /^(big|tiny)$/ } @{ pool_status()->{keys} };
my $j;
ok(poll_until(5, sub { $j = pacing(); my $p = reading($j, 'pool', 'weekly budget'); $p && abs($p->{used_usd} - $spent) < 1e-9 }),
   "the pool's week: what the history has, \$$spent") or diag(TB::Nginx::json_encode($j));
# the week: Monday 00:00 UTC by default
is($j->{week}{starts}, 'monday 00:00', 'the week starts on Monday 00:00');
is($j->{week}{time_zone}, '+00:00', 'UTC');
my $from = epoch_of($j->{week}{from});
is((gmtime $from)[6], 1, 'from a Monday');
is($from % 86400, 0, 'at midnight');
ok($from <= time && time < $from + 7 * 86400, 'the week that holds now');
is(epoch_of($j->{week}{to}) - $from, 7 * 86400, 'to a week later');
my $pool = reading($j, 'pool', 'weekly budget');
is($pool->{window}, 'fixed', 'the budget: a fixed window');
is($pool->{limit_usd}, 1, 'of $1');
ok($pool->{elapsed} > 0 && $pool->{elapsed} < 1, "its share gone ($pool->{elapsed})");
ok(abs($pool->{utilization} - $spent) < 1e-9, 'used: what was spent, of $1');
like($pool->{says}, qr/the pool's \$1\.00 weekly budget/, "says so: $pool->{says}");
# a key with room, by the rate of its last hour
my $big = reading($j, 'key', 'big');
ok($big, 'key big: its cap read');
is($big->{window}, 'rolling', 'a rolling window');
is($big->{window_hours}, 24, 'of the spend window');
my ($bs) = grep { $_->{name} eq 'big' } @{ pool_status()->{keys} };
ok(abs($big->{used_usd} - $bs->{spend}{window_usd}) < 1e-9, 'used: what its cap counts');
ok($big->{rate_usd_per_hour} > 0, "its rate (\$$big->{rate_usd_per_hour} an hour)");
is($big->{verdict}, 'on pace', 'under its cap at this rate');
like($big->{says}, qr/^at this rate \(\$[\d.]+ an hour\) a window comes to \d+% of key big's \$50\.00 spend cap: under it$/, "says so: $big->{says}");
# a key past its cap
my $tiny = reading($j, 'key', 'tiny');
is($tiny->{verdict}, 'reached', 'tiny: reached');
like($tiny->{says}, qr/^key tiny's \$0\.0001 spend cap is reached: room again in (\d+h \d+m|1d 0h), as the window moves on$/, "says so: $tiny->{says}");
my $frees = epoch_of($tiny->{frees_at} // '');
ok($frees > time + 23 * 3600 && $frees <= time + 25 * 3600, "when: a window after it spent ($tiny->{frees_at})");
ok(!reading($j, 'key', 'free'), 'a key without a cap: nothing to read');
# an account's cap, and the account without one
my $a1 = reading($j, 'account', 'a1');
ok($a1, 'account a1: its cap read');
is($a1->{limit_usd}, 5, 'of $5');
ok(!reading($j, 'account', 'a2'), 'a2 has none');
is($j->{tightest}{scope}, 'key', 'the tightest: a key');
is($j->{tightest}{name}, 'tiny', 'tiny, at its cap');
is($j->{mode}, 'advisory', 'advisory');
# only GET
my ($s) = admin(POST => '/admin/pacing', {});
is($s, 405, 'POST: 405');



=== TEST 2: the week where the operator says it starts, in their time zone
--- user_files eval
main::yaml_of(yaml => "${main::Store}pacing:\n  weekly_budget_usd: 100\n  week_starts: friday 17:30\n  time_zone: \"+05:30\"\n  curve: business_hours\n")
--- check
my $j = pacing();
is($j->{week}{starts}, 'friday 17:30', 'friday 17:30');
is($j->{week}{time_zone}, '+05:30', '+05:30');
my $from = epoch_of($j->{week}{from});
my $local = $from + 330 * 60;
is((gmtime $local)[6], 5, 'a Friday there');
is(POSIX::strftime('%H:%M', gmtime $local), '17:30', 'at 17:30 there');
ok($from <= time && time < $from + 7 * 86400, 'the week that holds now');
is($j->{curve}, 'business_hours', 'on the business-hours curve');
my $pool = reading($j, 'pool', 'weekly budget');
ok(defined $pool->{target} && $pool->{target} >= 0 && $pool->{target} <= 1, "its target: the business hours gone ($pool->{target})");



=== TEST 3: without a budget, or without a store to read the week from, the answer says so; the caps are read all the same
--- user_files eval
main::yaml_of()
--- check
my $j = pacing();
like($j->{week}{budget}, qr/^none: set pacing\.weekly_budget_usd/, 'no budget: said');
ok(!reading($j, 'pool', 'weekly budget'), 'no pool reading');
ok(reading($j, 'key', 'big'), 'the caps read');
is($j->{tightest}{scope}, 'key', 'the tightest among them');
like(reading($j, 'key', 'big')->{says}, qr/nothing spent lately: 0% of key big's \$50\.00 spend cap used/, 'idle: said');



=== TEST 4: a memory store keeps no history: the week is not read, and says why
--- user_files eval
main::yaml_of(yaml => "pacing:\n  weekly_budget_usd: 10\n")
--- check
my $j = pacing();
like($j->{week}{budget}, qr/^not read: the week's spend is in the usage history, which store\.backend: memory does not keep/, 'said');
ok(!reading($j, 'pool', 'weekly budget'), 'no pool reading');



=== TEST 5: enforcing: a batch-priority request is held back in proportion to how far ahead of pace the week is, within its wait budget; an interactive one never
--- user_files eval
main::yaml_of(yaml => "${main::Store}pacing:\n  mode: enforcing\n  weekly_budget_usd: 0.0001\n  max_batch_delay_seconds: 1\n")
--- check
my $batch = sub { my ($wait) = @_;
    my $a = message_args('key-big');
    $a->{headers}{'x-tokenbiryani-priority'} = 'batch';
    $a->{headers}{'x-tokenbiryani-max-wait'} = $wait if defined $wait;
    TB::Nginx::http_request(%$a) };
# nothing spent yet: on pace, nobody held back
my $j;
ok(poll_until(5, sub { $j = pacing(); ref $j->{enforced} }), 'the week read for the requests to pace by') or diag(TB::Nginx::json_encode($j));
my $r = $batch->();
is($r->{status}, 200, 'a batch-priority request, the week on pace');
is(request_record($r)->{paced_for_ms}, 0, 'not held back');
# the week's budget spent many times over: far ahead of its pace
is(message_with('key-big')->{status}, 200, 'an interactive request spends it');
ok(poll_until(10, sub { $j = pacing(); ref $j->{enforced} && $j->{enforced}{week_used_usd} > 0.0001 }),
   'the pacer has read it') or diag(TB::Nginx::json_encode($j));
$r = message_with('key-big');
is($r->{status}, 200, 'an interactive request');
is(request_record($r)->{paced_for_ms}, 0, 'never held back');
my $t0 = Time::HiRes::time();
$r = $batch->();
my $took = Time::HiRes::time() - $t0;
is($r->{status}, 200, 'a batch-priority request: served');
my $rec = request_record($r);
is($rec->{paced_for_ms}, 1000, 'held back max_batch_delay_seconds, the week far ahead');
ok($took >= 0.95, sprintf('after the delay (%.2f s)', $took));
is($rec->{priority}, 'batch', 'batch priority');
like(TB::Nginx::log_text(), qr/\Q$rec->{request_id}\E: paced for 1000ms, the pool's weekly budget being ahead of its pace/, 'said at info');
# within its own wait budget
$r = $batch->('0.3');
is($r->{status}, 200, 'one that may wait 0.3 s: served');
is(request_record($r)->{paced_for_ms}, 300, 'held back no longer than its wait budget');


=== TEST 6: enforcing, the week ahead: a batch-priority request goes to the cheaper model pacing.model_downshift names (exact, then "prefix*"), where its key may use it; never an interactive one; model_requested says what the client asked for
--- user_files eval
main::yaml_of(yaml => "${main::Store}pacing:\n  mode: enforcing\n  weekly_budget_usd: 0.0001\n  max_batch_delay_seconds: 0\n  model_downshift:\n    claude-opus-4-5: claude-haiku-4-5\n    claude-sonnet-*: claude-haiku-4-5\n")
--- check
my $send = sub { my ($key, $model, $prio) = @_;
    my $a = message_args($key, model => $model);
    $a->{headers}{'x-tokenbiryani-priority'} = $prio if $prio;
    my $r = TB::Nginx::http_request(%$a);
    die "$key $model: $r->{status} $r->{body}\n" unless $r->{status} == 200;
    my $rec = request_record($r);
    my $up = (grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log() })[-1];
    ($rec, $up, $r) };
my $j;
ok(poll_until(5, sub { $j = pacing(); ref $j->{enforced} }), 'the week read') or diag(TB::Nginx::json_encode($j));
# on pace: nothing changed
my ($rec, $up) = $send->('key-big', 'claude-opus-4-5', 'batch');
is($up->{model}, 'claude-opus-4-5', 'on pace: the model the client asked for');
is($rec->{model_requested}, '', 'nothing substituted');
# the week spent many times over
$send->('key-big', 'claude-sonnet-4-6');
ok(poll_until(10, sub { $j = pacing(); ref $j->{enforced} && $j->{enforced}{week_used_usd} > 0.0001 }), 'the pacer has read it')
    or diag(TB::Nginx::json_encode($j));
my $r;
($rec, $up, $r) = $send->('key-big', 'claude-opus-4-5', 'batch');
is($up->{model}, 'claude-haiku-4-5', 'ahead, batch priority: sent to the cheaper model');
is($rec->{model}, 'claude-haiku-4-5', 'the record names the model sent');
is($rec->{model_requested}, 'claude-opus-4-5', '... and the one asked for');
is(TB::Nginx::json_decode($r->{body})->{model}, 'claude-haiku-4-5', 'the answer says which model answered');
like(TB::Nginx::log_text(), qr/\Q$rec->{request_id}\E: sent to "claude-haiku-4-5" for "claude-opus-4-5", the pool's weekly budget being ahead of its pace/, 'said at info');
($rec, $up) = $send->('key-big', 'claude-sonnet-4-6', 'batch');
is($up->{model}, 'claude-haiku-4-5', 'a "prefix*" entry');
is($rec->{model_requested}, 'claude-sonnet-4-6', '... recorded');
($rec, $up) = $send->('key-big', 'claude-opus-4-5');
is($up->{model}, 'claude-opus-4-5', 'interactive: never downshifted');
is($rec->{model_requested}, '', '... nothing recorded');
($rec, $up) = $send->('key-narrow', 'claude-opus-4-5', 'batch');
is($up->{model}, 'claude-opus-4-5', 'a key that may not use the cheaper model keeps its own');
($rec, $up) = $send->('key-big', 'claude-haiku-4-5', 'batch');
is($up->{model}, 'claude-haiku-4-5', 'a model the map does not name: as asked');
is($rec->{model_requested}, '', '... nothing recorded');
