# A hostile store: whoever can write Redis or the SQLite file, playing the
# attacker against a running gateway.  Rewritten account specs (another
# base_url, headers, a priority, another type), forged and widened keys,
# sealed credentials swapped between accounts, old records written again,
# records cut short or too long, messages no instance signed, owners of
# conversations naming accounts the instance lacks - each refused, said
# once in the log, counted, nothing served through it; the honest records
# still served.  The suite knows the store's secret key, as another
# instance of the gateway would, to announce a change the way one does
# (a signed message): what is then refused is refused for the record
# itself.  Two workers, the real module, Debian's redis-server.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Digest::SHA qw(hmac_sha256_hex sha256);
use Time::HiRes ();

master_on();
workers(2);
no_shuffle();
mock_start();
redis_start(fresh => 1);

# the store's secret key, as another instance of the gateway knows it (the
# master reads it from its environment), and records made under it
use TB::Record;
our ($Hex, $Secret, $Kid, $RecKey) = TB::Record::secret();

our $Yaml = <<'_EOY_';
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: redis
  url: redis://127.0.0.1:${TEST_NGINX_REDIS_PORT}/0
  namespace: tbtest
accounts:
  - id: filed
    api_key: sk-filed
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

our $Sqlite = $Yaml =~ s{  backend: redis\n  url: [^\n]*\n  namespace: tbtest\n}{  backend: sqlite\n}r;

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");

# ---- what another instance of the gateway would write and say

# a message on the channel, signed now (or at $ms)
sub signed {
    my ($plain, $ms) = @_;
    $ms //= int(Time::HiRes::time() * 1000);
    my ($type, $body) = $plain =~ /^(.) (.*)\z/s or die "message: $plain\n";
    my $mac = substr(hmac_sha256_hex("tbm1\0$type" . pack('Q>', $ms) . part($body), $RecKey), 0, 32);
    "$type $ms $mac $body";
}

sub rcmd { TB::Nginx::redis_cmd(@_) }

# many commands on one connection, pipelined: how many replies came
sub rpipe {
    my @cmds = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => TB::Nginx::redis_port(), Timeout => 10)
        or die "redis: $!\n";
    binmode $s;
    my $out = join '', map { my @a = @$_; '*' . scalar(@a) . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @a) } @cmds;
    print $s $out;
    my $n = 0;
    while ($n < @cmds) {
        my $line = <$s>;
        last unless defined $line;
        $n++ if $line =~ /^[:+\-]/;
    }
    close $s;
    $n;
}
sub announce { rcmd('PUBLISH', 'tbtest:changes', signed($_[0])) }
sub now_ms { int(Time::HiRes::time() * 1000) }

sub refused { my $s = pool_status()->{store}{refused}; ($s->{records}, $s->{messages}) }

# polls until $cond holds (10 ms steps, up to $secs): true if it did
sub within { TB::Nginx::poll_until($_[0], $_[1]) }

# how many times the error log says $re in this block (what a master says
# as it starts goes to its stderr too: not counted twice)
sub said {
    my $re = shift;
    my @m = TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log') =~ /$re/g;
    scalar @m;
}

# an account's entry in /admin/accounts
sub listed {
    my ($id) = @_;
    my (undef, $j) = admin(GET => '/admin/accounts');
    (grep { $_->{id} eq $id } @{ $j->{accounts} || [] })[0];
}

sub attacker_log { [grep { ($_->{listen} // '') =~ /:$ENV{TEST_NGINX_MOCK_PORT4}$/ } @{ mock_log() }] }

sub mock_url { my $v = 'TEST_NGINX_MOCK_PORT' . ($_[0] > 1 ? $_[0] : ''); "http://127.0.0.1:$ENV{$v}" }

# a key minted through the admin API: its secret
sub mint {
    my ($name, %o) = @_;
    my ($st, $j) = admin(POST => '/admin/keys', { name => $name, %o });
    die "mint $name: $st\n" unless $st == 201;
    $j->{key};
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_}
        for qw(wrap signed rcmd rpipe announce now_ms refused within said listed attacker_log mock_url mint part);
}

run_tests();

__DATA__

=== TEST 1: an account's spec rewritten in Redis - another base_url, headers, a priority, another type - is never applied; the account keeps serving as it was added
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'team-b', api_key => 'sk-team-b', base_url => mock_url(2), probe => JSON::PP::false() });
is($st, 201, 'team-b added') or diag(explain($j));
my $honest = rcmd('HGET', 'tbtest:accounts', 'team-b');
like($honest, qr/^tba1\.$Kid\.\d+\.[\w-]{43}\.\{/, 'Redis holds its spec authenticated');
my $pin = mint('pin-b', pool => ['team-b']);

my @forged = (
    qq({"id":"team-b","base_url":"${\ mock_url(4)}"}),
    qq({"id":"team-b","base_url":"${\ mock_url(4)}","headers":{"x-exfil":"1"}}),
    qq({"id":"team-b","base_url":"${\ mock_url(2)}","priority":99}),
    qq({"id":"team-b","type":"vertex","options":{"credentials_path":"/etc/passwd"}}),
    # a well-formed envelope, its MAC another record's
    ($honest =~ s/\{.*\z/{"id":"team-b","base_url":"${\ mock_url(4)}"}/sr),
);
my ($recs0, $msgs0) = refused();
for my $i (0 .. $#forged) {
    rcmd('HSET', 'tbtest:accounts', 'team-b', $forged[$i]);
    # as a writer of Redis would announce it: no instance signed it
    rcmd('PUBLISH', 'tbtest:changes', 'a team-b');
    ok(within(3, sub { (refused())[1] > $msgs0 + $i }), "forgery $i: the unsigned announcement ignored and counted");
    # as if an instance had announced it: the record itself is refused
    announce('a team-b');
    ok(within(3, sub { (refused())[0] > $recs0 + $i }), "forgery $i: the record refused, counted");
    my $r = message_with($pin);
    is($r->{status}, 200, "forgery $i: team-b still serves");
    is($r->{headers}{'x-tokenbiryani-account'}, 'team-b', "forgery $i: as team-b");
}
is(scalar @{ attacker_log() }, 0, 'nothing reached the attacker\'s host');
is(scalar(grep { exists $_->{headers}{'x-exfil'} } @{ mock_log() }), 0, 'no injected header sent');
is(said(qr/account "team-b" in the store is refused/), scalar @forged, 'each refusal said once');
my ($a) = grep { $_->{id} eq 'team-b' } @{ pool_status()->{accounts} };
is($a->{priority} // 0, 0, 'its priority as added');

# a restart reads what Redis holds: the forged record does not load
TB::Nginx::stop_nginx();
start_again();
ok(!listed('team-b'), 'after a restart, the forged record is not loaded');
like(TB::Nginx::log_text(), qr/account "team-b" in the store is refused: its authentication does not verify/, 'and the log says why');
is(message_with($pin)->{status}, 403, 'its key has no account to reach: refused, not sent anywhere');
is(scalar @{ attacker_log() }, 0, 'still nothing at the attacker\'s host');

# the honest record written back: served again
rcmd('HSET', 'tbtest:accounts', 'team-b', $honest);
announce('a team-b');
ok(within(3, sub { (listed('team-b') // {})->{state} eq 'ready' }), 'the honest record serves again');
is(message_with($pin)->{headers}{'x-tokenbiryani-account'}, 'team-b', 'through team-b');



=== TEST 2: a key forged in Redis does not open /admin; a key widened in Redis stays as minted; another instance's honest changes are applied and said
--- request
GET /healthz
--- check
my $chosen = 'bir_' . ('x' x 43);
my $spec = '{"name":"evil","admin":true,"created":1700000000}';
# what a writer of Redis would write: no envelope, or an envelope it cannot sign
for my $value ("${\ sha256_hex($chosen)} $spec",
               sha256_hex($chosen) . " tba1.$Kid." . now_ms() . '.' . ('A' x 43) . ".$spec") {
    rcmd('HSET', 'tbtest:keys', 'evil', $value);
    rcmd('PUBLISH', 'tbtest:changes', 'k evil');
    announce('k evil');
}
my (undef, $msgs) = refused();
ok(within(3, sub { (refused())[0] >= 2 }), 'both forged records refused');
my ($st) = admin(GET => '/admin/status', undef, key => $chosen);
is($st, 401, 'the chosen secret opens nothing');
is(message_with($chosen)->{status}, 401, 'not even /v1');
is(said(qr/key "evil" in the store is refused/), 2, 'each said once');

# a minted key widened in place
my $narrow = mint('narrow', models => ['claude-haiku-*']);
my $rec = rcmd('HGET', 'tbtest:keys', 'narrow');
(my $wide = $rec) =~ s/"models":\["claude-haiku-\*"\]/"models":["*"]/ or die "no models in $rec\n";
rcmd('HSET', 'tbtest:keys', 'narrow', $wide);
announce('k narrow');
ok(within(3, sub { said(qr/key "narrow" in the store is refused/) == 1 }), 'the widened record refused');
is(message_with($narrow, model => 'claude-sonnet-4-6')->{status}, 403, 'the key keeps its scope');
is(message_with($narrow, model => 'claude-haiku-4-5')->{status}, 200, 'and what it had');

# an instance that has the store's secret key mints, rescopes and revokes:
# applied, and said at notice with the key's name
my $other = 'bir_' . ('y' x 43);
my $dig = sha256($other);
my $gen = now_ms();
rcmd('HSET', 'tbtest:keys', 'peer', unpack('H*', $dig) . ' '
     . wrap('k', 'peer', $dig, $gen, '{"name":"peer","created":1700000000}'));
announce('k peer');
ok(within(3, sub { (message_with($other)->{status} // 0) == 200 }), 'another instance\'s key honoured');
rcmd('HSET', 'tbtest:keys', 'peer', unpack('H*', $dig) . ' '
     . wrap('k', 'peer', $dig, $gen + 1, '{"name":"peer","models":["claude-haiku-*"],"created":1700000000}'));
announce('k peer');
ok(within(3, sub { (message_with($other)->{status} // 0) == 403 }), 'its rescoping applied');
rcmd('HDEL', 'tbtest:keys', 'peer');
announce('k peer');
ok(within(3, sub { (message_with($other)->{status} // 0) == 401 }), 'its revocation applied');
like(TB::Nginx::log_text(), qr/\[notice\].*key "peer" minted by another instance/, 'minted: said');
like(TB::Nginx::log_text(), qr/\[notice\].*key "peer" changed by another instance/, 'changed: said');
like(TB::Nginx::log_text(), qr/\[notice\].*key "peer" revoked by another instance/, 'revoked: said');
unlike(TB::Nginx::log_text(), qr/\Q$other\E|y{43}/, 'never its secret');



=== TEST 3: sealed credentials and specs swapped between two accounts are refused; both keep serving as added
--- request
GET /healthz
--- check
for my $id ('one', 'two') {
    my ($st, $j) = admin(POST => '/admin/accounts', { id => $id, api_key => "sk-$id", base_url => mock_url(2), probe => JSON::PP::false() });
    is($st, 201, "$id added") or diag(explain($j));
}
my %sealed = map { $_ => rcmd('HGET', 'tbtest:sealed', $_) } qw(one two);
my %spec = map { $_ => rcmd('HGET', 'tbtest:accounts', $_) } qw(one two);
my $k1 = mint('k-one', pool => ['one']);
# the credentials swapped: one's requests would carry two's key
rcmd('HSET', 'tbtest:sealed', 'one', $sealed{two});
rcmd('HSET', 'tbtest:sealed', 'two', $sealed{one});
announce('a one');
announce('a two');
ok(within(3, sub { said(qr/account "(one|two)" in the store is refused/) == 2 }), 'both swaps refused');
# the specs swapped too, each with the other's sealed credential
rcmd('HSET', 'tbtest:accounts', 'one', $spec{two});
rcmd('HSET', 'tbtest:accounts', 'two', $spec{one});
announce('a one');
ok(within(3, sub { said(qr/account "one" in the store is refused/) == 2 }), 'the spec swapped with it: refused');
my $r = message_with($k1);
is($r->{status}, 200, 'one serves');
is(mock_log()->[-1]{credential}, 'sk-one', 'with its own credential');



=== TEST 4: an older record written again is refused while instances hold a newer one: a rescoped key does not widen back, a revoked key does not come back, a changed account does not go back
--- request
GET /healthz
--- check
my $s1 = mint('k1', models => ['*']);
my $v1 = rcmd('HGET', 'tbtest:keys', 'k1');
my ($st) = admin(PATCH => '/admin/keys/k1', { models => ['claude-haiku-*'] });
is($st, 200, 'k1 narrowed');
rcmd('HSET', 'tbtest:keys', 'k1', $v1);
announce('k k1');
# (the gateway's own announcement of a change may be read after the older
# record was written back: refused too, a line each time it is read)
ok(within(3, sub { said(qr/key "k1" in Redis is refused: it is older/) >= 1 }), 'its older record refused, said');
is(message_with($s1, model => 'claude-sonnet-4-6')->{status}, 403, 'k1 stays narrow');

my $s2 = mint('k2');
my $v2 = rcmd('HGET', 'tbtest:keys', 'k2');
($st) = admin(DELETE => '/admin/keys/k2');
is($st, 200, 'k2 revoked');
is(message_with($s2)->{status}, 401, 'refused');
rcmd('HSET', 'tbtest:keys', 'k2', $v2);
announce('k k2');
ok(within(3, sub { said(qr/key "k2" in Redis is refused: it is older/) >= 1 }), 'the revoked record written again: refused');
is(message_with($s2)->{status}, 401, 'k2 stays revoked');

($st) = admin(POST => '/admin/accounts', { id => 'moved', api_key => 'sk-moved', base_url => mock_url(2), priority => 1, probe => JSON::PP::false() });
is($st, 201, 'an account');
my $a1 = rcmd('HGET', 'tbtest:accounts', 'moved');
($st) = admin(PATCH => '/admin/accounts/moved', { priority => 7 });
is($st, 200, 'changed');
rcmd('HSET', 'tbtest:accounts', 'moved', $a1);
announce('a moved');
ok(within(3, sub { said(qr/account "moved" in Redis is refused: it is older/) >= 1 }), 'its older record refused');
my ($a) = grep { $_->{id} eq 'moved' } @{ pool_status()->{accounts} };
is($a->{priority}, 7, 'it stays as changed');



=== TEST 5: records cut short, bent, oversized or of the wrong shape are refused without harm; the gateway serves on
--- request
GET /healthz
--- check
my $s = mint('good');
my $v = rcmd('HGET', 'tbtest:keys', 'good');
my @bad = (substr($v, 0, 70), substr($v, 0, length($v) - 3), $v . 'x',
           ('0' x 64) . ' ' . ('z' x 1_000_000), "garbage", '', ("\xff" x 100));
for my $i (0 .. $#bad) {
    rcmd('HSET', 'tbtest:keys', "junk$i", $bad[$i]);
    announce("k junk$i");
}
rcmd('HSET', 'tbtest:keys', 'good', substr($v, 0, length($v) - 1));
announce('k good');
ok(within(5, sub { (refused())[0] >= @bad + 1 }), 'every one refused') or diag(explain(pool_status()->{store}));
is(message_with($s)->{status}, 200, 'the key as it was still serves');
is(message_with('tenant-key')->{status}, 200, 'and the file\'s');
my $st = pool_status();
is($st->{store}{state}, 'ok', 'the store is not degraded by it');



=== TEST 6: messages no instance signed - news, spend, organisations, owners, a request to tell everything - are ignored and counted; a signed message replayed late is too
--- request
GET /healthz
--- check
my ($r0, $m0) = refused();
my @forged = ('m other 0000000000000000 filed 1 0 0 0 0 0 0 0',
              "u other\nk 0123456789abcdef 100000000000 0 0 0 0",
              'o other 0000000000000000 filed org-evil',
              'w other',
              'f 0123456789abcdef',
              'k tenant', 'a filed', 's setting.routing.strategy');
rcmd('PUBLISH', 'tbtest:changes', $_) for @forged;
# signed, but a minute ago
rcmd('PUBLISH', 'tbtest:changes', signed('w other', now_ms() - 60_000));
# signed with another key
rcmd('PUBLISH', 'tbtest:changes', 'w ' . now_ms() . ' ' . ('0' x 32) . ' other');
ok(within(3, sub { (refused())[1] - $m0 == @forged + 2 }), 'each ignored and counted')
    or diag(explain(pool_status()->{store}{refused}));
is(said(qr/a message on tbtest:changes that no instance of this gateway signed/), 1, 'said once, not once per message');
my @others = map { $_->{spend}{other_instances_usd} } @{ pool_status()->{keys} // [] };
ok(@others >= 2, 'the keys\' spend');
is_deeply([grep { $_ } @others], [], 'no other instance\'s spend counted into any key');
is(message_with('tenant-key')->{status}, 200, 'the gateway serves on');



=== TEST 7: owners of conversations naming an account this instance does not have never grow the zone (10,000 announcements)
--- request
GET /healthz
--- check
my $z0 = pool_status()->{gateway}{zone};
ok($z0->{account_slots} >= 1, 'the zone\'s slots: ' . $z0->{account_slots});
my $t0 = now_ms();
my @cmds;
for my $i (1 .. 50) {
    my $hex = sprintf '%016x', 0x1000 + $i;
    push @cmds, ['SET', "tbtest:aff:$hex", wrap('o', $hex, '', $t0 + $i, 'ghost 4096'), 'EX', 60];
}
for my $i (1 .. 10_000) {
    push @cmds, ['PUBLISH', 'tbtest:changes', signed('f ' . sprintf('%016x', 0x1000 + ($i % 50) + 1))];
}
is(rpipe(@cmds), scalar @cmds, '50 owners and 10,000 announcements, all taken by Redis');
# the last one processed: a marker announcement the instance answers
my $hex = sprintf '%016x', 0xfeed;
rcmd('SET', "tbtest:aff:$hex", wrap('o', $hex, '', now_ms(), 'filed 64'), 'EX', 60);
announce("f $hex");
ok(within(20, sub { pool_status()->{affinity}{sessions} >= 1 }), 'an owner naming an account it has is adopted');
my $z1 = pool_status()->{gateway}{zone};
is($z1->{account_slots}, $z0->{account_slots}, 'no slot made for the ghost account');
cmp_ok($z1->{free_bytes}, '>=', $z0->{free_bytes} - 4096, "the zone's free pages as they were ($z0->{free_bytes} -> $z1->{free_bytes})");
ok(!grep({ $_->{id} =~ /ghost/ } @{ pool_status()->{accounts} }), 'no ghost account anywhere');
# an owner record no instance wrote: refused
my ($r0) = refused();
$hex = sprintf '%016x', 0xbeef;
rcmd('SET', "tbtest:aff:$hex", 'filed 64', 'EX', 60);
announce("f $hex");
ok(within(3, sub { (refused())[0] > $r0 }), 'an unauthenticated owner refused');



=== TEST 8: the SQLite file rewritten between two starts: a forged key, a rewritten account, swapped credentials - each refused at load, said once; the honest records load
--- user_files eval
">>> tb.yaml\n$::Sqlite"
--- request
GET /healthz
--- check
for my $id ('alpha', 'beta') {
    my ($st, $j) = admin(POST => '/admin/accounts', { id => $id, api_key => "sk-$id", base_url => mock_url(2), probe => JSON::PP::false() });
    is($st, 201, "$id added") or diag(explain($j));
}
my $s = mint('kept');
TB::Nginx::stop_nginx();
my $chosen = 'bir_' . ('q' x 43);
sqlite_py(<<"_PY_");
import hashlib
a = dict(db.execute("select id, sealed from tb_accounts"))
db.execute("update tb_accounts set sealed = ? where id = 'alpha'", (a['beta'],))
db.execute("update tb_accounts set spec = replace(spec, '${\ mock_url(2)}', '${\ mock_url(4)}') where id = 'beta'")
db.execute("insert into tb_keys (name, digest, spec) values ('evil', ?, ?)",
           (hashlib.sha256(b'$chosen').digest(), '{"name":"evil","admin":true,"created":1700000000}'))
_PY_
start_again();
is(said(qr/account "alpha" in the store is refused/), 1, 'alpha (another\'s credential) refused, said once');
is(said(qr/account "beta" in the store is refused/), 1, 'beta (another base_url) refused, said once');
is(said(qr/key "evil" in the store is refused/), 1, 'the forged key refused, said once');
ok(!listed('alpha') && !listed('beta'), 'neither loaded');
is(message_with($s)->{status}, 200, 'the honest key loaded and serves');
my ($st) = admin(GET => '/admin/status', undef, key => $chosen);
is($st, 401, 'the forged key opens nothing');
is(scalar @{ attacker_log() }, 0, 'nothing reached the attacker\'s host');
is(pool_status()->{store}{refused}{records}, 3, 'three refused, counted');



=== TEST 9: records written before records were authenticated: refused, saying how to adopt them; adopted once with store.adopt_unauthenticated (checked by the API's rules, written back); then loaded as any other
--- user_files eval
">>> tb.yaml\n$::Sqlite"
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'old', api_key => 'sk-old', base_url => mock_url(2), probe => JSON::PP::false() });
is($st, 201, 'an account') or diag(explain($j));
my $s = mint('old-key', models => ['claude-*']);
TB::Nginx::stop_nginx();
# as an earlier version wrote them: the spec alone
sqlite_py(<<'_PY_');
import re
for t, k in (('tb_keys', 'name'), ('tb_accounts', 'id')):
    for name, spec in db.execute("select %s, spec from %s" % (k, t)).fetchall():
        db.execute("update %s set spec = ? where %s = ?" % (t, k), (re.sub(r'^tba1\.[^.]*\.[^.]*\.[^.]*\.', '', spec), name))
# and one the API would never have taken
db.execute("insert into tb_accounts (id, spec, sealed) select 'wide', replace(spec, '\"id\":\"old\"', '\"id\":\"wide\",\"headers\":{\"x\":\"1\"}'), sealed from tb_accounts where id = 'old'")
_PY_
start_again();
like(TB::Nginx::log_text(), qr/key "old-key" in the store is refused: written without authentication.*store\.adopt_unauthenticated/, 'refused, saying how to adopt it');
is(message_with($s)->{status}, 401, 'the key is not honoured meanwhile');
ok(!listed('old'), 'nor the account');

TB::Nginx::stop_nginx();
TB::Nginx::write_user_file('tb.yaml', $::Sqlite =~ s/store:\n/store:\n  adopt_unauthenticated: true\n/r);
start_again();
like(TB::Nginx::log_text(), qr/records written without authentication were adopted/, 'adopted, said');
is(message_with($s)->{status}, 200, 'the key serves');
is((listed('old') // {})->{state}, 'ready', 'the account too');
ok(!listed('wide'), 'not one the API would refuse');
like(TB::Nginx::log_text(), qr/account "wide" in the store is refused: its spec has "headers"/, 'said why');

TB::Nginx::stop_nginx();
TB::Nginx::write_user_file('tb.yaml', $::Sqlite);
start_again();
is(message_with($s)->{status}, 200, 'written back: loaded without the switch');
is((listed('old') // {})->{state}, 'ready', 'the account too');
