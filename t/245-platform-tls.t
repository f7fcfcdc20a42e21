# Bedrock and Vertex are HTTPS only: every platform account and every
# credential kind over TLS (verified against the suite's CA, the host as
# SNI), several requests one after another on one kept-alive connection,
# JSON and streams; a request nginx's TLS writer would hold back is never
# sent late.  Also the other chains the module writes to an upstream over
# TLS (a GET without a body), and the Vertex token request's Host.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use File::Temp ();

master_on();
workers(2);
no_shuffle();
mock_start();

our $Dir = File::Temp::tempdir(CLEANUP => 1);
system("openssl genrsa -out $Dir/key.pem 2048 2>/dev/null") == 0 or die "openssl genrsa\n";
chmod 0644, "$Dir/key.pem";
(our $Modulus = `openssl rsa -in $Dir/key.pem -noout -modulus 2>/dev/null`) =~ s/^Modulus=|\s+$//g;
$Modulus or die "openssl rsa -modulus\n";
our $Email = 'gateway@proj-1.iam.gserviceaccount.com';
# a token endpoint on a port that is not its scheme's default
our $TokenUri = "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT4}/token";
TB::Nginx::spew("$Dir/sa.json", TB::Nginx::json_encode({
    type => 'service_account', project_id => 'proj-1', private_key_id => 'kid-1',
    private_key => TB::Nginx::slurp("$Dir/key.pem"), client_email => $Email,
    token_uri => $TokenUri }));
chmod 0644, "$Dir/sa.json";
chmod 0755, $Dir;
$ENV{TB_TEST_SA} = "$Dir/sa.json";

our $Mock = {
    google => { keys => { $Email => { n => $Modulus, e => 65537 } },
                token_uri => $TokenUri, project => 'proj-1' },
    bedrock => { region => 'us-east-1',
                 keys => { AKIDTESTBR1 => { secret => 'br1-secret' } },
                 api_keys => ['br-api-key-1'] } };

our $Map = <<'_EOM_';
      model_map:
        "claude-*": us.anthropic.claude-sonnet-4-6-v1:0
_EOM_

our $Yaml = <<"_EOY_";
>>> tb.yaml
retry:
  max_attempts: 2
accounts:
  - id: br-sig
    type: bedrock
    base_url: https://localhost:\${TEST_NGINX_MOCK_TLS_PORT}
    options:
      region: us-east-1
      access_key_id: AKIDTESTBR1
      secret_access_key: br1-secret
$Map  - id: br-key
    type: bedrock
    api_key: br-api-key-1
    base_url: https://localhost:\${TEST_NGINX_MOCK_TLS_PORT}
    options:
$Map  - id: vx
    type: vertex
    base_url: https://localhost:\${TEST_NGINX_MOCK_TLS_PORT}
    options:
      project: proj-1
      region: us-east5
      credentials_path: \${TB_TEST_SA}
      model_map:
        "claude-*": claude-sonnet-4-6\@20250929
  - id: an
    api_key: sk-an
    base_url: https://localhost:\${TEST_NGINX_MOCK_TLS_PORT}
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

our $TlsConfig = "    tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $HttpConfig;

sub only {
    my %on = map { $_ => 1 } @_;
    for my $id (qw(br-sig br-key vx an)) {
        my $r = admin_post("/admin/accounts/$id/" . ($on{$id} ? 'enable' : 'disable'));
        die "$id: $r->{status}\n" unless $r->{status} == 200;
    }
}

# a hang is a failure here, not a wait: each request has 5 s, where
# nginx's own send timeout is 60 s
sub send_msg {
    my (%o) = @_;
    TB::Nginx::http_request(method => 'POST', path => '/v1/messages', timeout => 5,
        headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json',
                     'anthropic-version' => '2023-06-01' },
        body => msg_body(%o));
}

sub tokens_ready {
    TB::Nginx::poll_until(10, sub {
        scalar(grep { ($_->{platform} // '') eq 'google-token' && $_->{status} == 200 } @{ mock_log() }) >= 2 });
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(only send_msg tokens_ready);
}

gateway_suite(yaml => $Yaml, http_config => $TlsConfig);
run_tests();

__DATA__

=== TEST 1: each platform account and credential kind over TLS: eight requests in turn, JSON and streams, every one answered, connections kept alive and reused
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
ok(tokens_ready(), 'both workers have a Vertex token');
for my $case (['br-sig', 'bedrock', 'sigv4'], ['br-key', 'bedrock', 'api_key'], ['vx', 'vertex', undef]) {
    my ($id, $platform, $auth) = @$case;
    only($id);
    for my $stream (0, 1) {
        my $what = "$id " . ($stream ? 'streamed' : 'JSON');
        my $n = scalar @{ mock_log() };
        my @st;
        for my $i (1 .. 8) {
            my $r = send_msg(stream => $stream, text => "$what $i");
            push @st, $r->{status} // ("no answer: " . ($r->{error} // '?'));
            if ($r->{status} && $r->{status} == 200) {
                like($r->{body}, $stream ? qr/event: message_stop/ : qr/"type":"message"/,
                     "$what $i: a whole answer");
            }
        }
        is_deeply(\@st, [(200) x 8], "$what: eight answered, none held back");
        my @log = grep { ($_->{platform} // '') eq $platform } @{ mock_log() }[$n .. $#{ mock_log() }];
        is(scalar @log, 8, "$what: eight requests upstream");
        ok(!grep({ !$_->{tls} } @log), "$what: every one over TLS");
        is(scalar(grep { ($_->{sni} // '') eq 'localhost' } @log), 8, "$what: the account's host as SNI");
        is($_->{auth}, $auth, "$what: $auth") for grep { defined $auth } @log;
        my %conns;
        $conns{ $_->{conn} }++ for @log;
        ok(keys %conns <= 2, "$what: " . scalar(keys %conns) . ' connection(s) for eight requests (two workers)');
        my $max = 0;
        $max = $_->{conn_req} > $max ? $_->{conn_req} : $max for @log;
        ok($max >= 3, "$what: one connection carried $max requests in turn");
    }
}
--- no_error_log
timed out
[alert]


=== TEST 2: after a platform's attempt the next one on an Anthropic account over TLS goes whole too, and a GET with no body is not held back
--- init
mock_config({ %$::Mock, credentials => { AKIDTESTBR1 => { behavior => '529' } } });
--- request
GET /healthz
--- check
only('br-sig', 'an');
my @st;
for my $i (1 .. 4) {
    my $r = send_msg(stream => $i % 2);
    push @st, ($r->{status} // 0) . ' ' . ($r->{headers}{'x-tokenbiryani-account'} // '-');
}
is_deeply(\@st, [('200 an') x 4], 'Bedrock refused, Anthropic over TLS answered each');
only('an');
my @models;
for (1 .. 6) {
    my $r = TB::Nginx::http_request(method => 'GET', path => '/v1/models', timeout => 5,
                                    headers => { 'x-api-key' => 'tenant-key' });
    push @models, $r->{status} // ('no answer: ' . ($r->{error} // '?'));
}
is_deeply(\@models, [(200) x 6], 'GET /v1/models six times, each answered');
my @get = grep { $_->{path} =~ m{^/v1/models} } @{ mock_log() };
my $max = 0;
$max = $_->{conn_req} > $max ? $_->{conn_req} : $max for @get;
ok($max >= 2, "a GET went on a kept-alive connection ($max requests on it)");
--- no_error_log
timed out


=== TEST 3: the token request names the token endpoint's port in its Host, as Google's libraries do
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
ok(tokens_ready(), 'tokens');
my @tok = grep { ($_->{platform} // '') eq 'google-token' } @{ mock_log() };
is($tok[0]{headers}{host}, "127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT4}", 'Host: with the port');
