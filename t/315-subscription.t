# The operator's own Claude subscription (an account of type oauth): its
# token sent as a bearer with the OAuth beta after the client's own and
# no x-api-key; its unified headers read (never shown to a tenant), the
# account routed on its tightest window and exhausted until the reset
# when a window says rejected, the gateway's own 429 then carrying them
# for Claude Code's limit message; a 429 that names no window does not
# bench it; a token re-read from a changed Claude Code login file; a
# second oauth account and a non-loopback listener refused by nginx -t,
# citing Anthropic's terms.  Two workers, the real module, the mock's
# subscription windows.
use lib 't/lib';
use TB::Nginx;
use TB::Gateway;
use Time::HiRes ();
use File::Temp ();

master_on();
workers(2);
no_shuffle();
mock_start();

$ENV{TEST_NGINX_OPEN_PORT} ||= 19882;

our $Token = 'sk-ant-oat01-operator-own';
# Claude Code login files, there before nginx starts
our $Dir = File::Temp::tempdir(CLEANUP => 1);
chmod(0755, $Dir);              # nginx's workers read them again
our $Creds = "$Dir/credentials.json";
our $Expired = "$Dir/expired.json";
TB::Nginx::spew($Creds, '{"claudeAiOauth":{"accessToken":"sk-ant-oat01-first","refreshToken":"r","expiresAt":' . (time + 86400) * 1000 . '}}');
TB::Nginx::spew($Expired, '{"claudeAiOauth":{"accessToken":"sk-ant-oat01-old","expiresAt":' . (time - 60) * 1000 . '}}');

sub yaml_of {
    my (%o) = @_;
    my $sub = $o{sub} // "    api_key: $Token\n";
    ">>> tb.yaml\n" . ($o{yaml} // '') . "retry:\n  backoff_base_seconds: 0\naccounts:\n"
    . "  - id: sub\n    type: oauth\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT}\n$sub"
    . "  - id: api\n    api_key: sk-api\n    base_url: http://127.0.0.1:\${TEST_NGINX_MOCK_PORT2}\n"
    . "keys:\n  - key: tenant-key\n    name: tenant\n    max_wait_seconds: 0\n"
    . "  - key: admin-key\n    name: admin\n    admin: true\n";
}

# the mock's subscription: 3 requests in a 5-hour window of a few seconds
sub subscription {
    my (%o) = @_;
    mock_config({ credentials => { map { $_ => { subscription => { five_hour_requests => $o{n} // 3,
        five_hour_seconds => $o{secs} // 600, seven_day_requests => 100 }, %{ $o{extra} // {} } } }
        @{ $o{tokens} // [$::Token] } } });
}

sub only {
    my %on = map { $_ => 1 } @_;
    for my $id (qw(sub api)) {
        my $r = admin_post("/admin/accounts/$id/" . ($on{$id} ? 'enable' : 'disable'));
        die "$id: $r->{status}\n" unless $r->{status} == 200;
    }
}

sub send_as {
    my ($key, %h) = @_;
    my $a = message_args($key);
    $a->{headers}{$_} = $h{$_} for keys %h;
    TB::Nginx::http_request(%$a);
}

sub last_up { (grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log() })[-1] }

{
    no strict 'refs';
    *{"TB::Nginx::$_"} = \&{$_} for qw(subscription only send_as last_up);
}

gateway_suite(yaml => yaml_of());
run_tests();

__DATA__

=== TEST 1: the token as a bearer, the OAuth beta after the client's, no x-api-key; the unified headers kept from a tenant, read into the account
--- check
subscription();
only('sub');
my $r = send_as('tenant-key', 'anthropic-beta' => 'prompt-caching-2024-07-31');
is($r->{status}, 200, 'served') or diag($r->{body});
my $e = last_up();
is($e->{credential}, $::Token, 'the token');
is($e->{headers}{authorization}, "Bearer $::Token", 'as a bearer');
ok(!exists $e->{headers}{'x-api-key'}, 'no x-api-key');
is($e->{headers}{'anthropic-beta'}, 'prompt-caching-2024-07-31,oauth-2025-04-20', 'the OAuth beta after the client\'s own');
is($r->{headers}{'x-tokenbiryani-account'}, 'sub', 'the subscription answered');
is_deeply([grep { /^anthropic-ratelimit/ } keys %{ $r->{headers} }], [], 'no rate-limit header reaches a tenant');
$r = send_as('admin-key');
is($r->{headers}{'anthropic-ratelimit-unified-5h-utilization'}, '0.67', 'an admin key sees them');
$r = send_as('tenant-key');
is($r->{status}, 200, 'without a beta of its own');
is(last_up()->{headers}{'anthropic-beta'}, 'oauth-2025-04-20', 'the OAuth beta alone');
# what /admin/status says of it, never its token
my ($s, $j) = admin(GET => '/admin/status');
my ($sa) = grep { $_->{id} eq 'sub' } @{ $j->{accounts} };
is($sa->{subscription}{token_source}, 'api_key', 'the token\'s source');
is($sa->{subscription}{windows}{'5h'}{utilization}, 1, 'the 5-hour window, as its last answer said it (3 of 3)');
is($sa->{subscription}{windows}{'5h'}{status}, 'rejected', '... rejected: used up');
ok(abs($sa->{subscription}{windows}{'7d'}{utilization} - 0.03) < 1e-6, 'the 7-day window');
ok($sa->{subscription}{windows}{'5h'}{resets_in} > 500, 'when it resets');
unlike(TB::Nginx::json_encode($j), qr/\Q$::Token\E/, 'no token in /admin/status');
# the capacity horizon counts it apart: it has no token counts
my (undef, $hz) = admin(GET => '/admin/horizon');
is($hz->{accounts}{limits_unobserved}, 2, 'the horizon: the subscription (and the API key never answered yet) counted apart, not as tokens') or diag(TB::Nginx::json_encode($hz->{accounts}));
is($hz->{accounts}{counted}, 0, 'nothing of it added to the token sums');
# the account's test: its probe sent as its requests are
my $n = scalar @{ mock_log() };
($s, $j) = admin(POST => '/admin/accounts/sub/test');
my ($probe) = grep { ($_->{path} // '') =~ m{^/v1/} } @{ mock_log($n) };
is($probe->{headers}{authorization}, "Bearer $::Token", 'the test\'s probe: the bearer') or diag(TB::Nginx::json_encode($j));
is($probe->{headers}{'anthropic-beta'}, 'oauth-2025-04-20', '... and the OAuth beta');
ok(!exists $probe->{headers}{'x-api-key'}, '... no x-api-key');
is($j->{family}, 'unified', 'the test reads the subscription\'s headers');
is_deeply([map { $_->{header} } @{ $j->{checked} }],
          [map { "anthropic-ratelimit-unified-$_" } qw(5h-status 5h-utilization 5h-reset 7d-status 7d-utilization 7d-reset)],
          'the six it checks');
is_deeply($j->{missing}, [], 'none missing');
like($j->{consequence}, qr/routing reads the tightest of its 5-hour and 7-day windows/, 'what it means for routing');
# the command's meters
{
    local $ENV{TOKENBIRYANI_URL} = 'http://127.0.0.1:' . TB::Nginx::server_port();
    local $ENV{TOKENBIRYANI_KEY} = 'admin-key';
    local $ENV{NO_COLOR} = 1;
    my $out = `$ENV{TEST_NGINX_CLI} status 2>&1`;
    like($out, qr/← 5h ██████████ +100% resets in 0h\d\dm · 7d ░░░░░░░░░░ +3% in \dd\d\dh/, 'tokenbiryani status: the 5-hour and 7-day meters') or diag($out);
    utf8::decode($out);
    ok(!grep({ length($_) > 80 } split /\n/, $out), 'within 80 columns') or diag($out);
    like($out, qr/sub +\S exhausted/, 'the account: exhausted') or diag($out);
}


=== TEST 2: a window used up: rejected, the account spent until the reset; the gateway's own 429 says the unified headers; another account serves meanwhile
--- check
subscription(n => 2);
only('sub');
is(send_as('tenant-key')->{status}, 200, 'one') for 1 .. 2;
my $r = send_as('tenant-key');
is($r->{status}, 429, 'the window spent, nothing else in the pool: 429');
is($r->{headers}{'anthropic-ratelimit-unified-status'}, 'rejected', 'anthropic-ratelimit-unified-status: rejected');
is($r->{headers}{'anthropic-ratelimit-unified-representative-claim'}, 'five_hour', 'the claim');
my $reset = $r->{headers}{'anthropic-ratelimit-unified-reset'} // 0;
ok($reset > time + 500 && $reset < time + 700, "the reset, in epoch seconds ($reset)");
is($r->{headers}{'anthropic-ratelimit-unified-5h-status'}, 'rejected', 'the 5-hour window\'s status');
is(json_decode($r->{body})->{error}{type}, 'rate_limit_error', 'rate_limit_error');
like(json_decode($r->{body})->{error}{message}, qr/at capacity for \d+s \(\d+m/, 'its message names the time in words (what Claude Code shows)');
my $n = scalar @{ mock_log() };
$r = send_as('tenant-key');
is($r->{status}, 429, 'again');
is(scalar(grep { ($_->{path} // '') eq '/v1/messages' } @{ mock_log($n) }), 0, '... without asking the subscription: spent until its reset');
ok($r->{headers}{'retry-after'} >= 500, "retry-after until the reset ($r->{headers}{'retry-after'})");
only('sub', 'api');
$r = send_as('tenant-key');
is($r->{status}, 200, 'with an API key in the pool: served');
is($r->{headers}{'x-tokenbiryani-account'}, 'api', 'by the API key');
ok(!exists $r->{headers}{'anthropic-ratelimit-unified-status'}, 'a 200 says nothing of the subscription');
my $st = pool_status();
my ($sa) = grep { $_->{id} eq 'sub' } @{ $st->{accounts} };
like(TB::Nginx::json_encode($sa), qr/exhausted|cooling/, 'the account shows spent') or diag(TB::Nginx::json_encode($sa));


=== TEST 3: routed on the tightest window: a subscription at 90 % of its window gives way to an API key with room
--- check
subscription(n => 10);
only('sub');
is(send_as('tenant-key')->{status}, 200, 'one') for 1 .. 9;
only('sub', 'api');
# a new conversation: no cache holds it
my $a = message_args('tenant-key', text => 'a new conversation');
my $r = TB::Nginx::http_request(%$a);
is($r->{headers}{'x-tokenbiryani-account'}, 'api', 'at 90 %, the account with room');
my $rec = request_record($r);
my ($c) = grep { $_->{account} eq 'sub' } @{ $rec->{decision}{candidates} };
my ($k) = grep { $_->{account} eq 'api' } @{ $rec->{decision}{candidates} };
ok(abs($c->{terms}{headroom} / $k->{terms}{headroom} - 0.1) < 0.011,
   "the subscription's headroom: 1 - its utilization, 0.1 of the API key's full one ($c->{terms}{headroom} vs $k->{terms}{headroom})")
    or diag(TB::Nginx::json_encode($rec->{decision}));


=== TEST 4: a 429 that names no window (no rate-limit header, x-should-retry) does not bench the account
--- user_files eval
main::yaml_of(sub => "    api_key: $::Token\n    priority: 5\n")
--- check
subscription(extra => { behavior => ['429-request', 'ok'] });
only('sub', 'api');
my $r = send_as('tenant-key');
is($r->{status}, 200, 'served');
is($r->{headers}{'x-tokenbiryani-account'}, 'api', 'by the other account, after the subscription\'s 429');
my $rec = request_record($r);
is($rec->{attempts}[0]{status}, 429, 'the first attempt: the subscription\'s 429') or diag(TB::Nginx::json_encode($rec->{attempts}));
my ($sa) = grep { $_->{id} eq 'sub' } @{ pool_status()->{accounts} };
is($sa->{state}, 'ready', 'the subscription is not rested') or diag(TB::Nginx::json_encode($sa));
my $a = message_args('tenant-key', text => 'another conversation');
$r = TB::Nginx::http_request(%$a);
is($r->{headers}{'x-tokenbiryani-account'}, 'sub', 'the next request goes to it');


=== TEST 5: the token from this machine's Claude Code login file, read again when the file changes
--- user_files eval
main::yaml_of(yaml => "oauth:\n  refresh_interval_seconds: 0.1\n", sub => "    options:\n      credentials_path: $::Creds\n")
--- check
subscription(n => 100, tokens => ['sk-ant-oat01-first', 'sk-ant-oat01-second']);
only('sub');
is(send_as('tenant-key')->{status}, 200, 'served');
is(last_up()->{credential}, 'sk-ant-oat01-first', 'with the file\'s token');
TB::Nginx::spew("$::Creds.new", '{"claudeAiOauth":{"accessToken":"sk-ant-oat01-second","expiresAt":' . (time + 86400) * 1000 . '}}');
rename("$::Creds.new", $::Creds) or die "rename: $!\n";
ok(poll_until(5, sub { send_as('tenant-key'); last_up()->{credential} eq 'sk-ant-oat01-second' }), 'the new token, once the file changed') or diag('LOG:' . TB::Nginx::log_text());
is((grep { $_->{credential} eq 'sk-ant-oat01-second' } @{ mock_log() })[-1]{headers}{authorization}, 'Bearer sk-ant-oat01-second', 'as a bearer');
like(TB::Nginx::log_text(), qr/account "sub": a new token read from \Q$::Creds\E/, 'said at notice');
unlike(TB::Nginx::log_text(), qr/sk-ant-oat01/, 'no token in the log');
# a file that becomes nonsense: the token read before is kept
TB::Nginx::spew("$::Creds.new", '{"claudeAiOauth":{"accessToken":"bad token\r\nx-evil: 1"}}');
rename("$::Creds.new", $::Creds) or die "rename: $!\n";
ok(poll_until(5, sub { TB::Nginx::log_text() =~ /credentials_path \Q$::Creds\E has a claudeAiOauth.accessToken that is not a token/ }), 'one line says why');
is(send_as('tenant-key')->{status}, 200, 'still served');
is(last_up()->{credential}, 'sk-ant-oat01-second', 'with the token read before');
unlike(TB::Nginx::log_text(), qr/evil/, 'nothing of the file in the log');


=== TEST 6: an expired token in the login file: the account waits for a new one
--- user_files eval
main::yaml_of(yaml => "oauth:\n  refresh_interval_seconds: 0.1\n", sub => "    priority: 5\n    options:\n      credentials_path: $::Expired\n")
--- check
subscription(n => 100, tokens => ['sk-ant-oat01-old', 'sk-ant-oat01-fresh']);
only('sub', 'api');
my $r = send_as('tenant-key');
is($r->{headers}{'x-tokenbiryani-account'}, 'api', 'an expired token: the other account serves');
is(scalar(grep { ($_->{credential} // '') eq 'sk-ant-oat01-old' } @{ mock_log() }), 0, 'the expired token never sent');
TB::Nginx::spew("$::Expired.new", '{"claudeAiOauth":{"accessToken":"sk-ant-oat01-fresh","expiresAt":' . (time + 86400) * 1000 . '}}');
rename("$::Expired.new", $::Expired) or die "rename: $!\n";
my $i = 0;
ok(poll_until(5, sub { my $a = message_args('tenant-key', text => 'poll ' . $i++);
                       TB::Nginx::http_request(%$a)->{headers}{'x-tokenbiryani-account'} eq 'sub' }),
   'the subscription again, with its new token');
is(last_up()->{credential}, 'sk-ant-oat01-fresh', 'the fresh token');


=== TEST 7: nginx -t refuses a second oauth account, citing Anthropic's terms
--- check
my ($rc, $out) = nginx_t("accounts:\n  - id: s1\n    type: oauth\n    api_key: a\n  - id: s2\n    type: oauth\n    api_key: b\nkeys:\n  - key: k\n    name: k\n");
isnt($rc, 0, 'refused');
like($out, qr/account s2: a second account of type oauth: Anthropic's terms do not permit using a Claude subscription's tokens in other tools or pooling them \(code\.claude\.com\/docs\/en\/legal-and-compliance\)/, 'saying why');
($rc, $out) = nginx_t("accounts:\n  - id: s1\n    type: oauth\nkeys:\n  - key: k\n    name: k\n");
like($out, qr/account s1: type oauth needs one token source/, 'no token source: named');


=== TEST 8: nginx -t refuses an oauth account where a server using the gateway listens beyond loopback
--- http_config eval
$::HttpConfig . "server { listen 0.0.0.0:\$TEST_NGINX_OPEN_PORT; location /v1/ { tokenbiryani_pass; } }\n"
--- must_die
--- error_log eval
[qr/account "sub" is of type oauth, but a server using the gateway listens on 0\.0\.0\.0:\d+, which is not a loopback address: Anthropic's terms do not permit/]


=== TEST 9: /admin/pacing reads the subscription's 5-hour and 7-day windows, each a fixed window from its reset less its length, in words
--- check
subscription(n => 4, secs => 18000);
only('sub');
is(send_as('tenant-key')->{status}, 200, 'one') for 1 .. 3;
my ($s, $j) = admin(GET => '/admin/pacing');
is($s, 200, '/admin/pacing');
my ($h5) = grep { $_->{scope} eq 'subscription' && $_->{name} eq 'sub 5h' } @{ $j->{readings} };
my ($d7) = grep { $_->{scope} eq 'subscription' && $_->{name} eq 'sub 7d' } @{ $j->{readings} };
ok($h5 && $d7, 'a reading for each window') or diag(TB::Nginx::json_encode($j));
is($h5->{window}, 'fixed', 'fixed');
is($h5->{window_hours}, 5, 'five hours');
ok(abs($h5->{utilization} - 0.75) < 1e-6, '3 of 4 used');
ok(!defined $h5->{used_usd} && !defined $h5->{limit_usd}, 'no dollars');
like($h5->{verdict}, qr/^(ahead|runs out)$/, "three quarters used with the window just begun: $h5->{verdict}");
ok($h5->{pace} > 0.7, "far ahead of its pace ($h5->{pace})");
is($d7->{window_hours}, 168, 'the 7-day window: 168 hours');
like($h5->{says}, qr/the subscription's 5-hour window/, 'in words: ' . $h5->{says});
is($j->{tightest}{name}, 'sub 5h', 'the tightest');
