# Google Vertex AI accounts in the pool: a service account's key file made
# by this suite, the RS256 assertion the mock's token endpoint verifies
# with its public half, the access token fetched per worker off the
# request path and again before it expires; the model in the URL through
# model_map, anthropic_version into the body, the betas as a header;
# Google's error envelope and Anthropic's both classified; a request that
# finds no token waits for one, or goes elsewhere; and one request failing
# over from Anthropic to Bedrock to Vertex before its commit point.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use File::Temp ();

master_on();
workers(2);
no_shuffle();
mock_start();

# the service account: a key pair of this run's
our $Dir = File::Temp::tempdir(CLEANUP => 1);
system("openssl genrsa -out $Dir/key.pem 2048 2>/dev/null") == 0 or die "openssl genrsa\n";
chmod 0644, "$Dir/key.pem";
our $Pem = TB::Nginx::slurp("$Dir/key.pem");
(our $Modulus = `openssl rsa -in $Dir/key.pem -noout -modulus 2>/dev/null`) =~ s/^Modulus=|\s+$//g;
$Modulus or die "openssl rsa -modulus\n";
our $Email = 'gateway@proj-1.iam.gserviceaccount.com';
our $TokenUri = "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT4}/token";
TB::Nginx::spew("$Dir/sa.json", TB::Nginx::json_encode({
    type => 'service_account', project_id => 'proj-1', private_key_id => 'kid-1',
    private_key => $Pem, client_email => $Email, token_uri => $TokenUri }));
chmod 0644, "$Dir/sa.json";
chmod 0755, $Dir;
$ENV{TB_TEST_SA} = "$Dir/sa.json";

our $Google = { google => { keys => { $Email => { n => $Modulus, e => 65537 } },
                            token_uri => $TokenUri, project => 'proj-1' },
                bedrock => { region => 'us-east-1',
                             keys => { AKIDTESTBR1 => { secret => 'br1-secret' } } } };

our $Yaml = <<"_EOY_";
>>> tb.yaml
retry:
  max_attempts: 4
  max_accounts: 3
  backoff_base_seconds: 0.01
  backoff_max_seconds: 0.02
queue:
  default_max_wait_seconds: 20
accounts:
  - id: vx1
    type: vertex
    priority: 5
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}
    options:
      project: proj-1
      region: us-east5
      credentials_path: \${TB_TEST_SA}
      model_map:
        claude-sonnet-4-6: claude-sonnet-4-6\@20250929
        "claude-haiku-*": claude-haiku-4-5\@20251001
  - id: br1
    type: bedrock
    priority: 3
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT3}
    options:
      access_key_id: AKIDTESTBR1
      secret_access_key: br1-secret
      model_map:
        "claude-*": us.anthropic.claude-sonnet-4-6-v1:0
  - id: an1
    api_key: sk-an1
    priority: 1
    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT}
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

sub only {
    my %on = map { $_ => 1 } @_;
    for my $id (qw(vx1 br1 an1)) {
        my $r = admin_post("/admin/accounts/$id/" . ($on{$id} ? 'enable' : 'disable'));
        die "$id: $r->{status}\n" unless $r->{status} == 200;
    }
}

sub send_msg {
    my (%o) = @_;
    my %h = %{ delete $o{headers} // {} };
    TB::Nginx::http_request(method => 'POST', path => $o{path} // '/v1/messages',
        timeout => $o{timeout} // 10,
        headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json',
                     'anthropic-version' => '2023-06-01', %h },
        body => msg_body(%o));
}

sub of { my $p = shift; [grep { ($_->{platform} // '') eq $p } @{ mock_log() }] }

sub behave {
    my ($cred, $step) = @_;
    mock_config({ credentials => { $cred => { behavior => $step } } });
}

# both workers have a token: each fetched one
sub tokens_ready {
    TB::Nginx::poll_until(10, sub { scalar(grep { $_->{status} == 200 } @{ of('google-token') }) >= 2 });
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(only send_msg of behave tokens_ready);
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: each worker makes its token from the key file, off the request path; a request is served by Vertex with the model in the URL and the body translated
--- init
mock_config($::Google);
--- request
GET /healthz
--- check
ok(tokens_ready(), 'both workers fetched a token');
my @tok = grep { $_->{status} == 200 } @{ of('google-token') };
is(scalar @tok, 2, 'one per worker, no more');
is($tok[0]{credential}, $::Email, 'for the service account');
is($tok[0]{path}, '/token', 'at the key file\'s token_uri');

only('vx1');
my $r = send_msg(text => 'hello vertex',
                 headers => { 'anthropic-beta' => 'prompt-caching-2024-07-31',
                              'x-tenant-secret' => 'not for google' });
is($r->{status}, 200, 'answered') or diag($r->{body});
is($r->{headers}{'x-tokenbiryani-account'}, 'vx1', 'by vx1');
my $m = TB::Nginx::json_decode($r->{body});
is($m->{type}, 'message', 'an Anthropic Message');
ok(!grep({ /^x-goog|^x-vertex/i } keys %{ $r->{headers} }), 'no header of Google\'s reaches the client');

my $e = of('vertex')->[0];
is($e->{status}, 200, 'the mock took the token');
is($e->{path}, '/v1/projects/proj-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-6%4020250929:rawPredict',
   'project, region, model_map\'s id (its "@" encoded) and rawPredict');
like($e->{token}, qr/^ya29\.mock-\d+-/, 'a bearer token the endpoint issued');
is($e->{betas}, 'prompt-caching-2024-07-31', 'anthropic-beta as a header');
ok(!exists $e->{headers}{'x-tenant-secret'}, 'no other header of the client\'s');
ok(!exists $e->{headers}{'anthropic-version'}, 'the version is in the body');
my $want = msg_body(text => 'hello vertex');
$want =~ s/^\{"max_tokens"/{"anthropic_version":"vertex-2023-10-16","max_tokens"/ or die "body order\n";
$want =~ s/,"model":"claude-sonnet-4-6"//;
is($e->{body_sha256}, TB::Nginx::sha256_hex($want), 'the body byte for byte: model out, the version in');


=== TEST 2: a stream through streamRawPredict: Anthropic's SSE as it came
--- init
mock_config($::Google);
--- request
GET /healthz
--- check
ok(tokens_ready(), 'tokens');
only('vx1');
my $r = send_msg(stream => 1, model => 'claude-haiku-4-5');
is($r->{status}, 200, 'answered') or diag($r->{body});
like($r->{headers}{'content-type'}, qr{^text/event-stream}, 'SSE');
my @names = map { $_->[0] } @{ sse_events($r->{body}) };
is($names[0], 'message_start', 'message_start first');
is($names[-1], 'message_stop', 'message_stop last');
ok((grep { $_ eq 'content_block_delta' } @names) >= 3, 'deltas');
my $e = of('vertex')->[-1];
like($e->{path}, qr{/models/claude-haiku-4-5%4020251001:streamRawPredict$}, 'streamRawPredict, a prefix entry of model_map');
my $rec = request_record($r->{headers}{'x-tokenbiryani-request-id'});
is($rec->{usage}{output_tokens}, 12, 'the usage read from the stream');


=== TEST 3: Google's envelope and Anthropic's in the taxonomy
--- init
mock_config($::Google);
--- request
GET /healthz
--- check
my @rows = (
    ['429', 'cooling', 200, 2],
    ['503', 'cooling', 200, 2],
    ['529', 'cooling', 200, 2],
    ['500', 'ready', 200, 2],
    ['403', 'ready', 200, 2],
    ['404', 'ready', 200, 2],
    ['400', 'ready', 400, 1],
);
for my $row (@rows) {
    my ($step, $state, $status, $attempts) = @$row;
    for my $stream (0, 1) {
        my $what = "$step " . ($stream ? 'streamed' : 'not streamed');
        mock_reset();
        mock_config($::Google);
        restart();
        ok(tokens_ready(), "$what: tokens");
        only('vx1', 'an1');
        my $n = scalar @{ mock_log() };
        behave($::Email, $step);
        my $r = send_msg(stream => $stream);
        is($r->{status}, $status, "$what: the client gets $status") or diag($r->{body});
        my @log = grep { ($_->{platform} // '') ne 'google-token' } @{ mock_log() }[$n .. $#{ mock_log() }];
        is(scalar @log, $attempts, "$what: $attempts attempts");
        is($log[0]{platform}, 'vertex', "$what: Vertex first");
        is($r->{headers}{'x-tokenbiryani-account'}, 'an1', "$what: then an1") if $attempts == 2;
        is(account_of(pool_status(), 'vx1')->{state}, $state, "$what: vx1 is $state");
        if ($status == 400) {
            my $j = TB::Nginx::json_decode($r->{body});
            is($j->{error}{type}, 'invalid_request_error', "$what: an Anthropic error");
            is($j->{error}{message}, 'mock: scripted invalid argument', "$what: Google's message, the caller's to fix");
        }
    }
}


=== TEST 4: the token is made again before it expires; requests use the new one
--- init
mock_config({ %$::Google, google => { %{ $::Google->{google} }, token_ttl => 3 } });
--- request
GET /healthz
--- check
ok(tokens_ready(), 'the first tokens');
only('vx1');
my $first = send_msg();
is($first->{status}, 200, 'served with the first token');
# four fifths of 3 s: the next ones by 2.4 s after the first
ok(TB::Nginx::poll_until(8, sub { scalar(grep { $_->{status} == 200 } @{ of('google-token') }) >= 4 }),
   'each worker made its token again');
my @served;
for (1 .. 6) { push @served, send_msg()->{status} }
is_deeply(\@served, [(200) x 6], 'served after the refresh');
my %late = map { $_->{token} => 1 } @{ of('vertex') }[-6 .. -1];
my $old = of('vertex')->[0]{token};
ok(!$late{$old}, 'with a token newer than the first');
my @expired = grep { $_->{status} == 401 } @{ of('vertex') };
is(scalar @expired, 0, 'never an expired token upstream');


=== TEST 5: no token yet: requests go elsewhere, or wait for it within their budget; the failure said once
--- request
GET /healthz
--- check
# workers that start while the token endpoint fails
mock_config({ %$::Google, google => { %{ $::Google->{google} }, token_behavior => '500' } });
restart();
ok(TB::Nginx::poll_until(5, sub { scalar(grep { $_->{status} == 500 } @{ of('google-token') }) >= 2 }),
   'both workers asked, and were refused');
only('vx1', 'an1');
my $r = send_msg();
is($r->{status}, 200, 'served');
is($r->{headers}{'x-tokenbiryani-account'}, 'an1', 'by an1: vx1 has no token');
my $rec = request_record($r->{headers}{'x-tokenbiryani-request-id'});
my ($c) = grep { $_->{account} eq 'vx1' } @{ $rec->{decision}{candidates} };
is($c->{verdict}, "filtered \x{2014} waiting for an access token", 'the verdict says why');
is(scalar @{ of('vertex') }, 0, 'nothing went to Vertex without a token');

# only Vertex: the request waits, and is served once the token comes
only('vx1');
my $bg = bg_request(%{ message_args("tenant-key") }, timeout => 25);
ok(TB::Nginx::poll_until(5, sub { pool_status()->{queue}{depth} >= 1 }), 'it waits in the queue');
mock_config({ google => { token_behavior => undef } });
my $w = bg_result($bg);
is($w->{status}, 200, 'served when the token came') or diag($w->{body});
is($w->{headers}{'x-tokenbiryani-account'}, 'vx1', 'by vx1');
my $said = () = TB::Nginx::log_text() =~ /the token endpoint answered 500/g;
ok($said >= 1 && $said <= 2, "the failure said once per worker, not once per try ($said)");
--- error_log
the token endpoint answered 500: internal_failure


=== TEST 6: one request, Anthropic then Bedrock then Vertex before the commit point, streamed and not
--- user_files eval
(my $y = $::Yaml) =~ s/priority: 5\n/priority: 1\n/;
$y =~ s/id: an1\n    api_key: sk-an1\n    priority: 1\n/id: an1\n    api_key: sk-an1\n    priority: 9\n/;
$y
--- init
mock_config({ %$::Google, credentials => { 'sk-an1' => { behavior => '529' },
                                           AKIDTESTBR1 => { behavior => '429' } } });
--- request
GET /healthz
--- check
ok(tokens_ready(), 'tokens');
for my $stream (0, 1) {
    if ($stream) {
        mock_reset();
        mock_config({ %$::Google, credentials => { 'sk-an1' => { behavior => '529' },
                                                   AKIDTESTBR1 => { behavior => '429' } } });
        restart();
        ok(tokens_ready(), "stream $stream: tokens");
    }
    my $n = scalar @{ mock_log() };
    my $r = send_msg(stream => $stream);
    is($r->{status}, 200, "stream $stream: answered") or diag($r->{body});
    my @log = grep { ($_->{platform} // '') ne 'google-token' } @{ mock_log() }[$n .. $#{ mock_log() }];
    is_deeply([map { $_->{platform} // 'anthropic' } @log], ['anthropic', 'bedrock', 'vertex'],
              "stream $stream: Anthropic, Bedrock, Vertex");
    is_deeply([map { $_->{status} } @log], [529, 429, 200], "stream $stream: overloaded, throttled, served");
    is($r->{headers}{'x-tokenbiryani-account'}, 'vx1', "stream $stream: vx1 answered");
    unlike($r->{body}, qr/overloaded|Throttling|error/i, "stream $stream: the client saw nothing of the failures");
    like($r->{body}, $stream ? qr/^event: message_start/ : qr/^\{"id":"msg_mock_/, "stream $stream: a whole answer");
}


=== TEST 7: the official SDK through Bedrock and Vertex: a stream and a Message, as from Anthropic
--- init
mock_config($::Google);
--- request
GET /healthz
--- check
ok(tokens_ready(), 'tokens');
my $node = $ENV{TB_NODE} // 'node';
my $sdk = sub {
    my ($spec) = @_;
    local $ENV{ANTHROPIC_BASE_URL} = "http://127.0.0.1:" . TB::Nginx::server_port();
    local $ENV{ANTHROPIC_API_KEY} = 'tenant-key';
    open(my $fh, '-|', $node, 't/sdk/client.mjs', TB::Nginx::json_encode($spec)) or die "node: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh;
    TB::Nginx::json_decode($out);
};
my %p = (model => 'claude-sonnet-4-6', max_tokens => 64, messages => [{ role => 'user', content => 'hello' }]);
for my $id ('br1', 'vx1') {
    only($id);
    my $s = $sdk->({ op => 'stream', params => \%p });
    ok($s->{ok}, "$id: the SDK streamed") or diag(explain($s));
    like($s->{text}, qr/^Hello from the mock \(/, "$id: its text whole");
    is($s->{message}{usage}{output_tokens}, 12, "$id: its usage");
    is($s->{events}[0], 'message_start', "$id: its events");
    my $c = $sdk->({ op => 'create', params => \%p });
    ok($c->{ok}, "$id: the SDK created") or diag(explain($c));
    is($c->{account}, $id, "$id: answered by $id");
    is($c->{message}{type}, 'message', "$id: a Message");
}
