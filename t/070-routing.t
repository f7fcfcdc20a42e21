# The router end to end: affinity through a conversation, forced breaks,
# tenant scoping, strategies, the inspector and the output estimator.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
>>> tb.yaml
routing:
  strategy: ${TB_STRATEGY:-sticky_headroom}
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
  - id: a3
    api_key: sk-a3
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT3}
  - id: a4
    api_key: sk-a4
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT4}
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: tenant-a
    name: tenant-a
  - key: tenant-b
    name: tenant-b
_EOY_

our %Account = map { ("sk-a$_" => "a$_") } 1 .. 4;

sub yaml_with {
    my ($strategy, $extra) = @_;
    my $y = $::Yaml;
    $y =~ s/\$\{TB_STRATEGY:-sticky_headroom\}/$strategy/;
    $y =~ s/^keys:/$extra\nkeys:/m if $extra;
    $y;
}

sub post {
    my ($body, %h) = @_;
    http_request(method => 'POST', path => '/v1/messages', body => $body,
                 headers => { 'x-api-key' => 'admin-key', %h });
}

sub record { request_record($_[0]) }


gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: a conversation stays on its owner for all its turns
--- check
my @acct;
for my $t (1 .. 8) {
    my $r = post(turn_body('c1', $t, stream => $t % 2));
    is($r->{status}, 200, "turn $t served");
    push @acct, $r->{headers}{'x-tokenbiryani-account'};
}
is(scalar(grep { $_ eq $acct[0] } @acct), 8, "all eight turns on $acct[0]");

my $log = mock_log();
is(scalar(grep { ($_->{usage}{cache_read_input_tokens} // 0) > 0 } @$log), 7,
   'turns 2 to 8 read the prompt cache their first turn wrote');

my $st = admin_get('/admin/status');
is($st->{affinity}{no_owner}, 1, 'turn 1 placed the session');
is($st->{affinity}{honored}, 7, 'turns 2 to 8 honored it');
is($st->{affinity}{broken} + $st->{affinity}{forced_breaks}, 0, 'no break');
is($st->{affinity}{sessions}, 1, 'one session in the zone');
is($st->{affinity}{bytes_per_entry}, 64, '64 bytes an entry');

my $rec = admin_get('/admin/requests?limit=1')->{requests}[0];
is($rec->{affinity}, 'honored', 'the inspector says so too');
like($rec->{session}, qr/^fp:[0-9a-f]{16}$/, 'a fingerprint, a hash only');



=== TEST 2: it moves only when its owner cannot serve, and that counts as a break
--- check
my $r = post(turn_body('c2', 1));
my $owner = $r->{headers}{'x-tokenbiryani-account'};
my ($cred) = grep { $::Account{$_} eq $owner } keys %::Account;
is(post(turn_body('c2', 2))->{headers}{'x-tokenbiryani-account'}, $owner,
   'turn 2 on the owner');

# the owner's window shrinks to one request a minute: its next response
# reports none left, and the mirror knows it can take no more
mock_config({ credentials => { $cred => { requests_limit => 1 } } });
is(post(turn_body('c2', 3))->{headers}{'x-tokenbiryani-account'}, $owner,
   'turn 3 still on the owner, which reports its window empty');

$r = post(turn_body('c2', 4));
my $moved = $r->{headers}{'x-tokenbiryani-account'};
isnt($moved, $owner, "turn 4 moved off $owner");
my $rec = record($r);
is($rec->{affinity}, 'forced_break', 'a forced break');
my ($o) = grep { $_->{account} eq $owner } @{ $rec->{decision}{candidates} };
is($o->{verdict}, "filtered \x{2014} insufficient headroom", "the owner's verdict");
ok($o->{available_in} > 0 && $o->{available_in} <= 61,
   "with when it comes back ($o->{available_in}s)");

is(post(turn_body('c2', 5))->{headers}{'x-tokenbiryani-account'}, $moved,
   'the conversation stays where it moved');

my $st = admin_get('/admin/status');
is($st->{affinity}{forced_breaks}, 1, 'one forced break');
is($st->{affinity}{broken}, 0, 'no unforced break');
my ($a) = grep { $_->{id} eq $owner } @{ $st->{accounts} };
is($a->{limits}{requests}{remaining}, 0, "the mirror shows $owner empty");
is($a->{affinity}{forced_breaks}, 1, 'counted on the old owner');



=== TEST 3: two tenants sending the same conversation never share a session
--- check
my $ra = post(turn_body('c3', 1), 'x-api-key' => 'tenant-a');
my $rb = post(turn_body('c3', 1), 'x-api-key' => 'tenant-b');
is($ra->{status}, 200, 'a served');
is($rb->{status}, 200, 'b served');
my ($sa, $sb) = map { record($_)->{session} } $ra, $rb;
isnt($sa, $sb, 'different sessions');
is(admin_get('/admin/status')->{affinity}{sessions}, 2, 'two entries');
is(record($rb)->{affinity}, 'none', "b found no owner: a's entry is not b's");



=== TEST 4: the session header wins over the fingerprint
--- check
my @r = map { post(turn_body("different-$_", 1),
                   'X-TokenBiryani-Session' => 'my-conversation') } 1 .. 4;
my %acct = map { $_->{headers}{'x-tokenbiryani-account'} => 1 } @r;
is(scalar keys %acct, 1, 'four different bodies, one session, one account');
like(record($r[0])->{session}, qr/^hdr:[0-9a-f]{16}$/, 'from the header');
is(record($r[3])->{affinity}, 'honored', 'honored');
ok(!exists mock_log()->[0]{headers}{'x-tokenbiryani-session'},
   'the header stays at the gateway');



=== TEST 5: round_robin rotates and ignores affinity
--- user_files eval: yaml_with('round_robin')
--- check
my @a = map { post(turn_body('c5', $_))->{headers}{'x-tokenbiryani-account'} } 1 .. 8;
my %n;
$n{$_}++ for @a;
is(scalar keys %n, 4, 'all four accounts used');
is($n{$_}, 2, "$_ twice") for sort keys %n;
my $st = admin_get('/admin/status');
is($st->{strategy}, 'round_robin', 'the strategy in force');
ok($st->{affinity}{broken} >= 6, 'the cache-blind breaks are counted');



=== TEST 6: priority fails over in order; cost_tiered drains the cheap tier first
--- user_files eval
my $y = yaml_with('priority');
$y =~ s/(  - id: a3\n)/$1    priority: 3\n/;
$y =~ s/(  - id: a1\n)/$1    priority: 2\n/;
$y
--- check
is(post(turn_body("p$_", 1))->{headers}{'x-tokenbiryani-account'}, 'a3',
   "conversation $_ on the primary") for 1 .. 3;
my $r = post(turn_body('p9', 1), 'x-mock-script' => '529,ok',
             'x-mock-script-id' => 'p');
is($r->{headers}{'x-tokenbiryani-account'}, 'a1', 'a failure goes to the backup');
is_deeply([map { $::Account{ $_->{credential} } } grep { $_->{script_id} }
           @{ mock_log() }], ['a3', 'a1'], 'primary first, then backup');



=== TEST 7: cost_tiered
--- user_files eval
my $y = yaml_with('cost_tiered');
my %tier = (a1 => 2.0, a2 => 1.0, a3 => 1.5, a4 => 3.0);
$y =~ s/(  - id: (a\d)\n)/$1    cost_tier: $tier{$2}\n/g;
$y
--- check
is(post(turn_body("k$_", 1))->{headers}{'x-tokenbiryani-account'}, 'a2',
   "new conversation $_ on the cheapest tier") for 1 .. 3;



=== TEST 8: the inspector lists requests newest first and explains a failover
--- check
# each request's record awaited before the next is sent: the list's order
# is the order in which requests ended
my @r = map { my $r = post(msg_body(text => "question $_")); record($r); $r } 1 .. 3;
my $f = post(msg_body(text => 'with a failure'), 'x-mock-script' => '429,ok',
             'x-mock-script-id' => 'i');
is($f->{status}, 200, 'served after a failover');
record($f);

my $list = admin_get('/admin/requests?limit=3')->{requests};
is(scalar @$list, 3, 'limit 3');
is($list->[0]{request_id}, $f->{headers}{'x-tokenbiryani-request-id'},
   'newest first');
is($list->[2]{request_id}, $r[1]{headers}{'x-tokenbiryani-request-id'}, '...');

my $rec = record($f);
is(scalar @{ $rec->{attempts} }, 2, 'two attempts');
is($rec->{attempts}[0]{status}, 429, 'a 429');
is($rec->{attempts}[0]{kind}, 'rate_limit', 'of class rate_limit');
is($rec->{attempts}[1]{status}, 200, 'then a 200');
is($rec->{account}, $f->{headers}{'x-tokenbiryani-account'}, 'the account');
my %v = map { $_->{account} => $_->{verdict} } @{ $rec->{decision}{candidates} };
is($v{ $rec->{attempts}[0]{account} }, "filtered \x{2014} already attempted",
   'the last decision shows the failed account as attempted');
is($v{ $rec->{account} }, 'chosen', 'and the one chosen');
ok(exists $rec->{decision}{candidates}[0]{terms}{headroom}, 'with terms');
is($rec->{usage}{output_tokens}, 12, 'the usage the response reported');
is($rec->{lease}{requests}, 1, 'the lease: one request');
ok($rec->{lease}{input_tokens} > 0, 'an input estimate');
unlike(json_encode($rec), qr/with a failure|sk-a\d|admin-key/,
       'no prompt text, no credential, no key');

my $r404 = http_request(method => 'GET', path => '/admin/requests/tbr_000000000000000000000000',
                        headers => { 'x-api-key' => 'admin-key' });
is($r404->{status}, 404, 'an unknown id');



=== TEST 9: the output estimate learns per model, from the 20th sample on
--- check
my @r;
for my $i (1 .. 21) {
    push @r, post(msg_body(text => "q$i", max_tokens => 2000),
                  'x-mock-output-tokens' => 300 + $i);
}
is(record($r[19])->{lease}{output_tokens}, 2000,
   'the 20th request still leases max_tokens: 19 samples');
# 301..320: the value at index round(0.95 * 19) = 18 of the sorted set
is(record($r[20])->{lease}{output_tokens}, 319,
   'the 21st leases the nearest-rank p95 of 20 samples');
my $e = admin_get('/admin/estimation');
is($e->{mode}, 'adaptive', 'adaptive');
my $m = $e->{models}{'claude-sonnet-4-6'};
is($m->{samples}, 21, '21 samples');
ok($m->{predicting}, 'predicting');
is($m->{p95}, 320, 'nearest-rank p95');
is($m->{max}, 321, 'max');
is($m->{median}, 311, 'median');
is($m->{undershoot_rate}, 0.0476190476190476, 'one of 21 leases beaten (the 21st)')
    or diag(explain($m));



=== TEST 10: max_tokens mode leases the ceiling
--- user_files eval
$::Yaml =~ s/^routing:\n/routing:\n  output_estimate: max_tokens\n/mr
--- check
my @r = map { post(msg_body(text => "q$_", max_tokens => 900)) } 1 .. 22;
is(record($r[21])->{lease}{output_tokens}, 900, 'the ceiling');
is(admin_get('/admin/estimation')->{mode}, 'max_tokens', 'reported');



=== TEST 11: an account that reports no limits reads as half full, not full
--- user_files eval
$::Yaml =~ s/(  - id: a4\n)/$1    observable_limits: false\n/r
--- check
my $st = admin_get('/admin/status');
my ($a4) = grep { $_->{id} eq 'a4' } @{ $st->{accounts} };
my ($a1) = grep { $_->{id} eq 'a1' } @{ $st->{accounts} };
is($a4->{headroom}, 0.5, 'assumed_headroom');
is($a1->{headroom}, 1, 'a never-seen observable account reads full');
my %n;
$n{ post(msg_body(text => "u$_"))->{headers}{'x-tokenbiryani-account'} }++ for 1 .. 12;
ok(!$n{a4}, 'new sessions go where capacity is known to be')
    or diag(explain(\%n));



=== TEST 12: a full zone gives up its least recently used sessions
--- http_config eval
$::HttpConfig =~ s/tb 8m/tb 256k/r
--- user_files eval
$::Yaml =~ s/^routing:\n/observability:\n  event_buffer: 0\nrouting:\n/mr
--- timeout: 60
--- check
# windows large enough that only the zone's memory is scarce here
mock_config({ defaults => { requests_limit => 1000000, input_limit => 1e9,
                            output_limit => 1e9 } });
# one at a time first: accounts whose limits are unknown take one request
# at a time until their first answer
post(msg_body(text => 'x'), 'X-TokenBiryani-Session' => "warm-$_") for 1 .. 8;
my $n = 0;
my $sessions = 0;
# until the zone has had to evict: a few thousand 64-byte entries
while ($sessions < 8000) {
    my @reqs = map { +{ method => 'POST', path => '/v1/messages',
        body => msg_body(text => 'x'),
        headers => { 'x-api-key' => 'admin-key',
                     'X-TokenBiryani-Session' => 'session-' . ($sessions + $_) } } } 1 .. 50;
    # 50 at a time: within the pool's concurrency (4 x 16)
    my @res = @{ http_requests_concurrent(\@reqs) };
    $n += grep { $_->{status} == 200 } @res;
    $sessions += 50;
    last if admin_get('/admin/status')->{affinity}{evicted} > 0;
}
my $st = admin_get('/admin/status');
ok($st->{affinity}{evicted} > 0, "evictions after $sessions sessions");
is($n, $sessions, 'every request served while evicting');
# every session seen (the 8 warm ones too) is either kept or was evicted
my $seen = $sessions + 8;
ok($st->{affinity}{sessions} < $seen, "$st->{affinity}{sessions} of $seen sessions kept");
is($st->{affinity}{sessions} + $st->{affinity}{evicted}, $seen,
   'kept and evicted account for every session');
is(post(msg_body(text => 'x'), 'X-TokenBiryani-Session' => 'one more')->{status},
   200, 'and still serving');



=== TEST 13: an owner expires after routing.affinity_ttl_seconds without a success
--- user_files eval
$::Yaml =~ s/^routing:\n/routing:\n  affinity_ttl_seconds: 1\n/mr
--- check
my $r1 = post(turn_body('ttl', 1));
is(record(post(turn_body('ttl', 2)))->{affinity}, 'honored', 'owned within the TTL');
# the TTL is the event here: nothing to wait on but the clock
select(undef, undef, undef, 2.2);
is(record(post(turn_body('ttl', 3)))->{affinity}, 'none', 'forgotten after it');
