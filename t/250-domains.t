# Capacity domains: Anthropic counts an organisation's keys against one set
# of limits, so keys the answers name as one organisation
# (anthropic-organization-id) share one mirror and one set of leases; a
# file's capacity_domain says so for keys that never could; a sibling key
# of the conversation's owner reads the same prompt cache and is no cache
# break.  The mock's org_limits makes two keys spend one organisation's
# buckets, as the real API does: a stampede over both is never
# over-admitted with the domain, and is without it; nor over two
# instances sharing the pool through Redis, where the domain one of them
# learned is the other's too.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start();
redis_start(fresh => 1);

# two keys of one organisation, a third of another; the organisation's
# windows: 20 requests a minute
our $Mock = { credentials => {
    'sk-k1' => { org => 'org-shared', org_limits => JSON::PP::true },
    'sk-k2' => { org => 'org-shared', org_limits => JSON::PP::true },
    'sk-k3' => { org => 'org-other' },
    'org:org-shared' => { requests_limit => 20, input_limit => 1000000,
                          output_limit => 100000, window_seconds => 60 } } };

sub yaml {
    my (%o) = @_;
    my $acc = '';
    for my $k (1 .. 3) {
        $acc .= "  - id: k$k\n    api_key: sk-k$k\n"
              . "    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT@{[ $k == 1 ? '' : $k ]}}\n"
              . ($o{"d$k"} ? "    capacity_domain: $o{\"d$k\"}\n" : '');
    }
    my $store = $o{redis} ? "store:\n  backend: redis\n  url: redis://127.0.0.1:\${TEST_NGINX_REDIS_PORT}/0\n"
                          . "  namespace: tbdom\n" : '';
    <<"_EOY_";
>>> tb.yaml
${store}queue:
  default_max_wait_seconds: 0.5
routing:
  strategy: headroom
accounts:
$acc
keys:
  - key: admin-key
    name: admin
    admin: true
  - key: tenant-key
    name: tenant
    pool: [k1, k2]
    max_inflight: null
    max_queued: null
  - key: only-k1
    name: only-k1
    pool: [k1]
  - key: only-k2
    name: only-k2
    pool: [k2]
_EOY_
}

our $Learned = yaml();
our $PerKey = yaml(d1 => 'key-one', d2 => 'key-two');
our $Filed = yaml(d1 => 'shared-x', d3 => 'shared-x');
our $Shared = yaml(redis => 1);

# the same organisation with an hour's window: what refills while a block
# runs is a small fraction of one request, so a stampede's figures are the
# sharing's, not an estimate of the refill's
our $Hourly = { credentials => { %{ $Mock->{credentials} },
    'org:org-shared' => { %{ $Mock->{credentials}{'org:org-shared'} }, window_seconds => 3600 } } };
our $B = peer_port();

sub domain_of { my $a = account_of(pool_status(), $_[0]); $a->{capacity_domain} }

# /admin/status of the instance on $port, and what it says of account $id
sub status_on { my (undef, $j) = admin(GET => '/admin/status', undef, port => $_[0]); $j }
sub domain_on { (account_of(status_on($_[1]), $_[0]) // {})->{capacity_domain} }
sub requests_on { ((account_of(status_on($_[1]), $_[0]) // {})->{limits} // {})->{requests} // {} }

# n requests at once with the tenant key: their statuses
sub stampede {
    my ($n) = @_;
    my @r = @{ http_requests_concurrent([map { message_args('tenant-key', max_tokens => 16) } 1 .. $n]) };
    [map { $_->{status} // 0 } @r];
}

sub org_refused { (mock_stats()->{credentials}{'org:org-shared'} // {})->{refused_429} // 0 }

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(domain_of stampede org_refused status_on domain_on requests_on);
}

gateway_suite(yaml => $Learned);
run_tests();

__DATA__

=== TEST 1: two keys that answer for one organisation share one domain, learned from their answers
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
is(domain_of('k1'), undef, 'nothing learned before an answer');
is(message_with('only-k1')->{status}, 200, 'k1 answered');
is(domain_of('k1'), undef, 'one key of its organisation: a domain of its own');
is(message_with('only-k2')->{status}, 200, 'k2 answered');
my $d = domain_of('k2');
ok($d, 'k2 is in a domain');
is($d->{windows_of}, 'k1', 'k1\'s windows, the first of them');
is($d->{source}, 'learned', 'learned');
is_deeply([sort @{ $d->{accounts} }], ['k1', 'k2'], 'k1 and k2');
is_deeply(domain_of('k1'), $d, 'k1 says the same');
is(domain_of('k3'), undef, 'k3, of another organisation, is not');

my $st = pool_status();
my ($a1, $a2) = map { account_of($st, $_) } qw(k1 k2);
is($a2->{organization_id}, 'org-shared', 'its organisation');
is_deeply($a2->{limits}{requests}, $a1->{limits}{requests}, 'one requests window for both');
is($a1->{limits}{requests}{remaining}, 18, 'the organisation\'s: two spent of twenty');


=== TEST 2: a stampede over two keys of one organisation: never one upstream 429
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
is(message_with('only-k1')->{status}, 200, 'k1 warmed');
is(message_with('only-k2')->{status}, 200, 'k2 warmed');
ok(domain_of('k1'), 'one domain');
my $st = stampede(60);
my $served = grep { $_ == 200 } @$st;
my $refused = org_refused();
diag("capacity domain: $served of 60 served, $refused refused upstream");
is($refused, 0, 'the organisation never refused one: admitted against one set of windows');
ok($served >= 12 && $served <= 18, "about what the window had left ($served of 18)");
is(scalar(grep { $_ != 200 && $_ != 429 } @$st), 0, 'the rest refused by the gateway, 429');
quiet_pool_ok();


=== TEST 3: the same keys counted apart (a capacity_domain each): the stampede is over-admitted
--- user_files eval: $::PerKey
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
is(message_with('only-k1')->{status}, 200, 'k1 warmed');
is(message_with('only-k2')->{status}, 200, 'k2 warmed');
is(domain_of('k1'), undef, 'the file keeps them apart');
is(domain_of('k2'), undef, 'both');
my $st = stampede(60);
my $refused = org_refused();
my $served = grep { $_ == 200 } @$st;
diag("per-key accounting: $served of 60 served, $refused refused upstream");
ok($refused > 0, "each key admitted what the window had left: the organisation refused $refused");


=== TEST 4: a file's capacity_domain joins keys no answer could
--- user_files eval: $::Filed
--- init
mock_config($::Mock);
--- request
GET /healthz
--- check
my $d = domain_of('k3');
ok($d, 'k3 is in a domain before any answer');
is($d->{source}, 'file', 'from the file');
is($d->{windows_of}, 'k1', 'k1\'s windows');
is_deeply([sort @{ $d->{accounts} }], ['k1', 'k3'], 'k1 and k3, of two organisations');
is(message_with('only-k2')->{status}, 200, 'k2 answered');
is(message_with('only-k1')->{status}, 200, 'k1 answered');
is(domain_of('k2'), undef, 'k2: its organisation\'s other key keeps the file\'s domain');


=== TEST 5: a conversation's sibling key holds its cache: no cache break when the owner cannot serve
--- init
mock_config({ credentials => { %{ $::Mock->{credentials} },
              'org:org-shared' => { requests_limit => 1000, input_limit => 10000000,
                                    output_limit => 1000000, min_cache_tokens => 1 } } });
--- request
GET /healthz
--- check
is(message_with('only-k2')->{status}, 200, 'k2 answered: the domain learned');
my $turn = sub {
    my ($t) = @_;
    http_request(method => 'POST', path => '/v1/messages', timeout => 10,
                 headers => { 'x-api-key' => 'tenant-key', 'content-type' => 'application/json' },
                 body => turn_body('c1', $t));
};
my $r1 = $turn->(1);
is($r1->{status}, 200, 'turn 1');
my $owner = $r1->{headers}{'x-tokenbiryani-account'};
ok($owner eq 'k1' || $owner eq 'k2', "owned by $owner");
ok(domain_of('k1'), 'k1 and k2 are one domain');
my $sibling = $owner eq 'k1' ? 'k2' : 'k1';

admin_post("/admin/accounts/$owner/disable");
my $r2 = $turn->(2);
is($r2->{status}, 200, 'turn 2');
is($r2->{headers}{'x-tokenbiryani-account'}, $sibling, 'served by the sibling key');
my $rec = request_record($r2->{headers}{'x-tokenbiryani-request-id'});
is($rec->{affinity}, 'honored', 'not a cache break: the organisation\'s cache');
ok(($rec->{usage}{cache_read_input_tokens} // 0) > 0, 'and its cache was read');


=== TEST 6: two instances sharing the pool through Redis: the domain one learned is the other's too, and a stampede over both is never over-admitted
--- user_files eval: $::Shared
--- timeout: 60
--- init
mock_config($::Hourly);
--- request
GET /healthz
--- check
TB::Nginx::peer_start();
is(message_with('only-k1')->{status}, 200, 'k1 answered on A');
is(message_with('only-k2')->{status}, 200, 'k2 answered on A');
is(domain_of('k2')->{windows_of}, 'k1', 'A: one domain, k1\'s windows');
# B has had no answer of its own: what it knows is what A told it
ok(TB::Nginx::poll_until(3, sub { my $d = domain_on('k2', $::B); $d && $d->{windows_of} eq 'k1' && $d->{source} eq 'learned' }),
   'B: k1 and k2 one domain, k1\'s windows, as on A') or diag(explain(domain_on('k2', $::B)));
is_deeply([sort @{ domain_on('k1', $::B)->{accounts} }], ['k1', 'k2'], 'B: both keys in it');
is(domain_on('k3', $::B), undef, 'B: k3, of another organisation, in none');
ok(TB::Nginx::poll_until(3, sub { (requests_on('k2', $::B)->{remaining} // -1) == 18 }),
   'B reads k2 as the organisation\'s windows: 18 left') or diag(explain(requests_on('k2', $::B)));
ok(TB::Nginx::poll_until(3, sub { my ($a, $b) = map { status_on($_)->{store}{share} } server_port(), $::B;
                                  ($a->{gateways} // 0) == 2 && ($b->{gateways} // 0) == 2
                                  && $a->{held} > 0 && $b->{held} > 0 }),
   'both hold a share of the pool, of two gateways');
# an answer takes its time, as a real one does: what B admits before any
# comes back is what it believed of the windows
my %slow = map { ("sk-k$_" => { %{ $::Mock->{credentials}{"sk-k$_"} }, behavior => 'slow-headers:400' }) } 1, 2;
mock_config({ credentials => { %{ $::Hourly->{credentials} }, %slow } });
my @st = map { $_->{status} // 0 } @{ TB::Nginx::http_requests_concurrent(
    [map { my $a = message_args('tenant-key', max_tokens => 16, text => "split $_", $_ % 2 ? (port => $::B) : ());
           $a->{headers}{'x-tokenbiryani-max-wait'} = 1;
           $a->{timeout} = 20;
           $a } 1 .. 60]) };
my $served = grep { $_ == 200 } @st;
my $refused = org_refused();
my @on = map { my $p = $_; scalar grep { $st[$_] == 200 } grep { $_ % 2 == $p } 0 .. 59 } 1, 0;
diag("two instances, one learned domain: $served of 60 served (A $on[0], B $on[1]), $refused refused upstream");
# Before the instances told each other the organisation, B counted k2
# apart and the upstream refused up to 5; what is left is the slices'
# slack: slices begun at different moments of the warm-up can together
# hold one request more than the window (about 1 run in 5)
ok($refused <= 1, "the organisation refused at most the slices' one of slack ($refused): both instances admitted against its one set of windows");
ok($served >= 10 && $served <= 18, "about what the window had left ($served of 18)");
is(scalar(grep { $_ != 200 && $_ != 429 } @st), 0, 'the rest refused by the gateways, 429');
ok($on[1] >= 1, "B served its part ($on[1])");
