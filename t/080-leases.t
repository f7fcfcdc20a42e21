# Leases across two workers: many overlapping requests never take more
# than the mirror says is left, every lease comes back, and a worker that
# dies does not strand what it held.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

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
--- http_config eval
"tokenbiryani_lease_timeout 2s;\n" . $::HttpConfig
--- user_files eval: $::Yaml . $::Pinned
--- timeout: 20
--- error_log eval
[qr/exited on signal 9/, qr/took back a lease on account "a\d" that worker \d+ stopped renewing/]
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
waitpid($pid, 0);
ok(poll_until(10, sub { status()->{leases}{held} == 0 }), 'the lease was taken back');
my $st = quiet_pool_ok();
is($st->{leases}{taken_back}, 1, 'counted');
