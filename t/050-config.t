# Configuration: what nginx -t says about the directives and the YAML file.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

$ENV{TB_TEST_CREDENTIAL} = 'sk-from-env';
$ENV{TEST_NGINX_OPEN_PORT} ||= 19881;

our $Good = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
_EOY_

gateway_suite();
run_tests();

__DATA__

=== TEST 1: a YAML syntax error stops nginx, naming the file and the line
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: [sk-a1
--- must_die
--- error_log eval
[qr/tokenbiryani: \S+tb\.yaml:\d+: YAML syntax error/]



=== TEST 2: an unknown key, with its section, its line and the known keys
--- user_files
>>> tb.yaml
routing:
  strategy: sticky_headroom
  stratgey: headroom
--- must_die
--- error_log
tb.yaml:3: routing: unknown key "stratgey" (known: strategy, weights



=== TEST 3: a wrong type, with its key and line
--- user_files
>>> tb.yaml
retry:
  max_attempts: three
--- must_die
--- error_log
tb.yaml:2: retry.max_attempts: expected an integer, got "three"



=== TEST 4: an unknown routing strategy
--- user_files
>>> tb.yaml
accounts: []
routing:
  strategy: fastest
--- must_die
--- error_log
tb.yaml:3: routing.strategy: unknown strategy "fastest"



=== TEST 5: an unset ${VAR} without a default
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: ${TB_TEST_UNSET_VARIABLE}
--- must_die
--- error_log eval
[qr/tb\.yaml:3: .*TB_TEST_UNSET_VARIABLE/]



=== TEST 6: ${VAR} comes from nginx's environment; the credential goes upstream
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: ${TB_TEST_CREDENTIAL}
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT:-1}
--- request eval
"POST /v1/messages\n" . msg_body()
--- error_code: 200
--- check
is(mock_log()->[0]{credential}, 'sk-from-env', 'interpolated at load');



=== TEST 7: keys the Python implementation had and nginx owns are reported as ignored
--- user_files eval
"$::Good\nserver:\n  host: 0.0.0.0\n  port: 8787\n"
--- request
GET /healthz
--- error_log
server.port is ignored
server.host is ignored



=== TEST 8: no keys and a non-loopback listen: refused, saying why
--- http_config eval
$::HttpConfig . "server { listen 0.0.0.0:\$TEST_NGINX_OPEN_PORT; location /v1/ { tokenbiryani_pass; } }\n"
--- user_files eval: $::Good
--- must_die
--- error_log eval
[qr/declares no keys, so the gateway would be open to anyone, but a server using it listens on 0\.0\.0\.0:\d+, which is not a loopback address/]



=== TEST 9: the same listen is fine once keys exist
--- http_config eval
$::HttpConfig . "server { listen 0.0.0.0:\$TEST_NGINX_OPEN_PORT; location /v1/ { tokenbiryani_pass; } }\n"
--- user_files eval
"$::Good\nkeys:\n  - key: k1\n    name: one\n"
--- request
GET /healthz
--- error_code: 200



=== TEST 10: a non-loopback server that does not use the gateway does not count
--- http_config eval
$::HttpConfig . "server { listen 0.0.0.0:\$TEST_NGINX_OPEN_PORT; location / { return 204; } }\n"
--- user_files eval: $::Good
--- request
GET /healthz
--- error_code: 200



=== TEST 11: locations without tokenbiryani_config or tokenbiryani_zone
--- http_config
    tokenbiryani_zone tb 8m;
--- must_die
--- error_log
"tokenbiryani_config" is required where tokenbiryani locations are used



=== TEST 12: the zone is required, and must be big enough
--- http_config
    tokenbiryani_config $TEST_NGINX_HTML_DIR/tb.yaml;
--- user_files eval: $::Good
--- must_die
--- error_log
"tokenbiryani_zone" is required



=== TEST 13: nginx -t reports a broken file with its line, and passes a good one
--- user_files eval: $::Good
--- check
my ($rc, $out) = nginx_t("accounts:\n  - id: a1\n    api_key: sk\n    max_concurrency: -1\n");
isnt($rc, 0, 'nginx -t fails');
like($out, qr/tb\.yaml:4: accounts\[0\]\.max_concurrency: /, 'naming the key and line');
like($out, qr/configuration file .* test failed/, 'as a failed test');
($rc, $out) = nginx_t($::Good =~ s/^>>> tb.yaml\n//r);
is($rc, 0, 'a good file passes') or diag($out);
like($out, qr/test is successful/, 'nginx -t says so');



=== TEST 14: an account header with a line break is refused
--- user_files
>>> tb.yaml
accounts:
  - id: a1
    api_key: sk-a1
    headers:
      x-thing: "a\r\nx-injected: 1"
--- must_die
--- error_log eval
[qr/tb\.yaml:\d+: .*x-thing/]
