# Upstream addresses follow DNS: with a resolver in http{}, every worker
# resolves an account's host again when the answer's TTL runs out (within
# tokenbiryani_resolver_ttl), moves new attempts to the new addresses, and
# keeps the last good ones while DNS fails. The resolver is t/mock/dns.py;
# the mock listens on 127.0.0.1 and 127.0.0.2, so which one a request
# reached says which address the gateway used. The host is "localhost",
# which the system resolves at load and the test's DNS answers afterwards.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes qw(time);

master_on();
workers(2);
no_shuffle();
mock_start(listen => ["127.0.0.2:$ENV{TEST_NGINX_MOCK_PORT}"]);
dns_start();

our $Port = $ENV{TEST_NGINX_MOCK_PORT};
our $Yaml = pool_yaml(accounts => [{ id => 'named', base_url => 'http://localhost:${TEST_NGINX_MOCK_PORT}' }],
                      keys => []);
our $Resolver = "resolver 127.0.0.1:\$TEST_NGINX_DNS_PORT;\nresolver_timeout 1s;\n"
              . "tokenbiryani_resolver_ttl 1s 2s;\n";

sub zone_to { dns_zone({ names => { localhost => { a => [@_], ttl => 1 } } }) }

# one request; the address the mock took it on
sub reached {
    my $n = scalar @{ mock_log() };
    my $r = http_request(method => 'POST', path => '/v1/messages', body => msg_body());
    die "request: $r->{status} $r->{body}\n" unless ($r->{status} // 0) == 200;
    my $log = mock_log($n);
    die "not one upstream request\n" unless @$log == 1;
    $log->[0]{listen} =~ s/:\d+$//r;
}

# until $n requests in a row reach $want (both workers moved)
sub settles_on {
    my ($want, $n, $secs) = @_;
    my $row = 0;
    poll_until($secs, sub { $row = reached() eq $want ? $row + 1 : 0; $row >= $n });
}

sub questions { scalar grep { ($_->{name} // '') eq 'localhost' && !$_->{dropped} } @{ dns_log() } }

gateway_suite(yaml => $Yaml, http_config => $Resolver . $HttpConfig);
run_tests();

__DATA__

=== TEST 1: a new answer moves new attempts to the new address, in every worker
--- init
zone_to('127.0.0.1');
--- timeout: 40
--- error_log eval
[qr/account "named": "localhost" now resolves to 127\.0\.0\.2:\d+ \(was 127\.0\.0\.1:\d+\)/]
--- check
is(reached(), '127.0.0.1', 'first on the address loaded');
ok(poll_until(10, sub { questions() >= 2 }), 'the workers ask the resolver');
ok(settles_on('127.0.0.1', 5, 5), 'the same answer changes nothing');
my $t0 = time;
zone_to('127.0.0.2');
ok(settles_on('127.0.0.2', 10, 15), 'the new address, from both workers');
my $took = time - $t0;
ok($took < 6, sprintf('within the TTL and the ceiling (%.1f s)', $took));
zone_to('127.0.0.1', '127.0.0.2');
ok(poll_until(15, sub { my %seen; $seen{ reached() }++ for 1 .. 8; keys %seen == 2 }),
   'two addresses: attempts use both');



=== TEST 2: while DNS fails, the last good addresses stay; when it answers again, it is used
--- init
zone_to('127.0.0.2');
--- timeout: 60
--- error_log eval
[qr/"localhost" could not be resolved \(\d+: [^)]+\); keeping its 1 last good address/,
 qr/account "named": "localhost" resolves again/]
--- check
ok(settles_on('127.0.0.2', 10, 15), 'on the address DNS gave');
my $q = questions();
dns_zone({ names => { localhost => { a => ['127.0.0.2'], ttl => 1 } }, servfail => JSON::PP::true });
ok(poll_until(10, sub { grep { ($_->{rcode} // 0) == 2 } @{ dns_log() } }), 'DNS answers SERVFAIL');
ok(settles_on('127.0.0.2', 10, 10), 'every request still served, on the last good address');
dns_zone({ names => { localhost => { a => ['127.0.0.1'], ttl => 1 } }, drop => JSON::PP::true });
ok(poll_until(10, sub { grep { $_->{dropped} } @{ dns_log() } }), 'DNS does not answer at all');
ok(settles_on('127.0.0.2', 10, 10), 'still served, on the last good address');
zone_to('127.0.0.1');
ok(settles_on('127.0.0.1', 10, 20), 'DNS back: its answer is used');



=== TEST 3: without a resolver the addresses stay as loaded, and nobody asks
--- http_config eval: $::HttpConfig
--- init
zone_to('127.0.0.2');
--- check
my $before = questions();
ok(settles_on('127.0.0.1', 10, 5), 'on the address loaded');
is(questions(), $before, 'no question to any DNS server');



=== TEST 4: TLS after re-resolution: SNI and verification stay on the host name
--- http_config eval: "tokenbiryani_ssl_trusted_certificate \$TEST_NGINX_CA;\n" . $::Resolver . $::HttpConfig
--- user_files eval
pool_yaml(accounts => [{ id => 'named', base_url => 'https://localhost:${TEST_NGINX_MOCK_TLS_PORT}' }], keys => [])
--- init
zone_to('127.0.0.1');
--- timeout: 30
--- check
my $before = questions();
ok(poll_until(10, sub { questions() >= $before + 2 }), 're-resolved');
for (1 .. 4) {
    my $r = http_request(method => 'POST', path => '/v1/messages', body => msg_body());
    is($r->{status}, 200, "served over TLS ($_)");
}
my $log = mock_log();
is_deeply([map { $_->{sni} } @$log], [('localhost') x 4], 'SNI: the host name');
ok(!grep({ !$_->{tls} } @$log), 'every request over TLS');
