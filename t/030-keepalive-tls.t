# Upstream connections: keepalive reuse, TLS with verification and SNI.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = pool_yaml(accounts => [{ id => 'only' }], keys => []);

our $YamlTls = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: tls
    api_key: sk-tls
    base_url: https://localhost:${TEST_NGINX_MOCK_TLS_PORT}/
_EOY_

our $YamlTlsIp = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: tls-ip
    api_key: sk-tls
    base_url: https://127.0.0.1:${TEST_NGINX_MOCK_TLS_PORT}
_EOY_

our @Six = map { $_ % 2 ? "POST /v1/messages\n" . stream_body()
                        : "POST /v1/messages\n" . msg_body() } 1 .. 6;

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: sequential requests reuse upstream connections
--- request eval: [@::Six]
--- error_code eval: [(200) x 6]
--- check
my $log = mock_log();
is(scalar @$log, 6, 'six upstream requests');
my %conns;
$conns{ $_->{conn} }++ for @$log;
# two workers: six requests cannot need more than two connections
ok(keys %conns <= 2, scalar(keys %conns) . ' upstream connection(s) for six requests');
my $max = 0;
$max = $_->{conn_req} > $max ? $_->{conn_req} : $max for @$log;
ok($max >= 3, "one connection carried $max requests");
is(sha256_hex($responses[$_]{body}), $log->[$_]{resp_sha256}, "response $_ intact")
    for 0 .. 5;



=== TEST 2: an error response with a body does not poison the connection
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . msg_body(),
 "POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . msg_body()]
--- more_headers eval
["x-mock-script: 400", "", "x-mock-script: 404", ""]
--- error_code eval
[400, 200, 404, 200]
--- check
my $log = mock_log();
is(scalar @$log, 4, 'four requests');
my %conns;
$conns{ $_->{conn} }++ for @$log;
ok(keys %conns <= 2, 'errors with complete bodies keep the connection');



=== TEST 3: https upstream verified against a CA, with the account's host as SNI
--- http_config eval
"tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $::HttpConfig
--- user_files eval: $::YamlTls
--- request eval
["POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . stream_body(),
 "POST /v1/messages\n" . msg_body(), "POST /v1/messages\n" . msg_body()]
--- error_code eval: [200, 200, 200, 200]
--- upstream
tls sni       path         h:host
1   localhost /v1/messages ~^localhost:\d+$
1   localhost /v1/messages ~^localhost:\d+$
1   localhost /v1/messages ~^localhost:\d+$
1   localhost /v1/messages ~^localhost:\d+$
--- check
my $log = mock_log();
is($log->[0]{headers}{host}, "localhost:$ENV{TEST_NGINX_MOCK_TLS_PORT}", "Host header");
my %conns;
$conns{ $_->{conn} }++ for @$log;
ok(keys %conns <= 2, 'TLS connections are kept alive too');
is(count_events($responses[1]{body}, 'message_start'), 1, 'a stream over TLS');



=== TEST 4: a certificate from another CA is refused: no request is sent
--- http_config eval
"tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_WRONG_CA;\n" . $::HttpConfig
--- user_files eval: $::YamlTls
--- request eval
"POST /v1/messages\n" . msg_body()
--- error_code: 502
--- response_body_like: "type":"api_error"
--- error_log
upstream SSL certificate verify error
--- upstream: none



=== TEST 5: an https base_url must name a host: certificates are checked by name
--- http_config eval
"tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $::HttpConfig
--- user_files eval: $::YamlTlsIp
--- must_die
--- error_log
account "tls-ip": an https base_url must name a host, not an IP address
