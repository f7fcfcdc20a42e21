# Accounts at runtime: added (probed first), changed, rotated, removed and
# tested through /admin/accounts, held in the zone for every worker, kept
# in the SQLite store with their credentials sealed; the YAML file's
# accounts are the file's.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
server:
  allow_private_hosts: true     # the mock is on loopback
store:
  backend: sqlite
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

# a credential that must never be seen again once given
our $Canary = 'sk-ant-api03-CANARY' . ('x7Q' x 10) . 'LAST';

sub mock_url {
    my $v = 'TEST_NGINX_MOCK_PORT' . ($_[0] && $_[0] > 1 ? $_[0] : '');
    "http://127.0.0.1:$ENV{$v}";
}

# the account of that id in GET /admin/accounts, or undef
sub listed {
    my ($id) = @_;
    my ($st, $j) = admin(GET => '/admin/accounts');
    (grep { $_->{id} eq $id } @{ $j->{accounts} || [] })[0];
}

# only runtime accounts take traffic: the file's is disabled
sub only_runtime {
    my $r = admin_post('/admin/accounts/filed/disable');
    $r->{status} == 200 or die "disable: $r->{status}\n";
}

# the store's rows of accounts
sub stored { sqlite_rows('SELECT id, spec, sealed FROM tb_accounts ORDER BY id', []) }

# every byte the gateway wrote: the store file and its WAL, the logs
sub on_disk {
    my $s = '';
    for my $f (db_file(), db_file() . '-wal', glob(servroot() . '/logs/*')) {
        $s .= TB::Nginx::slurp($f) if -f $f;
    }
    $s;
}

# the credentials upstream saw since the mock's log had $n entries
sub creds_since {
    my ($n) = @_;
    my $log = mock_log();
    [map { $_->{credential} // '-' } grep { $_->{path} eq '/v1/messages' } @$log[$n .. $#$log]];
}
sub mark_log { scalar @{ mock_log() } }

# turn $t of conversation $conv, with key $key
sub turn_with {
    my ($key, $conv, $t) = @_;
    TB::Nginx::http_request(method => 'POST', path => '/v1/messages',
        headers => { 'x-api-key' => $key, 'content-type' => 'application/json',
                     'anthropic-version' => '2023-06-01' },
        body => turn_body($conv, $t));
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_}
        for qw(mock_url listed only_runtime stored on_disk creds_since mark_log turn_with);
}

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");
run_tests();

__DATA__

=== TEST 1: an account added through the API serves from every worker, survives a restart, and its credential is nowhere in the clear
--- init
mock_config({ strict_credentials => JSON::PP::true, credentials => { $::Canary => {} , 'sk-filed' => {} } });
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'rt1', name => 'Runtime one',
    api_key => $::Canary, base_url => mock_url(), priority => 2, models => ['claude-*'] });
is($st, 201, 'added') or diag(explain($j));
is($j->{id}, 'rt1', 'its id');
is($j->{source}, 'runtime', 'source runtime');
is($j->{credential}, "sk-ant-\x{2026}LAST", 'the credential masked: sk-ant-, an ellipsis, its last four');
is($j->{name}, 'Runtime one', 'its name');
is($j->{priority}, 2, 'its priority');
is($j->{probe}{ok}, JSON::PP::true, 'probed before it was stored');
is($j->{probe}{status}, 200, 'the probe was answered 200');
is(scalar(grep { $_->{path} eq '/v1/messages' } @{ mock_log() }), 1, 'one probe request upstream');

my $l = listed('rt1');
ok($l, 'listed');
is($l->{state}, 'ready', 'ready');

# it serves, from both workers
only_runtime();
my $n = mark_log();
my @r = @{ http_requests_concurrent([map { message_args('tenant-key') } 1 .. 16]) };
is(scalar(grep { $_->{status} == 200 } @r), 16, 'sixteen requests answered');
my @creds = @{ creds_since($n) };
is(scalar(grep { $_ eq $::Canary } @creds), 16, 'all with the runtime account\'s credential');

# the store has it sealed, nothing in the clear anywhere
my $rows = stored();
is(scalar @$rows, 1, 'one row in the store');
like($rows->[0]{sealed}, qr/^tbs1\.[0-9a-f]{8}\./, 'the credential sealed, versioned, with its key id');
unlike($rows->[0]{spec}, qr/api_key/, 'the spec carries no credential');

restart();

$l = listed('rt1');
ok($l, 'still there after a restart');
is($l->{source}, 'runtime', 'as a runtime account');
is($l->{priority}, 2, 'with its priority');
only_runtime();
$n = mark_log();
is(message_with('tenant-key')->{status}, 200, 'it serves after the restart');
is(creds_since($n)->[0], $::Canary, 'with its credential, opened from the store');

# every admin payload, and every byte written
my $payloads = join "\n", map { (admin(GET => $_))[2]{body} }
    '/admin/accounts', '/admin/accounts/rt1', '/admin/status', '/admin/requests', '/admin/events', '/admin/settings';
unlike($payloads, qr/CANARY/, 'no admin payload carries the credential');
unlike(on_disk(), qr/CANARY/, 'neither the store file, its WAL nor any log holds it');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/account "rt1" added by an operator/, 'the log says it was added');



=== TEST 2: a credential the upstream refuses is not stored (unless asked), and the answer says why
--- init
mock_config({ strict_credentials => JSON::PP::true, credentials => { 'sk-good' => {} } });
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'bad', api_key => 'sk-refused', base_url => mock_url() });
is($st, 400, 'refused');
is($j->{type}, 'error', 'an Anthropic-shaped error');
like($j->{error}{message}, qr/the upstream refused this credential: 401 \(invalid x-api-key\); nothing was stored/, 'the message says why');
is($j->{probe}{status}, 401, 'with what the probe saw');
ok(!listed('bad'), 'not listed');
is(scalar @{ stored() }, 0, 'not stored');

($st, $j) = admin(POST => '/admin/accounts', { id => 'bad', api_key => 'sk-refused', base_url => mock_url(), probe => JSON::PP::false });
is($st, 201, 'stored untested with "probe": false') or diag(explain($j));
is($j->{probe}, undef, 'no probe');
is(scalar @{ stored() }, 1, 'stored');

# the doctor check of a stored account: the mirror learns what it said
($st, $j) = admin(POST => '/admin/accounts/bad/test', undef);
is($st, 200, 'tested');
is($j->{ok}, JSON::PP::false, 'not ok');
is($j->{status}, 401, 'status 401');
is($j->{account}, 'bad', 'the account named');
ok(exists $j->{mirror}{requests}, 'with its mirror as it is now');
($st, $j) = admin(POST => '/admin/accounts/filed/test', undef);
is($st, 200, 'the file\'s account can be tested too');
is($j->{status}, 401, 'sk-filed is unknown to this mock: 401');

# an unknown credential is tried without storing it
($st, $j) = admin(POST => '/admin/accounts/test', { api_key => 'sk-good', base_url => mock_url() });
is($st, 200, 'a credential tried');
is($j->{ok}, JSON::PP::true, 'ok');
is_deeply([map { $_->{present} ? 1 : 0 } @{ $j->{checked} }], [(1) x 9], 'the nine headers came back');
is(scalar @{ stored() }, 1, 'nothing more stored');



=== TEST 3: PATCH renames, reprioritises, restricts and disables; a rotation re-enables an account disabled for auth and sends the new credential
--- init
mock_config({ strict_credentials => JSON::PP::true, credentials => { 'sk-new' => {}, 'sk-filed' => {} } });
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'rot', api_key => 'sk-old-rotated-away', base_url => mock_url(), probe => JSON::PP::false });
is($st, 201, 'added untested');
only_runtime();
my $r = message_with('tenant-key');
isnt($r->{status}, 200, 'the old credential is refused upstream');
ok(poll_until(5, sub { (listed('rot')->{disabled_reason} // '') =~ /invalid_auth/ }), 'the account is disabled for auth');

($st, $j) = admin(PATCH => '/admin/accounts/rot', { name => 'Rotated', priority => 5, models => ['claude-sonnet-*'], api_key => 'sk-new' });
is($st, 200, 'patched') or diag(explain($j));
is($j->{name}, 'Rotated', 'renamed');
is($j->{priority}, 5, 'reprioritised');
is_deeply($j->{models}, ['claude-sonnet-*'], 'models restricted');
is($j->{state}, 'ready', 'the rotation re-enabled it');
is($j->{probe}{ok}, JSON::PP::true, 'the new credential was probed');
like($j->{credential}, qr/\x{2026}$/, 'short credentials show no characters');

my $n = mark_log();
is(message_with('tenant-key')->{status}, 200, 'it serves again');
is(creds_since($n)->[0], 'sk-new', 'with the new credential, in the worker that answered');
my @r = @{ http_requests_concurrent([map { message_args('tenant-key') } 1 .. 8]) };
is(scalar(grep { $_->{status} == 200 } @r), 8, 'and in every worker');
is_deeply(creds_since($n), [('sk-new') x 9], 'all with the new credential');

$r = message_with('tenant-key', model => 'claude-haiku-4-5');
is($r->{status}, 404, 'a model outside its models is not served');

($st, $j) = admin(PATCH => '/admin/accounts/rot', { enabled => JSON::PP::false });
is($st, 200, 'disabled through PATCH');
is($j->{enabled}, JSON::PP::false, 'enabled false');
isnt(message_with('tenant-key')->{status}, 200, 'a disabled account takes nothing');

restart();
my $l = listed('rot');
is($l->{name}, 'Rotated', 'the name survives a restart');
is($l->{enabled}, JSON::PP::false, 'and being disabled');
unlike(on_disk(), qr/sk-new|sk-old-rotated-away/, 'neither credential on disk in the clear');



=== TEST 4: DELETE removes it everywhere: the zone, the store, its sessions; a removed account serves no request of either worker
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'gone', api_key => 'sk-gone', base_url => mock_url(2) });
is($st, 201, 'added');
only_runtime();
for my $t (1 .. 3) {
    is(turn_with('tenant-key', 7, $t)->{status}, 200, "turn $t served");
}
ok(pool_status()->{affinity}{sessions} >= 1, 'the conversation is placed on it');
($st, $j) = admin(DELETE => '/admin/accounts/gone', undef);
is($st, 200, 'deleted');
is($j->{deleted}, 'gone', 'the answer names it');
ok(!listed('gone'), 'not listed');
is(scalar @{ stored() }, 0, 'not stored');
is(pool_status()->{affinity}{sessions}, 0, 'its sessions went with it');
is((admin(GET => '/admin/accounts/gone'))[0], 404, 'GET says 404');
my $n = mark_log();
my @r = @{ http_requests_concurrent([map { message_args('tenant-key') } 1 .. 8]) };
is(scalar(grep { $_->{status} == 200 } @r), 0, 'nothing is served: the only account left is disabled');
is(scalar @{ creds_since($n) }, 0, 'no request reached its upstream from either worker');
($st, $j) = admin(DELETE => '/admin/accounts/gone', undef);
is($st, 404, 'deleting it again: 404');
restart();
ok(!listed('gone'), 'still gone after a restart');
# the same id can be added again
($st, $j) = admin(POST => '/admin/accounts', { id => 'gone', api_key => 'sk-gone2', base_url => mock_url(2) });
is($st, 201, 'the id can be used again');
only_runtime();
$n = mark_log();
is(turn_with('tenant-key', 7, 4)->{status}, 200, 'the conversation is served by the new one');
is(creds_since($n)->[0], 'sk-gone2', 'with its credential');



=== TEST 5: bad input: each an Anthropic-shaped 400 (or 409) naming the field, nothing written
--- request
GET /healthz
--- check
my @cases = (
    [POST => '/admin/accounts', '{"id": "x", ', 400, qr/JSON object/],
    [POST => '/admin/accounts', '[1]', 400, qr/JSON object/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', nope => 1 }, 400, qr/unknown field "nope"/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', priority => 'high' }, 400, qr/priority/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', max_concurrency => -3 }, 400, qr/max_concurrency/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', models => 'claude' }, 400, qr/models/],
    [POST => '/admin/accounts', { id => 'x' }, 400, qr/api_key is required/],
    [POST => '/admin/accounts', { api_key => 'sk-x' }, 400, qr/id is required/],
    [POST => '/admin/accounts', { id => '../etc', api_key => 'sk-x' }, 400, qr/id must be/],
    [POST => '/admin/accounts', { id => "a\nb", api_key => 'sk-x' }, 400, qr/id must be/],
    [POST => '/admin/accounts', { id => 'a/b', api_key => 'sk-x' }, 400, qr/id must be/],
    [POST => '/admin/accounts', { id => 'x' x 65, api_key => 'sk-x' }, 400, qr/id must be/],
    [POST => '/admin/accounts', { id => 'test', api_key => 'sk-x' }, 400, qr/not "test"/],
    [POST => '/admin/accounts', { id => 'x', api_key => "sk-x\r\nhost: evil" }, 400, qr/api_key has a line break/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', headers => { 'x-a' => 'b' } }, 400, qr/headers cannot be set through the API/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', options => {} }, 400, qr/options cannot be set/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', type => 'bedrock' }, 400, qr/type: accounts added at runtime/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', base_url => 'https://127.0.0.1:1' }, 400, qr/must name a host/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', base_url => 'ftp://h' }, 400, qr/base_url/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', base_url => 'http://no-such-host.invalid' }, 400, qr/base_url: host "no-such-host.invalid" does not resolve/],
    [POST => '/admin/accounts', { id => 'x', api_key => 'sk-x', api_key2 => '${HOME}' }, 400, qr/unknown field/],
    [POST => '/admin/accounts', { id => 'x', api_key => '${HOME}' }, 400, qr/HOME/],
    [POST => '/admin/accounts', { id => 'filed', api_key => 'sk-x' }, 409, qr/YAML file's/],
    [PATCH => '/admin/accounts/filed', { priority => 1 }, 409, qr/YAML file's: change it there/],
    [DELETE => '/admin/accounts/filed', undef, 409, qr/YAML file's/],
    [PATCH => '/admin/accounts/nobody', { priority => 1 }, 404, qr/no account "nobody"/],
    [PUT => '/admin/accounts', { id => 'x' }, 405, qr/expects GET or POST/],
);
for my $c (@cases) {
    my ($m, $p, $b, $want, $re) = @$c;
    my $r = TB::Nginx::http_request(method => $m, path => $p,
        headers => { 'x-api-key' => 'admin-key', 'content-type' => 'application/json' },
        body => ref $b ? TB::Nginx::json_encode($b) : ($b // ''));
    my $j = eval { TB::Nginx::json_decode($r->{body}) } || {};
    my $what = "$m $p " . (ref $b ? TB::Nginx::json_encode($b) : ($b // ''));
    $what =~ s/[\r\n]/ /g;
    is($r->{status}, $want, "$what: $want");
    is($j->{type}, 'error', "$what: an error");
    like($j->{error}{message} // '', $re, "$what: says why");
}
# an added one, then the changes it may not take
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'ok1', api_key => 'sk-ok1', base_url => mock_url() });
is($st, 201, 'a good one is added');
($st, $j) = admin(POST => '/admin/accounts', { id => 'ok1', api_key => 'sk-ok1', base_url => mock_url() });
is($st, 409, 'the same id twice: 409');
like($j->{error}{message}, qr/an account "ok1" exists/, 'says so');
for my $f ([base_url => 'http://127.0.0.1:1'], [type => 'anthropic_api'], [id => 'other'], [headers => {}]) {
    ($st, $j) = admin(PATCH => '/admin/accounts/ok1', { $f->[0] => $f->[1] });
    is($st, 400, "PATCH $f->[0]: 400");
}
($st, $j) = admin(PATCH => '/admin/accounts/ok1', { priority => 'x' });
is($st, 400, 'PATCH with a wrong type: 400');
is(listed('ok1')->{priority}, 0, 'nothing was changed');
is(scalar @{ stored() }, 1, 'one row: only the good one was written');
# a tenant key cannot reach any of it
($st, $j) = admin(GET => '/admin/accounts', undef, key => 'tenant-key');
is($st, 403, 'a tenant key is refused');
($st, $j) = admin(POST => '/admin/accounts/test', { api_key => 'sk-x', base_url => mock_url() }, key => 'tenant-key');
is($st, 403, 'a tenant key cannot probe either');



=== TEST 6: the secret key changed: the account is listed with the reason, the log says it once, the gateway serves the rest
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'sealed', api_key => 'sk-sealed', base_url => mock_url(), priority => 3 });
is($st, 201, 'added');
my $kf = servroot() . '/html/tokenbiryani.key';
ok(-f $kf, 'the secret key file was made');
is((stat $kf)[2] & 07777, 0600, 'mode 0600');
TB::Nginx::stop_nginx();
open(my $fh, '>', $kf) or die; print $fh ('ab' x 32) . "\n"; close $fh; chmod 0600, $kf;
start_again();
my $l = listed('sealed');
ok($l, 'still listed');
is($l->{state}, 'disabled', 'not serving');
like($l->{reason}, qr/sealed under the secret key [0-9a-f]{8}, and the secret key is now [0-9a-f]{8}.*add it again with every field it had/, 'the reason names both keys, and what to do');
# nothing of a record the gateway cannot authenticate is kept: its id alone
isnt($l->{priority}, 3, 'its spec is not trusted (its priority is gone)');
isnt($l->{base_url} // '', mock_url(), 'nor its base_url');
my $log = TB::Nginx::slurp(servroot() . '/logs/error.log');
my @lines = $log =~ /account "sealed" added at runtime does not serve/g;
is(scalar @lines, 1, 'the log says it once');
is(message_with('tenant-key')->{status}, 200, 'the file\'s account serves');
($st, $j) = admin(DELETE => '/admin/accounts/sealed');
is($st, 200, 'removed') or diag(explain($j));
($st, $j) = admin(POST => '/admin/accounts', { id => 'sealed', api_key => 'sk-sealed-again', base_url => mock_url(), priority => 3 });
is($st, 201, 'added again, whole: sealed and authenticated under the new key') or diag(explain($j));
is(listed('sealed')->{state}, 'ready', 'and serves');
is(listed('sealed')->{priority}, 3, 'as given');



=== TEST 7: without a store, accounts cannot be added at runtime, and the answer says how to set one up
--- user_files eval
">>> tb.yaml\n" . TB::Gateway::pool_yaml(accounts => [{ id => 'filed' }], keys => [{ key => 'admin-key', name => 'admin', admin => 'true' }])
--- request
POST /admin/accounts
{"id": "x", "api_key": "sk-x"}
--- more_headers
x-api-key: admin-key
content-type: application/json
--- error_code: 409
--- response_body_like: store.backend: sqlite.*TOKENBIRYANI_SECRET_KEY.*store.secret_key_path



=== TEST 8: tokenbiryani_max_accounts bounds the pool; a minted key's pool may name a runtime account
--- http_config eval: "tokenbiryani_max_accounts 3;\n" . $TB::Gateway::HttpConfig
--- request
GET /healthz
--- check
my ($st, $j);
for my $id (qw(m1 m2)) {
    ($st, $j) = admin(POST => '/admin/accounts', { id => $id, api_key => "sk-$id", base_url => mock_url() });
    is($st, 201, "$id added");
}
($st, $j) = admin(POST => '/admin/accounts', { id => 'm3', api_key => 'sk-m3', base_url => mock_url() });
is($st, 409, 'a fourth account: 409');
like($j->{error}{message}, qr/tokenbiryani_max_accounts \(3\)/, 'naming the directive');
($st, $j) = admin(DELETE => '/admin/accounts/m1', undef);
is($st, 200, 'one removed');
($st, $j) = admin(POST => '/admin/accounts', { id => 'm3', api_key => 'sk-m3', base_url => mock_url() });
is($st, 201, 'then there is room');
($st, $j) = admin(POST => '/admin/keys', { name => 'only-m3', pool => ['m3'] });
is($st, 201, 'a key whose pool is the runtime account') or diag(explain($j));
my $key = $j->{key};
my $n = mark_log();
my @r = @{ http_requests_concurrent([map { message_args($key) } 1 .. 8]) };
is(scalar(grep { $_->{status} == 200 } @r), 8, 'its requests served');
is_deeply([sort keys %{{ map { $_ => 1 } @{ creds_since($n) } }}], ['sk-m3'], 'only by its pool\'s account, in both workers');



=== TEST 9: a reload keeps the accounts added at runtime (the zone has them); one the file takes over is the file's
--- request
GET /healthz
--- check
my ($st, $j) = admin(POST => '/admin/accounts', { id => 'kept', api_key => 'sk-kept', base_url => mock_url(2) });
is($st, 201, 'added');
($st, $j) = admin(POST => '/admin/accounts', { id => 'taken', api_key => 'sk-taken-runtime', base_url => mock_url(2) });
is($st, 201, 'another added');
# the file gets an account of the second one's id
my $yf = servroot() . '/html/tb.yaml';
my $y = TB::Nginx::slurp($yf);
$y =~ s/^keys:/  - id: taken\n    api_key: sk-taken-file\n    base_url: http:\/\/127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}\nkeys:/m;
open(my $fh, '>', $yf) or die; print $fh $y; close $fh;
ok(nginx_reload(), 'reloaded');
my $l = listed('kept');
ok($l, 'the runtime account is there in the new workers');
is($l->{source}, 'runtime', 'as a runtime account');
my @taken = grep { $_->{id} eq 'taken' } @{ (admin(GET => '/admin/accounts'))[1]{accounts} };
is(scalar(grep { $_->{source} eq 'file' } @taken), 1, 'the file\'s "taken" serves');
is(scalar(grep { ($_->{reason} // '') =~ /the YAML file has an account of that id/ } @taken), 1,
   'the runtime one is listed as shadowed by the file');
only_runtime();
($st, $j) = admin(POST => '/admin/accounts/taken/disable', undef);
my $n = mark_log();
my @r = @{ http_requests_concurrent([map { message_args('tenant-key') } 1 .. 6]) };
is(scalar(grep { $_->{status} == 200 } @r), 6, 'served by the runtime account in both new workers');
is_deeply([sort keys %{{ map { $_ => 1 } @{ creds_since($n) } }}], ['sk-kept'], 'with its credential');



=== TEST 10: without server.allow_private_hosts, an account added at runtime reaches no loopback, link-local or private address - through the API, its credential test, or what the store gives back; the file's own still may
--- user_files eval
">>> tb.yaml\n" . ($::Yaml =~ s/server:\n  allow_private_hosts: true[^\n]*\n//r)
--- request
GET /healthz
--- check
for my $url (mock_url(), 'http://169.254.169.254/latest', 'http://localhost:8080', 'http://[::1]:8080',
             'https://10.0.0.7', 'http://192.168.1.20:11434') {
    my ($st, $j) = admin(POST => '/admin/accounts', { id => 'inside', api_key => 'sk-inside', base_url => $url });
    is($st, 400, "$url: refused");
    like($j->{error}{message}, qr/loopback, link-local or private address.*server\.allow_private_hosts/, "$url: saying why");
    ($st, $j) = admin(POST => '/admin/accounts/test', { api_key => 'sk-inside', base_url => $url });
    is($st, 400, "$url: its credential test too");
}
is(scalar @{ mock_log() }, 0, 'nothing reached the mock');
is(message_with('tenant-key')->{status}, 200, 'the file\'s account, on loopback, serves');

# one added while it was allowed, read back when it is not
TB::Nginx::stop_nginx();
TB::Nginx::write_user_file('tb.yaml', $::Yaml);
start_again();
my ($st) = admin(POST => '/admin/accounts', { id => 'inside', api_key => 'sk-inside', base_url => mock_url(2), probe => JSON::PP::false() });
is($st, 201, 'added while allowed');
TB::Nginx::stop_nginx();
TB::Nginx::write_user_file('tb.yaml', $::Yaml =~ s/server:\n  allow_private_hosts: true[^\n]*\n//r);
start_again();
my $l = listed('inside');
isnt(($l // {})->{state}, 'ready', 'read back when not allowed: it does not serve');
like(TB::Nginx::slurp(servroot() . '/logs/error.log'), qr/account "inside" added at runtime does not serve: base_url: 127\.0\.0\.1 is a loopback/, 'the log says why');
