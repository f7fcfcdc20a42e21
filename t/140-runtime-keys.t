# Keys at runtime: minted, listed, rescoped and revoked through /admin/keys,
# held in the zone for every worker, kept in the SQLite store across
# restarts; the YAML file's keys are the file's.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
store:
  backend: sqlite
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

# the access log says which worker answered what
our $HttpConfig = $TB::Gateway::HttpConfig . <<'_EOC_';
    log_format tbkeys '$pid $status $request_uri';
    access_log logs/keys.log tbkeys;
_EOC_

gateway_suite(http_config => $HttpConfig, yaml => ">>> tb.yaml\n$Yaml");
run_tests();

__DATA__

=== TEST 1: a minted key works at once, its secret is shown once and kept nowhere, and it still works after a restart
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'ci-bot', models => ['claude-*'], rpm => 30 });
is($st, 201, 'minted') or diag(explain($j));
my $secret = $j->{key};
like($secret, qr/^bir_[A-Za-z0-9_-]{43}$/, 'bir_ and 32 random bytes in base64url');
is($j->{record}{name}, 'ci-bot', 'its record');
is($j->{record}{source}, 'minted', 'minted, not the file\'s');
is($j->{record}{rpm}, 30, 'rpm');
is_deeply($j->{record}{models}, ['claude-*'], 'models');
ok(!grep({ defined $_ && !ref $_ && $_ eq $secret } values %{ $j->{record} }), 'the record carries no secret');

is(message_with($secret)->{status}, 200, 'the minted key works at once');

($st, $j) = admin(GET => '/admin/keys');
is($st, 200, 'listed');
is_deeply([map { "$_->{name}:$_->{source}" } @{ $j->{keys} }],
          ['ops:file', 'tenant:file', 'ci-bot:minted'], 'the file\'s keys and the minted one');
unlike(json_encode($j), qr/\Q$secret\E|admin-key|tenant-key/, 'no secret in the list');
my ($s2, $one) = admin(GET => '/admin/keys/ci-bot');
is($s2, 200, 'one key');
is($one->{rpm}, 30, 'by name');

# what the store keeps: the digest, never the secret
my $raw = join '', map { TB::Nginx::slurp($_) } grep { -f } (db_file(), db_file() . '-wal');
unlike($raw, qr/\Q$secret\E/, 'the secret is in neither the store file nor its WAL');
is(sqlite_py('print(db.execute("SELECT hex(digest) FROM tb_keys WHERE name = ?", ("ci-bot",)).fetchone()[0])'),
   uc(sha256_hex($secret)), 'the store holds its SHA-256');
unlike(TB::Nginx::slurp(servroot() . '/logs/error.log') . TB::Nginx::slurp(servroot() . '/logs/keys.log'), qr/\Q$secret\E/,
       'nor any log');

restart();
is(message_with($secret)->{status}, 200, 'after a restart, the key still works');
($st, $j) = admin(GET => '/admin/keys/ci-bot');
is($j->{rpm}, 30, 'with its scope');
is(message_with($secret, model => 'gpt-4o')->{status}, 403, 'its models still hold') ;
is(message_with('bir_' . ('A' x 43))->{status}, 401, 'a key that was never minted is refused');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/the store "[^"]+tokenbiryani\.db" loaded: 1 minted keys/,
     'the master loaded it before the workers started');



=== TEST 2: revoked in one worker, refused by both at once
--- timeout: 120
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'shortlived' });
is($st, 201, 'minted');
my $secret = $j->{key};
my $log = servroot() . '/logs/keys.log';
# bursts on many connections until both workers have answered the key
# with $want; every answer must be $want; the access log says which worker
my $bursts = sub {
    my $want = shift;
    my (%pids, $all, $n);
    $all = 1;
    for my $round (1 .. 10) {
        my $mark = -s $log;
        my @r = @{ http_requests_concurrent([map { message_args($secret) } 1 .. 16]) };
        $n += @r;
        $all &&= !grep { $_->{status} != $want } @r;
        # the log line is written as each request ends, just after its answer
        poll_until(5, sub { (() = TB::Nginx::slurp($log, $mark) =~ /\/v1\/messages\n/g) >= 16 });
        for (split /\n/, TB::Nginx::slurp($log, $mark)) {
            my ($pid, $status, $uri) = split / /;
            $pids{$pid}++ if $uri eq '/v1/messages' && $status == $want;
        }
        last if keys %pids == 2;
    }
    ($all, scalar(keys %pids), $n);
};
my ($all, $workers, $n) = $bursts->(200);
ok($all, "served: $n requests");
is($workers, 2, 'by both workers, which both know the key');
($st, $j) = admin(DELETE => '/admin/keys/shortlived');
is($st, 200, 'revoked');
is($j->{revoked}, 'shortlived', 'says which');
($all, $workers, $n) = $bursts->(401);
ok($all, "every request after the revocation is refused ($n)");
is($workers, 2, 'by both workers');
($st) = admin(DELETE => '/admin/keys/shortlived');
is($st, 404, 'revoking it again: 404');
restart();
is(message_with($secret)->{status}, 401, 'still refused after a restart');



=== TEST 3: rescoping a minted key; the file's keys cannot be changed
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'team-a', pool => ['a1'] });
is($st, 201, 'minted with a pool');
my $secret = $j->{key};
is(message_with($secret)->{headers}{'x-tokenbiryani-account'} // '', 'a1', 'served by its pool') ;
($st, $j) = admin(PATCH => '/admin/keys/team-a', { pool => ['a2'], models => ['claude-haiku-*'], rpm => 5 });
is($st, 200, 'rescoped') or diag(explain($j));
is_deeply($j->{pool}, ['a2'], 'its pool');
is($j->{rpm}, 5, 'its rpm');
is(message_with($secret, model => 'claude-haiku-4-5')->{headers}{'x-tokenbiryani-account'} // '', 'a2',
   'the new pool holds at once');
is(message_with($secret, model => 'claude-sonnet-4-5')->{status}, 403, 'and the new models');
($st, $j) = admin(PATCH => '/admin/keys/team-a', { rpm => undef });
is($st, 200, 'rpm cleared with null');
is($j->{rpm}, undef, 'no rpm');
is_deeply($j->{pool}, ['a2'], 'the rest kept');
restart();
($st, $j) = admin(GET => '/admin/keys/team-a');
is_deeply([$j->{pool}, $j->{models}], [['a2'], ['claude-haiku-*']], 'the new scope survives a restart');

for my $m (qw(PATCH DELETE)) {
    ($st, $j) = admin($m => '/admin/keys/tenant', $m eq 'PATCH' ? { rpm => 1 } : undef);
    is($st, 409, "$m on the file's key: 409");
    like($j->{error}{message}, qr/YAML file's/, 'says why');
}
is(message_with('tenant-key')->{status}, 200, 'the file\'s key untouched');
($st, $j) = admin(PATCH => '/admin/keys/nobody', { rpm => 1 });
is($st, 404, 'an unknown key: 404');



=== TEST 4: bad input is a 400 naming the field, and nothing is written
--- request
GET /healthz
--- error_code: 200
--- check
my @bad = (
    ['{"name": "x",',                                   qr/not valid JSON/],
    ['[1, 2]',                                          qr/must be a JSON object/],
    ['{}',                                              qr/name is required/],
    ['{"name": "x", "colour": "red"}',                  qr/unknown field "colour"/],
    ['{"name": "x", "key": "bir_mine"}',                qr/unknown field "key": a key's secret is always drawn by the gateway/],
    ['{"name": "x", "rpm": "ten"}',                     qr/rpm must be a number/],
    ['{"name": "x", "rpm": 1.5}',                       qr/rpm must be a whole number/],
    ['{"name": "x", "rpm": 0}',                         qr/rpm must be a whole number from 1/],
    ['{"name": "x", "admin": "yes"}',                   qr/admin must be true or false/],
    ['{"name": "x", "models": "claude-*"}',             qr/models must be an array of strings/],
    ['{"name": "x", "models": []}',                     qr/models must name at least one model/],
    ['{"name": "x", "pool": ["a1", "nope"]}',           qr/pool\[1\] names no account of this gateway: "nope"/],
    ['{"name": "x", "pool": ["a1", "a1"]}',             qr/pool\[1\] repeats "a1"/],
    ['{"name": "x", "priority": "urgent"}',             qr/priority must be "interactive" or "batch"/],
    ['{"name": "x", "spend_cap_usd": -1}',              qr/spend_cap_usd must be a number from 0/],
    ['{"name": "x", "expires_at": "tomorrow"}',         qr/expires_at must be a time like/],
    ['{"name": "x", "expires_at": 1000}',               qr/expires_at is in the past/],
    ['{"name": "x", "name": "y"}',                      qr/name appears twice/],
    ['{"name": "../etc"}',                              qr/name must be 1 to 64 letters/],
    ['{"name": "a\r\nX-Injected: 1"}',                  qr/name must be 1 to 64 letters/],
    ['{"name": "' . ('n' x 65) . '"}',                  qr/name must be 1 to 64 letters/],
    ['{"name": "x", "models": ["claude \"x"]}',         qr/models\[0\] must be 1 to 256 printable characters/],
    ['{"name": "tenant"}',                              qr/a key named "tenant" exists/, 409],
);
for my $b (@bad) {
    my ($body, $re, $want) = @$b;
    my ($st, $j) = admin(POST => '/admin/keys', $body);
    is($st, $want // 400, "POST $body: " . ($want // 400));
    is($j->{type}, 'error', 'Anthropic-shaped');
    is($j->{error}{type}, 'invalid_request_error', 'invalid_request_error');
    like($j->{error}{message} // '', $re, 'names the problem') or diag($j->{error}{message});
}
my ($st, $j) = admin(POST => '/admin/keys', { name => 'fine' });
is($st, 201, 'a good one');
($st, $j) = admin(POST => '/admin/keys', { name => 'fine' });
is($st, 409, 'its name again: 409');
for my $p (['{"admin": true}', qr/admin cannot be changed/], ['{"name": "other"}', qr/name cannot be changed/],
           ['{"rpm": -3}', qr/rpm must be a whole number/], ['{"expires_in_seconds": null}', qr/cannot be null/]) {
    ($st, $j) = admin(PATCH => '/admin/keys/fine', $p->[0]);
    is($st, 400, "PATCH $p->[0]: 400");
    like($j->{error}{message}, $p->[1], 'names it');
}
($st, $j) = admin(PUT => '/admin/keys/fine', '{}');
is($st, 405, 'PUT: 405');
($st, $j) = admin(POST => '/admin/keys', { name => 'x' }, key => 'tenant-key');
is($st, 403, 'a tenant cannot mint');
is(sqlite_py('print(db.execute("SELECT group_concat(name) FROM tb_keys").fetchone()[0])'), 'fine',
   'only the good one was written');



=== TEST 5: two workers minting at once: each name once, every acknowledged key kept
--- timeout: 120
--- request
GET /healthz
--- error_code: 200
--- check
# bursts on many connections until both workers have minted in one
my (@secrets, %pids, $bursts, $distinct_ok, $same_once);
($distinct_ok, $same_once) = (1, 1);
while ($bursts++ < 10 && keys %pids < 2) {
    my @reqs = ((map { admin_args(POST => '/admin/keys', { name => "b$bursts-k$_" }) } 1 .. 24),
                (map { admin_args(POST => '/admin/keys', { name => "same-$bursts" }) } 1 .. 8));
    my $mark = -s servroot() . '/logs/keys.log';
    my @r = @{ http_requests_concurrent(\@reqs) };
    $distinct_ok &&= (grep { $_->{status} == 201 } @r[0 .. 23]) == 24;
    $same_once &&= (grep { $_->{status} == 201 } @r[24 .. 31]) == 1
                   && (grep { $_->{status} == 409 } @r[24 .. 31]) == 7;
    push @secrets, map { json_decode($_->{body})->{key} } grep { $_->{status} == 201 } @r;
    my %burst = map { (split / /)[0] => 1 }
                grep { / 201 \/admin\/keys$/ } split /\n/, TB::Nginx::slurp(servroot() . '/logs/keys.log', $mark);
    %pids = %burst if keys %burst > keys %pids;
}
ok($distinct_ok, 'every distinct name minted, in every burst');
ok($same_once, 'the same name: once, the others 409, in every burst');
is(scalar(keys %pids), 2, "both workers minted in one burst ($bursts bursts)") or diag(explain(\%pids));
restart();
my $served = 0;
for my $s (@secrets) { $served++ if message_with($s)->{status} == 200 }
is($served, scalar @secrets, "after a restart, all " . scalar(@secrets) . ' keys work');
is(sqlite_py('print(db.execute("PRAGMA integrity_check").fetchone()[0])'), 'ok', 'the file is consistent');



=== TEST 6: open mode: the first key minted must be an admin key, and it ends open mode
--- user_files
>>> tb.yaml
store:
  backend: sqlite
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
--- request
GET /healthz
--- error_code: 200
--- check
my $open = sub { http_request(method => $_[0], path => $_[1], body => $_[2] // '',
                              headers => { 'content-type' => 'application/json', %{ $_[3] // {} } }) };
is($open->('GET', '/admin/keys')->{status}, 200, 'open mode: admin without a key');
my $r = $open->('POST', '/admin/keys', '{"name": "tenant"}');
is($r->{status}, 400, 'a first key that is not an admin key: 400');
like(json_decode($r->{body})->{error}{message}, qr/the first key minted ends open mode/, 'says why');
$r = $open->('POST', '/admin/keys', '{"name": "root", "admin": true}');
is($r->{status}, 201, 'an admin key');
my $secret = json_decode($r->{body})->{key};
is($open->('GET', '/admin/keys')->{status}, 401, 'open mode is over');
is($open->('GET', '/admin/keys', '', { 'x-api-key' => $secret })->{status}, 200, 'the admin key lets its holder in');
is($open->('DELETE', '/admin/keys/root', '', { 'x-api-key' => $secret })->{status}, 200, 'revoked');
is($open->('GET', '/admin/keys')->{status}, 200, 'no key left: open again');



=== TEST 7: refused clients are seen: a revoked key by its name (401 saying so), an unknown one, a model out of scope - in the events, the inspector and the keys' list with when each key was last used; never a secret
--- request
GET /healthz
--- error_code: 200
--- check
my ($st, $j) = admin(POST => '/admin/keys', { name => 'old-bot', models => ['claude-sonnet-*'] });
is($st, 201, 'minted');
my $secret = $j->{key};
($st, $j) = admin(GET => '/admin/keys');
my ($k) = grep { $_->{name} eq 'old-bot' } @{ $j->{keys} };
is($k->{last_used_at}, undef, 'never used yet');
is(message_with($secret)->{status}, 200, 'used once');
($st, $j) = admin(GET => '/admin/keys');
($k) = grep { $_->{name} eq 'old-bot' } @{ $j->{keys} };
like($k->{last_used_at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/, "last used $k->{last_used_at}");
my ($t) = grep { $_->{name} eq 'tenant' } @{ $j->{keys} };
is($t->{last_used_at}, undef, 'a file key not used since start: null');
# a model outside its scope: refused, and seen by name
my $r = message_with($secret, model => 'claude-opus-4-6');
is($r->{status}, 403, 'a model outside its scope: 403');
my $scope_id = $r->{headers}{'x-tokenbiryani-request-id'};
is((admin(DELETE => '/admin/keys/old-bot'))[0], 200, 'revoked');
$r = message_with($secret);
is($r->{status}, 401, 'revoked: 401');
is(json_decode($r->{body})->{error}{message}, 'key "old-bot" was revoked', 'saying so, by its name');
is($r->{headers}{'x-should-retry'}, 'false', 'and that a retry cannot change it');
my $revoked_id = $r->{headers}{'x-tokenbiryani-request-id'};
$r = message_with('bir_not-a-key-of-this-gateway');
is($r->{status}, 401, 'an unknown key: 401');
is(json_decode($r->{body})->{error}{message}, 'invalid key', 'said as invalid, no more');
my $unknown_id = $r->{headers}{'x-tokenbiryani-request-id'};
# the events
($st, $j) = admin(GET => '/admin/events?since=0&limit=1000');
my %ref = map { $_->{request_id} => $_ } grep { $_->{type} eq 'refusal' } @{ $j->{events} };
is_deeply([@{ $ref{$scope_id} }{qw(status reason key)}], [403, "model outside the key's scope", 'old-bot'], 'the scope refusal, by key name');
is_deeply([@{ $ref{$revoked_id} }{qw(status reason key)}], [401, 'key revoked', 'old-bot'], 'the revoked key, by name');
is_deeply([@{ $ref{$unknown_id} }{qw(status reason key)}], [401, 'invalid key', undef], 'the unknown one, nameless');
# the inspector
for my $c ([$scope_id, 403, 'old-bot', 'claude-opus-4-6'], [$revoked_id, 401, 'old-bot', undef], [$unknown_id, 401, '', undef]) {
    my ($id, $status, $key, $model) = @$c;
    my $rec;
    ok(poll_until(3, sub { ($st, $rec) = admin(GET => "/admin/requests/$id"); $st == 200 }), "$id in the inspector");
    is($rec->{status}, $status, "status $status");
    is($rec->{key} // '', $key, "key '$key'");
    is($rec->{model}, $model, 'its model') if $model;
}
# the keys' list: revoked, and still sent
($st, $j) = admin(GET => '/admin/keys');
my ($rv) = grep { $_->{name} eq 'old-bot' } @{ $j->{revoked} };
ok($rv, 'old-bot among the revoked');
like($rv->{revoked_at}, qr/^\d{4}-/, 'when');
is($rv->{refused}, 1, 'presented once since');
like($rv->{last_refused_at}, qr/^\d{4}-/, 'and when last');
ok(!grep({ $_->{name} eq 'old-bot' } @{ $j->{keys} }), 'no longer a key');
# no secret anywhere
my $everything = join '', map { scalar TB::Nginx::http_request(method => 'GET', path => $_, headers => { 'x-api-key' => 'admin-key' })->{body} }
    '/admin/events?since=0&limit=1000', '/admin/requests?limit=100', '/admin/keys', "/admin/requests/$revoked_id";
$everything .= TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/error.log') . TB::Nginx::slurp(TB::Nginx::servroot() . '/logs/keys.log');
unlike($everything, qr/\Q$secret\E|not-a-key-of-this/, 'neither the secret nor the unknown key anywhere');
# a flood of made-up keys cannot push the history out: a few a second are kept
my $before = (admin(GET => '/admin/events?since=0&limit=1'))[1]{last};
my @flood = @{ http_requests_concurrent([map { message_args("bir_made-up-$_") } 1 .. 60]) };
is(scalar(grep { $_->{status} == 401 } @flood), 60, 'every made-up key refused');
($st, $j) = admin(GET => "/admin/events?since=$before&limit=1000");
my $kept = grep { $_->{type} eq 'refusal' } @{ $j->{events} };
ok($kept >= 1 && $kept <= 5 * 2 * 3, "$kept of the 60 kept (at most 5 a second per worker)");
is((admin(GET => "/admin/requests/$revoked_id"))[0], 200, 'the earlier refusal still in the inspector');
