# Leases across two workers: many overlapping requests never take more
# than the mirror says is left, every lease comes back, and a worker that
# dies does not strand what it held.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes qw(time);

master_on();
workers(2);
no_shuffle();
mock_start(config => {
    # small request windows: 30 a minute per credential
    defaults => { requests_limit => 30, window_seconds => 60 },
});

our $Yaml = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    max_concurrency: 200
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    max_concurrency: 200
  - id: a3
    api_key: sk-a3
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
    max_concurrency: 200
  - id: a4
    api_key: sk-a4
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT4}
    max_concurrency: 200
keys:
  - key: admin-key
    name: admin
    admin: true
_EOY_

# one key per account, to reach each one on purpose
our $Pinned = join '', map { "  - key: pin-a$_\n    name: pin-a$_\n    pool: [a$_]\n" } 1 .. 4;

sub status {
    json_decode(http_request(method => 'GET', path => '/admin/status',
                headers => { 'x-api-key' => 'admin-key' })->{body});
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(status);
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: 200 overlapping streams across two workers never over-admit
# (X-TokenBiryani-Max-Wait: 0: what does not fit now is refused, not queued)
--- http_config eval
"log_format tbpid '\$pid';\n" . $::HttpConfig
--- config eval
$::Locations =~ s/\{ tokenbiryani_pass;/{ access_log \$TEST_NGINX_SERVROOT\/logs\/pids.log tbpid; tokenbiryani_pass;/r
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 30
--- check
# one request per account first: the mirror learns the windows
for my $i (1 .. 4) {
    my $r = http_request(method => 'POST', path => '/v1/messages',
                         body => msg_body(text => "prime $i"),
                         headers => { 'x-api-key' => "pin-a$i" });
    is($r->{status}, 200, "a$i primed");
}

my @reqs = map { +{ method => 'POST', path => '/v1/messages', timeout => 25,
                    body => stream_body(text => "conversation $_"),
                    headers => { 'x-api-key' => 'admin-key',
                                 'x-tokenbiryani-max-wait' => 0,
                                 'x-mock-event-delay-ms' => 25 } } } 1 .. 200;
my @res = @{ http_requests_concurrent(\@reqs) };

my @ok = grep { ($_->{status} // 0) == 200 } @res;
my @refused = grep { ($_->{status} // 0) == 429 } @res;
is(@ok + @refused, 200, 'every request answered: served, or refused by the gateway');

# 29 left on each of four accounts after the priming
ok(@ok <= 4 * 29, scalar(@ok) . ' served, no more than the windows hold');
ok(@ok >= 4 * 29 - 8, '... and close to all they hold');
ok(!grep({ exists $_->{headers}{'x-tokenbiryani-account'} } @refused),
   'the refusals are the gateway\'s own, not an upstream 429');
like($refused[0]{body}, qr/"type":"rate_limit_error"/, 'as rate_limit_error');
ok($refused[0]{headers}{'retry-after'} >= 1, 'with retry-after');
is(count_events($_->{body}, 'message_start'), 1, 'one message_start each')
    for @ok[0 .. 4];

my $stats = mock_stats();
is($stats->{refused_429}, 0, 'the mock never had to refuse a request');
is(scalar @{ mock_log() }, 4 + @ok, 'each served request reached the mock once');

open my $fh, '<', servroot() . '/logs/pids.log' or die $!;
my %pids;
$pids{$_}++ for map { chomp; $_ } <$fh>;
is(scalar keys %pids, 2, 'both workers served part of the burst: '
   . join(', ', map { "$_ x $pids{$_}" } sort keys %pids));

my $st = quiet_pool_ok();
for my $a (@{ $st->{accounts} }) {
    ok($a->{peak}{reserved}{requests} <= $a->{peak}{available}{requests},
       "$a->{id}: peak reserved $a->{peak}{reserved}{requests} <= what the "
       . "mirror had, $a->{peak}{available}{requests}");
    ok($a->{peak}{reserved}{requests} >= 20, "$a->{id}: it was really loaded");
}



=== TEST 2: before any response, an account takes one request at a time
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 20
--- check
# cold: no limits known yet; a burst would be 100 requests against 30 slots
my @reqs = map { +{ method => 'POST', path => '/v1/messages', timeout => 15,
                    body => stream_body(text => "cold $_"),
                    headers => { 'x-api-key' => 'pin-a1',
                                 'x-tokenbiryani-max-wait' => 0,
                                 'x-mock-event-delay-ms' => 20 } } } 1 .. 100;
my @res = @{ http_requests_concurrent(\@reqs) };
my @ok = grep { ($_->{status} // 0) == 200 } @res;
ok(@ok >= 1, scalar(@ok) . ' served');
is(mock_stats()->{refused_429}, 0, 'no upstream refusal even from cold');
quiet_pool_ok();



=== TEST 3: the leases of a worker that dies come back
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 20
--- error_log eval
[qr/exited on signal 9/, qr/took back a lease on account "a\d" of worker \d+ which is gone/]
--- check
http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
             headers => { 'x-api-key' => "pin-a$_" }) for 1 .. 4;

# a slow stream holds a lease in some worker: kill every worker mid-stream
my $pid = fork // die;
if ($pid == 0) {
    http_request(method => 'POST', path => '/v1/messages', timeout => 10,
                 body => stream_body(text => 'held'),
                 headers => { 'x-api-key' => 'admin-key',
                              'x-mock-event-delay-ms' => 1000 });
    POSIX::_exit(0);
}
ok(poll_until(5, sub { status()->{leases}{held} == 1 }), 'a lease is held');
my @old = worker_pids();
kill 'KILL', @old;
ok(poll_until(5, sub { my @w = worker_pids(); @w == 2 && !grep { my $o = $_; grep { $_ == $o } @old } @w }),
   'the master started new workers');
my $t0 = time;
ok(poll_until(5, sub { status()->{leases}{held} == 0 }), 'the lease was taken back');
my $took = time - $t0;
ok($took < 1, sprintf('within a second of the new workers (%.0f ms), the lease timeout being 60 s', $took * 1000));
waitpid($pid, 0);
my $st = quiet_pool_ok();
is($st->{leases}{taken_back}, 1, 'counted');



=== TEST 4: a worker that hangs: its leases expire, the backstop
--- http_config eval
"tokenbiryani_lease_timeout 2s;\n" . $::HttpConfig
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 20
--- error_log eval
[qr/took back a lease on account "a\d" that worker \d+ stopped renewing/]
--- check
http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
             headers => { 'x-api-key' => "pin-a$_" }) for 1 .. 4;
my $pid = fork // die;
if ($pid == 0) {
    http_request(method => 'POST', path => '/v1/messages', timeout => 15,
                 body => stream_body(text => 'held'),
                 headers => { 'x-api-key' => 'admin-key',
                              'x-mock-event-delay-ms' => 500 });
    POSIX::_exit(0);
}
ok(poll_until(5, sub { status()->{leases}{held} == 1 }), 'a lease is held');
my ($owner) = map { $_->{pid} } @{ status()->{leases}{workers} };
ok($owner && grep({ $_ == $owner } worker_pids()), "by worker $owner");
# while one worker is frozen a connection may wait on it: ask again
sub status_now {
    for (1 .. 20) {
        my $r = http_request(method => 'GET', path => '/admin/status', timeout => 1,
                             headers => { 'x-api-key' => 'admin-key' });
        my $st = ($r->{status} // 0) == 200 && eval { json_decode($r->{body}) };
        return $st if $st;
    }
    die "no status while a worker is stopped\n";
}
kill 'STOP', $owner;
my ($held, $taken) = eval {
    # alive but frozen: not gone, so only the lease's expiry takes it back
    poll_until(8, sub { status_now()->{leases}{held} == 0 });
    my $st = status_now();
    ($st->{leases}{held}, $st->{leases}{taken_back});
};
my $err = $@;
kill 'CONT', $owner;
die $err if $err;
is($held, 0, 'taken back by the other worker');
is($taken, 1, 'counted');
waitpid($pid, 0);
quiet_pool_ok();



=== TEST 5: kill -9 a worker under load: its capacity is back within a second
--- user_files
>>> tb.yaml
queue:
  max_size: 256
  default_max_wait_seconds: 30
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    max_concurrency: 16
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    max_concurrency: 16
keys:
  - key: admin-key
    name: admin
    admin: true
--- timeout: 90
--- error_log eval
[qr/exited on signal 9/, qr/which is gone/]
--- check
mock_config({ defaults => { requests_limit => 100000, window_seconds => 60 } });
for my $i (1 .. 12) {
    http_request(method => 'POST', path => '/v1/messages', body => msg_body(text => "prime $i"),
                 headers => { 'x-api-key' => 'admin-key' });
    last unless grep { !defined $_->{limits}{requests}{limit} } @{ status()->{accounts} };
}
sub stream_bg {
    my $tag = shift;
    bg_request(method => 'POST', path => '/v1/messages', timeout => 60,
               body => stream_body(text => "load $tag"),
               headers => { 'x-api-key' => 'admin-key', 'x-mock-event-delay-ms' => 400 });
}
# 64 clients on 32 slots: 32 streams in flight, 32 waiting, in both workers
my @bg = map { stream_bg($_) } 1 .. 64;
ok(poll_until(20, sub { my $st = status(); $st->{leases}{held} == 32 && @{ $st->{leases}{workers} } == 2 }),
   'the pool at its ceiling, both workers holding leases')
    or diag(explain(status()->{leases}));
my $st = status();
my ($victim) = sort { $b->{held} <=> $a->{held} } @{ $st->{leases}{workers} };
my @live = grep { $_ != $victim->{pid} } worker_pids();
kill 'KILL', $victim->{pid};
my $t0 = time;
# more demand, so the freed slots have takers whichever worker gets them
push @bg, map { stream_bg("after $_") } 1 .. 32;
my ($back, $seen);
ok(poll_until(10, sub {
        $seen = status();
        my %w = map { $_->{pid} => $_->{held} } @{ $seen->{leases}{workers} };
        my $inflight = 0;
        $inflight += $_->{inflight} for @{ $seen->{accounts} };
        $back = time - $t0;
        !exists $w{ $victim->{pid} } && $seen->{leases}{held} == 32 && $inflight == 32
    }), 'reserved and in flight: only what live workers hold, and at the ceiling again')
    or diag(explain($seen->{leases}));
ok($back < 1, sprintf("within a second of the kill: %.0f ms (it held %d of 32)", $back * 1000,
                      $victim->{held}));
diag(sprintf("a killed worker's %d leases back in %.0f ms", $victim->{held}, $back * 1000));
my @r = map { bg_result($_) } @bg;
my $ok = grep { ($_->{status} // 0) == 200 } @r;
ok($ok >= 96 - 32 - 32, "$ok of 96 streams complete (the dead worker's clients lost theirs)");
is(status()->{leases}{held}, 0, 'every lease back at the end');
quiet_pool_ok();



=== TEST 6: a worker that exits after a reload keeps renewing the leases of the streams it still serves
--- http_config eval
"tokenbiryani_lease_timeout 2s;\n" . $::HttpConfig
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 40
--- no_error_log eval
[qr/stopped renewing|which is gone/]
--- check
http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
             headers => { 'x-api-key' => "pin-a$_" }) for 1 .. 4;
# a stream of about 6 s: three lease timeouts
my $bg = bg_request(method => 'POST', path => '/v1/messages', timeout => 30,
                    body => stream_body(text => 'long'),
                    headers => { 'x-api-key' => 'admin-key', 'x-mock-event-delay-ms' => 500 });
ok(poll_until(5, sub { status()->{leases}{held} == 1 }), 'its lease is held');
my @old = worker_pids();
kill 'HUP', nginx_pid();
ok(poll_until(10, sub { my @w = worker_pids(); scalar(grep { my $o = $_; !grep { $_ == $o } @old } @w) == 2 }),
   'a new generation of workers');
ok(scalar(grep { TB::Nginx::alive($_) } @old) >= 1, 'while the old one serving the stream is still exiting');
# until the stream ends, its lease stays held: nobody takes it back
my ($samples, $dropped_at) = (0, undef);
while (!defined $dropped_at && kill 0, $bg->{pid}) {
    my $held = status()->{leases}{held};
    $samples++;
    $dropped_at = time if $held == 0;
    last if waitpid($bg->{pid}, POSIX::WNOHANG()) > 0;
    Time::HiRes::sleep(0.05);
}
my $r = bg_result($bg);
is($r->{status}, 200, 'the stream completed');
like($r->{body}, qr/event: message_stop/, 'to its end');
ok($samples > 20, "$samples samples while it ran");
ok(!defined $dropped_at || $dropped_at > $r->{done_at} - 0.3,
   sprintf('held until the stream ended (%s)', defined $dropped_at
           ? sprintf('gone %.2f s before its end', $r->{done_at} - $dropped_at) : 'to the end'));
is(status()->{leases}{taken_back}, 0, 'never taken back');
ok(poll_until(10, sub { !grep { TB::Nginx::alive($_) } @old }), 'the old worker exits once its stream is done');
quiet_pool_ok();
