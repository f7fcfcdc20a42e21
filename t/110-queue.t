# The queue shared by both workers: interactive before batch, first come
# first served, a waiter woken when capacity comes back in the other worker,
# the budget, a full queue, the deadline, a client that leaves; and the
# key's scopes that decide who may wait at all.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IO::Socket::INET ();
use List::Util qw(max);
use Time::HiRes qw(time);

master_on();
workers(2);
no_shuffle();
mock_start();

# one account that takes one request at a time: whoever comes next waits
our $Yaml = <<'_EOY_';
>>> tb.yaml
server:
  request_timeout_seconds: 10
queue:
  default_max_wait_seconds: 10
accounts:
  - id: solo
    api_key: sk-solo
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    max_concurrency: 1
    models: ["claude-sonnet-*"]
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: batch-key
    name: batcher
    priority: batch
  - key: rpm-key
    name: limited
    rpm: 2
  - key: patient-key
    name: patient
    max_wait_seconds: 0.4
_EOY_

sub msg {
    my (%h) = @_;
    my $stream = delete $h{stream};
    (method => 'POST', path => '/v1/messages', timeout => 15,
     body => $stream ? stream_body() : msg_body(),
     headers => { 'x-api-key' => 'admin-key', %h });
}

# a request that holds the account for $ms
sub blocker {
    my ($ms, $tag) = @_;
    my $b = bg_request(msg('x-mock-script' => "slow-headers:$ms",
                           'x-tag' => $tag // 'blocker'));
    poll_until(5, sub { account_of(pool_status(), 'solo')->{inflight} == 1 })
        or die "the blocker never started\n";
    $b;
}

sub queued { my $q = pool_status()->{queue}; $q->{interactive} + $q->{batch} }

sub tags { [map { $_->{headers}{'x-tag'} // '-' } @{ mock_log() }] }

sub record { request_record($_[0]) }


gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: interactive before batch, first come first served, across both workers
--- timeout: 60
--- check
my ($rounds, $crossed) = (0, 0);
while ($rounds < 10 && !($crossed && $rounds >= 2)) {
    $rounds++;
    mock_reset();
    my $blk = blocker(600);
    my @w;
    push @w, bg_request(msg('x-tokenbiryani-priority' => 'batch', 'x-tag' => 'b1'));
    poll_until(5, sub { queued() == 1 }) or die "b1 never queued\n";
    push @w, bg_request(msg('x-api-key' => 'batch-key', 'x-tag' => 'b2'));
    poll_until(5, sub { queued() == 2 }) or die "b2 never queued\n";
    push @w, bg_request(msg('x-tag' => 'i1'));
    poll_until(5, sub { queued() == 3 }) or die "i1 never queued\n";
    push @w, bg_request(msg('x-tag' => 'i2'));
    poll_until(5, sub { queued() == 4 }) or die "i2 never queued\n";

    my $q = pool_status()->{queue};
    is($q->{interactive}, 2, "round $rounds: two interactive waiting");
    is($q->{batch}, 2, "round $rounds: two batch waiting");

    is(bg_result($blk)->{status}, 200, "round $rounds: the blocker done");
    my @res = map { bg_result($_) } @w;
    is($_->{status}, 200, "round $rounds: every waiter served") for @res;
    is_deeply(tags(), [qw(blocker i1 i2 b1 b2)],
              "round $rounds: interactive first, then batch, each in order");

    my %pid;
    $pid{ record($res[$_])->{worker} }++ for 0 .. $#res;
    $crossed++ if keys %pid == 2;
}
ok($crossed, "the waiters were spread over both workers in $crossed of $rounds rounds");
quiet_pool_ok();



=== TEST 2: a lease given back in the other worker wakes the waiter at once
--- timeout: 150
--- check
my (@woken, @seen);
my $rounds = 0;
while (@woken < 7 && $rounds < 100) {
    $rounds++;
    mock_reset();
    my $blk = blocker(300);
    my $w = bg_request(msg('x-tag' => 'waiter'));
    poll_until(5, sub { queued() == 1 }) or die "the waiter never queued\n";
    my ($rb, $rw) = (bg_result($blk), bg_result($w));
    is($rw->{status}, 200, "round $rounds: served");
    my ($recb, $recw) = (record($rb), record($rw));
    next if $recb->{worker} == $recw->{worker};

    # the waiter's upstream request, against the blocker's end at the client
    my ($lw) = grep { ($_->{headers}{'x-tag'} // '') eq 'waiter' } @{ mock_log() };
    push @seen, ($lw->{ts} - $rb->{done_at}) * 1000;
    push @woken, $recw->{queue}{woken_ms};
    ok($recw->{queue}{waited_ms} < 2000,
       "round $rounds: waited $recw->{queue}{waited_ms} ms of its 10 s budget");
}
ok(@woken >= 7, scalar(@woken) . " cross-worker wake-ups in $rounds rounds");
my @s = sort { $a <=> $b } @woken;
my $median = $s[int($#s / 2)];
diag(sprintf("wake-up latency across workers, %d samples: median %d ms, max %d ms "
             . "(capacity back -> waiter granted); at the upstream: median %.1f ms "
             . "after the blocker's client had its answer",
             scalar @s, $median, $s[-1],
             (sort { $a <=> $b } @seen)[int($#seen / 2)]));
ok($median <= 50, "median wake-up $median ms, within 50 ms");
ok($s[-1] <= 250, "every wake-up well before the waiter's timeout (max $s[-1] ms)");
quiet_pool_ok();



=== TEST 3: a cooldown ending and a window refilling wake a waiter, not its timeout
--- timeout: 30
--- check
# a 429 with retry-after 1: nothing else can serve, so it waits out the cooldown
my $t0 = time;
my $r = http_request(msg('x-mock-script' => '429:1,ok', 'x-mock-script-id' => 'c'));
my $dt = time - $t0;
is($r->{status}, 200, 'served after the cooldown');
ok($dt >= 0.9 && $dt < 3, sprintf('in %.2fs: the cooldown, not the 10 s budget', $dt));
my ($log, $rec) = (mock_log(), record($r));
is(scalar @$log, 2, 'two attempts: the 429 and the answer')
    or diag(join("\n", map { sprintf "upstream: %.3f %s %s", $_->{ts},
                                     $_->{status} // '-', $_->{step} // '' } @$log),
            explain $rec);
is($rec->{queue}{waits}, 1, 'it waited in the queue') or diag(explain $rec);

# two requests a second, refilling: the third waits for the window
mock_config({ credentials => { 'sk-solo' => { requests_limit => 2, window_seconds => 2 } } });
mock_reset();
mock_config({ credentials => { 'sk-solo' => { requests_limit => 2, window_seconds => 2 } } });
is(http_request(msg())->{status}, 200, "request $_") for 1 .. 2;
$t0 = time;
my $third = http_request(msg());
$dt = time - $t0;
is($third->{status}, 200, 'the third is served');
ok($dt >= 0.5 && $dt < 3, sprintf('once the window had room (%.2fs)', $dt));
is(mock_stats()->{refused_429}, 0, 'never sent before it fit');
quiet_pool_ok();



=== TEST 4: the wait budget: 429 with retry-after, as plain JSON for a stream too
--- timeout: 30
--- check
my $blk = blocker(1500);
my $t0 = time;
my $r = http_request(msg('x-tokenbiryani-max-wait' => '0.3'));
my $dt = time - $t0;
is($r->{status}, 429, 'a 429 once its budget is spent');
ok($dt >= 0.25 && $dt < 1, sprintf('after 0.3 s (%.2fs)', $dt));
my $err = json_decode($r->{body});
is($err->{error}{type}, 'rate_limit_error', 'rate_limit_error');
like($err->{error}{message}, qr/^waited \d+s for pool capacity without any becoming available$/,
     $err->{error}{message});
is($r->{headers}{'retry-after'}, 1, 'retry-after');

my $s = http_request(msg(stream => 1, 'x-api-key' => 'patient-key'));
is($s->{status}, 429, "a streaming request: the key's max_wait_seconds (0.4) binds");
like($s->{headers}{'content-type'}, qr{^application/json}, 'plain JSON, not SSE');
is(json_decode($s->{body})->{error}{type}, 'rate_limit_error', 'rate_limit_error');

my $n = http_request(msg('x-api-key' => 'patient-key', 'x-tokenbiryani-max-wait' => 30));
is($n->{status}, 429, 'a client cannot wait longer than its key allows');
ok(record($n)->{queue}{waited_ms} < 1000, 'it waited 0.4 s, not 30');

my $z = http_request(msg('x-tokenbiryani-max-wait' => 0));
is($z->{status}, 429, 'Max-Wait 0: no waiting at all');
# decided before its body is read: its key holds every slot it may
like(json_decode($z->{body})->{error}{message}, qr/^key "admin" holds its max_inflight of 1 requests$/, 'saying why');
is(bg_result($blk)->{status}, 200, 'the blocker was never disturbed');
is(scalar @{ mock_log() }, 1, 'no refused request reached the upstream');
is(pool_status()->{queue}{timed_out}, 3, 'three budgets ran out');
quiet_pool_ok();



=== TEST 5: a full queue is refused at once, naming its depth
--- user_files eval
$::Yaml =~ s/queue:\n/queue:\n  max_size: 1\n/r
--- timeout: 30
--- check
my $blk = blocker(800);
my $w = bg_request(msg('x-tag' => 'w1'));
poll_until(5, sub { queued() == 1 }) or die "w1 never queued\n";
my $t0 = time;
my $r = http_request(msg('x-tag' => 'w2'));
ok(time - $t0 < 0.5, 'at once');
is($r->{status}, 429, 'status 429');
my $err = json_decode($r->{body});
is($err->{error}{type}, 'rate_limit_error', 'rate_limit_error');
is($err->{error}{message}, 'wait queue is full (1 waiting)', 'naming the depth');
ok($r->{headers}{'retry-after'} >= 1, 'with retry-after');
is(bg_result($w)->{status}, 200, 'the one waiting is served');
bg_result($blk);
is_deeply(tags(), [qw(blocker w1)], 'the refused one never went upstream');
is(pool_status()->{queue}{refused_full}, 1, 'counted');
quiet_pool_ok();



=== TEST 6: the whole-request deadline: 504 timeout_error
--- user_files eval
$::Yaml =~ s/queue:\n/retry:\n  deadline_seconds: 1\nqueue:\n/r
--- timeout: 30
--- check
my $blk = blocker(2500);
my $t0 = time;
my $r = http_request(msg());
my $dt = time - $t0;
is($r->{status}, 504, 'status 504');
ok($dt >= 0.9 && $dt < 2, sprintf('at the deadline (%.2fs)', $dt));
my $err = json_decode($r->{body});
is($err->{error}{type}, 'timeout_error', 'timeout_error');
is($err->{error}{message},
   "no capacity became available within the request's deadline of 1s", 'saying so');
bg_result($blk);
quiet_pool_ok();



=== TEST 7: a client that disconnects while queued frees its place at once
--- timeout: 30
--- check
my $blk = blocker(1500);
my $body = msg_body();
my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => server_port())
    or die "connect: $!\n";
print $sock "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: admin-key\r\n"
          . "x-tag: gone\r\nContent-Length: " . length($body) . "\r\n\r\n$body";
ok(poll_until(5, sub { queued() == 1 }), 'queued');
close $sock;
my $t0 = time;
ok(poll_until(2, sub { queued() == 0 }), 'its place freed');
ok(time - $t0 < 0.5, sprintf('at once (%.0f ms)', (time - $t0) * 1000));
is(pool_status()->{queue}{client_left}, 1, 'counted as a client that left');
is(bg_result($blk)->{status}, 200, 'the blocker done');
is_deeply(tags(), ['blocker'], 'the one that left never went upstream');
quiet_pool_ok();



=== TEST 8: key scopes: rpm counts admitted requests only; priority; bad headers
--- timeout: 30
--- check
# refused before admission: a model nobody serves, a malformed header
for (1 .. 3) {
    my $r = http_request(msg('x-api-key' => 'rpm-key'),
                         body => msg_body(model => 'claude-haiku-4-5'));
    is($r->{status}, 404, "a model no account supports: 404 ($_)");
}
my $bad = http_request(msg('x-api-key' => 'rpm-key', 'x-tokenbiryani-priority' => 'urgent'));
is($bad->{status}, 400, 'an unknown priority: 400');
like(json_decode($bad->{body})->{error}{message}, qr/X-TokenBiryani-Priority/, 'naming the header');
my $bad2 = http_request(msg('x-api-key' => 'rpm-key', 'x-tokenbiryani-max-wait' => 'soon'));
is($bad2->{status}, 400, 'a malformed Max-Wait: 400');

# ... none of which used the key's two requests a minute
is(http_request(msg('x-api-key' => 'rpm-key'))->{status}, 200, "admitted ($_)") for 1 .. 2;
my $over = http_request(msg('x-api-key' => 'rpm-key'));
is($over->{status}, 429, 'the third in a minute: 429');
my $err = json_decode($over->{body});
is($err->{error}{type}, 'rate_limit_error', 'rate_limit_error');
like($err->{error}{message}, qr/^key "limited" is over its limit of 2 requests a minute/,
     'naming the key and its limit');
my $ra = $over->{headers}{'retry-after'};
ok($ra >= 55 && $ra <= 60, "retry-after $ra: when the first admitted request leaves the minute");
my @again = map { http_request(msg('x-api-key' => 'rpm-key')) } 1 .. 5;
is(scalar(grep { $_->{status} == 429 } @again), 5, 'refused while over');
ok(!grep({ $_->{headers}{'retry-after'} > $ra } @again),
   'refusals do not push the window further out');
is(scalar(grep { ($_->{headers}{'x-tag'} // '') eq '' } @{ mock_log() }), 2,
   'two requests reached the upstream');

# a batch key waits as batch, and cannot claim interactive
my $blk = blocker(600);
my $b = bg_request(msg('x-api-key' => 'batch-key', 'x-tokenbiryani-priority' => 'interactive'));
my $q;
ok(poll_until(5, sub { $q = pool_status()->{queue}; $q->{batch} == 1 }), 'queued as batch');
is(scalar @{ $q->{waiting} }, 1, 'one waiter listed');
is($q->{waiting}[0]{priority}, 'batch', '... as batch');
ok((grep { $_ == $q->{waiting}[0]{worker} } worker_pids()), '... held by a worker');
my $rb = bg_result($b);
is($rb->{status}, 200, 'served');
is(record($rb)->{priority}, 'batch', 'recorded as batch');
is(record($rb)->{request_id}, $q->{waiting}[0]{request_id}, 'the waiter listed was this request');
bg_result($blk);
quiet_pool_ok();



=== TEST 9: fair share: a greedy key cannot take every slot or the whole queue
--- timeout: 60
--- user_files
>>> tb.yaml
server:
  request_timeout_seconds: 20
queue:
  max_size: 8
  default_max_wait_seconds: 15
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    max_concurrency: 2
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    max_concurrency: 2
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: greedy-key
    name: greedy
  - key: polite-key
    name: polite
--- check
sub key_of { my $n = shift; (grep { $_->{name} eq $n } @{ pool_status()->{keys} })[0] }
my $g = key_of('greedy');
is($g->{max_inflight}, 3, 'the default share: 3 of the 4 slots');
is($g->{max_queued}, 6, 'and 6 of the 8 places in the queue');
# both accounts observed first: an account never seen takes one request at a time
for my $i (1 .. 12) {
    http_request(msg(), body => msg_body(text => "prime $i"));
    last unless grep { !defined $_->{limits}{requests}{limit} } @{ pool_status()->{accounts} };
}
ok(!grep({ !defined $_->{limits}{requests}{limit} } @{ pool_status()->{accounts} }), 'both accounts observed');
# nine long streams of the greedy key, from both workers
my @greedy = map {
    bg_request(method => 'POST', path => '/v1/messages', timeout => 30, body => stream_body(),
               headers => { 'x-api-key' => 'greedy-key', 'x-mock-script' => 'drip:250',
                            'x-tag' => "greedy-$_" })
} 1 .. 9;
ok(poll_until(10, sub { my $k = key_of('greedy'); $k->{inflight} == 3 && $k->{queued} == 6 }),
   'the greedy key holds 3 and queues 6') or diag(explain(key_of('greedy')));
my $inflight = 0;
$inflight += $_->{inflight} for @{ pool_status()->{accounts} };
is($inflight, 3, 'one slot of the pool left for the others');
# the tenth greedy request has no place; its count_tokens waits its turn
my $full = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                        headers => { 'x-api-key' => 'greedy-key' });
is($full->{status}, 429, 'a tenth greedy request: 429');
like(json_decode($full->{body})->{error}{message}, qr/key "greedy" already has 6 requests waiting, its max_queued/,
     'saying the key has its places');
my $ct = http_request(method => 'POST', path => '/v1/messages/count_tokens',
                      body => '{"model":"claude-sonnet-4-6","messages":[{"role":"user","content":"x"}]}',
                      headers => { 'x-api-key' => 'greedy-key', 'x-tokenbiryani-max-wait' => '0' });
is($ct->{status}, 429, "the greedy key's count_tokens counts against its share too");
like(json_decode($ct->{body})->{error}{message}, qr/key "greedy" holds its max_inflight of 3 requests/, 'saying so')
    or diag($ct->{body});
# the polite key is served at once, ahead of six greedy waiters
my $t0 = time;
my $p = http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                     headers => { 'x-api-key' => 'polite-key', 'x-tag' => 'polite' });
my $took = time - $t0;
is($p->{status}, 200, 'the polite key: 200');
ok($took < 0.5, sprintf('at once (%.0f ms), while the greedy streams run', $took * 1000));
ok(key_of('greedy')->{queued} > 0, 'with greedy requests still waiting');
my @r = map { bg_result($_) } @greedy;
is(scalar(grep { $_->{status} == 200 } @r), 9, 'every queued greedy stream served in its turn')
    or diag(explain([map { "$_->{status} $_->{body}" } grep { $_->{status} != 200 } @r]));
my %k = (inflight => 0, queued => 0);
for my $key (@{ pool_status()->{keys} }) { $k{$_} += $key->{$_} for qw(inflight queued) }
is_deeply(\%k, { inflight => 0, queued => 0 }, 'and every count back to 0');
quiet_pool_ok();
