# The pool's capacity and counters for operators: /admin/horizon (what the
# pool can take now and over the next hour) and /admin/metrics (the
# Prometheus text format, parsed by Debian's python3-prometheus-client),
# both behind the admin boundary.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();

our $Yaml = <<'_EOY_';
pricing: builtin
accounts:
  - id: a1
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    priority: -1
keys:
  - key: admin-key
    name: ops
    admin: true
  - key: tenant-key
    name: tenant
_EOY_

# the samples of a Prometheus text, parsed by prometheus_client:
# { "name{label=value,...}" => value }, and its families' types
sub parse_metrics {
    my ($text) = @_;
    my $file = TB::Nginx::servroot() . '/logs/metrics.txt';
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $text;
    close $fh;
    my $out = `/usr/bin/python3 -c '
import json, sys
from prometheus_client.parser import text_string_to_metric_families
s, t = {}, {}
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    t[f.name] = f.type
    for m in f.samples:
        s[m.name + "{" + ",".join(k + "=" + v for k, v in sorted(m.labels.items())) + "}"] = m.value
print(json.dumps({"samples": s, "types": t}))
' $file 2>&1`;
    my $d = eval { TB::Nginx::json_decode($out) } or die "the parser refused it: $out\n";
    $d;
}

{
    no strict 'refs';
    *{"TB::Nginx::parse_metrics"} = \&parse_metrics;
}

gateway_suite(yaml => ">>> tb.yaml\n$Yaml");
run_tests();

__DATA__

=== TEST 1: /admin/metrics parses as Prometheus text and counts requests, tokens, cost, cache hits and failovers
--- request
GET /healthz
--- check
for (1 .. 3) { is(message_with('tenant-key')->{status}, 200, 'served') }
# a1 answers 429 once: the request fails over to a2
my $a = message_args('tenant-key');
$a->{headers}{'x-mock-script'} = '429,ok';
$a->{headers}{'x-mock-script-id'} = 'm1';
my $r = TB::Nginx::http_request(%$a);
is($r->{status}, 200, 'failed over');
is($r->{headers}{'x-tokenbiryani-account'}, 'a2', 'to a2');
TB::Nginx::wait_idle();
my ($st, undef, $raw) = admin(GET => '/admin/metrics');
is($st, 200, '/admin/metrics');
like($raw->{headers}{'content-type'}, qr{^text/plain; version=0\.0\.4}, 'the text format');
my $m = parse_metrics($raw->{body});
my $s = $m->{samples};
is($m->{types}{tokenbiryani_requests}, 'counter', 'requests: a counter');
is($s->{'tokenbiryani_requests_total{account=a1,outcome=ok}'}, 3, 'a1: 3 ok');
is($s->{'tokenbiryani_requests_total{account=a1,outcome=rate_limit}'}, 1, 'a1: 1 rate limited');
is($s->{'tokenbiryani_requests_total{account=a2,outcome=ok}'}, 1, 'a2: 1 ok');
is($s->{'tokenbiryani_failovers_total{}'}, 1, 'one failover');
ok($s->{'tokenbiryani_tokens_total{account=a1,kind=input}'} > 0, 'input tokens');
ok($s->{'tokenbiryani_tokens_total{account=a1,kind=output}'} > 0, 'output tokens');
ok($s->{'tokenbiryani_cost_usd_total{account=a1}'} > 0, 'cost');
is($s->{'tokenbiryani_account_state{account=a1,state=cooling}'}, 1, 'a1 cooling');
is($s->{'tokenbiryani_account_state{account=a2,state=ready}'}, 1, 'a2 ready');
is($s->{'tokenbiryani_queue_depth{class=interactive}'}, 0, 'nothing queued');
is($s->{'tokenbiryani_leases{}'}, 0, 'no leases held');
ok(exists $s->{'tokenbiryani_store_degraded{}'}, 'the store\'s health');
is($m->{types}{tokenbiryani_queue_wait_seconds}, 'summary', 'queue wait: a summary');
unlike($raw->{body}, qr/sk-a1|sk-a2|admin-key|tenant-key/, 'no credential in it');

($st) = admin(GET => '/admin/metrics', undef, key => 'tenant-key');
is($st, 403, 'a tenant key cannot read it');
is(TB::Nginx::http_request(method => 'GET', path => '/admin/metrics')->{status}, 401, 'nor anyone without a key');
is(TB::Nginx::http_request(method => 'GET', path => '/metrics')->{status}, 404, 'and there is no public /metrics');



=== TEST 2: /admin/horizon: what the pool can take now and over the next hour, the next reset, the queue, and a one-line summary
--- request
GET /healthz
--- check
is(message_with('tenant-key')->{status}, 200, 'a request: a1\'s limits observed');
my ($st, $h) = admin(GET => '/admin/horizon');
is($st, 200, '/admin/horizon');
is($h->{accounts}{total}, 2, 'two accounts');
is($h->{accounts}{counted}, 1, 'one with its limits observed');
is($h->{accounts}{limits_unobserved}, 1, 'one not yet: said apart, not counted as full');
ok($h->{now}{input_tokens} > 0, "input tokens now: $h->{now}{input_tokens}");
is(scalar @{ $h->{next_hour} }, 13, 'now and every 5 minutes for an hour');
is($h->{next_hour}[12]{in_seconds}, 3600, 'to an hour');
ok($h->{next_hour}[12]{input_tokens} >= $h->{now}{input_tokens}, 'never less later than now');
ok(defined $h->{next_reset_seconds} && $h->{next_reset_seconds} > 0, "next reset in $h->{next_reset_seconds}s");
is($h->{queue}{depth}, 0, 'queue depth');
like($h->{summary}, qr/^1 of 2 accounts ready|^2 of 2 accounts ready/, "summary: $h->{summary}");
like($h->{summary}, qr/\(1 with limits not observed\)/, 'saying what it cannot count');
($st) = admin(GET => '/admin/horizon', undef, key => 'tenant-key');
is($st, 403, 'a tenant key cannot read it');
