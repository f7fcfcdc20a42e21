# store.backend: redis - the durable state in a real redis-server (started
# here on a private port), shared by two nginx instances of two workers
# each: a key or an account written on one is honoured on the other within
# a second; the accounts' capacity shared by reservation, so that a
# stampede split across both makes the upstream refuse nothing (and
# without Redis it does); Redis away is the store degraded, never an
# outage, each instance holding itself to its part of the pool; Redis back
# empty is written again from what the instances hold.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
mock_start();
redis_start(fresh => 1);

our $Yaml = <<'_EOY_';
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: redis
  url: redis://127.0.0.1:${TEST_NGINX_REDIS_PORT}/0
  namespace: tbtest
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");

our $B = peer_port();

# polls $cond every 10 ms for up to $secs: how long it took, or undef
sub within {
    my ($secs, $cond) = @_;
    my $t0 = Time::HiRes::time();
    TB::Nginx::poll_until($secs, $cond) or return undef;
    Time::HiRes::time() - $t0;
}

sub store_of { pool_status()->{store} }

# two accounts on the mock's first two ports, each with a key that
# reaches only it, for the suites that share their capacity
our $Pair = <<'_EOY_';
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    max_concurrency: 200
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    max_concurrency: 200
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
  - key: pin-a1
    name: pin-a1
    pool: [a1]
  - key: pin-a2
    name: pin-a2
    pool: [a2]
_EOY_

sub pair_yaml {
    my %o = @_;
    my $store = "server:\n  allow_private_hosts: true\nstore:\n  backend: " . ($o{redis} // 1 ? "redis\n  url: redis://127.0.0.1:\${TEST_NGINX_REDIS_PORT}/0\n  namespace: tbtest\n"
                                                       : "memory\n");
    # refill => { a1 => 'fixed_window', ... }: how the accounts' windows come back
    my $pair = $::Pair;
    for my $id (sort keys %{ $o{refill} // {} }) {
        $pair =~ s/^(  - id: $id\n(?:    .*\n)*?    max_concurrency: 200\n)/$1    replenishment: $o{refill}{$id}\n/m;
    }
    ">>> tb.yaml\n$store$pair";
}

# the requests window of account $id as instance $port reads it
sub requests_window {
    my ($id, $port) = @_;
    my ($a) = grep { $_->{id} eq $id } @{ admin_get_port('/admin/status', $port)->{accounts} // [] };
    $a ? $a->{limits}{requests} : undef;
}

# $n overlapping streams, split between A and B, none of them waiting for
# capacity: the responses
sub stampede {
    my ($n, $wait) = @_;
    my @reqs = map { my $a = message_args('tenant-key', stream => 1, text => "stampede $_",
                                          $_ % 2 ? (port => $::B) : ());
                     $a->{headers}{'x-tokenbiryani-max-wait'} = $wait // 0;
                     $a->{headers}{'x-mock-event-delay-ms'} = 25;
                     $a->{timeout} = 25;
                     $a } 1 .. $n;
    @{ TB::Nginx::http_requests_concurrent(\@reqs) };
}

# GET $path from the instance on $port: the body decoded
sub admin_get_port {
    my ($path, $port) = @_;
    my (undef, $j) = admin(GET => $path, undef, port => $port);
    $j;
}

# Redis away under load: $o{clients} clients, half on A and half on B,
# each sending one streamed request after another (tagged with its
# instance, waiting for capacity up to $o{wait} s) until $o{until}; Redis
# killed at $o{kill} and started empty at $o{back} (epoch seconds).
# Returns when Redis was killed, $o{settle} s after (from) and when it was
# back, what A's /admin/status said of the accounts each second meanwhile,
# and the clients' answers.
sub drill {
    my %o = @_;
    my $dir = TB::Nginx::servroot() . '/logs';
    my @kids;
    for my $c (1 .. $o{clients}) {
        my $from = $c % 2 ? 'B' : 'A';
        my $pid = fork // die "fork: $!\n";
        if ($pid == 0) {
            my @done;
            for (my $i = 1; Time::HiRes::time() < $o{until}; $i++) {
                my $a = message_args('tenant-key', stream => 1, text => "drill $c $i",
                                     $from eq 'B' ? (port => $::B) : ());
                $a->{headers}{'x-tokenbiryani-max-wait'} = $o{wait};
                $a->{headers}{'x-mock-event-delay-ms'} = 25;
                $a->{headers}{'x-drill-from'} = $from;
                $a->{timeout} = $o{wait} + 15;
                my $t = Time::HiRes::time();
                my $r = TB::Nginx::http_request(%$a);
                push @done, { from => $from, status => $r->{status} // 0, took => Time::HiRes::time() - $t };
            }
            TB::Nginx::spew("$dir/drill.$c.json", TB::Nginx::json_encode(\@done));
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }
    my $sleep_until = sub { my $d = $_[0] - Time::HiRes::time(); Time::HiRes::sleep($d) if $d > 0 };
    my %d;
    $sleep_until->($o{kill});
    TB::Nginx::redis_kill();
    $d{killed} = Time::HiRes::time();
    for (my $at = $d{killed}; $at < $o{back} - 0.5; $at += 1) {
        $sleep_until->($at);
        $d{from} //= Time::HiRes::time() if $at >= $d{killed} + $o{settle};
        my $st = admin_get_port('/admin/status', undef);
        push @{ $d{seen} }, { at => sprintf('%.1f', Time::HiRes::time() - $d{killed}),
                              share => $st->{store}{share}{held}, queue => $st->{queue}{depth},
                              map { $_->{id} => sprintf('remaining %s, headroom %.2f, reserved %d, pending %d',
                                                        $_->{limits}{requests}{remaining} // '-', $_->{headroom} // 0,
                                                        $_->{reserved}{requests} // 0, $_->{pending}{requests} // 0) }
                              @{ $st->{accounts} // [] } };
    }
    $sleep_until->($o{back});
    TB::Nginx::redis_start(fresh => 1);
    $d{back} = Time::HiRes::time();
    waitpid($_, 0) for @kids;
    $d{done} = [map { @{ TB::Nginx::json_decode(TB::Nginx::slurp("$dir/drill.$_.json") || '[]') } }
                1 .. $o{clients}];
    \%d;
}

run_tests();

__DATA__

=== TEST 1: rediss:// is refused at nginx -t, naming why and what to do instead
--- user_files
>>> tb.yaml
store:
  backend: redis
  url: rediss://redis.example.com:6380/0
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
--- must_die
--- error_log eval
[qr/store\.url: rediss:\/\/ \(Redis over TLS\) is not supported: this build's hiredis \(Debian 12's 0\.14\) has no TLS/,
 qr/stunnel, or a unix socket to a local replica \(docs\/deployment\.md\)/]



=== TEST 2: a malformed URL or namespace stops the load naming it; the password never reaches a log
--- request
GET /healthz
--- check
my ($rc, $out) = nginx_t($::Yaml =~ s{url: \S+}{url: redis://:hunter2\@127.0.0.1:99999/0}r);
isnt($rc, 0, 'a port out of range is refused');
like($out, qr/store\.url: its port is not a number from 1 to 65535/, 'named');
unlike($out, qr/hunter2/, 'the password is not printed');
($rc, $out) = nginx_t($::Yaml =~ s{namespace: tbtest}{namespace: "has space"}r);
isnt($rc, 0, 'a namespace with a space is refused');
like($out, qr/store\.namespace is 1 to 64 letters/, 'named');
($rc, $out) = nginx_t($::Yaml =~ s{url: \S+}{url: unix:relative.sock}r);
like($out, qr/a unix socket's path is absolute/, 'a relative socket path');
($rc, $out) = nginx_t($::Yaml);
is($rc, 0, 'the file as it was passes') or diag($out);



=== TEST 3: /admin/status and /healthz say where the store is and that it is ok
--- request
GET /healthz
--- response_body_like: "store":"ok"
--- check
my $s = store_of();
is($s->{backend}, 'redis', 'backend');
is($s->{url}, "redis://127.0.0.1:$ENV{TEST_NGINX_REDIS_PORT}", 'the URL, no password');
is($s->{namespace}, 'tbtest', 'namespace');
like($s->{instance}, qr/^[\w.-]+-[0-9a-f]{8}$/, 'the instance, by host and prefix');
is($s->{state}, 'ok', 'ok');
like(TB::Nginx::log_text(), qr/the store redis:\/\/127\.0\.0\.1:\d+ \(namespace "tbtest", instance "[^"]+"\) loaded: 0 minted keys, 0 accounts/,
     'the master says what it read');



=== TEST 4: a key minted on A works on B, and revoked on A fails on B, each within a second
--- request
GET /healthz
--- check
peer_start();
isnt(admin_get_port('/admin/status', $B)->{store}{instance}, store_of()->{instance}, 'B is another instance');
my ($st, $j) = admin(POST => '/admin/keys', { name => 'shared', models => ['claude-*'] });
is($st, 201, 'minted on A') or diag(explain($j));
my $secret = $j->{key};
is(TB::Nginx::redis_cmd('HGET', 'tbtest:keys', 'shared') =~ /^([0-9a-f]{64}) tba1\.[0-9a-f]{8}\.\d+\.[\w-]{43}\.\{/ ? $1 : '',
   sha256_hex($secret), 'Redis holds its digest and spec, authenticated, not its secret');
ok(defined within(1, sub { (message_with($secret, port => $B)->{status} // 0) == 200 }),
   'B honours it within a second');
is(message_with($secret, port => $B, model => 'gpt-4o')->{status}, 403, 'with its scope');

($st, $j) = admin(PATCH => '/admin/keys/shared', { models => ['gpt-*'] });
is($st, 200, 'rescoped on A');
ok(defined within(1, sub { (message_with($secret, port => $B)->{status} // 0) == 403 }),
   'B applies the new scope within a second');

($st, $j) = admin(DELETE => '/admin/keys/shared');
is($st, 200, 'revoked on A');
ok(defined within(1, sub { (message_with($secret, port => $B, model => 'gpt-4o')->{status} // 0) == 401 }),
   'B refuses it within a second');
is(message_with($secret)->{status}, 401, 'and A at once');
my ($bs, $bj) = admin(GET => '/admin/keys', undef, port => $B);
is_deeply([map { $_->{name} } @{ $bj->{keys} }], ['ops', 'tenant'], 'B lists only the file\'s keys');
is($bj->{store}, 'redis', 'and names the backend in use');
unlike(TB::Nginx::log_text() . peer_log(), qr/\Q$secret\E/, 'the secret is in no log');



=== TEST 5: minted on B, the same name on A conflicts; both restart and read it back
--- request
GET /healthz
--- check
peer_start();
# B's workers answer once they listen, and connect to Redis a moment later:
# until then a write is refused with 503 and nothing is written
my ($st, $j);
within(5, sub { ($st, $j) = admin(POST => '/admin/keys', { name => 'from-b' }, port => $B); $st != 503 });
is($st, 201, 'minted on B') or diag(explain($j));
my $secret = $j->{key};
ok(defined within(1, sub { (message_with($secret)->{status} // 0) == 200 }), 'A honours it');
($st, $j) = admin(POST => '/admin/keys', { name => 'from-b' });
is($st, 409, 'A refuses a second key of that name');
TB::Nginx::peer_stop();
restart();
is(message_with($secret)->{status}, 200, 'after a restart A read it back from Redis');
like(TB::Nginx::log_text(), qr/loaded: 1 minted keys/, 'as the log says');



=== TEST 6: an account added on A serves on B; removed on A, B stops routing to it
--- request
GET /healthz
--- check
peer_start();
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'rt1', type => 'anthropic', api_key => 'sk-rt1',
                                                  base_url => "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT2}",
                                                  probe => JSON::PP::false });
is($st, 201, 'added on A') or diag(explain($j));
my $sealed = TB::Nginx::redis_cmd('HGET', 'tbtest:sealed', 'rt1');
ok(length($sealed // '') > 20, 'Redis holds its credential sealed');
unlike(join('', @{ TB::Nginx::redis_cmd('HGETALL', 'tbtest:accounts') }, $sealed), qr/sk-rt1/,
       'and nowhere in plaintext');
ok(defined within(1, sub { grep { $_->{id} eq 'rt1' } @{ admin_get_port('/admin/status', $B)->{accounts} } }),
   'B lists it within a second');
($st, $j) = admin(POST => '/admin/accounts/a1/disable', undef, port => $B);
is($st, 200, 'a1 disabled on B');
my $r = message_with('tenant-key', port => $B);
is($r->{status}, 200, 'B serves');
is($r->{headers}{'x-tokenbiryani-account'}, 'rt1', 'through the account added on A');
($st, $j) = admin(DELETE => '/admin/accounts/rt1');
is($st, 200, 'removed on A');
ok(defined within(1, sub { !grep { $_->{id} eq 'rt1' } @{ admin_get_port('/admin/status', $B)->{accounts} } }),
   'B drops it within a second');
unlike(TB::Nginx::log_text() . peer_log(), qr/sk-rt1/, 'the credential is in no log');



=== TEST 7: Redis killed while serving: requests go on, the store is degraded with one log line, writes refuse honestly, and it comes back
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'before' });
my $secret = $j->{key};
TB::Nginx::redis_kill();
my @r = map { message_with('tenant-key') } 1 .. 5;
is_deeply([map { $_->{status} } @r], [200, 200, 200, 200, 200], 'serving goes on from the zone');
is(message_with($secret)->{status}, 200, 'the minted key still works');
ok(defined within(5, sub { store_of()->{state} eq 'degraded' }), '/admin/status: degraded');
like(store_of()->{error}, qr/Redis redis:\/\/127\.0\.0\.1:\d+/, 'naming Redis');
like(TB::Nginx::http_request(method => 'GET', path => '/healthz')->{body}, qr/"status":"ok".*"store":"degraded"/,
     '/healthz: ok, the store degraded');
($st, $j) = admin(POST => '/admin/keys', { name => 'during' });
is($st, 503, 'a mint while Redis is away is refused');
like($j->{error}{message}, qr/nothing was changed: the store cannot be written \(Redis .* is not reachable/,
     'saying why') or diag(explain($j));
my @lines = grep { /the store cannot be written, the gateway serves from memory/ } split /\n/, TB::Nginx::log_text();
is(scalar @lines, 1, 'the log says so once');
TB::Nginx::redis_start();
ok(defined within(8, sub { store_of()->{state} eq 'ok' }), 'ok again once Redis is back');
like(TB::Nginx::log_text(), qr/the store "redis:\/\/[^"]+" is written again/, 'which the log says');
($st, $j) = admin(POST => '/admin/keys', { name => 'after' });
is($st, 201, 'writes work again');
@lines = grep { /the store cannot be written, the gateway serves from memory/ } split /\n/, TB::Nginx::log_text();
is(scalar @lines, 1, 'and it did not flap while the workers came back one by one');
--- error_log eval
qr/the store cannot be written/



=== TEST 8: Redis restarted empty: the instances write back the keys and accounts they hold
--- request
GET /healthz
--- check
peer_start();
my ($st, $j) = admin(POST => '/admin/keys', { name => 'kept' });
my $secret = $j->{key};
($st, $j) = admin(POST => '/admin/accounts', { id => 'rt2', api_key => 'sk-rt2',
                                               base_url => "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT2}",
                                               probe => JSON::PP::false });
is($st, 201, 'an account added');
TB::Nginx::redis_kill();
TB::Nginx::redis_start(fresh => 1);
ok(defined within(10, sub { (TB::Nginx::redis_cmd('HGET', 'tbtest:keys', 'kept') // '') =~ /^[0-9a-f]{64} / }),
   'the key is in Redis again');
ok(defined within(5, sub { defined TB::Nginx::redis_cmd('HGET', 'tbtest:sealed', 'rt2') }), 'and the account');
like(TB::Nginx::log_text() . peer_log(), qr/did not have this gateway's data set .*wrote back/, 'the log says why');
is(message_with($secret, port => $B)->{status}, 200, 'the key works on B');
($st, $j) = admin(DELETE => '/admin/keys/kept', undef, port => $B);
is($st, 200, 'and can be revoked on B');
ok(defined within(1, sub { (message_with($secret)->{status} // 0) == 401 }), 'which A honours');
--- error_log eval
qr/the store cannot be written/



=== TEST 9: a wrong password: degraded, with Redis's words and never the password
--- user_files eval
">>> tb.yaml\n" . ($::Yaml =~ s{namespace: tbtest}{namespace: tbtest\n  password: not-the-password}r)
--- request
GET /healthz
--- response_body_like: "store":"degraded"
--- check
like(store_of()->{error}, qr/AUTH.*(WRONGPASS|without any password|invalid)/i, 'Redis\'s refusal') or diag(explain(store_of()));
my (undef, $settings) = admin(GET => '/admin/settings');
unlike(TB::Nginx::log_text() . json_encode(pool_status()) . json_encode($settings), qr/not-the-password/,
       'the password is in no log, /admin/status or /admin/settings');
--- error_log eval
qr/degraded/



=== TEST 10: the history, the spend and the usage in Redis: written each second, read back after a restart
--- user_files eval
">>> tb.yaml\npricing: builtin\n" . $::Yaml
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'capped', spend_cap_usd => 0.001 });
is($st, 201, 'a capped key') or diag(explain($j));
my $secret = $j->{key};
my @r = map { message_with($secret) } 1 .. 8;
my $served = grep { $_->{status} == 200 } @r;
ok($served >= 2 && $r[-1]{status} == 429, "the cap refuses after $served") or diag(join ' ', map { $_->{status} } @r);
my $inst = store_of()->{instance};
ok(defined within(3, sub { (TB::Nginx::redis_cmd('LLEN', "tbtest:i:$inst:records") // 0) == 8 }),
   'the eight records are in Redis within the flush');
ok(defined within(3, sub { grep { /^k:[0-9a-f]{16}$/ } @{ TB::Nginx::redis_cmd('HKEYS', "tbtest:i:$inst:ledgers") } }),
   'and the key\'s ledger');
my %usage;
for my $range (qw(1h 24h 7d 30d)) {
    ($st, $j) = admin(GET => "/admin/usage?range=$range&by=key");
    is($st, 200, "/admin/usage?range=$range answers") or diag(explain($j));
    my %g = map { $_->{name} => $_ } @{ $j->{groups} // [] };
    $usage{$range} = $g{capped}{totals}{requests} // 0;
}
is_deeply(\%usage, { '1h' => 8, '24h' => 8, '7d' => 8, '30d' => 8 }, 'every range counts the eight (minutes, quarters, hours, days)');
ok($j->{totals}{cost_usd} > 0.001, "their cost, past the cap: \$$j->{totals}{cost_usd}");
unlike(join('', map { TB::Nginx::redis_cmd('TYPE', $_) eq 'string' ? TB::Nginx::redis_cmd('GET', $_) // '' : '' }
                @{ TB::Nginx::redis_cmd('KEYS', 'tbtest:*') }), qr/\Q$secret\E/, 'the secret is in no Redis string');
restart();
like(TB::Nginx::log_text(), qr/the store's history read back: 8 requests/, 'the history read back');
like(TB::Nginx::log_text(), qr/the store's spend read back: [1-9]\d* ledgers/, 'and the ledgers');
is(message_with($secret)->{status}, 429, 'the cap still holds after the restart');
($st, $j) = admin(GET => '/admin/requests?limit=50');
ok(@{ $j->{requests} // [] } >= 8, 'the inspector shows the requests from before') or diag(explain($j));
ok(defined within(3, sub { my (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key');
                           my %g = map { $_->{name} => $_ } @{ $u->{groups} // [] };
                           ($g{capped}{totals}{requests} // 0) == 9 }), 'the usage goes on from where it was: 9');



=== TEST 11: the usage history is one for both instances: each adds to the same buckets
--- request
GET /healthz
--- check
peer_start();
my @a = map { message_with('tenant-key') } 1 .. 3;
my @b = map { message_with('tenant-key', port => $B) } 1 .. 2;
is_deeply([map { $_->{status} } @a, @b], [200, 200, 200, 200, 200], 'three on A, two on B');
my $u;
ok(defined within(3, sub { (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key', undef, port => $B);
                           my %g = map { $_->{name} => $_ } @{ $u->{groups} // [] };
                           ($g{tenant}{totals}{requests} // 0) == 5 }),
   'B\'s /admin/usage counts all five') or diag(explain($u));
my $instances = TB::Nginx::redis_cmd('ZRANGE', 'tbtest:instances', 0, -1);
is(scalar @$instances, 2, 'two instances have written') or diag(explain($instances));



=== TEST 12: a conversation alternating between the instances stays on the account that holds its cache, and follows it when it fails over
--- user_files eval
">>> tb.yaml\n" . ($::Yaml =~ s{(    base_url: http://127.0.0.1:\$\{TEST_NGINX_MOCK_PORT\}\n)}{$1    priority: 1\n  - id: a2\n    api_key: sk-a2\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}\n}r)
--- request
GET /healthz
--- check
peer_start();
my $turn = sub {
    my ($port, $t, %o) = @_;
    my $a = message_args('tenant-key', port => $port);
    $a->{body} = turn_body('C', $t);
    $a->{headers}{'x-mock-script'} = $o{script} if $o{script};
    $a->{headers}{'x-mock-script-id'} = "turn-$t" if $o{script};
    my $r = TB::Nginx::http_request(%$a);
    ($r->{status} // 0) . ' ' . ($r->{headers}{'x-tokenbiryani-account'} // '-');
};
# turn 1 on A while a1, the preferred, is disabled there: a2 owns it
my ($st) = admin(POST => '/admin/accounts/a1/disable');
is($turn->(undef, 1), '200 a2', 'turn 1 on A: a2');
($st) = admin(POST => '/admin/accounts/a1/enable');
# what B does with a conversation it has never heard of: a1, the preferred
my $d = message_args('tenant-key', port => $B);
$d->{body} = turn_body('D', 1);
is(TB::Nginx::http_request(%$d)->{headers}{'x-tokenbiryani-account'}, 'a1', 'a new conversation on B goes to a1');
my @turns = map { $turn->($_ % 2 ? $B : undef, $_) } 2 .. 7;
is_deeply(\@turns, [('200 a2') x 6], 'turns 2 to 7, B, A, B, ...: every one on a2, the cache\'s');
my $ses = TB::Nginx::redis_cmd('KEYS', 'tbtest:aff:*');
ok(@$ses >= 2, 'Redis holds the owners') or diag(explain($ses));
# a2 fails on B: the turn goes to a1, which owns the conversation from now
is($turn->($B, 8, script => '529,ok'), '200 a1', 'turn 8 on B: a2 answers 529, a1 serves');
# the new owner is in Redis once the commit's write landed (it is sent
# without waiting, from whichever worker of B served the turn); a key
# minted on B after that is announced after it, and A reads the two back
# in that order on one connection
ok(defined within(1, sub { !grep { (TB::Nginx::redis_cmd('GET', $_) // '') =~ /^a2 / }
                                @{ TB::Nginx::redis_cmd('KEYS', 'tbtest:aff:*') } }),
   'Redis has the new owner');
my ($ks, $kj) = admin(POST => '/admin/keys', { name => 'after-8' }, port => $B);
ok(defined within(1, sub { (message_with($kj->{key})->{status} // 0) == 200 }),
   'A has read what B announced after turn 8');
is($turn->(undef, 9), '200 a1', 'turn 9 on A: a1, the new owner');
is($turn->($B, 10), '200 a1', 'turn 10 on B: a1');



=== TEST 13: without Redis the same turns break the cache: B does not know A's owner
--- user_files eval
">>> tb.yaml\n" . ($::Yaml =~ s{(    base_url: http://127.0.0.1:\$\{TEST_NGINX_MOCK_PORT\}\n)}{$1    priority: 1\n  - id: a2\n    api_key: sk-a2\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}\n}r =~ s{backend: redis}{backend: memory}r)
--- request
GET /healthz
--- check
peer_start();
my $turn = sub {
    my ($port, $t) = @_;
    my $a = message_args('tenant-key', port => $port);
    $a->{body} = turn_body('C', $t);
    my $r = TB::Nginx::http_request(%$a);
    ($r->{status} // 0) . ' ' . ($r->{headers}{'x-tokenbiryani-account'} // '-');
};
admin(POST => '/admin/accounts/a1/disable');
is($turn->(undef, 1), '200 a2', 'turn 1 on A: a2');
admin(POST => '/admin/accounts/a1/enable');
is($turn->($B, 2), '200 a1', 'turn 2 on B: a1, away from the cache on a2');



=== TEST 14: a stampede split across both instances: each holds its share of every window, and the upstream refuses nothing
--- user_files eval: pair_yaml()
--- timeout: 60
--- request
GET /healthz
--- check
mock_config({ defaults => { requests_limit => 20, window_seconds => 60 } });
peer_start();
is(message_with("pin-a$_")->{status}, 200, "a$_ read on A") for 1, 2;
ok(defined within(2, sub { my $w = requests_window('a2', $B); $w && ($w->{remaining} // -1) == 19 }),
   'B has what A read: 19 left on each') or diag(explain(requests_window('a2', $B)));
ok(defined within(3, sub { my ($a, $b) = (store_of()->{share}, admin_get_port('/admin/status', $B)->{store}{share});
                           ($a->{gateways} // 0) == 2 && ($b->{gateways} // 0) == 2
                           && $a->{held} > 0 && $b->{held} > 0 && $a->{held} + $b->{held} <= 1 }),
   'both hold a share of the pool, of two gateways') or diag(explain(store_of()));
my @res = stampede(100, 2);
my @ok = grep { ($_->{status} // 0) == 200 } @res;
my @refused = grep { ($_->{status} // 0) == 429 } @res;
is(@ok + @refused, 100, 'every request answered: served, or refused by its gateway');
is(mock_stats()->{refused_429}, 0, 'the upstream refused nothing');
ok(@ok <= 38, scalar(@ok) . ' served, no more than the two windows held');
ok(@ok >= 30, '... and most of what they held');
ok(!grep({ exists $_->{headers}{'x-tokenbiryani-account'} } @refused), 'the refusals are the gateways\' own');
my @served = map { my $p = $_; scalar grep { $res[$_]{status} == 200 } grep { $_ % 2 == $p } 0 .. 99 } 1, 0;
ok($served[0] >= 4 && $served[1] >= 4, "both instances served their part: A $served[0], B $served[1]");



=== TEST 15: the same stampede without Redis: each instance believes it holds the whole of every window, and together they over-admit
--- user_files eval: pair_yaml(redis => 0)
--- timeout: 60
--- request
GET /healthz
--- check
mock_config({ defaults => { requests_limit => 20, window_seconds => 60 } });
peer_start();
for my $port (undef, $B) {
    is(message_with("pin-a$_", port => $port)->{status}, 200, "a$_ read on " . ($port ? 'B' : 'A')) for 1, 2;
}
my @res = stampede(100);
my @ok = grep { ($_->{status} // 0) == 200 } @res;
my $refused = mock_stats()->{refused_429};
ok($refused > 0, "the upstream refused $refused requests the gateways let through");
ok(@ok <= 36, scalar(@ok) . ' served: the windows held 36 all the same');



=== TEST 16: an account that answers 429 on one instance rests on both
--- user_files eval: pair_yaml()
--- request
GET /healthz
--- check
peer_start();
my $r = message_args('pin-a1');
$r->{headers}{'x-mock-script'} = '429:30';
$r->{headers}{'x-tokenbiryani-max-wait'} = 0;
$r = TB::Nginx::http_request(%$r);
is($r->{status}, 429, 'a1 answered 429 on A');
my $a1;
ok(defined within(1, sub { ($a1) = grep { $_->{id} eq 'a1' } @{ admin_get_port('/admin/status', $B)->{accounts} };
                           $a1->{state} eq 'cooling' }), 'B rests a1 within a second') or diag(explain($a1));
is($a1->{reason}, 'resting on another instance', 'saying why');
ok($a1->{cooling_for} > 20, "for as long as A does: $a1->{cooling_for} s");
my @r = map { message_with('tenant-key', port => $B) } 1 .. 3;
is_deeply([map { "$_->{status} " . ($_->{headers}{'x-tokenbiryani-account'} // '-') } @r],
          [('200 a2') x 3], 'B sends nothing to a1 meanwhile');
is(scalar(grep { ($_->{credential} // '') eq 'sk-a1' } @{ mock_log() }), 1, 'a1 was asked once, by A');



=== TEST 17: Redis away: each instance holds itself to its part of every window, by the number of instances it last saw
--- user_files eval: pair_yaml()
--- timeout: 60
--- request
GET /healthz
--- check
mock_config({ defaults => { requests_limit => 20, window_seconds => 60 } });
peer_start();
is(message_with("pin-a$_")->{status}, 200, "a$_ read on A") for 1, 2;
ok(defined within(2, sub { my $w = requests_window('a2', $B); $w && ($w->{remaining} // -1) == 19 }),
   'B has what A read');
ok(defined within(3, sub { (store_of()->{share}{held} // 0) == 0.5
                           && (admin_get_port('/admin/status', $B)->{store}{share}{held} // 0) == 0.5 }),
   'two gateways, idle: half of the pool each');
TB::Nginx::redis_kill();
ok(defined within(3, sub { store_of()->{state} eq 'degraded' }), 'A: the store degraded');
ok(defined within(3, sub { admin_get_port('/admin/status', $B)->{store}{state} eq 'degraded' }), 'B too');
is(store_of()->{share}{held}, 0.5, 'A holds half of the pool');
is(admin_get_port('/admin/status', $B)->{store}{share}{held}, 0.5, 'and B the other half');
my @res = stampede(100);
my @ok = grep { ($_->{status} // 0) == 200 } @res;
is(scalar(grep { ($_->{status} // 0) == 200 || ($_->{status} // 0) == 429 } @res), 100, 'every request answered');
is(mock_stats()->{refused_429}, 0, 'the upstream refused nothing, with Redis away');
ok(@ok >= 30 && @ok <= 38, scalar(@ok) . ' served of the 38 the windows held');
my @lines = grep { /the pool's capacity is not shared while Redis is away: this gateway holds itself to 1\/2/ }
            split /\n/, TB::Nginx::log_text();
is(scalar @lines, 1, 'the log says so once');
TB::Nginx::redis_start();
ok(defined within(5, sub { (store_of()->{share}{held} // 0) != 0.5 || store_of()->{state} eq 'ok' }),
   'shared through Redis again');
ok(defined within(5, sub { TB::Nginx::log_text() =~ /the pool is shared through Redis again \(2 gateways\)/ }),
   'which the log says');
--- error_log eval
qr/the store cannot be written/



=== TEST 18: a key's spend cap and rpm hold on the sum of both instances, and after one restarts
--- user_files eval
">>> tb.yaml\npricing: builtin\n" . $::Yaml
--- request
GET /healthz
--- check
peer_start();
my $key_on = sub {
    my ($name, $port) = @_;
    my ($k) = grep { $_->{name} eq $name } @{ admin_get_port('/admin/status', $port)->{keys} // [] };
    $k;
};
my ($st, $j) = admin(POST => '/admin/keys', { name => 'capped', spend_cap_usd => 0.001 });
is($st, 201, 'a key capped at $0.001') or diag(explain($j));
my $capped = $j->{key};
ok(defined within(1, sub { $key_on->('capped', $B) }), 'B has it');
my @r;
for (1 .. 8) { push @r, message_with($capped); last if $r[-1]{status} != 200 }
ok(@r >= 2 && $r[-1]{status} == 429, 'A serves it until the cap: ' . join(' ', map { $_->{status} } @r));
ok(defined within(1, sub { ($key_on->('capped', $B)->{spend}{other_instances_usd} // 0) >= 0.001 }),
   'B knows what A spent within a second') or diag(explain($key_on->('capped', $B)));
my $rb = message_with($capped, port => $B);
is($rb->{status}, 429, 'B, which served nothing of it, refuses it');
like($rb->{body}, qr/spend cap/, 'naming the cap');
is(scalar(grep { ($_->{headers}{'x-api-key'} // '') eq 'sk-a1' } @{ mock_log() }), @r - 1,
   'the upstream saw only what A served');

($st, $j) = admin(POST => '/admin/keys', { name => 'paced', rpm => 4 });
my $paced = $j->{key};
ok(defined within(1, sub { $key_on->('paced', $B) }), 'a key of 4 requests a minute, on both');
is_deeply([map { message_with($paced)->{status} } 1 .. 3], [200, 200, 200], 'three on A');
ok(defined within(1, sub { ($key_on->('paced', $B)->{rpm_used} // 0) == 3 }), 'B counts them within a second');
my @b = map { message_with($paced, port => $B) } 1 .. 2;
is_deeply([map { $_->{status} } @b], [200, 429], 'B serves the fourth, not a fifth');
like($b[1]{body}, qr/over its limit of 4 requests a minute/, 'as the key\'s rpm');

TB::Nginx::peer_stop();
peer_start();
ok(defined within(2, sub { ($key_on->('capped', $B)->{spend}{other_instances_usd} // 0) >= 0.001 }),
   'B started again and was told again what A spent');
is(message_with($capped, port => $B)->{status}, 429, 'the cap still holds on B');



=== TEST 19: a conversation's caps hold on the sum of its turns on both instances; /admin/sessions on either shows the whole of it
--- request
GET /healthz
--- check
peer_start();
my ($st, $j) = admin(POST => '/admin/keys', { name => 'turns', session_max_turns => 3 });
is($st, 201, 'a key whose conversations take 3 turns') or diag(explain($j));
my $secret = $j->{key};
ok(defined within(1, sub { (message_with($secret, port => $B, text => 'warm')->{status} // 0) == 200 }), 'B has it');
my $turn = sub {
    my ($port, $t) = @_;
    my $a = message_args($secret, port => $port);
    $a->{body} = turn_body('T', $t);
    TB::Nginx::http_request(%$a);
};
my $sessions_on = sub {
    my ($port) = @_;
    [grep { $_->{key} eq 'turns' && $_->{turns} >= 1 && $_->{session} }
          @{ admin_get_port('/admin/sessions', $port)->{sessions} // [] }];
};
is($turn->(undef, 1)->{status}, 200, 'turn 1 on A');
ok(defined within(1, sub { my $s = $sessions_on->($B); grep { $_->{turns} == 1 && $_->{window_turns} == 1 } @$s }),
   'B lists the conversation A served, within a second') or diag(explain($sessions_on->($B)));
is($turn->($B, 2)->{status}, 200, 'turn 2 on B');
ok(defined within(1, sub { grep { $_->{turns} == 2 } @{ $sessions_on->(undef) } }), 'A counts both turns');
is($turn->(undef, 3)->{status}, 200, 'turn 3 on A');
ok(defined within(1, sub { grep { $_->{turns} == 3 } @{ $sessions_on->($B) } }), 'B counts three');
my $r = $turn->($B, 4);
is($r->{status}, 429, 'turn 4 on B is refused: the conversation ran its 3 turns across both');
like($r->{body}, qr/3 turns/, 'saying so') or diag($r->{body});
my ($s) = grep { $_->{turns} == 3 } @{ $sessions_on->($B) };
is($s->{account}, 'a1', 'its account, as the instance that served it last says');



=== TEST 20: Redis killed under load: no request fails, and once it is back the usage and the spend are whole
--- user_files eval
">>> tb.yaml\npricing: builtin\n" . $::Yaml
--- timeout: 60
--- request
GET /healthz
--- check
peer_start();
my ($st, $j) = admin(POST => '/admin/keys', { name => 'loaded' });
my $secret = $j->{key};
ok(defined within(1, sub { (message_with($secret, port => $B)->{status} // 0) == 200 }), 'on both');
my $batch = sub {
    my ($tag) = @_;
    my @reqs = map { message_args($secret, text => "$tag $_", $_ % 2 ? (port => $B) : ()) } 1 .. 20;
    [map { $_->{status} // 0 } @{ TB::Nginx::http_requests_concurrent(\@reqs) }];
};
my @all = @{ $batch->('before') };
TB::Nginx::redis_kill();
push @all, @{ $batch->('away') };
ok(defined within(3, sub { store_of()->{state} eq 'degraded' }), 'the store degraded meanwhile');
push @all, @{ $batch->('still away') };
TB::Nginx::redis_start();
push @all, @{ $batch->('back') };
is_deeply(\@all, [(200) x 80], 'all 80 requests served, before, while and after Redis was away');
my $u;
ok(defined within(5, sub { (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key', undef, port => $B);
                           my %g = map { $_->{name} => $_ } @{ $u->{groups} // [] };
                           ($g{loaded}{totals}{requests} // 0) == 81 }),
   'the usage history in Redis counts every one of them (and the first on B)') or diag(explain($u));
my %g = map { $_->{name} => $_ } @{ $u->{groups} };
my $cost = $g{loaded}{totals}{cost_usd};
ok($cost > 0, "their cost: \$$cost");
# the spend ledgers each instance wrote, read back by both after a restart
my $inst_a = store_of()->{instance};
ok(defined within(3, sub { grep { /^k:/ } @{ TB::Nginx::redis_cmd('HKEYS', "tbtest:i:$inst_a:ledgers") } }),
   'A\'s ledgers are in Redis');
TB::Nginx::peer_stop();
restart();
peer_start();
my $spend;
ok(defined within(2, sub { my ($k) = grep { $_->{name} eq 'loaded' } @{ pool_status()->{keys} };
                           $spend = $k->{spend}{window_usd} // 0;
                           abs($spend - $cost) < 1e-9 }),
   "after both restarted, A's ledger and B's as told add up to the same \$$cost") or diag("spend $spend, usage $cost");
--- error_log eval
qr/the store cannot be written/



=== TEST 21: Redis restarted empty under load: the usage history counts every request served, those before the loss too, and the status says what was written again
--- user_files eval
">>> tb.yaml\npricing: builtin\n" . $::Yaml
--- timeout: 60
--- request
GET /healthz
--- check
peer_start();
my $batch = sub {
    my ($tag) = @_;
    my @reqs = map { message_args('tenant-key', text => "$tag $_", $_ % 2 ? (port => $B) : ()) } 1 .. 20;
    [map { $_->{status} // 0 } @{ TB::Nginx::http_requests_concurrent(\@reqs) }];
};
my $served_on = sub {
    my ($port) = @_;
    my (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key', undef, defined $port ? (port => $port) : ());
    my %g = map { $_->{name} => $_ } @{ $u->{groups} // [] };
    $g{tenant}{totals}{requests} // 0;
};
my @all = @{ $batch->('before') };
ok(defined within(3, sub { $served_on->($B) == 20 }), 'the first 20 are in the usage history in Redis');
my $inst_a = store_of()->{instance};
TB::Nginx::redis_kill();
push @all, @{ $batch->('away') };
TB::Nginx::redis_start(fresh => 1);
is(TB::Nginx::redis_cmd('EXISTS', "tbtest:i:$inst_a:ledgers"), 0, 'Redis came back with nothing');
push @all, @{ $batch->('back') };
is_deeply(\@all, [(200) x 60], 'all 60 requests served, before, while and after Redis was away');
my ($n_a, $n_b);
ok(defined within(5, sub { ($n_a, $n_b) = ($served_on->(), $served_on->($B));
                           $n_a == 60 && $n_b == 60 }),
   'once Redis is back empty, the usage history on either instance counts all 60, counted once')
    or diag("A reads $n_a, B reads $n_b");
is(message_with("tenant-key", port => $_)->{status}, 200, "one more on $_") for TB::Nginx::server_port(), $B;
ok(defined within(3, sub { $served_on->($B) == 62 }), 'the flushes after count only what is new')
    or diag('B reads ' . $served_on->($B));
my $rw = store_of()->{history_rewritten};
ok($rw && $rw->{requests} >= 10 && $rw->{lost_requests} == 0,
   "A's status says what it wrote again: " . JSON::PP->new->canonical->encode($rw // {}));
ok(defined within(3, sub { grep { /^k:/ } @{ TB::Nginx::redis_cmd('HKEYS', "tbtest:i:$inst_a:ledgers") } }),
   'and its spend ledgers are in Redis again');
like(TB::Nginx::log_text(), qr/had less of this instance's history than it wrote \(restarted empty, or restored\): the \d+ requests it still holds are written again/,
     'the log says so');
--- error_log eval
qr/the store cannot be written/



=== TEST 22: Redis back empty: neither instance takes more than its part until the other is back too, and both count two gateways
--- user_files eval: pair_yaml()
--- timeout: 60
--- request
GET /healthz
--- check
mock_config({ defaults => { requests_limit => 20, window_seconds => 60 } });
peer_start();
is(message_with("pin-a$_")->{status}, 200, "a$_ read on A") for 1, 2;
ok(defined within(3, sub { (store_of()->{share}{held} // 0) == 0.5
                           && (admin_get_port('/admin/status', $B)->{store}{share}{held} // 0) == 0.5 }),
   'two gateways, idle: half of the pool each');
TB::Nginx::redis_kill();
ok(defined within(3, sub { store_of()->{state} eq 'degraded'
                           && admin_get_port('/admin/status', $B)->{store}{state} eq 'degraded' }),
   'both degraded');
# away long enough that each worker's reconnection waits grow apart
select(undef, undef, undef, 1.5);
TB::Nginx::redis_start(fresh => 1);
ok(defined within(6, sub { store_of()->{state} eq 'ok' || admin_get_port('/admin/status', $B)->{store}{state} eq 'ok' }),
   'one instance is back');
my @res = stampede(100);
is(scalar(grep { ($_->{status} // 0) == 200 || ($_->{status} // 0) == 429 } @res), 100, 'every request answered');
my $served = grep { ($_->{status} // 0) == 200 } @res;
is(mock_stats()->{refused_429}, 0, "the upstream refused nothing as Redis came back ($served served)");
ok($served <= 38, "$served served of the 38 the windows held");
my $said = sub { my @n = ($_[0] =~ /the pool is shared through Redis again \((\d+) gateways\)/g); $n[-1] };
my ($na, $nb);
ok(defined within(8, sub { ($na, $nb) = ($said->(TB::Nginx::log_text()), $said->(peer_log()));
                           defined $na && defined $nb }),
   'both say the pool is shared again');
# (the log line counts those back within a lease's time of its own return:
# under a sanitizer one instance may come back later than that)
ok(defined within(8, sub { (store_of()->{share}{gateways} // 0) == 2
                           && (admin_get_port('/admin/status', $B)->{store}{share}{gateways} // 0) == 2 }),
   'and both count two gateways') or diag("the logs said $na and $nb");
--- error_log eval
qr/the store cannot be written/



=== TEST 23: a spend cap's refusal says one thing on both instances - x-should-retry: false and no retry-after, and when room comes back as each knows it - and a cap held only by requests in flight on the other instance is waited for, not refused
--- user_files eval
">>> tb.yaml\npricing: builtin\n" . $::Yaml
--- timeout: 60
--- request
GET /healthz
--- check
peer_start();
my $key_on = sub {
    my ($name, $port) = @_;
    my ($k) = grep { $_->{name} eq $name } @{ admin_get_port('/admin/status', $port)->{keys} // [] };
    $k;
};
my ($st, $j) = admin(POST => '/admin/keys', { name => 'held', spend_cap_usd => 0.02 });
my $held = $j->{key};
ok(defined within(1, sub { $key_on->('held', $B) }), 'a key capped at $0.02, on both');
# on A, one slow stream whose output lease (4,096 tokens at $15 a million)
# reserves more than the cap; what it costs when it settles is far less
my $pid = fork // die "fork: $!";
if (!$pid) {
    my $a = message_args($held, stream => 1, max_tokens => 4096, text => 'slow');
    $a->{headers}{'x-mock-event-delay-ms'} = 300;
    $a->{timeout} = 30;
    TB::Nginx::http_request(%$a);
    POSIX::_exit(0);
}
ok(defined within(5, sub { ($key_on->('held', $B)->{spend}{other_instances_usd} // 0) >= 0.02 }),
   'B is told what A holds in flight');
my $rb = message_with($held, port => $B);
waitpid($pid, 0);
is($rb->{status}, 200, "B's request waited for A's to settle, and was served, as on one instance") or diag($rb->{body});

($st, $j) = admin(POST => '/admin/keys', { name => 'capped', spend_cap_usd => 0.001 });
my $capped = $j->{key};
ok(defined within(1, sub { $key_on->('capped', $B) }), 'a key capped at $0.001, on both');
my @r;
for (1 .. 8) { push @r, message_with($capped); last if $r[-1]{status} != 200 }
is($r[-1]{status}, 429, 'A serves it until the cap: ' . join(' ', map { $_->{status} } @r));
ok(defined within(2, sub { ($key_on->('capped', $B)->{spend}{other_instances_usd} // 0) >= 0.001 }),
   'B knows what A spent');
my $ra = message_with($capped);
$rb = message_with($capped, port => $B);
for ([A => $ra], [B => $rb]) {
    my ($who, $r) = @$_;
    is($r->{status}, 429, "$who refuses it");
    is($r->{headers}{'x-should-retry'}, 'false', "$who: not to be retried");
    ok(!defined $r->{headers}{'retry-after'}, "$who: and no retry-after with it");
}
like($ra->{body}, qr/room again in (?:23h \d+m|1d 0h)"/, 'A, which holds the charges, says when they leave its window');
like($rb->{body}, qr/room again within 1d 1h, as what other instances spent leaves the window"/,
     'B, told only their sum, says by when at the latest');



=== TEST 24: Redis away through several windows: each instance's part refills with them, a fixed window at its reset and a rolling one at its rate, and the upstream refuses nothing
--- user_files eval: pair_yaml(refill => { a1 => 'fixed_window', a2 => 'token_bucket' })
--- timeout: 90
--- request
GET /healthz
--- check
# a1 a fixed window of 20 requests every 4 s; a2 a rolling one of 300 a
# minute (5 a second)
my ($P, $rate) = (4, 5);
mock_config({ credentials => { 'sk-a1' => { requests_limit => 20, window_seconds => $P, window_mode => 'fixed' },
                               'sk-a2' => { requests_limit => 300, window_seconds => 60 } } });
peer_start();
is(message_with("pin-a$_")->{status}, 200, "a$_ read on A") for 1, 2;
ok(defined within(5, sub { my ($a, $b) = (store_of()->{share}, admin_get_port('/admin/status', $B)->{store}{share});
                           ($a->{gateways} // 0) == 2 && ($b->{gateways} // 0) == 2 }),
   'both hold a share of the pool, of two gateways');
# 32 clients through 3 s of Redis, 21 s without it and 4 s after it is back
# empty; measured from 3 s after the kill (a larger part is taken only
# then: each holds half of the pool) until Redis is back
my $t0 = Time::HiRes::time();
my $d = drill(clients => 32, wait => 30, kill => $t0 + 3, settle => 3, back => $t0 + 24, until => $t0 + 28);
my @done = @{ $d->{done} };
is(scalar(grep { $_->{status} != 200 && $_->{status} != 429 } @done), 0,
   scalar(@done) . ' requests, every one answered: served, or refused by its gateway');
my ($from, $to) = ($d->{from}, $d->{back});
is(mock_stats()->{refused_429}, 0, 'the upstream refused nothing, while Redis was away nor once it was back')
    or diag(explain([map { sprintf('%s %s %.2f s after the kill (back after %.2f s)', $_->{headers}{'x-drill-from'} // '-',
                                   $_->{credential}, $_->{ts} - $d->{killed}, $to - $d->{killed}) }
                     grep { ($_->{status} // 0) == 429 } @{ mock_log() }]));
# what the windows offered each instance meanwhile: half of a1's every
# window that began and ended then, and half of a2's refill (what it held
# then is in the slice of whichever instance held it)
my $fixed_end = mock_stats()->{credentials}{'sk-a1'}{requests_reset};
my @windows = grep { $_ >= $from && $_ + $P <= $to } map { $fixed_end - $P * $_ } 1 .. int(($fixed_end - $from) / $P) + 1;
ok(@windows >= 3, scalar(@windows) . " of a1's fixed windows began and ended while Redis was away");
my $offered_fixed = @windows * 20 / 2;
my $offered_rolling = ($to - $from) * $rate / 2;
my @log = grep { !$_->{refused} && ($_->{status} // 0) == 200 && $_->{ts} >= $from && $_->{ts} < $to } @{ mock_log() };
for my $gw ('A', 'B') {
    my @mine = grep { ($_->{headers}{'x-drill-from'} // '') eq $gw } @log;
    my $fixed = grep { my $t = $_->{ts}; ($_->{credential} // '') eq 'sk-a1' && grep { $t >= $_ && $t < $_ + $P } @windows } @mine;
    my $rolling = grep { ($_->{credential} // '') eq 'sk-a2' } @mine;
    my $ratio = ($fixed + $rolling) / ($offered_fixed + $offered_rolling);
    ok($ratio >= 0.8, sprintf('%s served %.2f of its half of what the windows offered while Redis was away: '
                              . 'a1 (fixed) %d of %d, a2 (rolling) %d of %.0f', $gw, $ratio, $fixed,
                              $offered_fixed, $rolling, $offered_rolling))
        or diag(explain($d->{seen}));
}
my $longest = List::Util::max(map { $_->{took} } @done);
ok($longest < 20, sprintf('no request waited for long: %.1f s at most', $longest));
ok(defined within(5, sub { TB::Nginx::log_text() =~ /the pool is shared through Redis again \(2 gateways\)/ }),
   'shared through Redis again once it is back');
--- error_log eval
qr/the store cannot be written/



=== TEST 25: requests faster than the inspector's ring turns over: the usage history counts every one, and goes on counting after a restart
--- user_files eval
">>> tb.yaml\npricing: builtin\nobservability:\n  event_buffer: 4\n" . $::Yaml
--- timeout: 60
--- request
GET /healthz
--- check
my $served_by_key = sub {
    my (undef, $u) = admin(GET => '/admin/usage?range=1h&by=key');
    my %g = map { $_->{name} => $_ } @{ $u->{groups} // [] };
    $g{tenant}{totals}{requests} // 0;
};
my @st = map { $_->{status} // 0 }
         @{ TB::Nginx::http_requests_concurrent([map { message_args('tenant-key', text => "fast $_") } 1 .. 60]) };
is_deeply(\@st, [(200) x 60], '60 requests at once, the ring holds 4');
my $n;
ok(defined within(5, sub { ($n = $served_by_key->()) == 60 }), 'the usage history counts all 60')
    or diag("it counts $n");
my $inst = store_of()->{instance};
ok((TB::Nginx::redis_cmd('LLEN', "tbtest:i:$inst:records") // 0) <= 4, 'Redis keeps no more records than the ring');
# two more one at a time: the ring keeps up, so each one's record is
# written; what is read back is listed as the ring would
my @last = map { message_with('tenant-key') } 1 .. 2;
is_deeply([map { $_->{status} } @last], [200, 200], 'two more, one at a time');
restart();
my $nback = read_back_listed(\@last);
my $one = message_with('tenant-key');
is($one->{status}, 200, 'one more after a restart');
ok(defined within(5, sub { ($n = $served_by_key->()) == 63 }), 'counted too: 63, whatever records were read back')
    or diag("it counts $n");
listed_before_read_back($one, $nback);
