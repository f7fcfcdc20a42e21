# A tenant's limits come before its bytes: a key over its rpm, holding
# its max_inflight with its max_queued waiting, or with its spend cap
# spent is refused before its body is read - a 32 MB body is answered
# after its first 64 KB - and the workers' private memory does not grow
# by the bodies refused; a body larger than client_body_buffer_size that
# is served is read from its temp file mapped, not copied into the
# worker.  Two workers, the real module, the mock.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use IO::Socket::INET ();
use Time::HiRes ();

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
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
  - key: tight-key
    name: tight
    max_inflight: 1
    max_queued: 1
  - key: rpm-key
    name: slow
    rpm: 1
  - key: capped-key
    name: capped
    spend_cap_usd: 0
_EOY_

# the harness's server has client_max_body_size 32m
our $Config = <<'_EOC_';
    client_body_buffer_size  1m;
_EOC_

gateway_suite(yaml => $Yaml, config => $Config . $Locations);

our $Big = 32 * 1024 * 1024;

# a POST of a $Big-byte body of which only the first 64 KB is sent: the
# answer, and how long it took to come (undef: none within 5 s)
sub upload {
    my ($key) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => server_port(), Timeout => 5)
        or die "connect: $!\n";
    binmode $s;
    local $SIG{PIPE} = 'IGNORE';
    my $t0 = Time::HiRes::time();
    print $s "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: $key\r\n"
           . "content-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
           . "Content-Length: $Big\r\n\r\n" . ('{"a":"' . ('x' x 65530));
    my $buf = '';
    $s->blocking(0);
    while (Time::HiRes::time() - $t0 < 5) {
        my $n = sysread($s, $buf, 65536, length $buf);
        last if defined $n && $n == 0;
        last if $buf =~ /\r\n\r\n/ && $buf =~ /\}\s*\z/;
        Time::HiRes::sleep(0.005) unless $n;
    }
    close $s;
    my ($status) = $buf =~ m{^HTTP/1\.1 (\d+)};
    my ($body) = $buf =~ /\r\n\r\n(.*)\z/s;
    { status => $status, body => $body, raw => $buf };
}

# the workers' private memory (RssAnon, kB), summed
sub anon_kb {
    my $kb = 0;
    for my $pid (TB::Nginx::worker_pids()) {
        open(my $fh, '<', "/proc/$pid/status") or next;
        while (<$fh>) { $kb += $1 if /^RssAnon:\s+(\d+)/ }
    }
    $kb;
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(upload anon_kb);
}

run_tests();

__DATA__

=== TEST 1: a key holding its max_inflight with its max_queued waiting: eight 32 MB bodies refused after their first 64 KB, the workers' memory as it was
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'warmed up');
my $before = anon_kb();
# one in flight (held at the mock for 3 s), one waiting behind it
my @held = map { my $a = message_args('tight-key');
                 $a->{headers}{'x-mock-script'} = 'slow-headers:3000';
                 bg_request(%$a, timeout => 20) } 1 .. 2;
ok(TB::Nginx::poll_until(5, sub {
    my ($k) = grep { $_->{name} eq 'tight' } @{ pool_status()->{keys} };
    $k && $k->{inflight} == 1 && $k->{queued} == 1 }), 'tight holds one in flight and one waiting');
my @r = map { upload('tight-key') } 1 .. 8;
is_deeply([map { $_->{status} // 'none' } @r], [(429) x 8], 'each refused before its body was read');
like($r[0]{body}, qr/key \\"tight\\" already has 1 requests waiting, its max_queued/, 'saying why, as the queue would');
like($r[0]{raw}, qr/\r\nretry-after: 1\r\n/i, 'with retry-after');
my $after = anon_kb();
ok($after - $before < 8 * 1024, "the workers' private memory grew by " . ($after - $before) . " kB for 8 x 32 MB refused (< 8 MB)");
bg_result($_) for @held;



=== TEST 2: over its rpm, or its spend cap spent: refused before the body
--- request
GET /healthz
--- check
is(message_with('rpm-key')->{status}, 200, 'rpm: the first of the minute');
my $r = upload('rpm-key');
is($r->{status}, 429, 'rpm: the next, 32 MB, refused before its body');
like($r->{body}, qr/over its limit of 1 requests a minute/, 'rpm: saying why');
$r = upload('capped-key');
is($r->{status}, 429, 'cap: refused before its body');
like($r->{body}, qr/spend cap \(spend_cap_usd\).*nothing may be spent until the limit is raised/, 'cap: saying why');
like($r->{raw}, qr/\r\nx-should-retry: false\r\n/i, 'cap: not to be retried');
my $ok = upload('tenant-key');
ok(!defined $ok->{status}, 'a key within its limits is not answered until its body has come');



=== TEST 3: a body larger than client_body_buffer_size is served from its temp file, mapped: the worker's private memory does not grow by its size
--- init
mock_config({ credentials => { 'sk-a1' => { input_limit => 50_000_000 } } });
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'warmed up');
my $body = big_body(20 * 1024 * 1024);
my $before = anon_kb();
# held at the mock for 3 s: the worker's memory measured while it holds it
my $bg = bg_request(method => 'POST', path => '/v1/messages', timeout => 30,
    headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json',
                 'anthropic-version' => '2023-06-01', 'x-mock-script' => 'slow-headers:3000' },
    body => $body);
ok(TB::Nginx::poll_until(10, sub { pool_status()->{leases}{held} >= 1 }), 'the 20 MB request in flight');
my $during = anon_kb();
my $r = bg_result($bg);
is($r->{status}, 200, 'a 20 MB body served') or diag(substr($r->{body} // '', 0, 300));
my $e = mock_log()->[-1];
is($e->{body_len}, length $body, 'sent upstream whole');
is($e->{body_sha256}, sha256_hex($body), 'byte for byte');
ok($during - $before < 8 * 1024, "the workers' private memory, while it was in flight, "
   . ($during - $before) . ' kB over before for a 20 MB body (< 8 MB: not copied)');



=== TEST 4: a key's conversations are held to a fair share of the zone's: one that opens them without end makes room with its own, never another key's
--- user_files eval
my $keys = join '', map { "  - key: k$_-key\n    name: k$_\n" } 1 .. 254;
">>> tb.yaml\naccounts:\n  - id: a1\n    api_key: sk-a1\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT}\n"
. "keys:\n  - key: admin-key\n    name: ops\n    admin: true\n  - key: tenant-key\n    name: tenant\n$keys"
--- request
GET /healthz
--- check
# 256 keys: a share of 16,384 / 256 = 64 conversations each
my $conv = sub {
    my ($key, $id) = @_;
    my $a = message_args($key);
    $a->{headers}{'x-tokenbiryani-session'} = $id;
    TB::Nginx::http_request(%$a)->{status};
};
is($conv->('k2-key', "quiet-$_"), 200, "k2's conversation $_") for 1 .. 3;
my @st = map { $conv->('k1-key', "flood-$_") } 1 .. 150;
is(scalar(grep { $_ == 200 } @st), 150, 'k1: 150 new conversations, each served');
my (undef, $j) = admin(GET => '/admin/sessions?limit=1000');
my %by;
$by{ $_->{key} }++ for @{ $j->{sessions} };
ok($by{k1} <= 64, "k1 holds $by{k1} conversations (its share: 64)");
ok($by{k1} >= 60, 'and about as many as its share');
is($by{k2}, 3, 'k2 keeps all three of its own');
