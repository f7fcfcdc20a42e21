# The map of batches is durable: a batch's record (which account holds it,
# which key made it, what it holds on the ledgers, whether its results were
# charged) is kept in the store, authenticated like every record the
# gateway reads back.  A restart still answers for every batch - on its
# account, to its key only, with its estimate held again until its results
# are charged, and never charged twice - and a second instance sharing
# Redis answers for a batch the first made, at once.  A record the gateway
# did not write (moved to another id, pointed at another account or key,
# cut short, replayed) is refused, said once in the log, counted, and its
# batch answered as unknown: nobody is redirected by a store writer.  Two
# workers, the real module, a real SQLite file, Debian's redis-server.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use MIME::Base64 ();
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

our $B = peer_port();

sub yaml_of {
    my ($backend) = @_;
    my $store = $backend eq 'redis'
        ? "store:\n  backend: redis\n  url: redis://127.0.0.1:\${TEST_NGINX_REDIS_PORT}/0\n  namespace: tbb\n"
        : "store:\n  backend: sqlite\n";
    main::pool_yaml(accounts => 2, yaml => "batch:\n  api: true\npricing: builtin\n$store", keys => [
        { key => 'key-one', name => 'one', spend_cap_usd => '5' },
        { key => 'key-two', name => 'two' },
        { key => 'admin-key', name => 'admin', admin => 'true' }]);
}

sub batch {
    my ($key, $method, $path, $body, %o) = @_;
    my $r = http_request(method => $method, path => "/v1/messages/batches$path",
                         headers => { 'x-api-key' => $key, 'anthropic-version' => '2023-06-01',
                                      'content-type' => 'application/json' },
                         defined $body ? (body => json_encode($body)) : (), %o);
    ($r->{status}, scalar eval { json_decode($r->{body}) }, $r);
}

sub requests_of {
    my ($n) = @_;
    +{ requests => [map { +{ custom_id => "r$_",
                              params => { model => 'claude-sonnet-4-6', max_tokens => 5,
                                          messages => [{ role => 'user', content => "secret prompt $_" }] } } }
                    1 .. $n] };
}

sub not_found_ok {
    my ($status, $e, $what) = @_;
    is($status, 404, "$what: 404");
    like($e->{error}{message} // '', qr/^message_batch not found/, "$what: as an unknown id");
}

sub key_spend {
    my ($name, %o) = @_;
    my (undef, $j) = admin(GET => '/admin/status', undef, %o);
    (grep { $_->{name} eq $name } @{ $j->{keys} })[0]{spend};
}

sub until_ended {
    my ($key, $id, %o) = @_;
    my $b;
    poll_until(10, sub { (undef, $b) = batch($key, 'GET', "/$id", undef, %o);
                         ($b->{processing_status} // '') eq 'ended' });
    $b;
}

sub refused { pool_status()->{store}{refused}{records} // 0 }

sub said {
    my $re = shift;
    my @m = TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log') =~ /$re/g;
    scalar @m;
}


# the stored record of a batch: (generation, payload) of its envelope
sub opened { $_[0] =~ /^tba1\.[0-9a-f]{8}\.(\d+)\.[\w-]{43}\.(.*)\z/s ? ($1, $2) : () }

sub sqlite_record {
    my ($id) = @_;
    my $rows = sqlite_rows('SELECT value FROM tb_objects WHERE id = ?', [$id]);
    @$rows ? $rows->[0]{value} : undef;
}

sub sqlite_put {
    my ($id, $value) = @_;
    my $args = MIME::Base64::encode_base64(json_encode([$id, $value]), '');
    sqlite_py("import base64, json\nrow = json.loads(base64.b64decode('$args'))\n"
              . "db.execute('INSERT INTO tb_objects (id, value) VALUES (?, ?) "
              . "ON CONFLICT (id) DO UPDATE SET value = excluded.value', row)\n");
}

gateway_suite(yaml => yaml_of('sqlite'));
run_tests();

__DATA__

=== TEST 1: SQLite: after a restart, every batch is answered on its account, to its key only; its hold is held again and its results charged once
--- check
mock_config({ defaults => { batch_processing_ms => 300 } });
my (%acct, @ids);
for my $key ('key-one', 'key-one', 'key-two') {
    my ($st, $b, $r) = batch($key, 'POST', '', requests_of(2));
    is($st, 200, "$key: created");
    push @ids, $b->{id};
    $acct{ $b->{id} } = $r->{headers}{'x-tokenbiryani-account'};
}
my $held = key_spend('one')->{in_flight_usd};
ok($held > 0, "the estimates held on key one (\$$held)");
my $rec;
ok(poll_until(5, sub { $rec = sqlite_record($ids[0]) }), 'the batch\'s record is in the file');
my ($gen, $payload) = opened($rec // '');
ok(defined $payload, 'in its envelope');
like($payload // '', qr/^o1 1 1 0 0 \d+ \d+ [1-9]\d* 0 .* \d+:a[12] 3:one\z/, 'its account, its key, what it holds');
unlike($rec // '', qr/secret prompt|sk-a/, 'no prompt and no credential in it');
poll_until(5, sub { sqlite_record($ids[2]) });

restart();

for my $i (0 .. 2) {
    my $key = $i < 2 ? 'key-one' : 'key-two';
    my ($st, $b, $r) = batch($key, 'GET', "/$ids[$i]");
    is($st, 200, "batch $i: answered after the restart");
    is($r->{headers}{'x-tokenbiryani-account'}, $acct{ $ids[$i] }, "batch $i: on its account");
    my ($s2, $e2) = batch($i < 2 ? 'key-two' : 'key-one', 'GET', "/$ids[$i]");
    not_found_ok($s2, $e2, "batch $i: another key");
}
my ($st, $l) = batch('key-one', 'GET', '');
is_deeply([map { $_->{id} } @{ $l->{data} }], [reverse @ids[0, 1]], 'the list: key one\'s two, newest first');
($st, $l) = batch('admin-key', 'GET', '');
is(scalar @{ $l->{data} }, 3, 'the admin sees all three');
ok(abs(key_spend('one')->{in_flight_usd} - $held) < 1e-12, 'the estimates held again');

until_ended('key-one', $ids[0]);
my ($s, undef, $r) = batch('key-one', 'GET', "/$ids[0]/results");
is($s, 200, 'results read');
my $sp = key_spend('one');
ok($sp->{in_flight_usd} < $held, 'its hold let go');
my $spent = $sp->{window_usd} - $sp->{in_flight_usd};
ok($spent > 0, "charged (\$$spent)");
ok(poll_until(5, sub { (opened(sqlite_record($ids[0]) // ''))[1] =~ /^o1 1 3 1 1 / }),
   'the record says it ended and was charged');

restart();

($s) = batch('key-one', 'GET', "/$ids[0]/results");
is($s, 200, 'read again after a restart');
$sp = key_spend('one');
ok(abs($sp->{window_usd} - $sp->{in_flight_usd} - $spent) < 1e-12, 'not charged twice');
($s) = batch('key-one', 'DELETE', "/$ids[0]");
is($s, 200, 'deleted');
ok(poll_until(5, sub { !defined sqlite_record($ids[0]) }), 'its record gone from the file');
restart();
my ($s3, $e3) = batch('key-one', 'GET', "/$ids[0]");
not_found_ok($s3, $e3, 'deleted, after a restart');



=== TEST 2: SQLite: a record the gateway did not write is refused at the start, said, counted; its batch is unknown, nothing is sent anywhere
--- check
mock_config({ defaults => { batch_processing_ms => 60000 } });
my (%acct, @ids);
for (1 .. 5) {
    my ($st, $b, $r) = batch('key-one', 'POST', '', requests_of(1));
    push @ids, $b->{id};
    $acct{ $b->{id} } = $r->{headers}{'x-tokenbiryani-account'};
}
poll_until(5, sub { defined sqlite_record($ids[-1]) });
my @rec = map { sqlite_record($_) } @ids;
my ($gen, $payload) = opened($rec[0]);
my $other = $acct{ $ids[0] } eq 'a1' ? 'a2' : 'a1';
TB::Nginx::stop_nginx();
# 0: pointed at the other account, its MAC left as it was
(my $moved = $rec[0]) =~ s/ 2:a[12] 3:one\z/ 2:$other 3:one/;
sqlite_put($ids[0], $moved);
# 1: given to key two
(my $given = $rec[1]) =~ s/ 3:one\z/ 3:two/;
sqlite_put($ids[1], $given);
# 2: batch 3's record under batch 2's id
sqlite_put($ids[2], $rec[3]);
# 3: cut short
sqlite_put($ids[3], substr($rec[3], 0, length($rec[3]) - 3));
# 4: written under another secret key
(my $foreign = $rec[4]) =~ s/^tba1\.[0-9a-f]{8}\./tba1.0badc0de./;
sqlite_put($ids[4], $foreign);
# and one no gateway made: an id the API never gives
sqlite_put("../../etc\npasswd", $rec[0]);
start_again();
is(refused(), 6, 'six records refused, counted');
for my $i (0 .. 4) {
    is(said(qr/\Q$ids[$i]\E" in the store is refused/), 1, "record $i: said once, naming it");
}
like(TB::Nginx::log_text(), qr/an object in the store is refused: its id is not one the API gives/,
     'the one with a bad id said without its id');
unlike(TB::Nginx::log_text(), qr/etc\npasswd/, 'which never reaches the log');
my $seen = scalar @{ mock_log() };
for my $i (0 .. 4) {
    my ($st, $e) = batch('key-one', 'GET', "/$ids[$i]");
    not_found_ok($st, $e, "record $i, key one");
    ($st, $e) = batch('key-two', 'GET', "/$ids[$i]");
    not_found_ok($st, $e, "record $i, key two");
}
is(scalar @{ mock_log() }, $seen, 'nothing sent anywhere');
is(key_spend('one')->{in_flight_usd}, 0, 'and nothing held for them');



=== TEST 3: Redis: a batch made on A is answered on B at once, to its key only, on its account; B lists it; deleted on A, it is gone on B
--- user_files eval
main::yaml_of('redis')
--- check
mock_config({ defaults => { batch_processing_ms => 200 } });
peer_start();
my ($st, $b, $r) = batch('key-one', 'POST', '', requests_of(2));
is($st, 200, 'created on A');
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my ($s, $o, $rb) = batch('key-one', 'GET', "/$b->{id}", undef, port => $B);
is($s, 200, 'read on B at once');
is($rb->{headers}{'x-tokenbiryani-account'}, $acct, 'on its account');
my ($s2, $e2) = batch('key-two', 'GET', "/$b->{id}", undef, port => $B);
not_found_ok($s2, $e2, 'B: another key');
ok(poll_until(2, sub { my (undef, $l) = batch('key-one', 'GET', '', undef, port => $B);
                       grep { $_->{id} eq $b->{id} } @{ $l->{data} } }), 'B lists it');
my (undef, $l2) = batch('key-two', 'GET', '', undef, port => $B);
is(scalar @{ $l2->{data} }, 0, 'not to another key');
my $stored = TB::Nginx::redis_cmd('HGET', 'tbb:objects', $b->{id});
like($stored, qr/^tba1\.[0-9a-f]{8}\.\d+\.[\w-]{43}\.o1 /, 'Redis holds its record, authenticated');
unlike($stored, qr/secret prompt|sk-a/, 'no prompt and no credential in it');

# its results read on B: charged there once, and A lets go of its hold
until_ended('key-one', $b->{id}, port => $B);
ok(key_spend('one')->{in_flight_usd} > 0, 'A holds its estimate');
($s) = batch('key-one', 'GET', "/$b->{id}/results", undef, port => $B);
is($s, 200, 'results read on B');
ok(poll_until(2, sub { key_spend('one')->{in_flight_usd} == 0 }), 'A let go of its hold');

($s) = batch('key-one', 'DELETE', "/$b->{id}");
is($s, 200, 'deleted on A');
ok(poll_until(2, sub { my ($x) = batch('key-one', 'GET', "/$b->{id}", undef, port => $B); $x == 404 }),
   'gone on B');
is(TB::Nginx::redis_cmd('HEXISTS', 'tbb:objects', $b->{id}), 0, 'and from Redis');

# A restarted: its new zone reads the batches back from Redis
($st, $b) = batch('key-two', 'POST', '', requests_of(1), port => $B);
is($st, 200, 'another, made on B');
restart();
($s, $o) = batch('key-two', 'GET', "/$b->{id}");
is($s, 200, 'answered on A after its restart');
peer_stop();



=== TEST 4: Redis: a forged record, or one moved to another id, is refused when B asks for it; nothing is sent anywhere
--- user_files eval
main::yaml_of('redis')
--- check
mock_config({ defaults => { batch_processing_ms => 60000 } });
peer_start();
my ($st, $b, $r) = batch('key-one', 'POST', '', requests_of(1));
my $acct = $r->{headers}{'x-tokenbiryani-account'};
my $other = $acct eq 'a1' ? 'a2' : 'a1';
my $rec = TB::Nginx::redis_cmd('HGET', 'tbb:objects', $b->{id});
my ($gen, $payload) = opened($rec);
ok(defined $payload, 'its record');
my $seen = scalar @{ mock_log() };
# the same record under an id of the attacker's choosing
TB::Nginx::redis_cmd('HSET', 'tbb:objects', 'msgbatch_forged1', $rec);
# a record that names key two, its MAC not redone
(my $given = $rec) =~ s/ 3:one\z/ 3:two/;
TB::Nginx::redis_cmd('HSET', 'tbb:objects', 'msgbatch_forged2', $given);
# a record made whole by someone without the secret key
my $bad = wrap('b', 'msgbatch_forged3', '', $gen + 1, $payload =~ s/ 2:a[12] / 2:$other /r);
substr($bad, 30, 1) = substr($bad, 30, 1) eq 'A' ? 'B' : 'A';
TB::Nginx::redis_cmd('HSET', 'tbb:objects', 'msgbatch_forged3', $bad);
for my $n (1 .. 3) {
    my ($s, $e) = batch('key-two', 'GET', "/msgbatch_forged$n", undef, port => $B);
    not_found_ok($s, $e, "forged $n, on B");
}
is(scalar @{ mock_log() }, $seen, 'nothing sent anywhere');
my (undef, $j) = admin(GET => '/admin/status', undef, port => $B);
is($j->{store}{refused}{records}, 3, 'B refused three, counted');
like(peer_log(), qr/object "msgbatch_forged1" in the store is refused/, 'and said why');
# the honest record rewritten in place to the other account: A, restarted,
# reads it back and refuses it - the batch is unknown, never sent to the
# other account
(my $moved = $rec) =~ s/ 2:a[12] / 2:$other /;
TB::Nginx::redis_cmd('HSET', 'tbb:objects', $b->{id}, $moved);
peer_stop();
restart();
like(TB::Nginx::log_text(), qr/object "\Q$b->{id}\E" in the store is refused: its authentication does not verify/,
     'refused at the start, said why');
my ($s, $e) = batch('key-one', 'GET', "/$b->{id}");
not_found_ok($s, $e, 'moved to another account: unknown');
is(scalar @{ mock_log() }, $seen, 'nothing sent anywhere');



=== TEST 5: Redis: both gateways restarted hold an open batch; when it ends, one of them reads and charges it, once
--- user_files eval
main::yaml_of('redis') =~ s/batch:\n  api: true\n/batch:\n  api: true\n  poll_interval_seconds: 0.05\n/r
--- check
mock_config({ defaults => { batch_processing_ms => 600000 } });
peer_start();
my ($st, $b) = batch('key-one', 'POST', '', requests_of(3));
is($st, 200, 'created on A');
ok(poll_until(5, sub { TB::Nginx::redis_cmd('HEXISTS', 'tbb:objects', $b->{id}) }), 'its record in Redis');
peer_stop();
restart();
peer_start();
my (undef, $ja) = admin(GET => '/admin/batches');
my (undef, $jb) = admin(GET => '/admin/batches', undef, port => $B);
ok($ja->{batches}[0]{held_usd} > 0 && $jb->{batches}[0]{held_usd} > 0, 'both hold its estimate after the restart');
my $from = scalar @{ mock_log() };
TB::Nginx::_mock_call(POST => "batches/$b->{id}/end", {});
my $charged = sub { (grep { $_->{id} eq $b->{id} && $_->{charged} } @{ (admin(GET => '/admin/batches', undef, @_))[1]{batches} }) };
ok(poll_until(15, sub { $charged->() && $charged->(port => $B) }), 'charged, as both know');
my @reads = grep { ($_->{path} // '') eq "/v1/messages/batches/$b->{id}/results" } @{ mock_log($from) };
is(scalar @reads, 1, 'its results read once');
my $said = () = (TB::Nginx::log_text() . peer_log()) =~ /batch "\Q$b->{id}\E" on account "a[12]" ended with its results unread/g;
is($said, 1, 'charged by one gateway');
my $claim = TB::Nginx::redis_cmd('GET', "tbb:claim:$b->{id}");
ok(defined $claim && length $claim, "claimed in Redis by one instance ($claim)");
(undef, $ja) = admin(GET => '/admin/batches');
(undef, $jb) = admin(GET => '/admin/batches', undef, port => $B);
is($ja->{batches}[0]{held_usd} + $jb->{batches}[0]{held_usd}, 0, 'neither holds it any more');
peer_stop();
