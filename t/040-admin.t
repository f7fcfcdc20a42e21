# /admin/status, /healthz, and the pool's state across workers and reloads.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;

master_on();
workers(2);
no_shuffle();
mock_start(config => {
    credentials => {
        'sk-a1' => { org => 'org-one', requests_limit => 50, input_limit => 40000,
                     output_limit => 8000 },
        'sk-a2' => { org => 'org-two' },
    },
});

our $Yaml = <<'_EOY_';
>>> tb.yaml
accounts:
  - id: a1
    name: first
    api_key: sk-a1
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT}
    priority: 1            # preferred: the tests read its mirror
    max_concurrency: 64
  - id: a2
    api_key: sk-a2
    base_url: http://127.0.0.1:${TEST_NGINX_MOCK_PORT2}
    max_concurrency: 64
keys:
  - key: tenant-key
    name: tenant
  - key: admin-key
    name: admin
    admin: true
  - key: a2-key
    name: a2-only
    pool: [a2]
_EOY_

sub status {
    my $r = http_request(method => 'GET', path => '/admin/status',
                         headers => { 'x-api-key' => 'admin-key' });
    die "status: $r->{status} $r->{body}\n" unless ($r->{status} // 0) == 200;
    json_decode($r->{body});
}

sub account { my ($st, $id) = @_; (grep { $_->{id} eq $id } @{ $st->{accounts} })[0] }

sub send_msg {
    my (%h) = @_;
    http_request(method => 'POST', path => '/v1/messages', body => msg_body(),
                 headers => { 'x-api-key' => 'admin-key', %h });
}

# the nine headers as the admin key saw them, per window
sub windows_of {
    my $h = shift;
    my %w;
    for my $win (qw(requests input-tokens output-tokens)) {
        (my $k = $win) =~ s/-/_/;
        $w{$k} = { map { $_ => $h->{"anthropic-ratelimit-$win-$_"} }
                   qw(limit remaining reset) };
    }
    \%w;
}

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(status account send_msg windows_of);
}

gateway_suite(yaml => $Yaml);
run_tests();

__DATA__

=== TEST 1: the mirror shows what the last response's headers said
--- check
my $r;
for (1 .. 4) {          # round robin: a1 gets some of them
    $r = send_msg();
    last if $r->{headers}{'x-tokenbiryani-account'} eq 'a1';
}
is($r->{headers}{'x-tokenbiryani-account'}, 'a1', 'a1 answered');
my $want = windows_of($r->{headers});
is($want->{requests}{limit}, 50, 'the mock sent its limit');

my $st = status();
my $a1 = account($st, 'a1');
my $used = json_decode($r->{body})->{usage}{output_tokens};
for my $w (qw(requests input_tokens output_tokens)) {
    is($a1->{limits}{$w}{limit}, $want->{$w}{limit}, "$w limit mirrored");
    # the headers go out before the output exists: the gateway takes what
    # the response reported using off the output window itself
    is($a1->{limits}{$w}{remaining},
       $want->{$w}{remaining} - ($w eq 'output_tokens' ? $used : 0),
       "$w remaining mirrored");
    is($a1->{limits}{$w}{reset_at}, $want->{$w}{reset}, "$w reset mirrored");
    ok(defined $a1->{limits}{$w}{reset_in} && $a1->{limits}{$w}{reset_in} >= 0
       && $a1->{limits}{$w}{reset_in} < 120, "$w reset_in in seconds");
}
is($a1->{organization_id}, 'org-one', 'organization id');
is($a1->{last_status}, 200, 'last status');
is($a1->{state}, 'ready', 'ready');
is($a1->{inflight}, 0, 'nothing in flight');
is($a1->{name}, 'first', 'name');
is($a1->{base_url}, "http://127.0.0.1:$ENV{TEST_NGINX_MOCK_PORT}", 'base_url');
unlike(json_encode($st), qr/sk-a\d|admin-key|tenant-key/, 'no credential, no key');
is($st->{pool}{total}, 2, 'pool total');
is($st->{pool}{ready}, 2, 'pool ready');



=== TEST 2: counters add up across both workers, and come back to zero in flight
--- check
# each account answers once first: until then it takes one request at a time
send_msg('x-api-key' => 'a2-key');
send_msg();
my @res = @{ http_requests_concurrent([map { +{ method => 'POST', path => '/v1/messages',
    body => msg_body(), headers => { 'x-api-key' => 'tenant-key',
    'x-mock-event-delay-ms' => 0 } } } 1 .. 40]) };
is(scalar(grep { $_->{status} == 200 } @res), 40, '40 concurrent requests served');
my %pids = map { $_ => 1 } worker_pids();
is(scalar keys %pids, 2, 'two workers');
my $st = status();
my $total = 0;
$total += $_->{requests_total} for @{ $st->{accounts} };
is($total, 42, 'every attempt counted once in the shared zone');
is(account($st, $_)->{inflight}, 0, "$_: inflight back to 0") for qw(a1 a2);
is(scalar @{ mock_log() }, 42, 'forty-two upstream requests');



=== TEST 3: failures are counted on the account that failed
--- check
my $r = send_msg('x-mock-script' => '500,ok', 'x-mock-script-id' => 'f');
is($r->{status}, 200, 'served after a failover');
my $st = status();
my $failed = (grep { $_->{failures_total} == 1 } @{ $st->{accounts} })[0];
ok($failed, 'one account has one failure');
is($failed->{last_status}, 500, '... and its last status is the 500');
isnt($failed->{id}, $r->{headers}{'x-tokenbiryani-account'}, '... not the one that answered');



=== TEST 4: the pool state survives nginx -s reload
--- check
send_msg() for 1 .. 4;
my $before = status();
ok(nginx_reload(), 'reloaded');
my $after = status();
is($after->{gateway}{config_generation}, $before->{gateway}{config_generation} + 1,
   'a new configuration generation');
for my $id (qw(a1 a2)) {
    my ($b, $a) = (account($before, $id), account($after, $id));
    is($a->{requests_total}, $b->{requests_total}, "$id: counters kept");
    is_deeply($a->{limits}{$_}{remaining}, $b->{limits}{$_}{remaining},
              "$id: $_ remaining kept") for qw(requests input_tokens output_tokens);
    is($a->{organization_id}, $b->{organization_id}, "$id: organization kept");
}
ok($after->{gateway}{uptime_seconds} >= $before->{gateway}{uptime_seconds},
   'same zone, same age');



=== TEST 5: a reload that adds an account and changes a credential
--- check
send_msg() for 1 .. 4;
my $before = status();
my $yaml = $::Yaml =~ s/^>>> tb.yaml\n//r;
$yaml =~ s/api_key: sk-a2/api_key: sk-a2-rotated/;
$yaml =~ s/^keys:/  - id: a3\n    api_key: sk-a3\n    base_url: http:\/\/127.0.0.1:\${TEST_NGINX_MOCK_PORT3}\nkeys:/m;
write_user_file('tb.yaml', $yaml);
ok(nginx_reload(), 'reloaded');
my $after = status();
is(scalar @{ $after->{accounts} }, 3, 'three accounts');
is(account($after, 'a1')->{requests_total}, account($before, 'a1')->{requests_total},
   'a1 untouched: its state kept');
is(account($after, 'a2')->{requests_total}, 0, 'a2 has a new credential: a new account');
is(account($after, 'a2')->{limits}{requests}{limit}, undef, '... whose limits are unknown');
is(account($after, 'a3')->{requests_total}, 0, 'a3 is new');
is(send_msg('x-api-key' => 'a2-key')->{status}, 200, 'a2 serves');
is(mock_log()->[-1]{credential}, 'sk-a2-rotated',
   'with its new credential');



=== TEST 6: a reload with a broken file keeps the running configuration
--- error_log
tb.yaml:2: accounts[0]: unknown key "nope"
--- check
write_user_file('tb.yaml', "accounts:\n  - nope: 1\n");
ok(!nginx_reload(), 'the reload is refused');
is(scalar @{ status()->{accounts} }, 2, 'still two accounts');
is(send_msg()->{status}, 200, 'still serving');



=== TEST 7: healthz counts the accounts that can serve
--- user_files eval
$::Yaml =~ s/(  - id: a2\n)/$1    enabled: false\n/r
--- request
GET /healthz
--- error_code: 200
--- response_body chomp
{"status":"ok","ready":1,"total":2,"store":"memory","failing":0,"last_success_ago":null,"reasons":[{"state":"disabled","reason":"disabled in config","accounts":1}]}
--- response_headers
content-type: application/json



=== TEST 8: healthz on an empty pool is 503
--- user_files
>>> tb.yaml
accounts: []
--- request
GET /healthz
--- error_code: 503
--- response_body chomp
{"status":"no_capacity","ready":0,"total":0,"store":"memory","failing":0,"last_success_ago":null,"reasons":[]}



=== TEST 9: every account disabled: healthz 503, requests 403 permission_error
--- user_files eval
$::Yaml =~ s/(  - id: a\d\n)/$1    enabled: false\n/gr
--- request eval
["GET /healthz", "POST /v1/messages\n" . msg_body()]
--- more_headers eval
["", "x-api-key: tenant-key"]
--- error_code eval
[503, 403]
--- response_body_like eval
['"status":"no_capacity"', '"type":"permission_error"']
--- check
is(scalar @{ mock_log() }, 0, 'nothing sent upstream');
is(account(status(), 'a1')->{state}, 'disabled', 'shown as disabled');
is(account(status(), 'a1')->{disabled_reason}, 'disabled in config', 'with the reason');



=== TEST 10: the admin API is for admin keys
--- request eval
["GET /admin/status", "GET /admin/status", "GET /admin/status", "GET /admin/status",
 "GET /admin/nope", "POST /admin/status\n{}"]
--- more_headers eval
["", "x-api-key: wrong", "x-api-key: tenant-key", "Authorization: Bearer admin-key",
 "x-api-key: admin-key", "x-api-key: admin-key"]
--- error_code eval
[401, 401, 403, 200, 404, 405]
--- response_body_like eval
['"type":"authentication_error","message":"missing credentials',
 '"type":"authentication_error","message":"invalid key"',
 '"type":"permission_error","message":"key .+tenant.+ is not an admin key"',
 '"accounts":\[',
 '"type":"not_found_error"',
 '"type":"invalid_request_error"']



=== TEST 11: with no keys at all, on loopback, the gateway is open
--- user_files eval
$::Yaml =~ s/^keys:.*//msr
--- request eval
["GET /admin/status", "POST /v1/messages\n" . msg_body()]
--- error_code eval
[200, 200]
--- check
ok(exists $responses[1]{headers}{'anthropic-ratelimit-requests-limit'},
   'the operator sees the limit headers in open mode');



=== TEST 12: events at nginx's usual log level: in order, polled by id, nothing secret
--- log_level: notice
--- user_files eval
$::Yaml =~ s/^accounts:/observability:\n  event_buffer: 8\naccounts:/mr
--- check
sub events {
    my $q = shift // '';
    my $r = http_request(method => 'GET', path => "/admin/events$q",
                         headers => { 'x-api-key' => 'admin-key' });
    die "events: $r->{status} $r->{body}\n" unless ($r->{status} // 0) == 200;
    json_decode($r->{body});
}
my $e0 = events();
is_deeply($e0->{events}, [], 'none yet');
is($e0->{next}, 0, 'next 0');
# a success, a retried 529, a queued-then-refused model: on both workers
my @r = (send_msg(), send_msg('x-mock-script' => '529,ok', 'x-mock-script-id' => 'e1'));
is($_->{status}, 200, 'served') for @r;
my $bad = http_request(method => 'POST', path => '/v1/messages',
                       body => msg_body(model => 'claude-nope', text => 'SECRET-PROMPT'),
                       headers => { 'x-api-key' => 'tenant-key' });
ok($bad->{status} == 200 || $bad->{status} == 400 || $bad->{status} == 404, 'answered');
my $all = events();
my @ev = @{ $all->{events} };
ok(@ev >= 6, scalar(@ev) . ' events');
is_deeply([map { $_->{id} } @ev], [1 .. scalar @ev], 'numbered 1.. in order');
is($all->{next}, $ev[-1]{id}, 'next is the last id');
is($all->{dropped}, 0, 'none dropped');
my @mine = grep { $_->{request_id} eq $r[0]{headers}{'x-tokenbiryani-request-id'} } @ev;
is_deeply([map { "$_->{type}:" . ($_->{decision} // $_->{next}) } @mine],
          ['admission:admit', 'settlement:done'], 'a success: admitted, then done');
is($mine[0]{account}, $r[0]{headers}{'x-tokenbiryani-account'}, 'on the account that answered');
ok($mine[0]{need}{input_tokens} > 0 && $mine[0]{need}{requests} == 1, 'with its need');
like($mine[0]{reason}, qr/^score \d\.\d{3}, \d+ eligible, affinity \w+/, 'and the reason');
ok(exists $mine[0]{remaining_before}{input_tokens}, 'and what was left before');
is($mine[1]{status}, 200, 'settled 200');
is($mine[1]{class}, 'ok', 'class ok');
ok($mine[1]{usage}{output_tokens} > 0, 'with its usage');
like($mine[1]{at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/, 'an RFC 3339 time');
like($mine[1]{worker}, qr/^\d+$/, 'and the worker');
my @retried = grep { $_->{request_id} eq $r[1]{headers}{'x-tokenbiryani-request-id'} } @ev;
is_deeply([map { "$_->{type}:" . ($_->{decision} // $_->{next}) . ":$_->{attempt}" } @retried],
          ['admission:admit:1', 'settlement:backoff:1', 'admission:admit:2', 'settlement:done:2'],
          'a 529, retried after a backoff: both attempts');
is($retried[1]{class}, 'overloaded', 'the first was overloaded');
is($retried[1]{status}, 529, 'with its status');
my $text = json_encode($all);
unlike($text, qr/SECRET-PROMPT|sk-a1|sk-a2|admin-key|tenant-key/, 'no prompt, no credential, no key');
# polling from the last id: only what is new
my $last = $all->{next};
send_msg();
my $more = events("?since=$last");
is_deeply([map { $_->{type} } @{ $more->{events} }], ['admission', 'settlement'], 'since: the new ones only');
is($more->{events}[0]{id}, $last + 1, 'numbered on');
my $lim = events('?since=0&limit=2');
is(scalar @{ $lim->{events} }, 2, 'limit');
# the ring holds 4 x event_buffer = 32: turn it over, and the reader is told
send_msg() for 1 .. 20;
my $late = events("?since=$last");
ok($late->{dropped} > 0, "$late->{dropped} dropped for a reader that fell behind");
is($late->{events}[0]{id}, $last + 1 + $late->{dropped}, 'the rest from the oldest held');
is($late->{last}, $late->{events}[-1]{id}, 'up to the newest');
# bad arguments
for my $q ('?since=x', '?limit=0', '?limit=-1') {
    my $b = http_request(method => 'GET', path => "/admin/events$q",
                         headers => { 'x-api-key' => 'admin-key' });
    is($b->{status}, 400, "$q: 400");
}
is(http_request(method => 'GET', path => '/admin/events',
                headers => { 'x-api-key' => 'tenant-key' })->{status}, 403, 'admins only');
unlike(error_log_since_block_start(), qr/event=(?:admission|settlement)/,
       'while the error log at notice has none of them');
my %workers = map { $_->{worker} => 1 } @{ events('?since=0&limit=1000')->{events} };
ok(scalar(keys %workers) >= 1, 'events carry their worker');
