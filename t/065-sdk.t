# The official Anthropic TypeScript SDK (@anthropic-ai/sdk from npm, pinned
# in t/sdk/package.json) against the gateway, as a user's program uses it:
# only ANTHROPIC_BASE_URL and the key change.  Messages, streams,
# count_tokens and models work through it; a request no account could ever
# serve is answered so that the SDK does not retry it, while one that may
# succeed later is retried as the SDK always does.  With batch.api on, the
# SDK's Message Batches calls work through it, results_url and all.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    models: ["claude-sonnet-*"]
keys:
  - key: tenant-key
    name: tenant
  - key: pinned-key
    name: pinned
    pool: [a2]
  - key: admin-key
    name: admin
    admin: true
  - key: capped-key
    name: capped
    spend_cap_usd: 0
pricing: builtin
_EOY_

our $Node = $ENV{TB_NODE} // 'node';

# one SDK call; the decoded line it printed
sub sdk {
    my ($key, $spec) = @_;
    local $ENV{ANTHROPIC_BASE_URL} = "http://127.0.0.1:" . server_port();
    local $ENV{ANTHROPIC_API_KEY} = $key;
    open(my $fh, '-|', $Node, 't/sdk/client.mjs', json_encode($spec))
        or die "cannot run $Node: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh;
    my $r = eval { json_decode($out) };
    die "the SDK client printed no result: $out\n" unless $r;
    return $r;
}

sub params { +{ model => 'claude-sonnet-4-6', max_tokens => 64,
                messages => [{ role => 'user', content => 'hello' }], @_ } }

# the suite's pool with the Message Batches API on
our $BatchYaml = $Yaml =~ s/^pricing: builtin$/batch:\n  api: true\npricing: builtin/mr;

# a create's requests: custom_ids req-1..req-N
sub batch_of {
    my ($n) = @_;
    +{ requests => [map { +{ custom_id => "req-$_",
                              params => params(max_tokens => 16,
                                               messages => [{ role => 'user', content => "hello $_" }]) } }
                    1 .. $n] };
}

sub key_spend { (grep { $_->{name} eq $_[0] } @{ pool_status()->{keys} })[0]{spend} }

# what the mock says batch $id used, at half the builtin price of
# claude-sonnet-4-6 ($3 and $15 a million), in nanodollars
sub batch_cost_nd {
    my ($id) = @_;
    my ($b) = grep { $_->{id} eq $id } @{ TB::Nginx::_mock_call(GET => 'batches')->{batches} };
    ($b->{usage}{input_tokens} * 3000 + $b->{usage}{output_tokens} * 15000) / 2;
}

# the upstream requests the clients made (not the gateway's own polls)
sub client_log { [grep { ($_->{headers}{'user-agent'} // '') !~ m{^tokenbiryani/} } @{ mock_log(@_) }] }

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: messages.create: one request, the account's credential, the Message
--- check
my $r = sdk('tenant-key', { op => 'create', params => params() });
ok($r->{ok}, 'created') or diag(explain($r));
is($r->{status}, 200, 'status 200');
is($r->{message}{type}, 'message', 'a Message');
like($r->{message}{content}[0]{text}, qr/^Hello from the mock/, 'its text');
ok($r->{message}{usage}{input_tokens} > 0, 'with usage');
like($r->{account}, qr/^a[12]$/, 'named by x-tokenbiryani-account');
is($r->{fetches}, 1, 'one HTTP request');
my $log = mock_log();
is(scalar @$log, 1, 'one upstream request');
is($log->[0]{credential}, $r->{account} eq 'a1' ? 'sk-a1' : 'sk-a2',
   "sent with the answering account's key, not the tenant's");



=== TEST 2: messages.stream: one message_start, the text, message_stop
--- check
my $r = sdk('tenant-key', { op => 'stream', params => params() });
ok($r->{ok}, 'streamed') or diag(explain($r));
like($r->{text}, qr/^Hello from the mock/, 'the final text');
is(scalar(grep { $_ eq 'message_start' } @{ $r->{events} }), 1, 'one message_start');
ok(scalar(grep { $_ eq 'content_block_delta' } @{ $r->{events} }) >= 3, 'the deltas');
is($r->{events}[-1], 'message_stop', 'ends with message_stop');
is($r->{message}{stop_reason}, 'end_turn', 'the final Message');
is($r->{fetches}, 1, 'one HTTP request');



=== TEST 3: countTokens and models.list
--- check
my $c = sdk('tenant-key', { op => 'count_tokens',
                            params => { model => 'claude-sonnet-4-6',
                                        messages => [{ role => 'user', content => 'hello' }] } });
ok($c->{ok}, 'counted') or diag(explain($c));
ok($c->{result}{input_tokens} > 0, 'input_tokens');
my $m = sdk('tenant-key', { op => 'models' });
ok($m->{ok}, 'listed') or diag(explain($m));
ok(scalar @{ $m->{ids} }, 'model ids');
is(scalar @{ mock_log() }, 2, 'one upstream request each');



=== TEST 4: a model no account serves: 404, and the SDK does not retry it
--- check
my $r = sdk('pinned-key', { op => 'create', maxRetries => 2,
                            params => params(model => 'claude-haiku-4-5') });
ok(!$r->{ok}, 'refused');
is($r->{status}, 404, 'status 404');
is($r->{name}, 'NotFoundError', 'NotFoundError');
is($r->{type}, 'not_found_error', 'not_found_error');
like($r->{error_message}, qr/none supports model "claude-haiku-4-5" in this key's pool/, 'saying why');
is($r->{should_retry}, 'false', 'x-should-retry: false');
is($r->{fetches}, 1, 'asked once, with two retries allowed');
is(scalar @{ mock_log() }, 0, 'nothing upstream');



=== TEST 5: larger than every account's window: 400, not retried
--- check
mock_config({ defaults => { input_limit => 4000, output_limit => 1000 } });
for my $i (1 .. 12) {
    my $r = http_request(method => 'POST', path => '/v1/messages',
                         body => msg_body(text => "conversation $i"),
                         headers => { 'x-api-key' => 'admin-key' });
    die "prime $i: $r->{status}\n" unless $r->{status} == 200;
    last unless grep { !defined $_->{limits}{output_tokens}{limit} }
                     @{ pool_status()->{accounts} };
}
ok(!grep({ !defined $_->{limits}{output_tokens}{limit} } @{ pool_status()->{accounts} }),
   'every account observed') or diag(explain(pool_status()));
my $n = scalar @{ mock_log() };
my $r = sdk('tenant-key', { op => 'create', maxRetries => 2,
                            params => params(max_tokens => 5000) });
ok(!$r->{ok}, 'refused');
is($r->{status}, 400, 'status 400');
is($r->{name}, 'BadRequestError', 'BadRequestError');
is($r->{type}, 'invalid_request_error', 'invalid_request_error');
like($r->{error_message}, qr/exceeds every account's rate limit .*max_tokens 5000\)$/, 'saying why');
is($r->{should_retry}, 'false', 'x-should-retry: false');
is($r->{fetches}, 1, 'asked once');
is(scalar @{ mock_log() }, $n, 'nothing upstream');



=== TEST 6: every account of the key's pool disabled: 403, not retried
--- check
is(admin_post('/admin/accounts/a2/disable')->{status}, 200, 'a2 disabled');
my $r = sdk('pinned-key', { op => 'create', maxRetries => 2, params => params() });
ok(!$r->{ok}, 'refused');
is($r->{status}, 403, 'status 403');
is($r->{name}, 'PermissionDeniedError', 'PermissionDeniedError');
is($r->{type}, 'permission_error', 'permission_error');
like($r->{error_message}, qr/every account is disabled or outside this key's pool/, 'saying why');
is($r->{fetches}, 1, 'asked once');
is(scalar @{ mock_log() }, 0, 'nothing upstream');
my $ok = sdk('tenant-key', { op => 'create', params => params() });
ok($ok->{ok}, 'a key whose pool has an enabled account is served');
is($ok->{account}, 'a1', 'by it');



=== TEST 7: what may succeed later is still retried by the SDK: the gateway's 529
--- check
my $r = sdk('tenant-key', { op => 'create', maxRetries => 1,
                            headers => { 'x-mock-script' => '529' },
                            params => params() });
ok(!$r->{ok}, 'failed');
is($r->{status}, 529, "the gateway's 529 once its own retries are spent");
is($r->{type}, 'overloaded_error', 'overloaded_error');
is($r->{should_retry}, undef, 'no x-should-retry');
is($r->{fetches}, 2, 'the SDK asked again');
is(scalar @{ mock_log() }, 6, 'three upstream attempts for each of its requests');



=== TEST 8: a spend cap that frees in hours: 429, and the SDK does not retry it
--- check
my $r = sdk('capped-key', { op => 'create', maxRetries => 2, params => params() });
ok(!$r->{ok}, 'refused');
is($r->{status}, 429, 'status 429');
is($r->{name}, 'RateLimitError', 'RateLimitError');
is($r->{type}, 'rate_limit_error', 'rate_limit_error');
like($r->{error_message}, qr/key "capped" has spent \$0\.00 of its \$0\.00 spend cap \(spend_cap_usd\) in the last 24h; nothing may be spent until the limit is raised/, 'saying which cap');
is($r->{should_retry}, 'false', 'x-should-retry: false');
is($r->{fetches}, 1, 'asked once, with two retries allowed');
is(scalar @{ mock_log() }, 0, 'nothing upstream');



=== TEST 9: the gateway's own refusals that no retry can change - a key unknown, revoked, out of scope, not an admin's - say so: the SDK asks once, Claude Code stops at once with the gateway's words
--- request
GET /healthz
--- check
# a key minted, then revoked
my ($st, $j) = admin(POST => '/admin/keys', { name => 'gone' });
is($st, 201, 'a key minted');
my $revoked = $j->{key};
($st) = admin(DELETE => '/admin/keys/gone');
is($st, 200, 'and revoked');
for my $case (['an unknown key', 'bir_' . ('0' x 48), 401], ['a revoked key', $revoked, 401],
              ['a model its pool does not offer', 'pinned-key', 404, model => 'claude-haiku-4-5']) {
    my ($what, $key, $status, %p) = @$case;
    my $r = sdk($key, { op => 'create', params => params(%p), maxRetries => 5 });
    is($r->{status}, $status, "$what: $status");
    is($r->{should_retry}, 'false', "$what: x-should-retry: false");
    is($r->{fetches}, 1, "$what: asked once, with five retries allowed");
}
my $a = TB::Nginx::http_request(method => 'GET', path => '/admin/status', headers => { 'x-api-key' => 'tenant-key' });
is($a->{status}, 403, 'an admin endpoint with a tenant key: 403');
is($a->{headers}{'x-should-retry'}, 'false', 'not to be retried');

# Claude Code (t/claude), as its users run it: the deadline is 30 s where
# the build before this answer kept it retrying past 40
my $claude = 't/claude/node_modules/.bin/claude';
ok(-x $claude, 'Claude Code is installed (make claude-deps)');
local $ENV{HOME} = TB::Nginx::servroot() . '/claude-home';
mkdir $ENV{HOME};
local $ENV{ANTHROPIC_BASE_URL} = "http://127.0.0.1:" . server_port();
local $ENV{ANTHROPIC_AUTH_TOKEN} = $revoked;
local $ENV{DISABLE_AUTOUPDATER} = 1;
local $ENV{CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC} = 1;
my $pid = open(my $fh, '-|');
if (!$pid) {
    open STDERR, '>&', \*STDOUT;
    alarm 30;
    exec $claude, '-p', 'hello' or exit 127;
}
my $out = do { local $/; <$fh> };
close $fh;
my $rc = $? >> 8;
my $sig = $? & 127;
is($sig, 0, 'claude -p ended by itself, not by the 30 s deadline');
isnt($rc, 0, 'and failed') or diag($out);
like($out, qr/401 key "gone" was revoked/, 'with the gateway\'s words: the key is named revoked') or diag($out);



=== TEST 10: messages.batches through the gateway: create, retrieve until ended, results from the results_url the SDK follows (the gateway's), each custom_id, charged once at half price; another key's retrieve a NotFoundError, not retried; delete
--- user_files eval
$main::BatchYaml
--- check
mock_config({ defaults => { batch_processing_ms => 200 } });
my $base = 'http://127.0.0.1:' . server_port();
my $c = sdk('tenant-key', { op => 'batch_create', params => batch_of(4) });
ok($c->{ok}, 'created') or diag(explain($c));
my $id = $c->{batch}{id} // '';
like($id, qr/^msgbatch_/, 'a MessageBatch');
is($c->{batch}{processing_status}, 'in_progress', 'in progress');
is($c->{batch}{request_counts}{processing}, 4, 'its four requests processing');
is($c->{batch}{results_url}, undef, 'no results_url yet');
my $acct = $c->{account} // '';
like($acct, qr/^a[12]$/, 'made on one account');
is_deeply($c->{requests}, ["POST $base/v1/messages/batches"], 'one request, to the gateway');

my $w = sdk('tenant-key', { op => 'batch_wait', id => $id });
ok($w->{ok}, 'retrieved') or diag(explain($w));
is($w->{batch}{processing_status}, 'ended', "ended (after $w->{polls} retrieves)");
is($w->{batch}{request_counts}{succeeded}, 4, 'four succeeded');
is($w->{batch}{results_url}, "$base/v1/messages/batches/$id/results",
   'its results_url is the gateway\'s, by the Host the SDK sent');
is($w->{fetches}, $w->{polls}, 'one HTTP request a retrieve');
my $held = key_spend('tenant');
ok($held->{in_flight_usd} > 0, "its estimate held (\$$held->{in_flight_usd})");
is($held->{window_usd}, $held->{in_flight_usd}, 'and nothing charged before the results are read');

my $r = sdk('tenant-key', { op => 'batch_results', id => $id });
ok($r->{ok}, 'results read') or diag(explain($r));
is_deeply($r->{requests}, ["GET $base/v1/messages/batches/$id", "GET $base/v1/messages/batches/$id/results"],
          'a retrieve, then its results_url: both at the gateway');
is_deeply([sort map { $_->{custom_id} } @{ $r->{results} }], [map { "req-$_" } 1 .. 4], 'each custom_id once');
is_deeply([map { $_->{result}{type} } @{ $r->{results} }], [('succeeded') x 4], 'each succeeded');
like($r->{results}[0]{result}{message}{content}[0]{text} // '', qr/^Hello from the mock batch/, 'with its Message');
my $want = batch_cost_nd($id);
my $sp = key_spend('tenant');
ok($want > 0 && abs($sp->{window_usd} * 1e9 - $want) < 0.5,
   "charged what the mock says it used, at half price ($sp->{window_usd} vs " . $want / 1e9 . ')');
is($sp->{in_flight_usd}, 0, 'the hold released');
my @reads = grep { $_->{path} eq "/v1/messages/batches/$id/results" } @{ client_log() };
is_deeply(credentials_of(\@reads), ["sk-$acct"], 'the results read once upstream, from its account');
$r = sdk('tenant-key', { op => 'batch_results', id => $id });
is(scalar @{ $r->{results} // [] }, 4, 'read again');
is(key_spend('tenant')->{window_usd}, $sp->{window_usd}, 'not charged again');

# another key: the 404 an unknown id gets, which the SDK does not retry
my $seen = scalar @{ client_log() };
for my $op ('batch_retrieve', 'batch_results', 'batch_cancel', 'batch_delete') {
    my $o = sdk('pinned-key', { op => $op, id => $id, maxRetries => 2 });
    ok(!$o->{ok}, "another key's $op: refused");
    is($o->{status}, 404, "another key's $op: 404");
    is($o->{name}, 'NotFoundError', "another key's $op: NotFoundError");
    like($o->{error_message}, qr/^message_batch not found: \Q$id\E$/, "another key's $op: as an unknown id");
    is($o->{fetches}, 1, "another key's $op: asked once, with two retries allowed");
}
is(scalar @{ client_log() }, $seen, 'none of it went upstream');

my $d = sdk('tenant-key', { op => 'batch_delete', id => $id });
ok($d->{ok}, 'deleted') or diag(explain($d));
is_deeply($d->{result}, { id => $id, type => 'message_batch_deleted' }, 'a DeletedMessageBatch');
my $gone = sdk('tenant-key', { op => 'batch_retrieve', id => $id, maxRetries => 2 });
is($gone->{name}, 'NotFoundError', 'then its own key gets a NotFoundError');
is($gone->{fetches}, 1, 'not retried');
is(key_spend('tenant')->{window_usd}, $sp->{window_usd}, 'a delete after the results charges nothing more');



=== TEST 11: messages.batches.list through the SDK: the key's own batches, newest first, paged on by the SDK itself with after_id; an admin key's list has them all
--- user_files eval
$main::BatchYaml
--- check
my @mine;
for my $n (1 .. 3) {
    my $c = sdk('tenant-key', { op => 'batch_create', params => batch_of($n) });
    ok($c->{ok}, "tenant's batch $n created") or diag(explain($c));
    push @mine, $c->{batch}{id};
}
my $other = sdk('pinned-key', { op => 'batch_create', params => batch_of(1) });
ok($other->{ok}, 'another key\'s created');
my $l = sdk('tenant-key', { op => 'batch_list', params => { limit => 2 } });
ok($l->{ok}, 'listed') or diag(explain($l));
is_deeply($l->{ids}, [reverse @mine], 'its three, newest first, not the other key\'s');
is($l->{fetches}, 2, 'in two pages of two');
like($l->{requests}[1] // '', qr/[?&]after_id=\Q$mine[1]\E(?:&|$)/, 'the second after the first\'s last_id');
is_deeply([map { $_->{request_counts}{processing} + $_->{request_counts}{succeeded} } @{ $l->{batches} }],
          [3, 2, 1], 'each with its request_counts');
my $all = sdk('admin-key', { op => 'batch_list' });
is_deeply([sort @{ $all->{ids} }], [sort @mine, $other->{batch}{id}], 'an admin key lists all four');
is($all->{fetches}, 1, 'in one page');
my $none = sdk('capped-key', { op => 'batch_list' });
ok($none->{ok}, 'a key with none lists');
is_deeply($none->{ids}, [], 'nothing');



=== TEST 12: messages.batches.cancel through the SDK: canceling, then ended with its requests canceled; nothing charged, the hold released; what the account refuses comes back as the SDK's error, not retried
--- user_files eval
$main::BatchYaml
--- check
mock_config({ defaults => { batch_processing_ms => 30000 } });
my $c = sdk('tenant-key', { op => 'batch_create', params => batch_of(3) });
ok($c->{ok}, 'created') or diag(explain($c));
my $id = $c->{batch}{id};
my $busy = sdk('tenant-key', { op => 'batch_delete', id => $id, maxRetries => 2 });
is($busy->{status}, 400, 'a delete while it runs: 400, the account\'s');
like($busy->{error_message}, qr/cannot be deleted while it is processing/, 'saying why');
is($busy->{fetches}, 1, 'not retried');
my $x = sdk('tenant-key', { op => 'batch_cancel', id => $id });
ok($x->{ok}, 'cancel asked') or diag(explain($x));
is($x->{batch}{processing_status}, 'canceling', 'canceling');
ok($x->{batch}{cancel_initiated_at}, 'since cancel_initiated_at');
my $w = sdk('tenant-key', { op => 'batch_wait', id => $id });
is($w->{batch}{processing_status}, 'ended', 'then ended');
is_deeply($w->{batch}{request_counts}, { processing => 0, succeeded => 0, errored => 0, canceled => 3, expired => 0 },
          'its three requests canceled');
my $r = sdk('tenant-key', { op => 'batch_results', id => $id });
ok($r->{ok}, 'its results read') or diag(explain($r));
is_deeply([sort map { "$_->{custom_id} $_->{result}{type}" } @{ $r->{results} }],
          ['req-1 canceled', 'req-2 canceled', 'req-3 canceled'], 'a canceled line a request');
my $sp = key_spend('tenant');
is($sp->{in_flight_usd}, 0, 'the hold released');
is($sp->{window_usd}, 0, 'nothing charged: nothing ran');
my $late = sdk('tenant-key', { op => 'batch_cancel', id => $id, maxRetries => 2 });
is($late->{status}, 400, 'a cancel once ended: 400');
is($late->{name}, 'BadRequestError', 'BadRequestError');
like($late->{error_message}, qr/has already ended/, 'saying why');
is($late->{fetches}, 1, 'not retried');
