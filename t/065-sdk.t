# The official Anthropic TypeScript SDK (@anthropic-ai/sdk from npm, pinned
# in t/sdk/package.json) against the gateway, as a user's program uses it:
# only ANTHROPIC_BASE_URL and the key change.  Messages, streams,
# count_tokens and models work through it; a request no account could ever
# serve is answered so that the SDK does not retry it, while one that may
# succeed later is retried as the SDK always does.
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
