# Open mode (no keys) serves programs on the operator's machine, not web
# pages in the operator's browser: a Host that is not loopback (DNS
# rebinding), a cross-site Origin or Sec-Fetch-Site, and an admin write
# without application/json are refused, and nothing goes upstream.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = pool_yaml(accounts => 2, keys => []);

sub send_as {
    my ($path, %h) = @_;
    my $method = delete $h{method} // ($path =~ m{^/v1/messages} ? 'POST' : 'GET');
    http_request(method => $method, path => $path,
                 $method eq 'POST' ? (body => delete $h{body} // msg_body()) : (),
                 headers => { %h });
}

sub refused_ok {
    my ($r, $status, $re, $what) = @_;
    is($r->{status}, $status, "$what: $status");
    my $e = eval { json_decode($r->{body}) } || {};
    is($e->{type}, 'error', "$what: an Anthropic error");
    like($e->{error}{message} // '', $re, "$what: saying why");
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: DNS rebinding: a Host that is not loopback is refused, on /v1 and /admin
--- check
for my $host ('attacker.example', 'attacker.example:8787', '10.1.2.3', 'localhost.attacker.example',
              'evil-localhost', '[2001:db8::1]', '127.0.0.1.attacker.example') {
    (my $name = lc $host) =~ s/:\d+$//;
    refused_ok(send_as('/v1/messages', Host => $host), 403, qr/Host "\Q$name\E"/,
               "messages, Host $host");
    refused_ok(send_as('/admin/status', Host => $host), 403, qr/loopback/, "status, Host $host");
}
is(scalar @{ mock_log() }, 0, 'nothing went upstream');



=== TEST 2: loopback names and addresses are served
--- check
for my $host ('localhost', 'LOCALHOST:8787', 'app.localhost', '127.0.0.1', '127.0.0.1:8787',
              '127.9.8.7', '[::1]', '[::1]:8787', 'localhost.') {
    is(send_as('/v1/messages', Host => $host)->{status}, 200, "messages, Host $host");
    is(send_as('/admin/status', Host => $host)->{status}, 200, "status, Host $host");
}
is(scalar @{ mock_log() }, 9, 'each message sent once');
my $raw = http_request(raw => "GET /admin/status HTTP/1.0\r\n\r\n");
is($raw->{status}, 200, 'HTTP/1.0 without a Host: served (no browser sends that)');



=== TEST 3: a web page of another origin cannot post to the gateway or read the admin API
--- check
for my $origin ('http://attacker.example', 'https://attacker.example:443', 'null',
                'http://localhost.attacker.example', 'http://127.0.0.1.nip.io',
                'file://', 'http://127.0.0.1/path', 'http://127.0.0.1:80x') {
    refused_ok(send_as('/v1/messages', Origin => $origin, 'Content-Type' => 'text/plain'),
               403, qr/another origin \(Origin: \Q$origin\E\)/, "messages from $origin");
    refused_ok(send_as('/admin/status', Origin => $origin), 403, qr/origin/, "status from $origin");
    refused_ok(send_as('/admin/accounts/a1/disable', method => 'POST', body => '{}',
                       Origin => $origin, 'Content-Type' => 'application/json'),
               403, qr/origin/, "disable from $origin");
}
for my $site ('cross-site', 'Cross-Site') {
    refused_ok(send_as('/v1/messages', 'Sec-Fetch-Site' => $site), 403,
               qr/Sec-Fetch-Site: cross-site/, "Sec-Fetch-Site: $site");
}
is(scalar @{ mock_log() }, 0, 'nothing went upstream');
is(account_of(pool_status(), 'a1')->{state}, 'ready', 'a1 was not disabled');
# a page of another server on this machine: loopback, but not the gateway's
my $port = server_port();
for my $origin ("http://127.0.0.1:" . ($port + 1), 'http://localhost:8080', "https://127.0.0.1:$port",
                'http://127.0.0.1', "http://localhost:$port") {
    refused_ok(send_as('/v1/messages', Host => "127.0.0.1:$port", Origin => $origin,
                       'Content-Type' => 'text/plain'),
               403, qr/another origin/, "messages from $origin, to 127.0.0.1:$port");
    refused_ok(send_as('/admin/accounts/a1/disable', method => 'POST', body => '{}', Host => "127.0.0.1:$port",
                       Origin => $origin, 'Content-Type' => 'application/json'),
               403, qr/origin/, "disable from $origin, to 127.0.0.1:$port");
}
is(account_of(pool_status(), 'a1')->{state}, 'ready', 'a1 was not disabled');
# what a page of the gateway's own origin (its scheme, host and port), or a program, sends
for my $pair (["127.0.0.1:$port", "http://127.0.0.1:$port"], ["localhost:$port", "http://LOCALHOST:$port"],
              ['localhost', 'http://localhost'], ['localhost:80', 'http://localhost'],
              ["[::1]:$port", "http://[::1]:$port"]) {
    my ($host, $origin) = @$pair;
    is(send_as('/v1/messages', Host => $host, Origin => $origin)->{status}, 200, "Origin $origin to Host $host: served");
}
for my $site ('same-origin', 'same-site', 'none') {
    is(send_as('/v1/messages', 'Sec-Fetch-Site' => $site)->{status}, 200, "Sec-Fetch-Site: $site: served");
}



=== TEST 4: an admin write must say application/json
--- check
for my $ct (undef, 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
            'application/jsonp') {
    my $r = send_as('/admin/accounts/a1/disable', method => 'POST', body => '',
                    defined $ct ? ('Content-Type' => $ct) : ());
    refused_ok($r, 415, qr/Content-Type: application\/json/, 'disable with ' . ($ct // 'no content type'));
}
is(account_of(pool_status(), 'a1')->{state}, 'ready', 'a1 still ready');
my $ok = send_as('/admin/accounts/a1/disable', method => 'POST', body => '',
                 'Content-Type' => 'application/json; charset=utf-8');
is($ok->{status}, 200, 'with application/json: done');
is(account_of(pool_status(), 'a1')->{state}, 'disabled', 'a1 disabled');
is(send_as('/admin/status')->{status}, 200, 'reads need no content type');
